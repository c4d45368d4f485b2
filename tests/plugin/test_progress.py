"""Live progress of real-time waits: the library, the option, and what a pytest run prints."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from test_fake_support import SteppedClock

from pytest_synth_rl.client.polling import Poller, SynthCallbackWarning
from pytest_synth_rl.client.results import observe_polls
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.plugin.progress import ProgressReporter, ProgressUpdate, choose_mode, progress_update
from pytest_synth_rl.plugin.session import ServedFake
from pytest_synth_rl.plugin.settings import resolve_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _status(status: str, step: int, reward: float | None) -> dict[str, Any]:
    return {"status": status, "progress": {"completed": step, "total": 10}, "metrics": {"reward": reward}}


def test_update_describes_job_status_step_reward_elapsed_and_time_left() -> None:
    clock = SteppedClock()
    poller = Poller("job_7", timeout=7200, interval=10, clock=clock)
    clock.sleep(75)
    update = progress_update(poller, poller.record(_status("running", 3, 0.4512)))
    assert update == ProgressUpdate("job_7", "running", 3, 10, 0.4512, 75.0, 7125.0)
    assert update.describe() == "job_7 running step 3/10 reward 0.451 elapsed 1m15s left 1h58m"
    done = progress_update(poller, poller.record({"status": "succeeded", "step": 10}))
    assert done.describe() == "job_7 succeeded step 10 elapsed 1m15s"


def test_heartbeat_prints_first_poll_then_every_interval_and_the_end() -> None:
    clock = SteppedClock()
    lines: list[str] = []
    reporter = ProgressReporter(
        "heartbeat", interval=60, write_line=lines.append, label=lambda: "t.py::test_a", now=clock.now
    ).start()
    try:
        poller = Poller("job_1", timeout=600, interval=10, clock=clock)
        for step in range(8):  # polls at 0, 10, ..., 70 s
            poller.record(_status("running", step, 0.1 * step if step else None))
            clock.sleep(10)
        poller.record(_status("succeeded", 8, 0.9))
    finally:
        reporter.stop()
    assert lines == [
        "synth-rl heartbeat: t.py::test_a job_1 running step 0/10 elapsed 0s left 10m00s",
        "synth-rl heartbeat: t.py::test_a job_1 running step 6/10 reward 0.600 elapsed 1m00s left 9m00s",
        "synth-rl heartbeat: t.py::test_a job_1 succeeded step 8/10 reward 0.900 elapsed 1m20s",
    ]


def test_live_line_is_rewritten_every_poll_and_ended_at_a_terminal_status() -> None:
    clock = SteppedClock()
    calls: list[tuple[str, bool]] = []
    reporter = ProgressReporter(
        "line", write_line=lambda _: None, rewrite=lambda text, final: calls.append((text, final))
    ).start()
    try:
        poller = Poller("job_2", timeout=100, interval=10, clock=clock)
        poller.record(_status("queued", 0, None))
        clock.sleep(10)
        poller.record(_status("failed", 1, 0.2))
    finally:
        reporter.stop()
    assert calls == [
        ("synth-rl: job_2 queued step 0/10 elapsed 0s left 1m40s", False),
        ("synth-rl: job_2 failed step 1/10 reward 0.200 elapsed 10.0s", True),
    ]


def test_virtual_clock_polls_print_nothing_and_stop_detaches() -> None:
    lines: list[str] = []
    reporter = ProgressReporter("heartbeat", interval=0.001, write_line=lines.append).start()
    poller = Poller("job_3", timeout=100, interval=10, clock=VirtualClock())
    poller.record(_status("running", 1, 0.5))
    reporter.stop()
    real = Poller("job_4", timeout=100, interval=10, clock=SteppedClock())
    real.record(_status("running", 1, 0.5))
    assert lines == []


def test_failing_observer_warns_and_polling_goes_on() -> None:
    def broken(poller: Poller, record: Any) -> None:
        raise RuntimeError("printer on fire")

    stop = observe_polls(broken)
    try:
        poller = Poller("job_5", timeout=100, interval=10, clock=SteppedClock())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            poller.record(_status("running", 1, None))
    finally:
        stop()
    assert len(poller.history) == 1
    assert [type(w.message) for w in caught] == [SynthCallbackWarning]
    assert "RuntimeError: printer on fire" in str(caught[0].message)


@pytest.mark.parametrize(
    ("setting", "worker", "quiet", "tty", "expected"),
    [
        ("auto", False, False, True, "line"),
        ("auto", False, True, True, "heartbeat"),
        ("auto", False, False, False, "heartbeat"),
        ("auto", True, False, True, "heartbeat"),
        ("line", True, False, True, "heartbeat"),
        ("line", False, True, False, "line"),
        ("heartbeat", False, False, True, "heartbeat"),
        ("off", False, False, True, None),
    ],
)
def test_choose_mode(setting: str, worker: bool, quiet: bool, tty: bool, expected: str | None) -> None:
    assert choose_mode(setting, xdist_worker=worker, quiet=quiet, isatty=tty) == expected


def test_progress_settings_from_env_and_ini_with_did_you_mean() -> None:
    settings = resolve_settings(env={"SYNTH_PROGRESS": "Heartbeat"}, ini={"heartbeat_interval": "15"})
    assert (settings.progress, settings.heartbeat_interval) == ("heartbeat", 15.0)
    assert settings.sources["progress"] == "env:SYNTH_PROGRESS"
    assert resolve_settings(env={}).progress == "auto"
    with pytest.raises(SynthUsageError) as error:
        resolve_settings(cli={"progress": "lin", "heartbeat_interval": "0"}, env={})
    text = str(error.value)
    assert "--synth-progress: progress must be one of auto, line, heartbeat, off, got 'lin'" in text
    assert "(did you mean 'line'?)" in text
    assert "--synth-heartbeat-interval: must be a finite number of seconds > 0, got '0'" in text


def test_bad_progress_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--synth-progress=heartbeet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*got 'heartbeet' (did you mean 'heartbeat'?)*"])


SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_trains(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=600)
"""

HEARTBEATS = [
    "synth-rl heartbeat: *test_trains job_rl_* running step 1/4 reward 0.200 elapsed * left *",
    "synth-rl heartbeat: *test_trains job_rl_* running step 3/4 reward 0.500 elapsed * left *",
    "synth-rl heartbeat: *test_trains job_rl_* succeeded step 4/4 reward 0.700 elapsed *",
]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_wait=SUITE)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env_key_shared_with_served_fake_01")
    for name in ("SYNTH_PROGRESS", "SYNTH_HEARTBEAT_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    return pytester


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_heartbeat_of_an_online_wait_reaches_the_output(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    # A served fake moves one stage per poll, and the client polls it on real time.
    with ServedFake.start(polls_to_finish=6) as served:
        served.fake.scenario(polls=6, steps=4, reward_curve=[0.2, 0.35, 0.5, 0.7])
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        args = [f"--synth-backend={served.url}", "--synth-poll-interval=0.02", "-q", "-p", "no:randomly"]
        args += ["--synth-heartbeat-interval=0.001", *(["-n", "2"] if xdist else [])]
        # Two workers need processes of their own; one process is this one (nothing global is patched).
        result = suite.runpytest_subprocess(*args, timeout=300) if xdist else suite.runpytest(*args)
    result.assert_outcomes(passed=1)
    # Under xdist the worker writes to the standard error it shares with the controller.
    output = result.stderr if xdist else result.stdout
    output.fnmatch_lines(HEARTBEATS)
    if xdist:
        output.fnmatch_lines(["synth-rl heartbeat: [[]gw?[]] test_wait.py::test_trains job_rl_*"])


def test_offline_wait_on_the_virtual_clock_prints_nothing(suite: pytest.Pytester) -> None:
    result = suite.runpytest("--synth-progress=heartbeat", "--synth-heartbeat-interval=0.001")
    result.assert_outcomes(passed=1)
    assert "heartbeat" not in result.stdout.str() + result.stderr.str()


def test_a_narrow_terminal_cuts_the_test_id_before_the_job_facts() -> None:
    # Before, the live line was cut at its end: on 80 columns the reward, elapsed time and time
    # left (what the line is for) were lost behind a long test id.
    from pytest_synth_rl.plugin.progress import fit_line

    label = "tests/test_training.py::test_learns_to_add_numbers"
    facts = "job_rl_000002 running step 3/10 reward 0.450 elapsed 1m00s left 1h59m"
    text = f"synth-rl: {label} {facts}"
    assert fit_line(text, label, 200) == text
    fitted = fit_line(text, label, 100)
    assert fitted == f"synth-rl: tests/…o_add_numbers {facts}"
    assert len(fitted) == 100
    # Too narrow for a useful part of the id: it goes, then the end is cut.
    assert fit_line(text, label, 90) == f"synth-rl: {facts}"
    assert fit_line(text, label, 70) == f"synth-rl: {facts}"[:70]
    assert fit_line("synth-rl: " + facts, "", 40) == ("synth-rl: " + facts)[:40]


@pytest.mark.parametrize("mode", ["heartbeat", "line"])
def test_a_wait_that_ends_without_a_final_status_gets_a_last_line(mode: str) -> None:
    # Before, a timed-out wait's log ended on "running ... left 0s", as if it were still waited on.
    clock = SteppedClock()
    lines: list[str] = []
    reporter = ProgressReporter(
        mode,  # type: ignore[arg-type]
        interval=600,
        write_line=lines.append,
        rewrite=lambda text, final: lines.append(f"{text} final={final}"),
        label=lambda: "t.py::test_a",
        now=clock.now,
    ).start()
    try:
        timed_out = Poller("job_1", timeout=20, interval=10, clock=clock)
        finished = Poller("job_2", timeout=20, interval=10, clock=clock)
        for step in range(3):
            timed_out.record(_status("running", step, 0.25))
            clock.sleep(10)
        finished.record(_status("succeeded", 10, 0.5))
        reporter.end_waits()
        reporter.end_waits()  # once per job
    finally:
        reporter.stop()
    facts = "t.py::test_a job_1 running step 2/10 reward 0.250 elapsed 20.0s"
    last = f"{facts} (wait ended)"
    if mode == "heartbeat":
        assert lines == [
            "synth-rl heartbeat: t.py::test_a job_1 running step 0/10 reward 0.250 elapsed 0s left 20.0s",
            "synth-rl heartbeat: t.py::test_a job_2 succeeded step 10/10 reward 0.500 elapsed 30.0s",
            f"synth-rl heartbeat: {last}",
        ]
    else:
        assert lines[-2:] == [
            "synth-rl: t.py::test_a job_2 succeeded step 10/10 reward 0.500 elapsed 30.0s final=True",
            f"synth-rl: {last} final=True",
        ]
        assert lines[2] == f"synth-rl: {facts} left 0s final=False"


def timed_out_wait(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.RunResult:
    """The suite's one test, online against a served fake whose job never ends, waiting 0.2 s."""
    suite.makepyfile(test_wait=SUITE.replace("within=600", "within=0.2"))
    with ServedFake.start(polls_to_finish=1000) as served:
        served.fake.scenario(polls=1000, steps=4, reward_curve=[0.2, 0.35, 0.5, 0.7])
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        online = [f"--synth-backend={served.url}", "--synth-poll-interval=0.05", "-p", "no:randomly"]
        result = suite.runpytest(*online, *args)
    result.assert_outcomes(failed=1)
    return result


def test_an_online_wait_that_times_out_ends_its_heartbeats_with_a_last_line(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = timed_out_wait(suite, monkeypatch, "-q", "--synth-heartbeat-interval=600")
    # Each on a line of its own: before, the last one came right after -q's "F".
    heartbeats = [line for line in result.outlines if "synth-rl heartbeat:" in line]
    assert [line.startswith("synth-rl heartbeat:") for line in heartbeats] == [True, True], heartbeats
    assert " left " in heartbeats[0]
    assert heartbeats[1].startswith("synth-rl heartbeat: test_wait.py::test_trains job_rl_")
    assert heartbeats[1].endswith(" (wait ended)")
    assert " running step " in heartbeats[1]


def test_a_live_line_that_times_out_ends_before_the_tests_letter(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, "F" landed at the end of the live line, past its last column.
    monkeypatch.setenv("COLUMNS", "80")  # the width of a run on no terminal (this run is in-process)
    result = timed_out_wait(suite, monkeypatch, "--synth-progress=line")
    lines = result.stdout.str().split("\n")
    (last,) = [i for i, line in enumerate(lines) if line.rstrip().endswith("(wait ended)")]
    assert lines[last].split("\r")[-1].startswith("synth-rl: job_rl_000001 running step 0/4 elapsed ")
    assert lines[last + 1].startswith("F")


def test_under_xdist_a_heartbeat_starts_a_line_of_its_own_after_the_controllers_dots(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quick tests first, so the controller has printed progress dots when the job's wait begins.
    quick = "import pytest\n\n@pytest.mark.parametrize('n', range(8))\ndef test_q(n):\n    pass\n"
    suite.makepyfile(test_quick=quick)
    with ServedFake.start(polls_to_finish=6) as served:
        served.fake.scenario(polls=6, steps=4, reward_curve=[0.2, 0.35, 0.5, 0.7])
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        args = [f"--synth-backend={served.url}", "--synth-poll-interval=0.02", "-p", "no:randomly"]
        args += ["--synth-heartbeat-interval=0.001", "-n", "2", "--color=no"]
        # One stream, as on a terminal or in a CI log: the workers share the controller's.
        command = [sys.executable, "-m", "pytest", *args]
        pipes = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        with suite.popen(command, **pipes) as process:
            output = process.communicate(timeout=300)[0].decode()
    assert process.returncode == 0, output
    lines = output.splitlines()
    heartbeats = [line for line in lines if "synth-rl heartbeat:" in line]
    assert len(heartbeats) >= 2, output
    assert all(line.startswith("synth-rl heartbeat: [gw") for line in heartbeats), heartbeats
    assert "9 passed" in output
