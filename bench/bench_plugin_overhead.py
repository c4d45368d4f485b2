"""Plugin overhead per test: generated offline job suites vs empty tests, and vs the floors.

Suites of *N* tests (modules of 50) run with ``python -m pytest -q -p no:cacheprovider`` in a
subprocess, interleaved, medians of 5 runs; each suite's cost per test is its wall and CPU (of
the pytest process) above an empty suite's, divided by *N*. Ours (scripted rewards: plugin,
client and fake alone; the default scenario's real rollouts are an info line) is compared on
CPU with the same 9 exchanges (submit, 7 polls, metrics, the fake's own bodies) mocked with
pytest-httpx and answered by a shared ``httpx.MockTransport`` client, the floor.

Run alone: ``python bench/bench_plugin_overhead.py [--quick] [--tests N] [--variants a,b] [--profile V]``.
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
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, add_quick_flag, medians, report, run_process, scripted_job  # noqa: E402

EXAMPLES = ROOT / "examples"
TESTS = 500
QUICK_TESTS = 150
PER_MODULE = 50
REPEATS = 5
QUICK_REPEATS = 3
#: Ours at most this many times the MockTransport floor, on CPU per test above empty tests.
FLOOR_TARGET = 1.3

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

#: The same job's 9 exchanges made by hand, the fake's recorded answers replayed: the peer a user
#: would pick (pytest-httpx) and the floor (one shared client on an ``httpx.MockTransport``).
PEERS: dict[str, str] = {
    "httpx_mock": "pytest-httpx tests (9 mocked exchanges)",
    "mock_transport": "bare MockTransport tests (9 exchanges, shared client)",
}
PEER_MODULE_HEAD = """import json
from pathlib import Path

import httpx

EXCHANGES = json.loads((Path(__file__).parent / "exchanges.json").read_text())
HEADERS = {{"Authorization": "Bearer sk_test_bench_peer_key_0123"}}
{client}

def run_job():
    submit, *polls, metrics = EXCHANGES
    json_body = {{"content-type": "application/json"}}
    job = CLIENT.post(submit["url"], content=submit["request"], headers=json_body)
    assert job.json()["status"] == "queued"
    for poll in polls:
        status = CLIENT.get(poll["url"]).json()
    assert status["status"] == "succeeded"
    assert CLIENT.get(metrics["url"]).json()["points"]
"""
PEER_CLIENTS: dict[str, str] = {
    "httpx_mock": "CLIENT = httpx.Client(headers=HEADERS)\n",
    "mock_transport": """REPLIES = []


def handler(request):
    exchange = REPLIES.pop(0)
    assert (request.method, str(request.url)) == (exchange["method"], exchange["url"])
    return httpx.Response(exchange["status"], json=exchange["body"])


CLIENT = httpx.Client(headers=HEADERS, transport=httpx.MockTransport(handler))
""",
}
PEER_TESTS: dict[str, str] = {
    "httpx_mock": """

def test_job_{index}(httpx_mock):
    for exchange in EXCHANGES:
        httpx_mock.add_response(
            method=exchange["method"],
            url=exchange["url"],
            status_code=exchange["status"],
            json=exchange["body"],
        )
    run_job()
""",
    "mock_transport": """

def test_job_{index}():
    REPLIES[:] = EXCHANGES
    run_job()
""",
}

#: Variables that would change what the child pytest does (online mode, extra options, xdist).
_SCRUBBED_PREFIXES = ("SYNTH_", "PYTEST_", "GITHUB_STEP_SUMMARY", "ENVIRONMENT_API_KEY", "TASK_APP_URL")


class BenchmarkRunError(RuntimeError):
    """A generated suite did not pass: the measurement would be meaningless, so stop."""


@cache
def recorded_exchanges() -> str:
    """The 9 exchanges of one scripted job test against the fake (submit, 7 polls, metrics), as JSON."""
    import httpx

    from pytest_synth_rl.clock import VirtualClock
    from pytest_synth_rl.fake import FakeSynthBackend

    clock = VirtualClock()
    fake = FakeSynthBackend(clock=clock, rollouts=False)
    fake.scenario(reward_curve=[0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8])
    exchanges: list[dict[str, Any]] = []

    def record(request: httpx.Request) -> httpx.Response:
        response = fake.handle(request)
        response.read()
        exchanges.append(
            {
                "method": request.method,
                "url": str(request.url),
                "request": request.content.decode(),
                "status": response.status_code,
                "body": response.json(),
            }
        )
        return response

    with httpx.Client(transport=httpx.MockTransport(record)) as http:
        job = scripted_job(fake, clock, EXAMPLES / "rl_minimal.toml", http_client=http)
        with job:
            job.submit()
            job.poll_until_complete(timeout=7200.0, interval=10.0)
            job.metrics()
    fake.close()
    if len(exchanges) != 9:
        raise BenchmarkRunError(f"a scripted job made {len(exchanges)} exchanges, not 9")
    return json.dumps(exchanges)


def write_suite(directory: Path, kind: str, tests: int, *, per_module: int = PER_MODULE) -> Path:
    """Write a suite of *tests* tests into *directory*/*kind* and return that folder.

    *kind* is ``"empty"``, a key of :data:`SCENARIOS` or of :data:`PEERS`. The folder gets its
    own ``pytest.ini`` so the child's rootdir (and ini options) never come from its surroundings.
    """
    kinds = ["empty", *SCENARIOS, *PEERS]
    if kind not in kinds:
        raise ValueError(f"unknown suite kind {kind!r}: use one of {', '.join(kinds)}")
    if tests < 1:
        raise ValueError(f"tests must be >= 1, got {tests}")
    folder = directory / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, folder / name)
    if kind in PEERS:
        (folder / "exchanges.json").write_text(recorded_exchanges())
    for start in range(0, tests, per_module):
        indices = range(start, min(tests, start + per_module))
        if kind == "empty":
            text = "".join(EMPTY_TEST.format(index=i) for i in indices).lstrip()
        elif kind in PEERS:
            text = PEER_MODULE_HEAD.format(client=PEER_CLIENTS[kind]) + "".join(
                PEER_TESTS[kind].format(index=i) for i in indices
            )
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


def run_suite(folder: Path, expected: int, *extra: str, pycache: Path | None = None) -> Sample:
    """Wall and CPU (of the whole process tree) of one ``python -m pytest`` run of *folder*;
    raises unless all passed. With ``--collect-only`` in *extra* it checks the collected count.
    """
    proc, sample = run_process(pytest_command(*extra), cwd=folder, env=child_env(pycache))
    word = "collected" if "--collect-only" in extra else "passed"
    counted = re.search(rf"(\d+) (?:tests? )?{word}", proc.stdout)
    if proc.returncode != 0 or counted is None or int(counted.group(1)) != expected:
        tail = "\n".join(proc.stdout.splitlines()[-15:] + proc.stderr.splitlines()[-5:])
        raise BenchmarkRunError(
            f"the generated suite in {folder} did not pass ({expected} tests expected, exit code "
            f"{proc.returncode}); fix the suite or the plugin before measuring. Output tail:\n{tail}"
        )
    return sample


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
    tests: int,
    variants: Sequence[str],
    repeats: int,
    splits: dict[str, dict[str, float]] | None = None,
    peers: Sequence[str] = tuple(PEERS),
) -> dict[str, Sample]:
    """Median wall and CPU per suite kind (``"empty"``, *variants*, *peers*), interleaved.

    The warm-up run of each suite writes the bytecode and assertion-rewrite caches (as a user's
    second run starts from them). With *splits*, each kind's :func:`phase_split` is stored there.
    """
    kinds = ("empty", *variants, *peers)
    with tempfile.TemporaryDirectory(prefix="bench-plugin-overhead-") as raw:
        folders = {kind: write_suite(Path(raw), kind, tests) for kind in kinds}
        pycache = Path(raw) / "pycache"
        times = medians(
            {kind: lambda f=folder: run_suite(f, tests, pycache=pycache) for kind, folder in folders.items()},
            repeats,
        )
        if splits is not None:
            for kind, folder in folders.items():
                splits[kind] = phase_split(folder, tests, pycache)
    return times


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
    times: dict[str, Sample], tests: int, splits: dict[str, dict[str, float]] | None = None
) -> list[str]:
    """The target lines (``scripted``, else the first variant, against each floor present) and
    one info line per other variant."""
    per_test = {kind: (sample - times["empty"]) * (1000 / tests) for kind, sample in times.items()}
    variants = [kind for kind in times if kind in SCENARIOS]
    primary = "scripted" if "scripted" in variants else variants[0]
    ours = per_test[primary]
    lines: list[str] = []
    name = f"plugin overhead per offline job test ({DESCRIPTIONS[primary]}, {tests} tests)"
    common: dict[str, Any] = {"ours": ours.wall, "ours_cpu": ours.cpu, "unit": "ms/test"}
    if "mock_transport" in per_test:
        floor = per_test["mock_transport"]
        ratio = ours.cpu / floor.cpu if floor.cpu > 0 else float("inf")
        lines.append(
            report(
                name,
                **common,
                baseline_name=PEERS["mock_transport"],
                baseline=floor.wall,
                baseline_cpu=floor.cpu,
                ratio=ratio,
                target_text=f"<= {FLOOR_TARGET:g}x on CPU per test above empty tests",
                met=ratio <= FLOOR_TARGET,
            )
        )
    if "httpx_mock" in per_test:
        peer = per_test["httpx_mock"]
        ratio = ours.cpu / peer.cpu if peer.cpu > 0 else float("inf")
        lines.append(
            report(
                f"{name} vs pytest-httpx",
                **common,
                baseline_name=PEERS["httpx_mock"],
                baseline=peer.wall,
                baseline_cpu=peer.cpu,
                ratio=ratio,
                target_text="< 1x on CPU per test above empty tests",
                met=ratio < 1.0,
            )
        )
    for kind in variants:
        if kind == primary and len(lines) > 0:
            continue
        cost = per_test[kind]
        line = (
            f"  info: plugin overhead ({DESCRIPTIONS[kind]}): {cost.wall:.4g} ms/test "
            f"(CPU {cost.cpu:.4g} ms/test)"
        )
        print(line, flush=True)
        lines.append(line)
    if splits:
        lines.append(split_line(splits, tests))
    line = f"  info: suite times for {tests} tests: " + ", ".join(
        f"{kind} {sample.wall:.2f} s (CPU {sample.cpu:.2f} s)" for kind, sample in times.items()
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


#: What ``main`` measures unless told otherwise: the target variant and the realistic default
#: (only the target variant under ``--quick``).
MAIN_VARIANTS: tuple[str, ...] = ("scripted", "default")
QUICK_VARIANTS: tuple[str, ...] = ("scripted",)


def main(
    tests: int | None = None,
    variants: Sequence[str] | None = None,
    repeats: int | None = None,
    peers: Sequence[str] = tuple(PEERS),
) -> list[str]:
    tests = SETTINGS.pick(TESTS, QUICK_TESTS) if tests is None else tests
    variants = SETTINGS.pick(MAIN_VARIANTS, QUICK_VARIANTS) if variants is None else variants
    repeats = SETTINGS.pick(REPEATS, QUICK_REPEATS) if repeats is None else repeats
    splits: dict[str, dict[str, float]] | None = None if SETTINGS.quick else {}  # the split: info only
    times = measure(tests, variants, repeats, splits=splits, peers=peers)
    return overhead_lines(times, tests, splits)


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_quick_flag(parser)
    parser.add_argument("--tests", type=int, help=f"tests per suite ({TESTS}, {QUICK_TESTS} quick)")
    parser.add_argument("--repeats", type=int, help=f"timed runs of each ({REPEATS}, {QUICK_REPEATS} quick)")
    parser.add_argument("--variants", help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--profile", metavar="VARIANT", help="print a cProfile of one job suite instead")
    args = parser.parse_args(argv)
    SETTINGS.quick = args.quick
    variants = None if args.variants is None else [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in [*(variants or ()), args.profile or "default"] if v not in SCENARIOS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}: use {', '.join(SCENARIOS)}")
    if args.profile:
        print(profile(args.profile, args.tests or SETTINGS.pick(TESTS, QUICK_TESTS)))
    else:
        main(args.tests, variants, args.repeats)


if __name__ == "__main__":
    _cli()
