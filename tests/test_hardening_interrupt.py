"""Ctrl-C behaves: it ends the run promptly, cancels the online job, stops task apps; and the
plugin never takes SIGINT/SIGTERM away from the user (the upstream SDK's task app module did).

The interrupted run is a real ``python -m pytest`` subprocess, online against a served fake in
this process, so the test watches the fake's job store to know when to press Ctrl-C and to see
the job cancelled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_synth_rl.plugin.session import ServedFake

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENV_KEY = "env_interrupt_task_app_key_4be1d09c"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_long_poll(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""

# At the very end of the run (after every fixture was torn down) record what is still up.
CONFTEST = """
import json, os, threading


def _listening():
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        count += sum(1 for row in rows if row.split()[3] == "0A" and row.split()[9] in inodes)
    return count


def pytest_unconfigure(config):
    state = {
        "threads": sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()),
        "listening": _listening(),
    }
    with open("after-run.json", "w") as out:
        json.dump(state, out)
"""


# Seconds, for hangs only: a healthy run needs a small fraction of this on any machine.
HANG_GUARD = 180.0

# The run under test is started the way a terminal starts it: with Python's own Ctrl-C handler,
# whatever disposition this process inherited (a script's ``cmd &`` ignores SIGINT, and children
# inherit that). Python keeps an ignored SIGINT ignored, so the child sets the handler itself.
_PYTEST_WITH_CTRL_C = (
    "import signal, sys, pytest; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.console_main())"
)


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes]) -> bool:
    """Check *condition* until true or the subprocess exits; give up only if it never happens."""
    tick = threading.Event()
    for _ in range(int(HANG_GUARD / 0.05)):
        if condition():
            return True
        if proc.poll() is not None:
            return False
        tick.wait(0.05)
    return False


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child needs POSIX signals")
def test_ctrl_c_during_a_poll_cancels_the_online_job_and_stops_task_apps(
    pytester: pytest.Pytester,
) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_long=SUITE)
    pytester.makeconftest(CONFTEST)
    # A job that would need 10 000 polls, 300 s apart: only Ctrl-C ends this run.
    with ServedFake.start(polls_to_finish=10_000, task_app_api_key=ENV_KEY) as served:
        env = {**os.environ, "SYNTH_API_KEY": served.api_key.value, "ENVIRONMENT_API_KEY": ENV_KEY}
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop("PYTEST_ADDOPTS", None)
        command = [
            sys.executable, "-c", _PYTEST_WITH_CTRL_C, "-p", "no:cacheprovider", "-p", "no:xdist",
            f"--synth-backend={served.url}", "--synth-poll-interval=300", "--synth-timeout=7200",
        ]  # fmt: skip
        output = pytester.path / "run.log"
        with output.open("wb") as sink:
            proc = subprocess.Popen(
                command, cwd=pytester.path, env=env, stdout=sink, stderr=subprocess.STDOUT
            )
            try:
                polled = _wait_for(lambda: any(j.polls >= 1 for j in served.fake.jobs), proc)
                assert polled, "the job was never submitted and polled:\n" + output.read_text()
                proc.send_signal(signal.SIGINT)
                # The run sleeps 300 s between polls: ending before the next poll is "promptly".
                code = proc.wait(timeout=HANG_GUARD)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        jobs = served.fake.jobs
    text = output.read_text()
    assert code == pytest.ExitCode.INTERRUPTED, text
    assert "KeyboardInterrupt" in text
    assert [job.status for job in jobs] == ["cancelled"], text
    after = json.loads((pytester.path / "after-run.json").read_text())
    assert after["listening"] == 0, after
    assert not [name for name in after["threads"] if "task-app" in name or "uvicorn" in name], after


SIGNALS_SCRIPT = """
import json, signal, sys

import pytest

# Start from the disposition a terminal gives Python, whatever this process inherited.
signal.signal(signal.SIGINT, signal.default_int_handler)

names = ("SIGINT", "SIGTERM")
def handlers():
    return {n: repr(signal.getsignal(getattr(signal, n))) for n in names}

before = handlers()
import pytest_synth_rl.plugin.hooks  # noqa: F401
import pytest_synth_rl
import pytest_synth_rl.taskapp.in_process  # noqa: F401
import pytest_synth_rl.fake  # noqa: F401
after_import = handlers()
code = pytest.main(["-q", "-p", "no:cacheprovider", "test_signals.py"])
after_run = handlers()
found = {"before": before, "after_import": after_import, "after_run": after_run, "exit": int(code)}
print("RESULT " + json.dumps(found))
"""

SIGNALS_SUITE = """
import signal

import pytest


@pytest.mark.synth_task_app("arithmetic_task_app.py")
def test_handlers_untouched_while_servers_run(synth_task_app, synth_fake_server):
    assert synth_task_app.url and synth_fake_server.url
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
"""


def test_the_plugin_never_replaces_sigint_or_sigterm_handlers(pytester: pytest.Pytester) -> None:
    shutil.copy(EXAMPLES / "arithmetic_task_app.py", pytester.path / "arithmetic_task_app.py")
    pytester.makepyfile(test_signals=SIGNALS_SUITE)
    script = pytester.makepyfile(check_signals=SIGNALS_SCRIPT)
    result = pytester.runpython(script)
    lines = [line for line in result.outlines if line.startswith("RESULT ")]
    assert lines, result.stdout.str() + result.stderr.str()
    found = json.loads(lines[-1][len("RESULT ") :])
    assert found["exit"] == 0, result.stdout.str()
    assert found["before"]["SIGINT"] == repr(signal.default_int_handler)
    assert found["after_import"] == found["before"]
    assert found["after_run"] == found["before"]
