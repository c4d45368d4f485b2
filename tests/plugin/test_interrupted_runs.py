"""An interrupted run is still reported: Ctrl-C and SIGTERM cancel the online job, print the job
table and write the JSON report, also when signalled again during teardown; the SIGTERM handler
lives only for the session; a job of an xdist worker that was killed is reported and cancelled.

The test in the subprocess signals itself once its job is submitted and running on a served fake
in this process, so the interruption lands at a known point, with no timing involved.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.session import ServedFake

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENV_KEY = "env_interrupted_task_app_key_5d0c7e"

SUITE = """
import os
import signal

import pytest

# A process started with SIGINT ignored (a script's `cmd &`) passes that on, and Python keeps
# an ignored SIGINT ignored: give Ctrl-C its usual meaning, as a terminal would.
signal.signal(signal.SIGINT, signal.default_int_handler)

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_interrupted(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    assert job.get_status()["status"] in ("queued", "running")
    os.kill(os.getpid(), signal.{signal})
    synth_expect(job).to_succeed(within=7200)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_online_run_cancels_its_job_and_reports_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, signal_name: str
) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_interrupt=SUITE.replace("{signal}", signal_name))
    with ServedFake.start(polls_to_finish=10_000, task_app_api_key=ENV_KEY) as served:
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
        result = pytester.runpytest_subprocess(
            "-p", "no:randomly", "-p", "no:xdist", f"--synth-backend={served.url}",
            "--synth-poll-interval=300", "--synth-report=report.json",
            timeout=600,  # a hang guard only: the run ends as soon as the signal lands
        )  # fmt: skip
        jobs = served.fake.jobs
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert [job.status for job in jobs] == ["cancelled"]
    job_id = jobs[0].id
    result.stdout.fnmatch_lines(
        [
            f"*= synth-rl jobs (online, {served.url}) =*",
            f"test_interrupt.py::test_interrupted  {job_id}  cancelled*",
            "synth-rl: JSON report written to *report.json",
        ]
    )
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert [(row["test_id"], row["job_id"], row["status"]) for row in report["jobs"]] == [
        ("test_interrupt.py::test_interrupted", job_id, "cancelled")
    ]


SCRIPT = """
import json, signal, sys

import pytest

signal.signal(signal.SIGTERM, {before})
args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--synth-report=r.json", "test_h.py"]
code = pytest.main(args)
print("RESULT " + json.dumps({{"exit": int(code), "after": repr(signal.getsignal(signal.SIGTERM))}}))
"""

HANDLER_SUITE = """
import signal


def test_handler():
    print("DURING", repr(signal.getsignal(signal.SIGTERM)))
"""


@pytest.mark.parametrize("before", ["signal.SIG_DFL", "signal.SIG_IGN"])
def test_the_sigterm_handler_lives_only_for_the_session_and_respects_sig_ign(
    pytester: pytest.Pytester, before: str
) -> None:
    pytester.makepyfile(test_h=HANDLER_SUITE)
    script = pytester.makepyfile(run_h=SCRIPT.format(before=before))
    result = pytester.runpython(script)
    found = json.loads(next(line for line in result.outlines if line.startswith("RESULT "))[7:])
    expected = repr({"signal.SIG_DFL": signal.SIG_DFL, "signal.SIG_IGN": signal.SIG_IGN}[before])
    assert found == {"exit": 0, "after": expected}
    result.stdout.no_fnmatch_line("*DURING*")  # captured: the test passed
    during = pytester.runpytest("-s", "-p", "no:randomly", "--synth-report=r.json", "test_h.py")
    if before == "signal.SIG_DFL":
        during.stdout.fnmatch_lines(["*DURING <function RunInterrupts._on_term at *>*"])


# Teardown: a second signal lets the cancels finish, a third ends the run at once. The served fake
# holds every cancel until this test has seen the run's answer to the extra signal, so each signal
# lands while the teardown is cancelling.
THREE_JOBS_SUITE = """
import os
import signal

import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_three_jobs(synth_rl_job, synth_expect):
    jobs = [synth_rl_job() for _ in range(3)]
    for job in jobs:
        job.submit()
    os.kill(os.getpid(), signal.SIGINT)
    synth_expect(jobs[0]).to_succeed(within=7200)
"""

# Seconds, for hangs only: a healthy run needs a small fraction of this on any machine.
HANG_GUARD = 180.0
# Started as a terminal starts it, with Python's own signal handlers, whatever this process inherited.
_PYTEST_WITH_CTRL_C = (
    "import signal, sys, pytest; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "sys.exit(pytest.console_main())"
)
AGAIN = "synth-rl: interrupted again:"


class _HeldCancels:
    """The fake's handler, answering ``POST .../cancel`` only once :meth:`release` is called."""

    def __init__(self, fake: FakeSynthBackend) -> None:
        self.arrived = threading.Event()
        self._released = threading.Event()
        self._handle = fake.handle

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/cancel"):
            self.arrived.set()
            self._released.wait(HANG_GUARD)
        return self._handle(request)

    def release(self) -> None:
        self._released.set()

    def __getattr__(self, name: str) -> object:
        return getattr(self._handle, name)


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes]) -> bool:
    """Whether *text* appears in *log* before the run exits (bounded by the hang guard)."""
    tick = threading.Event()
    for _ in range(int(HANG_GUARD / 0.05)):
        if text in log.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return text in log.read_text(errors="replace")
        tick.wait(0.05)
    return False


def _interrupted_in_teardown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, extra_signals: list[signal.Signals]
) -> tuple[int, str, list[tuple[str, str]]]:
    """Run the three-job suite online; once the teardown's first cancel is held, send
    *extra_signals* (each after the run said it got the one before), then let the cancels go.
    Returns the exit code, the run's output and the fake's (job id, status) pairs."""
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_three=THREE_JOBS_SUITE)
    fake = FakeSynthBackend(task_app_api_key=ENV_KEY)
    fake.scenario(polls=10_000)
    held = _HeldCancels(fake)
    monkeypatch.setattr(fake, "handle", held)
    log = pytester.path / "run.log"
    try:
        with fake.serve() as url, log.open("wb") as sink:
            env = {**os.environ, "SYNTH_API_KEY": fake.api_key.value, "ENVIRONMENT_API_KEY": ENV_KEY}
            for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_ADDOPTS"):
                env.pop(name, None)
            command = [
                sys.executable, "-c", _PYTEST_WITH_CTRL_C, "-p", "no:cacheprovider", "-p", "no:xdist",
                "-p", "no:randomly", f"--synth-backend={url}", "--synth-poll-interval=300",
                "--synth-report=report.json",
            ]  # fmt: skip
            proc = subprocess.Popen(
                command, cwd=pytester.path, env=env, stdout=sink, stderr=subprocess.STDOUT
            )
            try:
                assert held.arrived.wait(HANG_GUARD), "no cancel reached the backend:\n" + log.read_text()
                for number, signum in enumerate(extra_signals):
                    proc.send_signal(signum)
                    if number == 0:
                        assert _wait_for_line(log, AGAIN, proc), log.read_text()
                if len(extra_signals) < 2:
                    held.release()
                code = proc.wait(timeout=HANG_GUARD)
                jobs = [(job.id, job.status) for job in fake.jobs]  # before a held cancel goes on
            finally:
                held.release()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        fake.close()
    return code, log.read_text(errors="replace"), jobs


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")
@pytest.mark.parametrize("again", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_during_teardown_still_cancels_every_job_and_reports(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, again: signal.Signals
) -> None:
    code, text, jobs = _interrupted_in_teardown(pytester, monkeypatch, [again])
    assert code == pytest.ExitCode.INTERRUPTED, text
    assert [status for _, status in jobs] == ["cancelled"] * 3, text
    assert "Traceback" not in text
    assert "interrupt once more to stop now" in text
    lines = text.splitlines()
    for job_id, _ in jobs:
        assert any(
            line.startswith(f"test_three.py::test_three_jobs  {job_id}  cancelled") for line in lines
        ), text
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert sorted((row["job_id"], row["status"]) for row in report["jobs"]) == sorted(jobs)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")
def test_a_third_signal_ends_the_run_at_once_naming_the_jobs_left_running(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text, jobs = _interrupted_in_teardown(pytester, monkeypatch, [signal.SIGINT, signal.SIGTERM])
    assert code == -signal.SIGTERM, text  # ended by the signal itself
    # Held at the first cancel: nothing was cancelled, and the run names every job to cancel.
    assert len(jobs) == 3, text
    assert "cancelled" not in [status for _, status in jobs], text
    stopped = [line for line in text.splitlines() if line.startswith("synth-rl: stopped at once")]
    assert len(stopped) == 1, text
    for job_id, _ in jobs:
        assert f"{job_id} (test_three.py::test_three_jobs)" in stopped[0]
    assert "Traceback" not in text
    assert not (pytester.path / "report.json").exists()


ORPHAN_SUITE = """
import os
import pathlib
import shutil
import signal

import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_killed(synth_rl_job, request):
    job = synth_rl_job()
    job.submit()
    assert job.get_status()["status"] in ("queued", "running")
    # What the worker leaves the controller, kept for the test to read.
    spool = pathlib.Path(request.config.workerinput["synth_row_spool"])
    for live in spool.glob("*.live.json"):
        shutil.copy(live, "live.json")
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer: no teardown, no report to the controller
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")
def test_a_job_of_an_xdist_worker_killed_with_sigkill_is_reported_orphaned_and_cancelled(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_orphan=ORPHAN_SUITE)
    temp = pytester.mkdir("temp")  # where the run keeps its workers' files
    monkeypatch.setenv("TMPDIR", str(temp))
    with ServedFake.start(polls_to_finish=10_000, task_app_api_key=ENV_KEY) as served:
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
        result = pytester.runpytest_subprocess(
            "-n", "2", "-p", "xdist", "--max-worker-restart=0", "-p", "no:randomly",
            f"--synth-backend={served.url}",
            "--synth-report=report.json", timeout=600,  # a hang guard only
        )  # fmt: skip
        jobs = [(job.id, job.status) for job in served.fake.jobs]
    assert len(jobs) == 1, result.stdout.str()
    job_id = jobs[0][0]
    assert jobs == [(job_id, "cancelled")], result.stdout.str()
    orphaned = "cancelled (cancelled by plugin) (orphaned: its worker died)"
    result.stdout.fnmatch_lines([f"test_orphan.py::test_killed  {job_id}  {orphaned}*"])
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert [(r["test_id"], r["job_id"], r["status"], r["orphaned"]) for r in report["jobs"]] == [
        ("test_orphan.py::test_killed", job_id, "cancelled", True)
    ]
    assert not list(temp.iterdir())  # removed at the end of the run
    live = (pytester.path / "live.json").read_text(encoding="utf-8")
    assert [(e["test"], e["job_id"]) for e in json.loads(live)] == [("test_orphan.py::test_killed", job_id)]
    assert served.api_key.value not in live
    assert ENV_KEY not in live
