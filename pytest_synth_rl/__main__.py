"""``python -m pytest_synth_rl``: commands around test runs (merging sharded CI results).

python -m pytest_synth_rl merge shard-*.json --report synth-report.json --summary "$GITHUB_STEP_SUMMARY"
python -m pytest_synth_rl merge-baselines shard1/baselines shard2/baselines --into tests/baselines
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import SynthError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_synth_rl", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    merge = commands.add_parser(
        "merge",
        help="merge the --synth-report files of CI shards into one report",
        description="Merge shards' --synth-report JSON files: prints the job table, writes one JSON "
        "report and appends one step summary (table and reward charts).",
    )
    merge.add_argument("reports", nargs="+", metavar="SHARD_REPORT", help="a shard's --synth-report JSON")
    merge.add_argument("--report", metavar="PATH", help="write the merged JSON report here")
    merge.add_argument(
        "--summary", metavar="PATH", help='append the merged Markdown summary here ("$GITHUB_STEP_SUMMARY")'
    )
    baselines = commands.add_parser(
        "merge-baselines",
        help="merge baseline directories refreshed by several shards",
        description="Copy every shard's baseline files into one directory; the same test's baseline "
        "from two shards must agree.",
    )
    baselines.add_argument("directories", nargs="+", metavar="SHARD_BASELINE_DIR")
    baselines.add_argument("--into", required=True, metavar="DIR", help="merged baselines go here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .merge import merge_baselines, merge_reports

    try:
        if args.command == "merge":
            report = merge_reports(args.reports)
            print(report.render_terminal())
            if args.report:
                print(f"synth-rl: merged JSON report written to {report.write_json(args.report)}")
            if args.summary:
                report.append_github_summary(args.summary)
                print(f"synth-rl: merged summary appended to {args.summary}")
        else:
            written = merge_baselines(args.directories, args.into)
            print(f"synth-rl: {len(written)} baseline files merged into {args.into}")
    except SynthError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
