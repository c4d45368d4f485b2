"""An interrupted run is still reported: Ctrl-C and SIGTERM cancel the online job, print the job
table and write the JSON report; the SIGTERM handler lives only for the session.

The test in the subprocess signals itself once its job is submitted and running on a served fake
in this process, so the interruption lands at a known point, with no timing involved.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest

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
        during.stdout.fnmatch_lines(["*DURING <function TerminationAsInterrupt._on_term at *>*"])
