"""The polling contract: first poll at t=0, the last exactly at the deadline, any terminal
spelling ends it, and a timeout explains what was seen. Clocks start late on purpose."""

from __future__ import annotations

import traceback
import warnings
from typing import Any

import pytest

from pytest_synth_rl.client.polling import MIN_POLL_INTERVAL, Poller, SynthCallbackWarning, summarize_history
from pytest_synth_rl.client.results import MAX_POLL_RECORDS, JobResult, PollRecord, add_poll, polls_in
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import JobFailedError, JobTimeoutError, SynthUsageError

START = 3_600.0
EPOCH = 1_700_000_000.0


def poller(timeout: float = 60, interval: float = 10, **kw: Any) -> tuple[Poller, VirtualClock]:
    clock = VirtualClock(START, epoch=EPOCH)
    return Poller("job-1", timeout=timeout, interval=interval, clock=clock, **kw), clock


def drive(p: Poller, clock: VirtualClock, statuses: list[str]) -> list[float]:
    """Poll like a job does: record the next scripted status, sleep what the poller says."""
    polled_at = []
    for status in statuses:
        polled_at.append(clock.now() - START)
        p.record({"status": status})
        wait = p.next_wait()
        if wait is None:
            return polled_at
        clock.sleep(wait)
    raise AssertionError("script ran out")


# -- arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kwargs", "shown"),
    [
        ("timeout", {"timeout": -1}, ">= 0, got -1"),
        ("timeout", {"timeout": float("inf")}, ">= 0, got inf"),
        ("timeout", {"timeout": float("nan")}, ">= 0, got nan"),
        ("timeout", {"timeout": True}, ">= 0, got True"),
        ("timeout", {"timeout": "60"}, ">= 0, got '60'"),
        ("interval", {"interval": 0}, "> 0, got 0"),
        ("interval", {"interval": -0.5}, "> 0, got -0.5"),
        ("interval", {"interval": True}, "> 0, got True"),
        ("interval", {"interval": False}, "> 0, got False"),
        ("interval", {"interval": None}, "> 0, got None"),
    ],
)
def test_bad_timeout_or_interval_is_a_usage_error_naming_the_argument(
    name: str, kwargs: dict[str, Any], shown: str
) -> None:
    with pytest.raises(SynthUsageError) as info:
        poller(**kwargs)
    [problem] = info.value.problems
    assert problem.key == f"poll_until_complete.{name}"
    assert problem.message == f"must be a finite number of seconds {shown}"
    assert problem.hint == "e.g. poll_until_complete(timeout=7200, interval=10)"


def test_an_interval_below_the_minimum_is_a_usage_error_naming_it_and_the_minimum() -> None:
    with pytest.raises(SynthUsageError) as info:
        poller(interval=1e-9)
    [problem] = info.value.problems
    assert problem.key == "poll_until_complete.interval"
    assert problem.message == "must be at least 0.01 seconds (the shortest poll interval), got 1e-09"
    assert problem.hint == "e.g. poll_until_complete(timeout=7200, interval=10)"
    assert poller(interval=MIN_POLL_INTERVAL)[0].interval == 0.01


def test_a_two_hour_wait_polled_every_tenth_of_a_second_keeps_what_changed_not_every_poll() -> None:
    p, clock = poller(timeout=7200, interval=0.1)
    statuses = ["queued"] * 1000 + ["running"] * 80_000
    with pytest.raises(JobTimeoutError) as info:
        drive(p, clock, statuses)
    assert polls_in(p.history) == 72_001
    assert [(r.status, r.polls) for r in p.history] == [
        ("queued", 1),
        ("queued", 999),
        ("running", 1),
        ("running", 71_000),
    ]
    assert "72001 polls every 0.1s; statuses: queued x1000 (0-99.9s) -> running x71001 (100-7200s)" in str(
        info.value
    )


def test_a_history_whose_every_answer_differs_is_bounded_and_keeps_its_count() -> None:
    history: list[PollRecord] = []
    for poll in range(3 * MAX_POLL_RECORDS):
        kept = add_poll(history, PollRecord(float(poll), float(poll), "running", {"step": poll}))
        assert kept is history[-1]
    assert len(history) == MAX_POLL_RECORDS
    assert polls_in(history) == 3 * MAX_POLL_RECORDS
    assert (history[0].elapsed, history[-1].elapsed) == (0.0, 3 * MAX_POLL_RECORDS - 1)


def test_zero_timeout_and_integer_arguments_are_accepted_as_floats() -> None:
    p, _ = poller(timeout=0, interval=1)
    assert (p.timeout, p.interval) == (0.0, 1.0)
    assert isinstance(p.timeout, float)
    assert isinstance(p.interval, float)
    assert p.deadline == START


# -- timing ----------------------------------------------------------------------------------
def test_polls_start_at_zero_and_the_last_lands_on_the_deadline() -> None:
    p, clock = poller(timeout=25, interval=10)
    with pytest.raises(JobTimeoutError):
        drive(p, clock, ["running"] * 10)
    assert [(r.elapsed, r.polls) for r in p.history] == [(0, 1), (25, 3)]
    assert clock.sleeps == [10, 10, 5]
    assert clock.now() == START + 25


def test_a_terminal_status_in_any_spelling_ends_polling() -> None:
    for final in ["succeeded", "COMPLETED", " Failed ", "canceled", "cancelled"]:
        p, clock = poller()
        assert drive(p, clock, ["queued", "running", final]) == [0, 10, 20]
        assert p.next_wait() is None


def test_record_keeps_epoch_time_elapsed_time_and_the_normalized_status() -> None:
    p, clock = poller()
    clock.sleep(5)
    record = p.record({"state": " RUNNING "}, note="odd")
    assert record == PollRecord(at=EPOCH + 5, elapsed=5.0, status="running", payload={"state": " RUNNING "})
    assert p.history == [record]
    assert p.note == "odd"
    p.record({})
    assert p.note is None
    assert p.history[-1].status == ""


def test_the_first_wait_is_the_interval_or_the_time_left() -> None:
    p, clock = poller(timeout=4, interval=10)
    assert p.next_wait() == 4
    clock.sleep(4)
    with pytest.raises(JobTimeoutError):
        p.next_wait()


def test_float_noise_does_not_buy_a_poll_past_the_deadline() -> None:
    p, clock = poller(timeout=1, interval=0.1)
    for _ in range(10):
        clock.sleep(0.1)  # sums to 0.9999999999999999
    p.record({"status": "running"})
    with pytest.raises(JobTimeoutError):
        p.next_wait()


def test_just_before_the_deadline_there_is_one_more_short_wait() -> None:
    p, clock = poller(timeout=1, interval=10)
    clock.sleep(0.999)
    p.record({"status": "running"})
    assert p.next_wait() == pytest.approx(0.001)


# -- the timeout -----------------------------------------------------------------------------
def test_timeout_error_carries_what_the_caller_needs() -> None:
    p, clock = poller(timeout=25, interval=10)
    with pytest.raises(JobTimeoutError) as info:
        drive(p, clock, ["queued", "queued", "running", "running"])
    error = info.value
    assert str(error).splitlines()[0] == (
        f"RL job job-1 did not finish within 25s on {clock!r}: 4 polls every 10s; statuses: "
        "queued x2 (0-10s) -> running x2 (20-25s)"
    )
    assert (error.job_id, error.timeout, error.last_status) == ("job-1", 25.0, "running")
    assert [r.elapsed for r in error.history] == [0, 10, 20, 25]
    assert "RLJob.from_job_id('job-1')" in (error.hint or "")


def test_timeout_with_no_answer_and_an_unreadable_last_answer() -> None:
    p, _ = poller(timeout=0)
    with pytest.raises(JobTimeoutError) as info:
        p.next_wait()
    assert info.value.last_status is None
    assert " 0 polls every 10s; statuses: " in str(info.value)
    p.record({}, note="HTML where JSON was expected")
    with pytest.raises(JobTimeoutError) as info:
        p.next_wait()
    assert (
        str(info.value)
        .splitlines()[0]
        .endswith("statuses: <no status> (0s); the last answer was unreadable: HTML where JSON was expected")
    )


# -- summaries --------------------------------------------------------------------------------
def records(*pairs: tuple[float, str]) -> list[PollRecord]:
    return [PollRecord(at=0.0, elapsed=t, status=s, payload={}) for t, s in pairs]


def test_summary_collapses_runs_and_formats_seconds_compactly() -> None:
    assert summarize_history([]) == ""
    assert summarize_history(records((0, "queued"))) == "queued (0s)"
    assert summarize_history(records((0, "queued"), (2.5, "queued"), (7200, "running"))) == (
        "queued x2 (0-2.5s) -> running (7200s)"
    )


def test_summary_shows_the_last_runs_only() -> None:
    history = records(*[(float(i), f"s{i % 2}") for i in range(7)])
    assert summarize_history(history) == ("... -> s0 (2s) -> s1 (3s) -> s0 (4s) -> s1 (5s) -> s0 (6s)")
    assert summarize_history(history, limit=2) == "... -> s1 (5s) -> s0 (6s)"
    assert (
        summarize_history(history, limit=7)
        == "s0 (0s) -> s1 (1s) -> s0 (2s) -> s1 (3s) -> s0 (4s) -> s1 (5s) -> s0 (6s)"
    )


# -- callbacks and the result ----------------------------------------------------------------
def test_a_failing_callback_becomes_a_warning_with_its_traceback() -> None:
    p, _ = poller()
    p.record({"status": "running"})
    try:
        raise ValueError("printer broke")
    except ValueError as exc:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            p.callback_failed(exc)
    [warning] = caught
    assert warning.category is SynthCallbackWarning
    text = str(warning.message)
    assert text.startswith(
        "on_status callback raised ValueError: printer broke (poll 1 of job job-1); polling continues.\n"
        "Traceback (most recent call last):"
    )
    assert 'raise ValueError("printer broke")' in text


def test_finish_builds_the_result_from_the_last_answer() -> None:
    p, clock = poller()
    drive(p, clock, ["queued", "running", "succeeded"])
    p.history[-1].payload["final_reward"] = 0.5
    result = p.finish()
    assert isinstance(result, JobResult)
    assert (result.job_id, result.status, result.final_reward, result.polls, result.elapsed) == (
        "job-1",
        "succeeded",
        0.5,
        3,
        20.0,
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"status": "failed", "error": "OOM"}, "RL job job-1 failed (status 'failed'): OOM"),
        (
            {"status": "canceled"},
            "RL job job-1 cancelled (status 'canceled'): the backend gave no error text",
        ),
    ],
)
def test_raise_on_failure(payload: dict[str, Any], message: str) -> None:
    p, _ = poller(raise_on_failure=True)
    p.record(payload)
    with pytest.raises(JobFailedError) as info:
        p.finish()
    assert str(info.value).splitlines()[0] == message
    assert (info.value.job_id, info.value.status, info.value.result.status) == (
        "job-1",
        payload["status"],
        payload["status"],
    )
    assert info.value.error == payload.get("error")

    quiet, _ = poller()
    quiet.record(payload)
    assert quiet.finish().status == payload["status"]


def test_raise_on_failure_lets_success_through() -> None:
    p, _ = poller(raise_on_failure=True)
    p.record({"status": "succeeded"})
    assert p.finish().succeeded


def test_the_callback_warning_carries_the_whole_traceback_verbatim() -> None:
    p, _ = poller()
    try:
        raise KeyError("k")
    except KeyError as exc:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            p.callback_failed(exc)
        formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert str(caught[0].message) == (
        f"on_status callback raised KeyError: 'k' (poll 0 of job job-1); polling continues.\n{formatted}"
    )


def test_the_deadline_itself_counts_as_reached() -> None:
    clock = VirtualClock()  # at 0, "time left" is exactly the timeout, with no float noise
    p = Poller("job-1", timeout=1e-9, interval=1, clock=clock)
    with pytest.raises(JobTimeoutError):
        p.next_wait()


def test_a_failed_job_error_points_at_the_event_log() -> None:
    p, _ = poller(raise_on_failure=True)
    p.record({"status": "failed"})
    with pytest.raises(JobFailedError) as info:
        p.finish()
    assert info.value.hint == "see job.events() for the backend's log of the run"


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (None, True),
        (408, True),
        (429, True),
        (500, True),
        (503, True),
        (499, False),
        (404, False),
        (409, False),
    ],
)
def test_a_poll_that_failed_counts_as_transient_only_without_an_answer_or_on_408_429_and_5xx(
    code: int | None, transient: bool
) -> None:
    from pytest_synth_rl.client.polling import is_transient
    from pytest_synth_rl.errors import BackendError

    assert is_transient(BackendError("poll failed", status_code=code)) is transient


def test_a_bad_failure_budget_names_the_argument_and_an_example() -> None:
    with pytest.raises(SynthUsageError) as caught:
        Poller("job_1", timeout=10, interval=1, clock=VirtualClock(), max_failed_polls=0)
    assert caught.value.keys == ["poll_until_complete.max_failed_polls"]
    assert "must be an integer >= 1, got 0" in str(caught.value)
    assert "e.g. poll_until_complete(max_failed_polls=5)" in str(caught.value)
