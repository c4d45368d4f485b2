"""The polling assertions' contract: when each passes, and the exact words of each failure.

The backend is a handler function behind ``httpx.MockTransport`` that answers from a script on
the job's virtual clock, which starts at a non-zero time so that "elapsed" means "since start".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_support import make_job, write_config

from pytest_synth_rl.assertions import (
    EventuallyTimeout,
    JobExpectation,
    JobHistory,
    collect_job_history,
    eventually,
    expect_job,
    job_rewards,
    reward_curve,
)
from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.secrets.masking import register_secret

START = 1_000.0
BACKEND = "https://api.usesynth.ai"
KEY = "sk_test_assertions_key_0123456789"


class Runaway(Exception):
    """Raised by checks that were called far more often than the test allows (a loop bug)."""


def counting(result: Callable[[int], Any], limit: int = 1_000) -> Callable[[], Any]:
    calls = {"n": 0}

    def check() -> Any:
        calls["n"] += 1
        if calls["n"] > limit:
            raise Runaway(calls["n"])
        return result(calls["n"])

    return check


# -- eventually ------------------------------------------------------------------------------
def test_eventually_returns_the_first_truthy_value_on_a_clock_not_starting_at_zero() -> None:
    clock = VirtualClock(START)
    answers = iter([None, 0, "", "ready", "later"])
    assert eventually(lambda: next(answers), timeout=60, interval=5, clock=clock) == "ready"
    assert clock.sleeps == [5, 5, 5]
    assert clock.now() == START + 15


def test_eventually_timeout_message_lists_every_attempt_time_and_what_it_returned() -> None:
    clock = VirtualClock(START)

    def reward_above_half() -> float:
        return 0.0

    with pytest.raises(EventuallyTimeout) as info:
        eventually(counting(lambda n: 0.0), timeout=25, interval=10, clock=clock, description="reward > 0.5")
    assert str(info.value) == (
        "reward > 0.5 did not pass within 25.0s (4 attempts, every 10.0s):\n"
        "  t=0s: returned 0.0\n"
        "  t=10.0s: returned 0.0\n"
        "  t=20.0s: returned 0.0\n"
        "  t=25.0s: returned 0.0"
    )
    assert clock.sleeps == [10, 10, 5]
    assert clock.now() == START + 25
    with pytest.raises(EventuallyTimeout, match=r"^reward_above_half did not pass within 1\.0s \(2 attempts"):
        eventually(reward_above_half, timeout=1, interval=1, clock=clock)


def test_eventually_shows_the_last_five_attempts_and_counts_the_earlier_ones() -> None:
    clock = VirtualClock(START)
    with pytest.raises(EventuallyTimeout) as info:
        eventually(counting(lambda n: n * 0), timeout=6, interval=1, clock=clock, description="c")
    lines = str(info.value).splitlines()
    assert lines == [
        "c did not pass within 6.0s (7 attempts, every 1.0s):",
        "  … 2 earlier attempts",
        "  t=2.0s: returned 0",
        "  t=3.0s: returned 0",
        "  t=4.0s: returned 0",
        "  t=5.0s: returned 0",
        "  t=6.0s: returned 0",
    ]


@pytest.mark.parametrize(("timeout", "earlier"), [(4, None), (5, "  … 1 earlier attempts")])
def test_eventually_truncates_only_beyond_five_attempts(timeout: float, earlier: str | None) -> None:
    with pytest.raises(EventuallyTimeout) as info:
        eventually(counting(lambda n: False), timeout=timeout, interval=1, clock=VirtualClock(START))
    lines = str(info.value).splitlines()
    assert len(lines) == 6 + (earlier is not None)
    assert (lines[1] if earlier else None) == earlier
    assert lines[-1] == f"  t={timeout:.1f}s: returned False"


def test_eventually_reports_the_first_line_of_each_assertion_error() -> None:
    def check(n: int) -> bool:
        raise AssertionError(f"reward still 0.{n}\nsecond line")

    with pytest.raises(EventuallyTimeout) as info:
        eventually(counting(check), timeout=1, interval=1, clock=VirtualClock(START), description="d")
    assert str(info.value) == (
        "d did not pass within 1.0s (2 attempts, every 1.0s):\n"
        "  t=0s: AssertionError: reward still 0.1\n"
        "  t=1.0s: AssertionError: reward still 0.2"
    )


def test_eventually_passes_on_the_attempt_at_the_deadline() -> None:
    clock = VirtualClock(START)
    assert eventually(counting(lambda n: n == 3 and "done"), timeout=20, interval=10, clock=clock) == "done"
    assert clock.now() == START + 20


def test_eventually_with_zero_timeout_tries_exactly_once() -> None:
    clock = VirtualClock(START)
    with pytest.raises(EventuallyTimeout, match=r"\(1 attempts, every 1\.0s\):\n  t=0s: returned None$"):
        eventually(counting(lambda n: None), timeout=0, clock=clock, description="x")
    assert clock.sleeps == []


def test_eventually_names_a_check_without_a_name_check() -> None:
    partial = functools.partial(lambda n: False, 1)
    with pytest.raises(EventuallyTimeout, match=r"^check did not pass within 0s \(1 attempts"):
        eventually(partial, timeout=0, clock=VirtualClock(START))


def test_eventually_lets_other_errors_through_at_once() -> None:
    clock = VirtualClock(START)

    def broken() -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        eventually(broken, timeout=60, interval=1, clock=clock)
    assert clock.sleeps == []


def test_eventually_without_a_clock_uses_real_time() -> None:
    assert eventually(lambda: 42, timeout=0) == 42
    with pytest.raises(EventuallyTimeout, match="1 attempts"):
        eventually(lambda: 0, timeout=0)


@pytest.mark.parametrize(
    ("timeout", "interval", "keys"),
    [
        (-1, 1.0, ["eventually.timeout"]),
        (1, 0, ["eventually.interval"]),
        (1, -1.0, ["eventually.interval"]),
        (-0.5, 0, ["eventually.timeout", "eventually.interval"]),
        # Before, a NaN timeout was never reached: the wait did not end.
        (float("nan"), 1.0, ["eventually.timeout"]),
        (1, float("inf"), ["eventually.interval"]),
        ("30", 1.0, ["eventually.timeout"]),
    ],
)
def test_eventually_rejects_a_timeout_or_interval_that_is_no_number_of_seconds(
    timeout: float, interval: float, keys: list[str]
) -> None:
    with pytest.raises(SynthUsageError) as info:
        eventually(lambda: True, timeout=timeout, interval=interval, clock=VirtualClock(START))
    assert info.value.keys == keys
    text = str(info.value)
    if "eventually.timeout" in keys:
        assert f"eventually.timeout: must be a finite number of seconds >= 0, got {timeout!r}" in text
    if "eventually.interval" in keys:
        assert f"eventually.interval: must be a finite number of seconds > 0, got {interval!r}" in text
    assert "e.g. eventually(check, timeout=30, interval=1)" in text


def test_eventually_masks_secrets_in_its_message() -> None:
    register_secret("sk-leaky-value-123456")
    with pytest.raises(EventuallyTimeout) as info:
        eventually(
            lambda: "x" == "y", timeout=0, clock=VirtualClock(START), description="sk-leaky-value-123456"
        )
    assert "sk-leaky-value-123456" not in str(info.value)
    assert str(info.value).startswith("sk-l…56 did not pass")


# -- a scripted backend ----------------------------------------------------------------------
class Backend:
    """Answers job routes from a script: statuses over (virtual) time, events, metric points."""

    def __init__(
        self,
        clock: VirtualClock,
        statuses: Sequence[tuple[float, Mapping[str, Any]]] = ((0.0, {"status": "succeeded"}),),
        events: Sequence[Mapping[str, Any]] = (),
        points: Sequence[Mapping[str, Any]] = (),
        page: Callable[[int, int], Mapping[str, Any]] | None = None,
    ) -> None:
        self.clock = clock
        self.start = clock.now()
        self.statuses = list(statuses)
        self.events = list(events)
        self.points = list(points)
        self.page = page
        self.requests: list[tuple[float, str, dict[str, str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        params = dict(request.url.params)
        self.requests.append((self.clock.now() - self.start, path, params))
        if path == "/api/rl/jobs/job-1":
            elapsed = self.clock.now() - self.start
            current = [payload for at, payload in self.statuses if at <= elapsed][-1]
            return httpx.Response(200, json={"id": "job-1", **current})
        if path == "/api/rl/jobs/job-1/events":
            since, limit = int(params["since_seq"]), int(params["limit"])
            if self.page is not None:
                return httpx.Response(200, json=self.page(since, limit))
            batch = [e for e in self.events if e["seq"] > since][:limit]
            return httpx.Response(200, json={"events": batch})
        if path == "/api/rl/jobs/job-1/metrics":
            return httpx.Response(200, json={"points": self.points})
        return httpx.Response(404, json={"detail": "not found"})

    def paths(self, suffix: str = "") -> list[str]:
        return [p for _, p, _ in self.requests if p == f"/api/rl/jobs/job-1{suffix}"]


def job_for(backend: Backend, job_id: str = "job-1") -> RLJob:
    return RLJob.from_job_id(
        job_id,
        backend_url=BACKEND,
        api_key=KEY,
        clock=backend.clock,
        transport=httpx.MockTransport(backend),
        retry=RetryPolicy(seed=3),
    )


def event(seq: int, type_: str, message: str = "", **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "message": message, "data": data}


def steps(*rewards: float) -> list[dict[str, Any]]:
    return [event(i + 1, "rl.train.step", f"step {i + 1}", reward=r) for i, r in enumerate(rewards)]


def reward_points(*rewards: float, name: str = "train.reward") -> list[dict[str, Any]]:
    return [{"name": name, "step": i + 1, "value": r} for i, r in enumerate(rewards)]


# -- JobHistory.render ---------------------------------------------------------------------
def test_history_render_shows_status_error_timeline_curve_reward_and_events() -> None:
    history = JobHistory(
        job_id="job-1",
        statuses=[(0.0, "queued", 1), (10.0, "running", 1), (20.0, "failed", 1)],
        events=[
            event(1, "rl.job.started", "started"),
            {"type": "rl.job.failed"},
            {"seq": 3, "message": "odd"},
        ],
        rewards=[0.25, 0.5],
        final_status="failed",
        final_reward=0.5,
        error="OOM",
    )
    assert history.render() == (
        "job job-1: status failed\n"
        "  error: OOM\n"
        "  statuses: queued x1 (0s) -> running x1 (10.0s) -> failed x1 (20.0s)\n"
        "  reward curve: first 0.250 -> last 0.500 (max 0.500, n=2) ▁█\n"
        "  final reward: 0.5000\n"
        "  last 3 of 3 events:\n"
        "    #1 rl.job.started started\n"
        "    #? rl.job.failed\n"
        "    #3 ? odd"
    )


def test_history_render_of_an_unsubmitted_job_with_nothing_known() -> None:
    assert JobHistory(job_id=None).render() == (
        "job <not submitted>: status ?\n"
        "  statuses: (no polls)\n"
        "  reward curve: (no rewards reported)\n"
        "  events: (none)"
    )


def test_history_render_keeps_the_last_eight_events() -> None:
    history = JobHistory(job_id="j", events=[event(i, "t") for i in range(1, 11)], final_reward=0.0)
    lines = history.render().splitlines()
    assert "  final reward: 0.0000" in lines
    assert lines[-9] == "  last 8 of 10 events:"
    assert lines[-8:] == [f"    #{i} t" for i in range(3, 11)]


# -- reward curves and event paging --------------------------------------------------------
def test_reward_curve_prefers_train_reward_points_sorted_by_step() -> None:
    metrics = [
        {"name": "reward", "step": 1, "value": 9.0},
        {"name": "train.reward", "step": 2, "value": 0.5},
        {"name": "train.reward", "step": 1, "value": 0.25},
        {"name": "train.reward", "step": 3, "value": "n/a"},
        {"name": "train.reward", "value": 0.125},
    ]
    assert reward_curve(metrics) == [0.125, 0.25, 0.5]
    assert reward_curve([{"name": "reward", "step": 1, "value": 2}]) == [2.0]
    assert reward_curve([{"name": "train.mean_reward", "step": 1, "value": 3}]) == [3.0]
    assert reward_curve([{"name": "loss", "step": 1, "value": 3}]) == []


def test_reward_curve_falls_back_to_train_step_events() -> None:
    events = [
        event(1, "rl.train.step", reward=0.25),
        event(2, "rl.train.started", reward=9.0),
        event(3, "train.step", reward=1),
        event(4, "rl.train.step", reward="high"),
        {"seq": 5, "type": "rl.train.step"},
    ]
    assert reward_curve([{"name": "loss", "value": 1.0}], events) == [0.25, 1.0]
    assert reward_curve(events=[{"data": {"reward": 1.0}}]) == []


def test_job_rewards_reads_metrics_first_and_events_only_when_metrics_carry_no_reward() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, events=steps(0.1, 0.2), points=reward_points(0.5, 0.75))
    assert job_rewards(job_for(backend)) == [0.5, 0.75]
    assert backend.paths("/events") == []
    assert backend.requests[0][2] == {"after_step": "-1", "limit": "10000"}

    backend = Backend(clock, events=steps(0.1, 0.2), points=[{"name": "loss", "step": 1, "value": 2.0}])
    assert job_rewards(job_for(backend)) == [0.1, 0.2]


def test_events_are_read_page_by_page_until_a_short_page() -> None:
    backend = Backend(VirtualClock(START), events=steps(*([0.5] * 450)))
    history = collect_job_history(job_for(backend))
    assert [e["seq"] for e in history.events] == list(range(1, 451))
    since = [params["since_seq"] for _, path, params in backend.requests if path.endswith("/events")]
    assert since == ["0", "200", "400"]
    assert {params["limit"] for _, path, params in backend.requests if path.endswith("/events")} == {"200"}


def test_event_paging_follows_next_seq_and_stops_at_an_empty_page() -> None:
    seen: list[int] = []

    def page(since: int, limit: int) -> dict[str, Any]:
        seen.append(since)
        if since >= 1000:
            return {"events": []}
        return {"events": [event(since + i + 1, "t") for i in range(limit)], "next_seq": since + 500}

    history = collect_job_history(job_for(Backend(VirtualClock(START), page=page)))
    assert seen == [0, 500, 1000]
    assert len(history.events) == 400


def test_event_paging_stops_when_the_cursor_does_not_advance() -> None:
    seen: list[int] = []

    def page(since: int, limit: int) -> dict[str, Any]:
        seen.append(since)
        return {"events": [{"seq": 7, "type": "t"}] * limit, "next_seq": "x"}

    history = collect_job_history(job_for(Backend(VirtualClock(START), page=page)))
    assert seen == [0, 7]
    assert len(history.events) == 400


def test_event_paging_is_bounded_for_a_backend_that_never_ends() -> None:
    seen: list[int] = []

    def page(since: int, limit: int) -> dict[str, Any]:
        seen.append(since)
        return {"events": [event(since + i + 1, "t") for i in range(limit)]}

    history = collect_job_history(job_for(Backend(VirtualClock(START), page=page)))
    assert len(seen) == 50
    assert len(history.events) == 50 * 200


# -- collect_job_history -------------------------------------------------------------------
def test_history_of_a_polled_job_comes_from_the_poll_result() -> None:
    clock = VirtualClock(START)
    backend = Backend(
        clock,
        statuses=[
            (0, {"status": "queued"}),
            (10, {"status": "failed", "error": "OOM", "final_reward": 0.25}),
        ],
        events=steps(0.25),
    )
    job = job_for(backend)
    result = job.poll_until_complete(timeout=100, interval=10)
    history = collect_job_history(job, result)
    assert history.statuses == [(0.0, "queued", 1), (10.0, "failed", 1)]
    assert (history.final_status, history.final_reward, history.error) == ("failed", 0.25, "OOM")
    assert history.rewards == [0.25]
    assert history.job_id == "job-1"
    metric_reads = [params for _, path, params in backend.requests if path.endswith("/metrics")]
    assert metric_reads == [{"after_step": "-1", "limit": "10000"}]  # every point, in one read


@pytest.mark.parametrize(
    ("payload", "status", "error"),
    [
        ({"status": "running"}, "running", None),
        ({"state": "queued", "error": "slow"}, "queued", "slow"),
        ({"error": {"code": 1}}, "?", None),
    ],
)
def test_history_of_an_unpolled_job_asks_for_its_status(
    payload: dict[str, Any], status: str, error: str | None
) -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, payload)])
    history = collect_job_history(job_for(backend))
    assert (history.final_status, history.error, history.statuses) == (status, error, [])


def test_history_survives_a_backend_that_fails_while_explaining_a_failure() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"detail": "nope"})

    job = RLJob.from_job_id(
        "job-1",
        backend_url=BACKEND,
        api_key=KEY,
        clock=VirtualClock(START),
        transport=httpx.MockTransport(broken),
    )
    history = collect_job_history(job)
    assert (history.final_status, history.events, history.rewards) == ("?", [], [])


def test_history_of_an_unsubmitted_job_asks_nothing(tmp_path: Path) -> None:
    backend = Backend(VirtualClock(START))
    job = make_job(write_config(tmp_path), transport=httpx.MockTransport(backend), clock=backend.clock)
    history = collect_job_history(job)
    assert (history.job_id, history.final_status, history.events, history.rewards) == (None, None, [], [])
    with pytest.raises(
        AssertionError,
        match=r"^expected events \['a'\] in order; 'a' is missing after position 0\. Seen: \[\]",
    ):
        expect_job(job).to_emit_events(["a"])
    assert backend.requests == []


# -- expect_job: finishing -----------------------------------------------------------------
def running_then(final: Mapping[str, Any], at: float = 30.0) -> list[tuple[float, Mapping[str, Any]]]:
    return [(0.0, {"status": "queued"}), (10.0, {"status": "running"}), (at, final)]


def test_to_succeed_polls_on_the_jobs_clock_with_the_given_interval_and_chains() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=running_then({"status": "succeeded", "final_reward": 0.75}))
    expectation = expect_job(job_for(backend), interval=5)
    assert isinstance(expectation, JobExpectation)
    assert expectation.to_succeed(within=60) is expectation
    assert [t for t, p, _ in backend.requests if p == "/api/rl/jobs/job-1"] == [0, 5, 10, 15, 20, 25, 30]
    assert expectation.result.final_reward == 0.75
    assert expectation.clock is clock


def test_to_succeed_accepts_completed() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "completed"})])
    expect_job(job_for(backend)).to_succeed()


def test_to_finish_failure_names_the_limit_and_the_last_status() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=running_then({"status": "succeeded"}, at=500))
    with pytest.raises(AssertionError) as info:
        expect_job(job_for(backend), interval=10).to_finish(within=60)
    assert str(info.value).splitlines()[:3] == [
        "expected job job-1 to finish within 1m00s, but it was still 'running' after 7 polls",
        "job job-1: status running",
        "  statuses: queued x1 (0s) -> running x6 (10.0s-1m00s)",
    ]
    assert clock.now() == START + 60


def test_to_finish_uses_the_expectations_default_timeout() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=running_then({"status": "succeeded"}, at=500))
    with pytest.raises(AssertionError, match="to finish within 2m00s, but it was still 'running'"):
        expect_job(job_for(backend), interval=30, timeout=120).to_finish()
    assert clock.now() == START + 120


def test_to_finish_without_settings_uses_the_jobs_polling_defaults() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=running_then({"status": "succeeded"}, at=7_000))
    expect_job(job_for(backend)).to_finish()
    assert [t for t, p, _ in backend.requests if p == "/api/rl/jobs/job-1"][:3] == [0, 10, 20]
    clock2 = VirtualClock(START)
    backend2 = Backend(clock2, statuses=running_then({"status": "succeeded"}, at=8_000))
    with pytest.raises(AssertionError, match="within 2h00m"):
        expect_job(job_for(backend2)).to_finish()


def test_to_succeed_fails_with_the_status_the_job_ended_in_and_its_history() -> None:
    clock = VirtualClock(START)
    backend = Backend(
        clock,
        statuses=running_then({"status": "failed", "error": "CUDA OOM"}, at=20),
        events=[event(1, "rl.job.started", "started"), event(2, "rl.job.failed", "CUDA OOM")],
        points=reward_points(0.25),
    )
    with pytest.raises(AssertionError) as info:
        expect_job(job_for(backend), interval=10).to_succeed(within=100)
    assert str(info.value) == (
        "expected job job-1 to succeed, but it ended 'failed'\n"
        "job job-1: status failed\n"
        "  error: CUDA OOM\n"
        "  statuses: queued x1 (0s) -> running x1 (10.0s) -> failed x1 (20.0s)\n"
        "  reward curve: first 0.250 -> last 0.250 (max 0.250, n=1) ▃\n"
        "  last 2 of 2 events:\n"
        "    #1 rl.job.started started\n"
        "    #2 rl.job.failed CUDA OOM"
    )


def test_failure_messages_mask_secrets_the_backend_echoes() -> None:
    register_secret("sk-echoed-secret-98765")
    backend = Backend(
        VirtualClock(START), statuses=[(0, {"status": "failed", "error": "bad key sk-echoed-secret-98765"})]
    )
    with pytest.raises(AssertionError) as info:
        expect_job(job_for(backend)).to_succeed()
    assert "sk-echoed-secret-98765" not in str(info.value)
    assert "  error: bad key sk-e…65" in str(info.value)


def test_to_fail_passes_on_a_failed_job_and_checks_the_error_text() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "failed", "error": "disk full"})])
    expectation = expect_job(job_for(backend))
    assert expectation.to_fail(error_contains="disk") is expectation
    with pytest.raises(AssertionError) as info:
        expect_job(job_for(backend)).to_fail(error_contains="OOM")
    assert str(info.value).startswith("expected the job's error to contain 'OOM', got 'disk full'\n")


def test_to_fail_with_no_error_text() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "failed"})])
    expect_job(job_for(backend)).to_fail()
    with pytest.raises(AssertionError, match=r"^expected the job's error to contain 'x', got ''"):
        expect_job(job_for(backend)).to_fail(error_contains="x")


def test_to_fail_fails_on_a_job_that_succeeded() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "succeeded"})])
    with pytest.raises(AssertionError, match=r"^expected job job-1 to fail, but it ended 'succeeded'\n"):
        expect_job(job_for(backend)).to_fail(within=10)


@pytest.mark.parametrize("spelling", ["cancelled", "canceled", "CANCELLED"])
def test_to_be_cancelled_accepts_any_spelling(spelling: str) -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": spelling})])
    expectation = expect_job(job_for(backend))
    assert expectation.to_be_cancelled(within=10) is expectation


def test_to_be_cancelled_fails_on_a_job_that_failed() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "failed"})])
    with pytest.raises(AssertionError, match=r"^expected job job-1 to be cancelled, but it ended 'failed'\n"):
        expect_job(job_for(backend)).to_be_cancelled()


# -- to_reach_status -----------------------------------------------------------------------
def test_to_reach_status_is_case_insensitive_and_polls_on_the_interval() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=[(0, {"status": "queued"}), (25, {"state": "RUNNING"})])
    expectation = expect_job(job_for(backend), interval=5)
    assert expectation.to_reach_status("Running", within=60) is expectation
    assert [t for t, _, _ in backend.requests] == [0, 5, 10, 15, 20, 25]


def test_to_reach_status_failure_shows_what_was_seen_since_the_start() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=[(0, {"status": "queued"}), (20, {"status": "running"})])
    with pytest.raises(AssertionError) as info:
        expect_job(job_for(backend), interval=10).to_reach_status("succeeded", within=40)
    assert str(info.value).startswith(
        "expected job job-1 to reach status 'succeeded' within 40.0s; "
        "saw queued x2 (0s-10.0s) -> running x3 (20.0s-40.0s)\njob job-1: status running\n"
    )


def test_to_reach_status_defaults_to_the_expectation_timeout_then_two_hours_every_ten_seconds() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=[(0, {})])
    with pytest.raises(AssertionError, match=r"within 1m30s; saw  x4 \(0s-1m30s\)"):
        expect_job(job_for(backend), interval=30, timeout=90).to_reach_status("running")
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=[(0, {"status": "queued"})])
    with pytest.raises(AssertionError, match=r"within 2h00m; saw queued x721 \(0s-2h00m\)"):
        expect_job(job_for(backend)).to_reach_status("running")
    assert clock.now() == START + 7200


# -- to_have_final_reward ------------------------------------------------------------------
def finished_with(reward: float | None) -> RLJob:
    final: dict[str, Any] = {"status": "succeeded"}
    if reward is not None:
        final["final_reward"] = reward
    return job_for(Backend(VirtualClock(START), statuses=[(0, final)]))


@pytest.mark.parametrize(("at_least", "at_most"), [(0.5, None), (None, 0.5), (0.5, 0.5), (0.25, 0.75)])
def test_final_reward_bounds_are_inclusive(at_least: float | None, at_most: float | None) -> None:
    expectation = expect_job(finished_with(0.5))
    assert expectation.to_have_final_reward(at_least=at_least, at_most=at_most) is expectation


def test_final_reward_below_at_least() -> None:
    with pytest.raises(
        AssertionError, match=r"^expected final reward >= 0\.6, got 0\.5000\njob job-1: status succeeded"
    ):
        expect_job(finished_with(0.5)).to_have_final_reward(at_least=0.6)


def test_final_reward_above_at_most() -> None:
    with pytest.raises(AssertionError, match=r"^expected final reward <= 0\.4, got 0\.5000\n"):
        expect_job(finished_with(0.5)).to_have_final_reward(at_most=0.4)


def test_final_reward_missing() -> None:
    with pytest.raises(
        AssertionError, match=r"^expected job job-1 to report a final reward, but it has none\n"
    ):
        expect_job(finished_with(None)).to_have_final_reward(at_least=0)


def test_final_reward_reuses_the_finished_result() -> None:
    backend = Backend(VirtualClock(START), statuses=[(0, {"status": "succeeded", "final_reward": 0.5})])
    expect_job(job_for(backend)).to_succeed().to_have_final_reward(at_least=0.5).to_have_final_reward(
        at_most=1
    )
    assert len(backend.paths()) == 1


# -- to_improve_reward ---------------------------------------------------------------------
def curve_job(*rewards: float) -> tuple[RLJob, Backend]:
    backend = Backend(VirtualClock(START), points=reward_points(*rewards))
    return job_for(backend), backend


def test_improvement_is_last_minus_first_and_the_boundary_passes() -> None:
    job, _ = curve_job(0.25, 0.0, 0.75)
    expectation = expect_job(job)
    assert expectation.to_improve_reward(by=0.5) is expectation
    assert expect_job(curve_job(0.25, 0.25)[0]).to_improve_reward() is not None


def test_improvement_too_small_says_how_the_reward_went() -> None:
    with pytest.raises(AssertionError) as info:
        expect_job(curve_job(0.75, 0.9, 0.25)[0]).to_improve_reward(by=0.1)
    assert str(info.value).startswith(
        "expected the reward to improve by at least 0.1, but it went 0.7500 -> 0.2500 (change -0.5000)\n"
    )
    with pytest.raises(AssertionError, match=r"went 0\.2500 -> 0\.5000 \(change \+0\.2500\)"):
        expect_job(curve_job(0.25, 0.5)[0]).to_improve_reward(by=0.5)


@pytest.mark.parametrize("count", [0, 1])
def test_improvement_needs_two_points(count: int) -> None:
    with pytest.raises(AssertionError) as info:
        expect_job(curve_job(*[0.5] * count)[0]).to_improve_reward(by=0.2)
    assert str(info.value).startswith(
        f"expected the reward to improve by 0.2, but the job reported {count} reward point(s)\n"
    )


@pytest.mark.parametrize(
    ("window", "first", "last"),
    [(0, "0.0000", "1.0000"), (1, "0.0000", "1.0000"), (2, "0.5000", "0.5000"), (9, "0.5000", "0.5000")],
)
def test_improvement_window_averages_up_to_half_the_curve(window: int, first: str, last: str) -> None:
    with pytest.raises(AssertionError, match=rf"went {first} -> {last} "):
        expect_job(curve_job(0.0, 1.0, 0.0, 1.0)[0]).to_improve_reward(by=2.0, window=window)


def test_improvement_window_smooths_a_noisy_curve() -> None:
    noisy = (0.0, 0.5, 0.25, 1.0, 1.0, 0.25)
    expect_job(curve_job(*noisy)[0]).to_improve_reward(by=0.5, window=3)
    with pytest.raises(AssertionError, match=r"went 0\.0000 -> 0\.2500 \(change \+0\.2500\)"):
        expect_job(curve_job(*noisy)[0]).to_improve_reward(by=0.5)
    with pytest.raises(
        AssertionError,
        match=r"went 0\.2500 -> 0\.6250 \(change \+0\.3750; means of the first and last 2 of 6 points\)",
    ):
        expect_job(curve_job(*noisy)[0]).to_improve_reward(by=0.5, window=2)


def test_a_window_past_half_the_curve_says_what_was_compared() -> None:
    # Before, window=50 on a 4-point curve quietly compared means of 2 points.
    with pytest.raises(AssertionError) as info:
        expect_job(curve_job(0.0, 1.0, 0.0, 1.0)[0]).to_improve_reward(by=2.0, window=50)
    assert str(info.value).startswith(
        "expected the reward to improve by at least 2.0, but it went 0.5000 -> 0.5000 (change +0.0000; "
        "means of the first and last 2 of 4 points, as window=50 is more than half the curve)\n"
    )


def test_improvement_polls_the_job_to_the_end_first() -> None:
    clock = VirtualClock(START)
    backend = Backend(clock, statuses=running_then({"status": "succeeded"}), points=reward_points(0.0, 1.0))
    expect_job(job_for(backend), interval=10).to_improve_reward(by=1.0)
    assert clock.now() == START + 30


# -- to_emit_events ------------------------------------------------------------------------
def events_job(*types: str) -> RLJob:
    return job_for(Backend(VirtualClock(START), events=[event(i + 1, t) for i, t in enumerate(types)]))


def test_to_emit_events_in_order_with_others_between() -> None:
    job = events_job("a", "x", "b", "y", "c")
    expectation = expect_job(job)
    assert expectation.to_emit_events(["a", "b", "c"]) is expectation
    expect_job(job).to_emit_events([])
    expect_job(events_job("a", "a")).to_emit_events(["a", "a"])


def test_to_emit_events_out_of_order_or_missing() -> None:
    with pytest.raises(AssertionError) as info:
        expect_job(events_job("a", "b", "c")).to_emit_events(["a", "c", "b"])
    assert str(info.value).startswith(
        "expected events ['a', 'c', 'b'] in order; 'b' is missing after position 3. Seen: ['a', 'b', 'c']\n"
    )
    with pytest.raises(AssertionError, match=r"'a' is missing after position 1\. Seen: \['a'\]"):
        expect_job(events_job("a")).to_emit_events(["a", "a"])
    with pytest.raises(AssertionError, match=r"'z' is missing after position 0\. Seen: \['a'\]"):
        expect_job(events_job("a")).to_emit_events(["z"])


# -- expect_job ----------------------------------------------------------------------------
def test_expect_job_refuses_an_async_job() -> None:
    job = AsyncRLJob.from_job_id("job-1", backend_url=BACKEND, api_key=KEY, clock=VirtualClock(START))
    with pytest.raises(SynthUsageError) as info:
        expect_job(job)  # type: ignore[arg-type]
    assert info.value.keys == ["expect_job.job"]
    assert "got expect_job(<AsyncRLJob>); expectations wait by blocking, so they take an RLJob" in str(
        info.value
    )


def test_expect_job_keeps_its_settings_and_an_explicit_clock_wins() -> None:
    clock = VirtualClock(START)
    other = VirtualClock(5.0)
    expectation = expect_job(job_for(Backend(clock)), clock=other, interval=3, timeout=9)
    assert (expectation.clock, expectation.interval, expectation.timeout) == (other, 3, 9)
    assert expectation.result is None


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.to_finish(within=-1),
        lambda e: e.to_succeed(within=-1),
        lambda e: e.to_fail(within=-1),
        lambda e: e.to_be_cancelled(within=-1),
        lambda e: e.to_reach_status("runing"),
        lambda e: e.to_have_final_reward(at_least=2, at_most=1),
        lambda e: e.to_improve_reward(by=float("nan")),
        lambda e: e.to_emit_events(["train.step", 3]),
    ],
    ids=["finish", "succeed", "fail", "cancelled", "status", "final_reward", "improve", "events"],
)
def test_a_refused_expectation_shows_none_of_the_plugins_frames(
    tmp_path: Path, call: Callable[[JobExpectation], Any]
) -> None:
    with make_job(write_config(tmp_path)) as job, pytest.raises(SynthUsageError) as caught:
        call(expect_job(job))
    shown = {entry.path for entry in caught.traceback.filter(caught)}
    assert shown == {Path(__file__)}  # the test's and its lambda's frames, none of the plugin's


@pytest.mark.parametrize("job", [None, 3, AsyncRLJob], ids=["none", "int", "async"])
def test_a_refused_expect_job_call_shows_none_of_the_plugins_frames(job: object) -> None:
    with pytest.raises(SynthUsageError) as caught:
        expect_job(job)  # type: ignore[arg-type]
    assert [entry.path for entry in caught.traceback.filter(caught)] == [Path(__file__)]
    if job == 3:
        assert "got expect_job(3), an int; expected the RLJob itself" in str(caught.value)
        assert "pass the job, not what it returned: job = synth_rl_job(); job.submit(); " in str(caught.value)
