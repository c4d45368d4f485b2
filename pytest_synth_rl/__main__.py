"""``python -m pytest_synth_rl``: commands around test runs (merging sharded CI results, a fake backend).
Each command, with examples: docs/reference/cli.md."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pytest_synth_rl.errors import SynthError, closest, did_you_mean


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors add a "did you mean" for a misspelt command or option."""

    #: The commands' long options, which the top parser reports as unrecognized when misspelt.
    options: tuple[str, ...] = ()

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        words = re.findall(r"(?:^| )(--[\w-]+)", unknown[1]) if unknown else []
        guess = next((guess for word in words if (guess := closest(word, self.options))), None)
        if choice:
            guess = closest(choice[1], re.findall(r"'([^']*)'", choice[2]))
        super().error(f"{message} (did you mean {guess!r}?)" if guess else message)


def _parser() -> _Parser:
    parser = _Parser(prog="python -m pytest_synth_rl", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    merge = commands.add_parser("merge", help="merge the --synth-report files of CI shards into one report")
    merge.add_argument("reports", nargs="+", metavar="SHARD_REPORT", help="a shard's --synth-report JSON")
    merge.add_argument("--report", metavar="PATH", help="write the merged JSON report here")
    merge.add_argument(
        "--summary", metavar="PATH", help='append the merged Markdown summary here ("$GITHUB_STEP_SUMMARY")'
    )
    baselines = commands.add_parser(
        "merge-baselines",
        help="merge baseline directories refreshed by several shards (the same test's must agree)",
    )
    baselines.add_argument("directories", nargs="+", metavar="SHARD_BASELINE_DIR")
    baselines.add_argument("--into", required=True, metavar="DIR", help="merged baselines go here")
    serve = commands.add_parser(
        "serve",
        help="serve a fake backend for other processes, until Ctrl-C or SIGTERM",
        description="Serve the fake Synth backend on loopback for test runs in other processes "
        "(pytest --synth-backend=URL). Prints SYNTH_BACKEND_URL=... and SYNTH_API_KEY=... lines, "
        "then a readiness line; jobs move one stage per look (a status poll) unless --speed is given.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=_port, default=0, help="the port (default 0: a free one)")
    serve.add_argument(
        "--api-key", metavar="KEY", help="the key clients send (default: $SYNTH_API_KEY, else a new one)"
    )
    serve.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="[ENV=]SPEC",
        help="the stand-in model's policy: SPEC is path/to/file.py:NAME or pkg.module:NAME (a policy, "
        "or a factory of no arguments); ENV= gives it to that env's rollouts only. Repeatable; the "
        "built-in arithmetic policy answers every env left without one",
    )
    serve.add_argument(
        "--pacing",
        type=_pacing,
        metavar="MODE",
        help="observed (the default: a job moves a stage when looked at) or clock (time moves only "
        "when advanced, POST /_fake/clock/advance)",
    )
    serve.add_argument("--speed", type=_speed, metavar="N", help="run jobs on real time, N times faster")
    serve.add_argument(
        "--task-app-key",
        dest="task_app_api_key",
        metavar="KEY",
        help="the key sent to task apps when no client uploaded one (default: $ENVIRONMENT_API_KEY)",
    )
    usage = "".join(command.format_usage() for command in (merge, baselines, serve))
    parser.options = tuple(sorted(set(re.findall(r"--[a-z][\w-]*", usage)) - {"--help"}))
    return parser


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected a number 0-65535 (0: a free one)")
    return int(text)


def _speed(text: str) -> float:
    from pytest_synth_rl.fake.backend import argument_problem  # the fake loads only for `serve`

    try:
        speed = float(text)
        problem = argument_problem("speed", speed)
    except ValueError:
        speed, problem = math.nan, f"must be a number, got {text!r}"
    if problem is not None:
        example = "e.g. --speed 60: a minute a second"
        raise argparse.ArgumentTypeError(f"invalid speed {text!r}: {problem} ({example})")
    return speed


def _pacing(text: str) -> str:
    from pytest_synth_rl.fake.lifecycle import PACING_MODES  # the fake loads only for `serve`

    if text not in PACING_MODES:
        guess = did_you_mean(text, PACING_MODES)
        raise argparse.ArgumentTypeError(
            f"invalid pacing {text!r}: expected one of {', '.join(PACING_MODES)}"
            + (f" ({guess})" if guess else "")
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; a problem with the files given is one ``error:`` line and exit code 2."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            from pytest_synth_rl.fake.backend import policies_from_specs, serve_until_stopped

            options = {name: value for name, value in vars(args).items() if name != "command"}
            serve_until_stopped(**{**options, "policy": policies_from_specs(args.policy) or None})
        elif args.command == "merge":
            _merge(args)
        else:
            from pytest_synth_rl.reporting.merge import merge_baselines

            written = merge_baselines(args.directories, args.into, on_empty=_say_empty)
            files = "baseline file" if len(written) == 1 else "baseline files"
            print(f"synth-rl: {len(written)} {files} merged into {args.into}")
    except SynthError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _merge(args: argparse.Namespace) -> None:
    from pytest_synth_rl.reporting.merge import check_output_file, merge_reports, write_output

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


def _say_empty(directory: Path) -> None:
    print(
        f"synth-rl: shard baseline directory {directory} has no baseline files (*.json); "
        "if that shard refreshed baselines, check that its directory was downloaded",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
