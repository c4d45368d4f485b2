"""A job's status timeline reaches the report also when its wait ended without a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import JobTimeoutError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.report import job_record

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "arithmetic.toml"


def _job(fake: FakeSynthBackend, clock: VirtualClock) -> RLJob:
    return RLJob.from_config(
        CONFIG,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url="https://task-app.example.com",
        skip_health_check=True,
        clock=clock,
        transport=fake.transport(),
    )


def test_a_timed_out_wait_keeps_its_polls_in_the_record() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=20, duration=600)
        job = _job(fake, clock)
        job.submit()
        with pytest.raises(JobTimeoutError):
            job.poll_until_complete(timeout=60, interval=10)
        record = job_record("t::x", job, backend=fake.base_url, status_payload=job.get_status())
        unread = job_record("t::x", job, backend=fake.base_url, status_payload=None)
    assert job.last_result is None
    assert [p.elapsed for p in job.last_polls] == [0, 10, 20, 30, 40, 50, 60]
    assert record.timeline == [["queued", 0, 10], ["running", 20, 60]]
    assert record.status == "running"
    # A status that could not be read at the end: the last one polled stands.
    assert (unread.status, unread.status_label) == ("running", "running")


def test_a_finished_wait_still_takes_its_timeline_from_the_result() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(duration=30)
        job = _job(fake, clock)
        job.submit()
        result = job.poll_until_complete(timeout=600, interval=10)
        record = job_record("t::x", job, backend=fake.base_url)
    assert result.history == job.last_polls
    assert record.timeline[-1] == ["succeeded", 30, 30]
    assert record.status == "succeeded"


def test_a_job_never_polled_has_no_timeline() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=20)
        job = _job(fake, clock)
        job.submit()
        record = job_record("t::x", job, backend=fake.base_url, status_payload=job.get_status())
    assert record.timeline == []
    assert record.status == "queued"


def test_a_submitted_job_never_read_is_status_unknown_not_unsubmitted() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        job = _job(fake, clock)
        job.submit()
        record = job_record("t::x", job, backend=fake.base_url, status_payload=None)
    assert record.job_id == "job_rl_000001"
    assert record.status is None
    assert record.status_label == "status unknown"
    never = job_record("t::y", _job(fake, clock), backend=fake.base_url)
    assert never.status_label == "not submitted"


TEARDOWN_SUITE = """
def test_status_route_down(synth_fake, synth_rl_job):
    synth_fake.fault("status", status=500)
    job = synth_rl_job()
    job.submit()
"""


def test_teardown_that_cannot_read_a_submitted_job_reports_it_as_unknown(pytester: pytest.Pytester) -> None:
    import json
    import shutil

    examples = CONFIG.parent
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(examples / name, pytester.path / name)
    pytester.makeini("[pytest]\nsynth_task_app = arithmetic_task_app.py\nsynth_rl_config = arithmetic.toml\n")
    pytester.makepyfile(test_down=TEARDOWN_SUITE)
    result = pytester.runpytest("--synth-report=report.json", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    row = json.loads((pytester.path / "report.json").read_text())["jobs"][0]
    assert row["job_id"] == "job_rl_000001"
    assert row["status"] is None
    # The job's duration ends with the test, not after the teardown's retried reads.
    assert row["clock_seconds"] == 0
    result.stdout.fnmatch_lines(["*test_down.py::test_status_route_down*job_rl_000001*status unknown*"])
    result.stdout.no_fnmatch_line("*not submitted*")
    summary = json.loads((pytester.path / "report.json").read_text())["summary"]
    assert summary == {"jobs": 1, "by_status": {"status unknown": 1}}
