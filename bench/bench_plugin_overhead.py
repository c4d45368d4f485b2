"""Plugin overhead per test: generated offline job suites vs the same number of empty tests.

A temporary directory gets the example task app and its TOML, and two suites of *N* tests
each, spread over modules of 50 (as a real suite would be):

* job tests, each ``job = synth_rl_job(); job.submit(); synth_expect(job).to_succeed(within=7200)``
  with the plugin's ``synth_task_app`` / ``synth_rl`` markers, and
* empty tests (``def test_n(): pass``).

Both run with ``python -m pytest -q -p no:cacheprovider`` in a subprocess of this interpreter,
interleaved, five times each (``--repeats``); the overhead is ``(t_jobs - t_empty) / N`` per test
from the median run times, so one noisy run does not decide the verdict. Process start-up,
collection and the session-wide task app are in both numbers or amortised over the *N* jobs,
which is what a user pays.

Job suites come in three scenarios, because the fake's default does real work:

* ``scripted``: ``synth_scenario(reward_curve=[...])``: the fake's default lifecycle (60 virtual
  seconds, 10 steps, polled every 10 virtual seconds to ``succeeded``) with scripted rewards: the
  cost of the plugin, client and fake alone. The target ("plugin overhead") is measured on it.
* ``default``: no scenario marker: the same 60 virtual seconds, but rewards come from real
  rollouts against the task app over the config's own steps (1 epoch x 4 iterations, up to 4
  rollouts per step plus evaluations). That adds the task app's own work,
  whose driving cost is measured against raw loopback requests in ``bench_rollouts.py``; it is
  printed as an info line.
* ``immediate``: ``synth_scenario(immediate=True)``: one poll runs the whole job (with rollouts).

Run alone: ``python bench/bench_plugin_overhead.py [--tests N] [--variants a,b] [--profile V]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import report  # noqa: E402

EXAMPLES = ROOT / "examples"
TESTS = 500
PER_MODULE = 50
TARGET_MS = 2.0
REPEATS = 5

#: Module-level markers per scenario. ``default`` adds none: the fake's own default lifecycle.
SCENARIOS: dict[str, str] = {
    "default": "",
    "scripted": "pytest.mark.synth_scenario(reward_curve=[0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, "
    "0.8]), ",
    "immediate": "pytest.mark.synth_scenario(immediate=True), ",
}
DESCRIPTIONS: dict[str, str] = {
    "default": "default scenario, real rollouts",
    "scripted": "scripted rewards, no rollouts",
    "immediate": "immediate scenario, real rollouts",
}

JOB_MODULE_HEAD = """import pytest

pytestmark = [{scenario}pytest.mark.synth_task_app("arithmetic_task_app.py"), \
pytest.mark.synth_rl(config="arithmetic.toml")]
"""
JOB_TEST = """

def test_job_{index}(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""
EMPTY_TEST = """

def test_empty_{index}():
    pass
"""

#: Variables that would change what the child pytest does (online mode, extra options, xdist).
_SCRUBBED_PREFIXES = ("SYNTH_", "PYTEST_", "GITHUB_STEP_SUMMARY", "ENVIRONMENT_API_KEY", "TASK_APP_URL")


class BenchmarkRunError(RuntimeError):
    """A generated suite did not pass: the measurement would be meaningless, so stop."""


def write_suite(directory: Path, kind: str, tests: int, *, per_module: int = PER_MODULE) -> Path:
    """Write a suite of *tests* tests into *directory*/*kind* and return that folder.

    *kind* is ``"empty"`` or a key of :data:`SCENARIOS`. The folder gets its own ``pytest.ini``
    so the child's rootdir (and ini options) never come from whatever surrounds it.
    """
    if kind != "empty" and kind not in SCENARIOS:
        raise ValueError(f"unknown suite kind {kind!r}: use 'empty' or one of {', '.join(SCENARIOS)}")
    if tests < 1:
        raise ValueError(f"tests must be >= 1, got {tests}")
    folder = directory / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, folder / name)
    for start in range(0, tests, per_module):
        indices = range(start, min(tests, start + per_module))
        if kind == "empty":
            text = "".join(EMPTY_TEST.format(index=i) for i in indices).lstrip()
        else:
            text = JOB_MODULE_HEAD.format(scenario=SCENARIOS[kind]) + "".join(
                JOB_TEST.format(index=i) for i in indices
            )
        (folder / f"test_{kind}_{start // per_module:03d}.py").write_text(text)
    return folder


def child_env(pycache: Path | None = None) -> dict[str, str]:
    """This process's environment minus anything that would steer the child pytest.

    With *pycache*, bytecode and assertion-rewrite caches go there (even where the environment
    sets ``PYTHONDONTWRITEBYTECODE``), so repeated runs start warm, as a user's second run does.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def pytest_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]


def run_suite(folder: Path, expected: int, *extra: str, pycache: Path | None = None) -> float:
    """Wall seconds of one ``python -m pytest`` run of *folder*; raises unless all passed.

    With ``--collect-only`` in *extra* it checks the collected count instead.
    """
    started = time.perf_counter()
    proc = subprocess.run(
        pytest_command(*extra),
        cwd=folder,
        env=child_env(pycache),
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    word = "collected" if "--collect-only" in extra else "passed"
    counted = re.search(rf"(\d+) (?:tests? )?{word}", proc.stdout)
    if proc.returncode != 0 or counted is None or int(counted.group(1)) != expected:
        tail = "\n".join(proc.stdout.splitlines()[-15:] + proc.stderr.splitlines()[-5:])
        raise BenchmarkRunError(
            f"the generated suite in {folder} did not pass ({expected} tests expected, exit code "
            f"{proc.returncode}); fix the suite or the plugin before measuring. Output tail:\n{tail}"
        )
    return elapsed


#: A plugin the split run loads (``-p``): each test phase's duration, written as JSON at exit.
PHASE_PROBE = """
import json, os

_durations = {"setup": [], "call": [], "teardown": []}


def pytest_runtest_logreport(report):
    _durations[report.when].append(report.duration)


def pytest_unconfigure(config):
    with open(os.environ["BENCH_PHASES_FILE"], "w") as out:
        json.dump(_durations, out)
"""


def phase_split(folder: Path, tests: int, pycache: Path) -> dict[str, float]:
    """One extra, untimed run of *folder*: where a test's time goes, in ms.

    ``first_setup`` is the first test's setup (the task app, the fake and the imports they
    need, paid once per run); ``setup``/``call``/``teardown`` are medians over all tests.
    """
    probe_dir = folder.parent / "probe"
    probe_dir.mkdir(exist_ok=True)
    (probe_dir / "bench_phase_probe.py").write_text(PHASE_PROBE)
    out = probe_dir / f"{folder.name}.json"
    env = child_env(pycache)
    env["BENCH_PHASES_FILE"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(probe_dir), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        pytest_command("-p", "bench_phase_probe"), cwd=folder, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0 or not out.is_file():
        raise BenchmarkRunError(f"the phase-split run of {folder} failed:\n{proc.stdout[-2000:]}")
    durations: dict[str, list[float]] = json.loads(out.read_text())
    if len(durations["setup"]) != tests:
        raise BenchmarkRunError(f"the phase-split run of {folder} ran {len(durations['setup'])} tests")
    split = {when: statistics.median(values) * 1000 for when, values in durations.items()}
    split["first_setup"] = durations["setup"][0] * 1000
    return split


def measure(
    tests: int = TESTS,
    variants: Sequence[str] = tuple(SCENARIOS),
    repeats: int = REPEATS,
    splits: dict[str, dict[str, float]] | None = None,
) -> dict[str, float]:
    """Median wall seconds per suite kind (``"empty"`` and each of *variants*), interleaved.

    With *splits*, each kind's :func:`phase_split` is stored there too (from one extra run).
    """
    samples: dict[str, list[float]] = {kind: [] for kind in ("empty", *variants)}
    with tempfile.TemporaryDirectory(prefix="bench-plugin-overhead-") as raw:
        folders = {kind: write_suite(Path(raw), kind, tests) for kind in samples}
        pycache = Path(raw) / "pycache"
        # Warm-up: the first run of each suite writes the bytecode and assertion-rewrite caches
        # (the plugin's package, the task app and the generated modules); later runs (and users'
        # second runs) start from them.
        for folder in folders.values():
            run_suite(folder, tests, pycache=pycache)
        for _ in range(repeats):
            for kind, folder in folders.items():
                samples[kind].append(run_suite(folder, tests, pycache=pycache))
        if splits is not None:
            for kind, folder in folders.items():
                splits[kind] = phase_split(folder, tests, pycache)
    return {kind: statistics.median(values) for kind, values in samples.items()}


def split_line(splits: dict[str, dict[str, float]], tests: int) -> str:
    """An info line: the first test's setup (amortised) and the median phases, jobs vs empty."""
    parts = []
    for kind, split in splits.items():
        parts.append(
            f"{kind}: first setup {split['first_setup']:.0f} ms (= {split['first_setup'] / tests:.2f} "
            f"ms/test), then setup {split['setup']:.2f} / call {split['call']:.2f} / teardown "
            f"{split['teardown']:.2f} ms"
        )
    line = "  info: where a test's time goes (medians of one extra run): " + "; ".join(parts)
    print(line, flush=True)
    return line


def overhead_lines(
    seconds: dict[str, float], tests: int, splits: dict[str, dict[str, float]] | None = None
) -> list[str]:
    """The target line (``scripted``, else the first variant) and one info line per other variant."""
    empty = seconds["empty"]
    variants = [kind for kind in seconds if kind != "empty"]
    primary = "scripted" if "scripted" in variants else variants[0]
    lines: list[str] = []
    for kind in [primary, *(v for v in variants if v != primary)]:
        per_test_ms = (seconds[kind] - empty) / tests * 1000
        ratio = per_test_ms / TARGET_MS
        if kind == primary:
            lines.append(
                report(
                    f"plugin overhead per offline job test ({DESCRIPTIONS[kind]}, {tests} tests)",
                    ours=per_test_ms,
                    baseline_name="target budget",
                    baseline=TARGET_MS,
                    unit="ms/test",
                    ratio=ratio,
                    target_text=f"<= {TARGET_MS:g} ms/test above empty tests",
                    met=per_test_ms <= TARGET_MS,
                )
            )
        else:
            line = (
                f"  info: plugin overhead ({DESCRIPTIONS[kind]}): {per_test_ms:.4g} ms/test "
                f"= {ratio:.2f}x the {TARGET_MS:g} ms budget"
            )
            print(line, flush=True)
            lines.append(line)
    if splits:
        lines.append(split_line(splits, tests))
    line = f"  info: suite wall times for {tests} tests: " + ", ".join(
        f"{kind} {value:.2f} s" for kind, value in seconds.items()
    )
    print(line, flush=True)
    lines.append(line)
    return lines


def profile(variant: str, tests: int, top: int = 30) -> str:
    """cProfile of one job suite run in this process: where the time per job test goes."""
    with tempfile.TemporaryDirectory(prefix="bench-plugin-profile-") as raw:
        folder = write_suite(Path(raw), variant, tests)
        run_suite(folder, tests, "--collect-only")  # the suite must collect before it is profiled
        import pytest

        profiler = cProfile.Profile()
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            profiler.enable()
            code = pytest.main(["-q", "-p", "no:cacheprovider", str(folder)])
            profiler.disable()
        finally:
            os.chdir(cwd)
        if code != 0:
            raise BenchmarkRunError(f"profiled suite failed with exit code {code}")
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


#: What ``main`` measures unless told otherwise: the target variant and the realistic default.
MAIN_VARIANTS: tuple[str, ...] = ("scripted", "default")


def main(tests: int = TESTS, variants: Sequence[str] = MAIN_VARIANTS, repeats: int = REPEATS) -> list[str]:
    splits: dict[str, dict[str, float]] = {}
    seconds = measure(tests, variants, repeats, splits=splits)
    return overhead_lines(seconds, tests, splits)


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tests", type=int, default=TESTS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument(
        "--variants", default=",".join(MAIN_VARIANTS), help="comma-separated: " + ", ".join(SCENARIOS)
    )
    parser.add_argument("--profile", metavar="VARIANT", help="print a cProfile of one job suite instead")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in [*variants, args.profile or "default"] if v not in SCENARIOS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}: use {', '.join(SCENARIOS)}")
    if args.profile:
        print(profile(args.profile, args.tests))
    else:
        main(args.tests, variants, args.repeats)


if __name__ == "__main__":
    _cli()
