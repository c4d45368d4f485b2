"""The lifecycle: everything that moves a fake job through its scenario, lazily, on any clock. A job
catches up whenever it is observed or its virtual clock moves (a served fake may instead run one stage
per look); stages are stamped with their scheduled time, forced or poll-driven ones with "now"."""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pytest_synth_rl.clock import Clock, VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake.jobs import JobState
from pytest_synth_rl.fake.rollouts import BatchPlan, RolloutDriver, RolloutFailure, RolloutFeed, RolloutSpec
from pytest_synth_rl.fake.scenario import Scenario, Stage, error_text_problem, int_in
from pytest_synth_rl.fake.store import JobStore
from pytest_synth_rl.secrets.masking import redact

_EPS = 1e-9
DEFAULT_ERROR = "training failed (scripted by the FakeSynthBackend scenario)"
#: ``"clock"``: jobs move when the clock does; ``"observed"``: one stage per look (served fakes).
Pacing = Literal["clock", "observed"]
PACING_MODES: tuple[str, ...] = ("clock", "observed")
#: Status polls that see neither the job nor the clock move before the status body says why.
STALL_POLLS = 3


@dataclass(frozen=True)
class Target:
    """Where a forced advance stops: after ``start``, after step ``step``, or at ``end``."""

    kind: Literal["start", "step", "end"]
    step: int = 0

    def reached(self, job: JobState) -> bool:
        if job.terminal or self.kind == "start":
            return job.terminal or job.started
        return self.kind == "step" and job.steps_done >= self.step


class Lifecycle:
    """Runs due stages of the jobs in *store*, on its clock, under its lock (set aside for batches)."""

    def __init__(self, store: JobStore, driver: RolloutDriver, max_rollouts_per_step: int = 4) -> None:
        self.store = store
        self.driver = driver
        self.max_rollouts_per_step = max_rollouts_per_step
        self.pacing: Pacing = "clock"
        self._feeds: dict[str, RolloutFeed] = {}
        self._unsubscribe: Callable[[], None] | None = None
        self._subscribe()

    # -- the clock --------------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self.store.clock

    def use_clock(self, clock: Clock) -> Clock:
        """Run jobs on *clock* from now on; returns the previous clock."""
        previous = self.store.clock
        if clock is not previous:
            self.close()
            with self.store.lock:
                self.store.clock = clock
            self._subscribe()
        return previous

    def _subscribe(self) -> None:
        clock = self.store.clock
        if not isinstance(clock, VirtualClock):
            return
        ref = weakref.WeakMethod(self._on_clock)

        def on_advance(before: float, after: float) -> None:
            on_clock = ref()
            if on_clock is not None:
                on_clock()

        self._unsubscribe = clock.subscribe(on_advance)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_clock(self) -> None:
        active = self.store.active
        if not active:
            return
        with self.store.lock:
            for job in list(active.values()):
                self._sync(job)
                if job.terminal:
                    active.pop(job.id, None)

    # -- when -------------------------------------------------------------------------------------
    def position(self, job: JobState) -> float:
        mode = job.scenario.mode
        if mode == "immediate":
            return math.inf
        if mode == "polls":
            return float(job.polls)
        return self.store.clock.now() - job.created_now

    def next_due(self, job: JobState) -> float | None:
        """Clock ``now()`` at which a duration-mode job's next stage is due (None otherwise)."""
        with self.store.lock:
            if job.terminal or job.scenario.mode != "duration":
                return None
            return job.created_now + self._next(job)[1]

    @staticmethod
    def _next(job: JobState) -> tuple[Stage, float]:
        cached = job.next_cache
        if cached is not None and cached[0] == job.version:
            return cached[1], cached[2]
        stage = job.scenario.next_stage(job.started, job.steps_done, job.outcome_override)
        position = job.scenario.slot_position(stage.slot)
        job.next_cache = (job.version, stage, position)
        return stage, position

    # -- looking at a job -------------------------------------------------------------------------
    def sync(self, job: JobState) -> JobState:
        with self.store.lock:
            self._sync(job)
            return job

    def observe(self, job: JobState) -> JobState:
        """A client looked at *job*: it catches up (and with ``pacing="observed"`` runs its next stage)."""
        with self.store.lock:
            self._sync(job)
            if self.pacing == "observed" and not job.terminal and job.scenario.mode == "duration":
                stage = self._next(job)[0]
                self._sync(job, Target("step", stage.step) if stage.kind == "step" else Target(stage.kind))
            return job

    def stall_reason(self, job: JobState) -> str | None:
        """Note a status poll; after :data:`STALL_POLLS` that saw nothing move, why *job* is stuck."""
        with self.store.lock:
            clock = self.store.clock
            mark = (job.version, clock.now())
            if job.last_poll == mark:
                job.stalled_polls += 1
            else:
                job.stalled_polls = 0
                job.last_poll = mark
            moving = job.terminal or job.scenario.mode != "duration" or not isinstance(clock, VirtualClock)
            if moving or job.stalled_polls < STALL_POLLS:
                return None
            return (
                f"job {job.id} has not moved in {job.stalled_polls + 1} status polls: this fake backend "
                "runs jobs on a virtual clock that nothing advances. Advance it "
                '(POST /_fake/clock/advance {"seconds": 60}, or fake.clock.advance(60) in-process), '
                "serve with pacing='observed' (the serve() default: each look at a job moves it one "
                "stage) or speed=<factor> (real time, sped up), or script the job with "
                "Scenario(polls=N) or Scenario(immediate=True)"
            )

    # -- pushing a job ----------------------------------------------------------------------------
    def script(self, target: str, scenario: Scenario) -> None:
        """Script ``"next"`` (calls queue up) or the job *target*, from its current stage on."""
        if target == "next":
            self.store.queue(scenario)
            return
        hint = "use scenario_for('next', ...) before submitting, or an id from fake.jobs"
        job = self.store.get(target, hint=hint)
        with self._pushing(job):
            self.store.rescript(job, scenario)

    def advance(self, job: JobState, target: Target) -> None:
        with self._pushing(job):
            self._sync(job, target)

    def succeed(self, job: JobState) -> None:
        with self._pushing(job):
            job.outcome_override = "succeeded"
            job.version += 1  # the plan changed
            self._sync(job, Target("end"))

    def fail(self, job: JobState, message: str) -> None:
        problem = error_text_problem(message, "FakeJob.fail")
        if problem is not None:
            raise SynthUsageError([problem])
        with self._pushing(job):
            self._fail(job, message, self.store.clock.time(), data={"step": job.steps_done})

    def cancel(self, job: JobState, reason: str) -> None:
        with self._pushing(job):
            self._fail(job, f"Job cancelled: {reason}", self.store.clock.time(), status="cancelled")

    @contextlib.contextmanager
    def _pushing(self, job: JobState) -> Iterator[None]:
        """Hold the lock with *job* caught up and no other thread running a rollout batch of it."""
        me = threading.get_ident()
        with self.store.lock:
            self.store.lock.wait_until(lambda: job.batch_thread in (None, me))
            self._sync(job)
            yield

    @contextlib.contextmanager
    def _set_aside(self, job: JobState) -> Iterator[None]:
        """Release the lock for a network wait, with *job* marked busy meanwhile."""
        job.batch_thread = threading.get_ident()
        try:
            with self.store.lock.set_aside():
                yield
        finally:
            job.batch_thread = None

    # -- running stages ---------------------------------------------------------------------------
    def _sync(self, job: JobState, target: Target | None = None) -> None:
        """Run every due stage of *job* (with *target*, every stage up to it, now)."""
        if job.batch_thread not in (None, threading.get_ident()):
            return
        try:
            while not job.terminal:
                if target is not None and target.reached(job):
                    return
                stage, position = self._next(job)
                if target is None and position > self.position(job) + _EPS:
                    return
                now = target is not None or job.scenario.mode != "duration"  # forced or poll-driven
                self._run(job, stage, self.store.clock.time() if now else job.created_time + position, target)
        finally:  # drop rollouts queued ahead that this advance will not use (waiting for those in flight)
            feed = self._feeds.pop(job.id, None)
            if feed is not None:
                with self._set_aside(job):
                    feed.stop()

    def _run(self, job: JobState, stage: Stage, ts: float, target: Target | None) -> None:
        try:
            if stage.kind == "start":
                self._start(job, ts)
            elif stage.kind == "step":
                self._step(job, stage.step, ts, target)
            else:
                self._end(job, stage.outcome, ts)
        except RolloutFailure as failure:
            r = failure.record
            trace = r.request.get("trace_correlation_id")
            data = {"step": r.step, "seed": r.seed, "run_id": r.run_id, "trace_correlation_id": trace}
            self._fail(job, str(failure), ts, data={**data, "url": r.url, "mode": r.mode})
        except Exception as exc:  # a user callable (reward curve, policy) broke: fail, say why
            self._fail(job, redact(f"{stage.kind} stage raised {type(exc).__name__}: {exc}"), ts)

    def _start(self, job: JobState, ts: float) -> None:
        job.started = True
        job.started_at = ts
        job.set_phase(ts, "running")
        steps, model = job.scenario.steps, job.model
        data = {"total_steps": steps, "model": model, "rollouts": job.use_rollouts}
        job.add_event(ts, "rl.train.started", f"Training started: {steps} steps on {model}", data)
        if job.use_rollouts and not job.endpoint.startswith(("http://", "https://")):
            self._fail(
                job,
                f"cannot run rollouts: data.endpoint_base_url is {job.endpoint!r}, not an http(s) URL "
                "(hint: pass task_app_url= to the job, or script rewards with "
                "fake.scenario(reward_curve=...))",
                ts,
            )

    def _step(self, job: JobState, step: int, ts: float, target: Target | None) -> None:
        if job.use_rollouts:
            rewards = self._batch(job, self._plan(job, step, "rl"), self.next_batch(job, step, "rl", target))
            reward = round(sum(rewards) / len(rewards), 6)
        else:
            reward = round(job.scenario.scripted_reward(step), 6)
        loss = round(max(0.01, 1.0 - reward) * 2.0 / math.sqrt(step + 1), 6)
        job.add_step(ts, step, reward, loss)
        if self._evaluates_at(job, step):
            then = self.next_batch(job, step, "eval", target) if job.use_rollouts else None
            self._evaluate(job, step, ts, then)

    def _end(self, job: JobState, outcome: str, ts: float) -> None:
        if outcome == "succeeded":
            if self._final_eval_pending(job, job.steps_done):
                self._evaluate(job, job.steps_done, ts)
            if job.terminal:  # the final evaluation's rollouts failed
                return
            final = job.eval_means.get(job.steps_done)
            data = {"final_reward": final, "model_id": job.model_id, "steps": job.steps_done}
            message = f"Training completed: final_reward={final}"
            job.finish(ts, "succeeded", final, ("rl.train.completed", message, data, "info"))
        elif outcome in ("failed", "error"):
            data = {"step": job.steps_done + 1}
            self._fail(job, job.scenario.error or DEFAULT_ERROR, ts, data=data, status=outcome)
        else:
            self._fail(job, "Job cancelled: cancelled by the scenario", ts, status="cancelled")

    @staticmethod
    def _fail(
        job: JobState, error: str, ts: float, data: dict[str, Any] | None = None, status: str = "failed"
    ) -> None:
        """End *job* in *status* (a failure, or ``cancelled`` with *error* as its message)."""
        if job.terminal:
            return
        if status == "cancelled":
            kind, level, data = "rl.job.cancelled", "warning", {"step": job.steps_done}
        else:
            job.error, kind, level, data = error, "rl.train.failed", "error", {"error": error, **(data or {})}
        job.finish(ts, status, job.last_reward, (kind, error, data, level))

    # -- rewards ------------------------------------------------------------------------------
    def _evaluate(self, job: JobState, step: int, ts: float, then: BatchPlan | None = None) -> None:
        plan = self._plan(job, step, "eval")
        rewards = self._batch(job, plan, then) if job.use_rollouts else [job.scenario.scripted_reward(step)]
        job.add_eval(ts, step, list(plan.seeds), rewards)

    def _batch(self, job: JobState, plan: BatchPlan, then: BatchPlan | None) -> list[float]:
        """Rewards of one rollout per seed, in seed order; *then* (the next batch) overlaps its end."""
        spec = RolloutSpec.from_config(job.config, job.model)
        feed = self._feeds[job.id] = self._feeds.get(job.id) or self.driver.feed(job.endpoint, spec)
        with self._set_aside(job):
            records, failure = self.driver.run_batch(
                job.endpoint, spec, feed, job_id=job.id, steps=job.scenario.steps, plan=plan, then=then
            )
        job.rollouts.extend(records)
        if failure is not None:
            raise failure
        return [record.reward for record in records if record.reward is not None]

    def next_batch(
        self, job: JobState, step: int, mode: str, target: Target | None = None
    ) -> BatchPlan | None:
        """The batch after *job*'s *mode* batch of *step* in this advance (up to *target*, or now)."""
        if mode == "rl" and self._evaluates_at(job, step):
            return self._plan(job, step, "eval")
        stage = job.scenario.next_stage(True, step, job.outcome_override)
        if target is not None:
            due = target.kind == "end" or (target.kind == "step" and step < target.step)
        else:
            due = job.scenario.slot_position(stage.slot) <= self.position(job) + _EPS
        if not due:
            return None
        if stage.kind == "step":
            return self._plan(job, stage.step, "rl")
        final_eval = stage.outcome == "succeeded" and mode == "rl" and self._final_eval_pending(job, step)
        return self._plan(job, step, "eval") if stage.kind == "end" and final_eval else None

    def _plan(self, job: JobState, step: int, mode: str) -> BatchPlan:
        """The seeds of *job*'s *mode* batch at *step*: consecutive per step, or the configured eval seeds."""
        size = job.setting("rollout", "episodes_per_batch")
        size = max(1, min(size if int_in(size, 1, math.inf) else 1, self.max_rollouts_per_step))
        seeds = job.setting("evaluation", "seeds")
        if mode == "rl":
            seeds = range((step - 1) * size, step * size)
        elif isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds):
            seeds = seeds[: self.max_rollouts_per_step]
        else:
            seeds = range(size)
        return BatchPlan(step, tuple(seeds), mode)

    @staticmethod
    def _evaluates_at(job: JobState, step: int) -> bool:
        every = job.scenario.eval_every
        every = job.setting("evaluation", "every_n_iters") if every is None else every
        return int_in(every, 1, math.inf) and step % every == 0

    @staticmethod
    def _final_eval_pending(job: JobState, step: int) -> bool:
        return bool(step) and step not in job.eval_means
