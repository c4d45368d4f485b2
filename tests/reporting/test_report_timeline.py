"""A job's status timeline reaches the report also when its wait ended without a result."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fake_support import job_on

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import JobTimeoutError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.session import offline_job_id_prefix
from pytest_synth_rl.reporting.report import job_record

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "arithmetic.toml"


def test_a_timed_out_wait_keeps_its_polls_in_the_record() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=20, duration=600)
        job = job_on(fake, clock)
        job.submit()
        with pytest.raises(JobTimeoutError):
            job.poll_until_complete(timeout=60, interval=10)
        record = job_record("t::x", job, backend=fake.base_url, status_payload=job.get_status())
        unread = job_record("t::x", job, backend=fake.base_url, status_payload=None)
    assert job.last_result is None
    assert [(p.elapsed, p.polls) for p in job.last_polls] == [(0, 1), (10, 1), (20, 1), (60, 4)]
    assert record.timeline == [["queued", 0, 10], ["running", 20, 60]]
    assert record.status == "running"
    # A status that could not be read at the end: the last one polled stands.
    assert (unread.status, unread.status_label) == ("running", "running")


def test_a_finished_wait_still_takes_its_timeline_from_the_result() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(duration=30)
        job = job_on(fake, clock)
        job.submit()
        result = job.poll_until_complete(timeout=600, interval=10)
        record = job_record("t::x", job, backend=fake.base_url)
    assert result.history == job.last_polls
    assert record.timeline[-1] == ["succeeded", 30, 30]
    assert record.status == "succeeded"


def test_a_job_never_polled_has_the_status_read_at_the_end_as_its_timeline() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=20)
        job = job_on(fake, clock)
        job.submit()
        never_read = job_record("t::x", job, backend=fake.base_url)
        clock.advance(5)
        record = job_record("t::x", job, backend=fake.base_url, status_payload=job.get_status())
    assert never_read.timeline == []
    assert record.timeline == [["queued", 5, 5]]
    assert record.status == "queued"


def test_the_timeline_spans_every_wait_not_only_the_last() -> None:
    # Before: each wait restarted the timeline, so a second wait on a finished job left
    # [["succeeded", 0, 0]] and the queued and running statuses were gone.
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=20, duration=40)
        job = job_on(fake, clock)
        job.submit()
        job.poll_until_complete(timeout=7200, interval=10)
        clock.advance(100)
        job.poll_until_complete(timeout=7200, interval=10)
        record = job_record("t::x", job, backend=fake.base_url)
    assert [p.elapsed for p in job.last_polls] == [0]
    assert record.timeline == [["queued", 0, 10], ["running", 20, 50], ["succeeded", 60, 160]]


def test_statuses_read_by_an_expectation_and_a_later_wait_both_reach_the_timeline() -> None:
    from pytest_synth_rl.assertions import expect_job

    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(queue_time=30, duration=600)
        job = job_on(fake, clock)
        job.submit()
        expect_job(job, clock=clock).to_reach_status("running", within=600)
        job.cancel()
        expect_job(job, clock=clock).to_be_cancelled(within=60)
        record = job_record("t::x", job, backend=fake.base_url)
    assert record.timeline == [["queued", 0, 20], ["running", 30, 30], ["cancelled", 30, 30]]
    assert record.status == "cancelled"


def test_a_submitted_job_never_read_is_status_unknown_not_unsubmitted() -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        job = job_on(fake, clock)
        job.submit()
        record = job_record("t::x", job, backend=fake.base_url, status_payload=None)
    assert record.job_id == "job_rl_000001"
    assert record.status is None
    assert record.status_label == "status unknown"
    never = job_record("t::y", job_on(fake, clock), backend=fake.base_url)
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
    job_id = offline_job_id_prefix("test_down.py::test_status_route_down") + "000001"
    assert row["job_id"] == job_id
    assert row["status"] is None
    # The job's duration ends with the test, not after the teardown's retried reads.
    assert row["clock_seconds"] == 0
    result.stdout.fnmatch_lines([f"*test_down.py::test_status_route_down*{job_id}*status unknown*"])
    result.stdout.no_fnmatch_line("*not submitted*")
    summary = json.loads((pytester.path / "report.json").read_text())["summary"]
    assert summary == {"jobs": 1, "by_status": {"status unknown": 1}}
