"""``python -m pytest_synth_rl``: commands around test runs (merging sharded CI results).

python -m pytest_synth_rl merge shard-*.json --report synth-report.json --summary "$GITHUB_STEP_SUMMARY"
python -m pytest_synth_rl merge-baselines shard1/baselines shard2/baselines --into tests/baselines
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pytest_synth_rl.errors import SynthError, closest


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors add a "did you mean" for a misspelt command or option."""

    #: The commands' long options, which the top parser reports as unrecognized when misspelt.
    options: tuple[str, ...] = ()

    def error(self, message: str) -> NoReturn:
        guess = _near_miss(message, self.options)
        super().error(f"{message} (did you mean {guess!r}?)" if guess else message)


def _near_miss(message: str, options: Sequence[str]) -> str | None:
    import re

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        return closest(choice[1], re.findall(r"'([^']*)'", choice[2]))
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    words = [word.split("=")[0] for word in (unknown[1].split() if unknown else ()) if word.startswith("--")]
    return next((guess for word in words if (guess := closest(word, options))), None)


def _parser() -> _Parser:
    parser = _Parser(prog="python -m pytest_synth_rl", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    merge = commands.add_parser(
        "merge",
        help="merge the --synth-report files of CI shards into one report",
        description="Merge shards' --synth-report JSON files: prints the job table, writes one JSON "
        "report and appends one step summary (table and reward charts).",
    )
    merge.add_argument("reports", nargs="+", metavar="SHARD_REPORT", help="a shard's --synth-report JSON")
    report = merge.add_argument("--report", metavar="PATH", help="write the merged JSON report here")
    summary = merge.add_argument(
        "--summary", metavar="PATH", help='append the merged Markdown summary here ("$GITHUB_STEP_SUMMARY")'
    )
    baselines = commands.add_parser(
        "merge-baselines",
        help="merge baseline directories refreshed by several shards",
        description="Copy every shard's baseline files into one directory; the same test's baseline "
        "from two shards must agree.",
    )
    baselines.add_argument("directories", nargs="+", metavar="SHARD_BASELINE_DIR")
    into = baselines.add_argument("--into", required=True, metavar="DIR", help="merged baselines go here")
    parser.options = tuple(option for action in (report, summary, into) for option in action.option_strings)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; a problem with the files given is one ``error:`` line and exit code 2."""
    args = _parser().parse_args(argv)
    from pytest_synth_rl.reporting.merge import (
        check_output_file,
        merge_baselines,
        merge_reports,
        write_output,
    )

    try:
        if args.command == "merge":
            # Refuse an output path that cannot be written before reading any shard.
            if args.report is not None:
                check_output_file(args.report, "--report", shards=args.reports)
            if args.summary is not None:
                check_output_file(args.summary, "--summary", make_parents=False)
            report = merge_reports(args.reports)
            print(report.render_terminal(titled=True))
            if args.report is not None:
                path = write_output(report.write_json, args.report, "--report")
                print(f"synth-rl: merged JSON report written to {path}")
            if args.summary is not None:
                write_output(report.append_github_summary, args.summary, "--summary", append=True)
                print(f"synth-rl: merged summary appended to {args.summary}")
        else:
            written = merge_baselines(args.directories, args.into, on_empty=_say_empty)
            files = "baseline file" if len(written) == 1 else "baseline files"
            print(f"synth-rl: {len(written)} {files} merged into {args.into}")
    except SynthError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _say_empty(directory: Path) -> None:
    print(
        f"synth-rl: shard baseline directory {directory} has no baseline files (*.json); "
        "if that shard refreshed baselines, check that its directory was downloaded",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
