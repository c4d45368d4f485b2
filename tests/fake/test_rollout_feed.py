"""Batches run back to back: the next batch starts in the current one's tail, never beyond what
the job is due to run, never more than the concurrency at once, and a failure holds back the rest."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from test_fake_support import TASK_KEY, auth, poll_to_end, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.jobs import JobState, RolloutRecord
from pytest_synth_rl.fake.lifecycle import Lifecycle, Target
from pytest_synth_rl.fake.rollouts import BatchPlan, RolloutDriver, RolloutFailure, RolloutFeed
from pytest_synth_rl.fake.store import JobStore
from pytest_synth_rl.taskapp import InProcessTaskApp

#: Guard on every wait below: reached only when the behaviour under test is broken.
GUARD_S = 10.0
ROLLOUT = {"env_name": "arithmetic", "policy_name": "p", "max_turns": 1, "episodes_per_batch": 4}


def failed(name: str) -> RolloutFailure:
    """What the test attempt raises for a failed rollout."""
    return RolloutFailure(name, RolloutRecord(step=1, seed=0, mode="rl", run_id=name, url="", request={}))


class Runner:
    """An attempt function: logs starts, blocks bodies on events, fails or raises on request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gates: dict[str, threading.Event] = {}
        self.arrived: dict[str, threading.Event] = {}
        self.timed_out: list[str] = []

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    def arrival(self, name: str) -> threading.Event:
        return self.arrived.setdefault(name, threading.Event())

    def __call__(self, key: Any, body: dict[str, Any]) -> Any:
        name = body["name"]
        with self.lock:
            self.started.append(name)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            gate = self.gates.get(name)
            arrival = self.arrival(name)
        arrival.set()
        try:
            if gate is not None and not gate.wait(GUARD_S):
                self.timed_out.append(name)
            if name.startswith("raise"):
                raise ValueError(f"bug in {name}")
            if name.startswith("fail"):
                raise failed(name)
            return f"done {name}"
        finally:
            with self.lock:
                self.in_flight -= 1


def bodies(*names: str) -> list[dict[str, Any]]:
    return [{"name": name} for name in names]


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(8)
    yield executor
    executor.shutdown(wait=True)


def feed_for(pool: ThreadPoolExecutor, runner: Runner, workers: int) -> RolloutFeed:
    return RolloutFeed(lambda: pool, runner, workers)


def test_the_next_batch_starts_while_the_last_rollouts_of_this_one_run(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    # a2 finishes only once b0 has started: without overlap this would wait out the guard.
    runner.gates["a2"] = runner.arrival("b0")
    feed = feed_for(pool, runner, workers=2)
    first = feed.add("A", bodies("a0", "a1", "a2"))
    second = feed.add("B", bodies("b0", "b1"))
    assert feed.wait(first) == ["done a0", "done a1", "done a2"]
    assert runner.timed_out == []
    assert feed.take("B") is second
    assert feed.wait(second) == ["done b0", "done b1"]
    assert runner.most_in_flight == 2
    assert sorted(runner.started) == ["a0", "a1", "a2", "b0", "b1"]


def test_never_more_than_the_workers_in_flight_across_batches(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    release = threading.Event()
    for name in ("a0", "a1", "b0", "b1", "b2"):
        runner.gates[name] = release
    feed = feed_for(pool, runner, workers=3)
    first = feed.add("A", bodies("a0", "a1"))
    second = feed.add("B", bodies("b0", "b1", "b2"))
    for name in ("a0", "a1", "b0"):  # a free third worker starts the next batch
        assert runner.arrival(name).wait(GUARD_S)
    assert runner.in_flight == 3
    assert not runner.arrival("b1").is_set()
    release.set()
    assert feed.wait(first) == ["done a0", "done a1"]
    assert feed.wait(second) == ["done b0", "done b1", "done b2"]
    assert runner.most_in_flight == 3


def test_a_failure_starts_nothing_more_in_its_batch_nor_in_later_ones(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    feed = feed_for(pool, runner, workers=1)
    first = feed.add("A", bodies("a0", "fail1", "a2"))
    feed.add("B", bodies("b0"))
    results = feed.wait(first)
    assert results[0] == "done a0"
    assert isinstance(results[1], RolloutFailure)
    assert results[2] is None
    feed.stop()
    assert runner.started == ["a0", "fail1"]
    assert feed.take("B") is None  # stopped: the queue is gone


def test_a_failure_in_the_next_batch_does_not_stop_this_one(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    runner.gates["a0"] = runner.arrival("fail0")  # a0 is still running when the next batch fails
    feed = feed_for(pool, runner, workers=2)
    first = feed.add("A", bodies("a0", "a1"))
    second = feed.add("B", bodies("fail0", "b1"))
    assert feed.wait(first) == ["done a0", "done a1"]
    results = feed.wait(second)
    assert isinstance(results[0], RolloutFailure)
    assert results[1] is None
    assert "b1" not in runner.started


def test_taking_another_batch_drops_the_queue_after_its_rollouts_finish(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    release = threading.Event()
    runner.gates["b0"] = runner.gates["b1"] = release
    feed = feed_for(pool, runner, workers=2)
    first = feed.add("A", bodies("a0"))
    queued = feed.add("B", bodies("b0", "b1", "b2"))
    assert feed.wait(first) == ["done a0"]
    assert runner.arrival("b0").wait(GUARD_S)
    assert runner.arrival("b1").wait(GUARD_S)
    taken: list[object] = []
    taker = threading.Thread(target=lambda: taken.append(feed.take("C")))
    taker.start()
    ticks = threading.Event()  # never set: only paces the look at the flag, bounded by the guard
    for _ in range(int(GUARD_S / 0.001)):
        if queued.stopped or ticks.wait(0.001):
            break
    release.set()  # only now may b0 and b1 finish: b2 must not start after them
    taker.join(GUARD_S)
    assert taken == [None]
    assert feed.running == 0
    assert sorted(runner.started) == ["a0", "b0", "b1"]
    assert runner.timed_out == []


def test_a_bug_in_a_rollout_is_raised_to_the_waiter_and_starts_nothing_more(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    feed = feed_for(pool, runner, workers=1)
    batch = feed.add("A", bodies("raise0", "a1"))
    with pytest.raises(ValueError, match="bug in raise0"):
        feed.wait(batch)
    assert runner.started == ["raise0"]
    assert feed.running == 0


def test_workers_are_started_only_for_work_and_within_the_limit(pool: ThreadPoolExecutor) -> None:
    assert feed_for(pool, Runner(), workers=0).workers == 1
    runner = Runner()
    release = threading.Event()
    runner.gates["a0"] = runner.gates["a1"] = release
    feed = feed_for(pool, runner, workers=4)
    first = feed.add("A", bodies("a0"))
    assert runner.arrival("a0").wait(GUARD_S)
    assert feed.running == 1  # one body: one worker, not four
    second = feed.add("A2", bodies("a1"))
    assert runner.arrival("a1").wait(GUARD_S)
    assert feed.running == 2
    release.set()
    assert feed.wait(first) == ["done a0"]
    assert feed.wait(second) == ["done a1"]


def test_a_full_feed_adds_no_worker_for_a_queued_batch(pool: ThreadPoolExecutor) -> None:
    runner = Runner()
    release = threading.Event()
    runner.gates["a0"] = runner.gates["a1"] = release
    feed = feed_for(pool, runner, workers=2)
    first = feed.add("A", bodies("a0", "a1"))
    assert runner.arrival("a0").wait(GUARD_S)
    assert runner.arrival("a1").wait(GUARD_S)
    second = feed.add("B", bodies("b0"))
    assert feed.running == 2  # both busy: the next batch waits for one of them
    release.set()
    assert feed.wait(first) == ["done a0", "done a1"]
    assert feed.wait(second) == ["done b0"]
    assert runner.most_in_flight == 2


def test_a_closed_pool_is_an_error_not_a_hang() -> None:
    closed = ThreadPoolExecutor(1)
    closed.shutdown()
    feed = RolloutFeed(lambda: closed, Runner(), 2)
    with pytest.raises(RuntimeError):
        feed.add("A", bodies("a0", "a1"))  # two workers asked for, neither can start
    assert feed.running == 0
    feed.stop()  # nothing counted as running: returns at once


def test_a_pool_that_closes_between_two_workers_counts_only_the_one_started(
    pool: ThreadPoolExecutor,
) -> None:
    class ClosingAfterOne:
        def __init__(self) -> None:
            self.accepted = 0

        def submit(self, fn: Any) -> Any:
            if self.accepted:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self.accepted += 1
            return pool.submit(fn)

    runner = Runner()
    release = threading.Event()
    runner.gates["a0"] = release
    closing = ClosingAfterOne()
    feed = RolloutFeed(lambda: closing, runner, 2)  # type: ignore[arg-type,return-value]
    with pytest.raises(RuntimeError):
        feed.add("A", bodies("a0", "a1"))
    assert runner.arrival("a0").wait(GUARD_S)
    assert feed.running == 1  # the one worker that did start
    release.set()
    feed.stop()  # returns once that worker is done: nothing else is counted
    assert feed.running == 0


def test_workers_dropped_by_a_closing_pool_end_the_wait_with_an_error() -> None:
    executor = ThreadPoolExecutor(1)
    hold = threading.Event()
    executor.submit(hold.wait, GUARD_S)  # the only thread is busy: the feed's worker queues
    feed = RolloutFeed(lambda: executor, Runner(), 1)
    batch = feed.add("A", bodies("a0"))
    executor.shutdown(wait=False, cancel_futures=True)
    try:
        with pytest.raises(RuntimeError) as raised:
            feed.wait(batch)
        assert str(raised.value) == "rollout workers stopped before the batch finished (fake closed)"
        assert feed.running == 0
    finally:
        hold.set()


# -- through the fake, against task apps served on loopback --------------------------------------


def _logging_app(
    log: list[str], gates: Mapping[str, str] | None = None, fail_seed: int | None = None
) -> FastAPI:
    """Rewards 1.0 and logs each run_id on arrival. ``gates`` maps a run_id ending to a text:
    that rollout answers only once a rollout whose run_id holds the text has arrived (else 0.0
    after the guard). *fail_seed* gets HTTP 500."""
    app = FastAPI()
    seen = {text: asyncio.Event() for text in (gates or {}).values()}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> Any:
        body = await request.json()
        run_id = body["run_id"]
        log.append(run_id)
        for text, event in seen.items():
            if text in run_id:
                event.set()
        if body["env"]["seed"] == fail_seed:
            raise RuntimeError("seed is broken")
        reward = 1.0
        for ending, text in (gates or {}).items():
            if run_id.endswith(ending):
                try:
                    await asyncio.wait_for(seen[text].wait(), GUARD_S)
                except asyncio.TimeoutError:
                    reward = 0.0
        return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": reward}}

    return app


@pytest.fixture
def fake() -> Iterator[FakeSynthBackend]:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as backend:
        yield backend
    backend.close()


def _payload(url: str, concurrency: int) -> dict[str, Any]:
    return rl_payload(url, rollout={**ROLLOUT, "max_concurrent_rollouts": concurrency})


def _steps(log: list[str]) -> set[int]:
    return {int(run_id.split("-rl-s")[1].split("-")[0]) for run_id in log if "-rl-s" in run_id}


def test_each_batch_overlaps_the_last_rollouts_of_the_one_before(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    log: list[str] = []
    fake.scenario(immediate=True, steps=3, eval_every=2)
    # The last rollout (index 3) of each batch answers only once the next batch has begun: 1.0
    # only if the next batch overlapped it (a step, the evaluation after it, the final one).
    gates = {
        "-rl-s1-3": "-rl-s2-",
        "-rl-s2-3": "-eval-s2-",
        "-eval-s2-3": "-rl-s3-",
        "-rl-s3-3": "-eval-s3-",
    }
    with InProcessTaskApp(_logging_app(log, gates), api_key=TASK_KEY, export_api_key=False) as app:
        job_id = submit(client, fake, _payload(app.url, 2))
        body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "succeeded", body.get("error")
    job = fake.job(job_id)
    assert [(r.mode, r.step, r.seed) for r in job.rollouts] == [
        *[("rl", 1, seed) for seed in range(4)],
        *[("rl", 2, seed) for seed in range(4, 8)],
        *[("eval", 2, seed) for seed in range(4)],
        *[("rl", 3, seed) for seed in range(8, 12)],
        *[("eval", 3, seed) for seed in range(4)],
    ]
    assert [r.reward for r in job.rollouts] == [1.0] * 20
    assert job.rewards == [1.0, 1.0, 1.0]


def test_nothing_runs_ahead_of_a_step_that_is_not_due(fake: FakeSynthBackend, client: httpx.Client) -> None:
    log: list[str] = []
    fake.scenario(steps=3, polls=8, eval_every=2)
    with InProcessTaskApp(_logging_app(log), api_key=TASK_KEY, export_api_key=False) as app:
        forced = fake.job(submit(client, fake, _payload(app.url, 4)))
        forced.advance_to(1)
        assert _steps(log) == {1}
        assert len(log) == len(forced.rollouts) == 4
        forced.advance_to(2)  # step 2, then its evaluation
        assert _steps(log) == {1, 2}
        assert len(log) == len(forced.rollouts) == 12
        log.clear()
        polled = submit(client, fake, _payload(app.url, 4))
        seen: list[tuple[int, int]] = []
        while True:
            status = client.get(f"{fake.base_url}/api/rl/jobs/{polled}", headers=auth(fake)).json()["status"]
            # Everything the task app was sent so far belongs to a stage the job has run.
            seen.append((len(log), len(fake.job(polled).rollouts)))
            if status in ("succeeded", "failed"):
                break
    assert status == "succeeded"
    assert all(sent == kept for sent, kept in seen)
    assert seen[-1] == (20, 20)  # 3 steps x 4, the evaluation at step 2 and the final one
    assert len({kept for _, kept in seen}) > 3  # the polls saw the job part-way, step by step


def test_a_failed_step_keeps_no_rollout_of_the_next_one(fake: FakeSynthBackend, client: httpx.Client) -> None:
    log: list[str] = []
    fake.scenario(immediate=True, steps=3, eval_every=100)
    with InProcessTaskApp(_logging_app(log, fail_seed=4), api_key=TASK_KEY, export_api_key=False) as app:
        job_id = submit(client, fake, _payload(app.url, 2))
        body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "failed"
    assert "task app rollout failed at step 2 (rl; seed 4," in body["error"]
    assert "not safe under concurrency" not in body["error"]  # it fails alone too
    job = fake.job(job_id)
    assert {r.step for r in job.rollouts} == {1, 2}
    assert job.rewards == [1.0]


# -- which batch comes next: the plan that is queued ahead ----------------------------------------


class Plans:
    """Jobs submitted to a fake that is never polled, and a lifecycle of the test's own on a
    clock the test moves: ``next_batch`` is asked about them without running anything."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY)
        self.clock = VirtualClock()
        self.lifecycle = Lifecycle(
            JobStore(clock=self.clock),
            RolloutDriver(api_key=lambda: None, inference_url=lambda rollout, progress: ""),
            max_rollouts_per_step=4,
        )

    def job(self, **scenario: Any) -> JobState:
        self.fake.next_job(**scenario)
        return self.fake.store.get(submit(self.client, self.fake, _payload("http://127.0.0.1:9", 4)))


@pytest.fixture
def plans(client: httpx.Client) -> Iterator[Plans]:
    made = Plans(client)
    with made.fake:
        yield made
    made.fake.close()


TRAIN = {step: tuple(range((step - 1) * 4, step * 4)) for step in (1, 2, 3)}
EVAL = (0, 1, 2, 3)  # no evaluation.seeds in the config: one per rollout of a step


def test_the_next_batch_of_an_immediate_job_in_order(plans: Plans) -> None:
    job = plans.job(immediate=True, steps=3, eval_every=2)
    after = plans.lifecycle.next_batch
    assert after(job, 1, "rl") == BatchPlan(2, TRAIN[2], "rl")
    assert after(job, 2, "rl") == BatchPlan(2, EVAL, "eval")  # the evaluation every 2 steps
    assert after(job, 2, "eval") == BatchPlan(3, TRAIN[3], "rl")
    assert after(job, 3, "rl") == BatchPlan(3, EVAL, "eval")  # the final evaluation
    assert after(job, 3, "eval") is None


def test_no_final_evaluation_follows_a_job_scripted_to_fail(plans: Plans) -> None:
    job = plans.job(immediate=True, steps=3, eval_every=2, outcome="failed", fail_at_step=3)
    after = plans.lifecycle.next_batch
    assert after(job, 1, "rl") == BatchPlan(2, TRAIN[2], "rl")
    assert after(job, 2, "rl") == BatchPlan(2, EVAL, "eval")
    assert after(job, 2, "eval") is None  # step 3 is where it fails: no batch
    every_step = plans.job(immediate=True, steps=2, eval_every=1, outcome="cancelled")
    assert after(every_step, 1, "rl") == BatchPlan(1, EVAL, "eval")
    assert after(every_step, 2, "rl") == BatchPlan(2, EVAL, "eval")
    assert after(every_step, 2, "eval") is None


def test_an_advance_to_a_step_queues_only_up_to_that_step(plans: Plans) -> None:
    job = plans.job(steps=3, polls=8, eval_every=2)
    after = plans.lifecycle.next_batch
    to_two = Target("step", 2)
    assert after(job, 1, "rl", to_two) == BatchPlan(2, TRAIN[2], "rl")
    assert after(job, 2, "rl", to_two) == BatchPlan(2, EVAL, "eval")  # the same stage
    assert after(job, 2, "eval", to_two) is None
    assert after(job, 1, "rl", Target("step", 1)) is None
    assert after(job, 1, "rl", Target("start")) is None
    to_end = Target("end")
    assert after(job, 2, "eval", to_end) == BatchPlan(3, TRAIN[3], "rl")
    assert after(job, 3, "rl", to_end) == BatchPlan(3, EVAL, "eval")


def test_a_stage_is_queued_only_once_its_time_has_come(plans: Plans) -> None:
    # 3 steps over 40 virtual seconds: step k's slot is at 10 k seconds, the end at 40.
    job = plans.job(steps=3, duration=40.0, eval_every=100)
    after = plans.lifecycle.next_batch
    plans.clock.advance(20.0 - 1e-6)
    assert after(job, 1, "rl") is None
    plans.clock.advance(1e-6)
    assert plans.clock.now() == 20.0
    assert after(job, 1, "rl") == BatchPlan(2, TRAIN[2], "rl")
    assert after(job, 2, "rl") is None  # step 3 is at 30 s
    plans.clock.advance(20.0)
    assert after(job, 3, "rl") == BatchPlan(3, EVAL, "eval")  # the end is due at 40 s
    polled = plans.job(steps=3, polls=8, eval_every=100)
    assert after(polled, 1, "rl") is None  # polls mode: not before its poll
