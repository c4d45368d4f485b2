"""The lifecycle engine: moves a fake job through its scenario, lazily, on any clock.

Nothing here runs on a timer. :meth:`Lifecycle.sync` is called whenever a job is observed (a
status poll, an events read, a clock tick from a subscribed :class:`VirtualClock`, a look through
:class:`FakeJob`); it runs every stage whose slot is due and stops. Stage timestamps are the
*scheduled* times (submit time + slot position), so a job observed late still reports the same
history as one watched closely; a poll-driven or forced stage is stamped with the current time.

A training step either reads its reward from the scenario's curve or runs real rollouts against
the job's task app (see :mod:`.rollouts`); a failed rollout fails the job with the evidence.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pytest_synth_rl.clock import Clock
from pytest_synth_rl.fake.jobs import JobRecord
from pytest_synth_rl.fake.rollout_feed import RolloutFeed
from pytest_synth_rl.fake.rollouts import BatchPlan, RolloutDriver, RolloutFailure, RolloutSpec
from pytest_synth_rl.fake.scenario import Stage
from pytest_synth_rl.secrets.masking import redact

__all__ = ["Lifecycle", "Target"]

_EPS = 1e-9
DEFAULT_ERROR = "training failed (scripted by the FakeSynthBackend scenario)"


@dataclass(frozen=True)
class Target:
    """Where a forced advance stops: after ``start``, after step ``step``, or at ``end``."""

    kind: Literal["start", "step", "end"]
    step: int = 0

    def reached(self, job: JobRecord) -> bool:
        if job.terminal:
            return True
        if self.kind == "start":
            return job.started
        if self.kind == "step":
            return job.steps_done >= self.step
        return False


class Lifecycle:
    """Runs due stages for jobs. Not thread-safe by itself: the backend holds its lock.

    *set_aside* releases that lock around a rollout batch (network I/O of unbounded length);
    meanwhile the job is marked busy (``batch_thread``) and :meth:`sync` from other threads leaves
    it as it is, so other jobs and other requests are not held up by one job's task app.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], Clock],
        driver: RolloutDriver,
        max_rollouts_per_step: int,
        set_aside: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self._clock = clock
        self._set_aside = set_aside
        self.driver = driver
        self.max_rollouts_per_step = max_rollouts_per_step
        #: Per job being advanced: the feed its batches run on (see :meth:`_batch`).
        self._feeds: dict[str, RolloutFeed] = {}

    # -- when ---------------------------------------------------------------------------------
    def position(self, job: JobRecord) -> float:
        mode = job.scenario.mode
        if mode == "immediate":
            return math.inf
        if mode == "polls":
            return float(job.polls)
        return self._clock().now() - job.created_now

    def _stamp(self, job: JobRecord, stage: Stage, forced: bool) -> float:
        if forced or job.scenario.mode != "duration":
            return self._clock().time()
        return job.created_time + job.scenario.slot_position(stage.slot)

    def next_due(self, job: JobRecord) -> float | None:
        """Clock ``now()`` at which the next stage of a duration-mode job is due (None otherwise)."""
        if job.terminal or job.scenario.mode != "duration":
            return None
        return job.created_now + self._next(job)[1]

    @staticmethod
    def _next(job: JobRecord) -> tuple[Stage, float]:
        # Memoised per state version: a job polled 720 times between two steps asks this 720 times.
        cached = job.next_cache
        if cached is not None and cached[0] == job.version:
            return cached[1], cached[2]
        stage = job.scenario.next_stage(job.started, job.steps_done, job.outcome_override)
        position = job.scenario.slot_position(stage.slot)
        job.next_cache = (job.version, stage, position)
        return stage, position

    # -- advancing ------------------------------------------------------------------------------
    def sync(self, job: JobRecord, target: Target | None = None) -> None:
        """Run every due stage of *job* (or, with *target*, every stage up to it, now).

        A job whose rollout batch another thread is running is left as it is (it is mid-step).
        """
        if job.batch_thread not in (None, threading.get_ident()):
            return
        try:
            while not job.terminal:
                if target is not None and target.reached(job):
                    return
                stage, position = self._next(job)
                if target is None and position > self.position(job) + _EPS:
                    return
                self._run(job, stage, self._stamp(job, stage, forced=target is not None), target)
        finally:
            self._settle(job)

    def _settle(self, job: JobRecord) -> None:
        """Drop rollouts queued ahead that this advance will not use (waiting for those in flight)."""
        feed = self._feeds.pop(job.id, None)
        if feed is None:
            return
        job.batch_thread = threading.get_ident()
        try:
            with self._set_aside():
                feed.stop()
        finally:
            job.batch_thread = None

    def _run(self, job: JobRecord, stage: Stage, ts: float, target: Target | None = None) -> None:
        try:
            if stage.kind == "start":
                self._start(job, ts)
            elif stage.kind == "step":
                self._step(job, stage.step, ts, target)
            else:
                self._end(job, stage.outcome, ts)
        except RolloutFailure as failure:
            record = failure.record
            self.fail(
                job,
                str(failure),
                ts,
                data={
                    "step": record.step,
                    "seed": record.seed,
                    "run_id": record.run_id,
                    "trace_correlation_id": record.request.get("trace_correlation_id"),
                    "url": record.url,
                    "mode": record.mode,
                },
            )
        except Exception as exc:  # a user callable (reward curve, policy) broke: fail, say why
            self.fail(job, redact(f"{stage.kind} stage raised {type(exc).__name__}: {exc}"), ts)

    def _start(self, job: JobRecord, ts: float) -> None:
        job.started = True
        job.started_at = ts
        job.set_phase(ts, "running")
        job.add_event(
            ts,
            "rl.train.started",
            f"Training started: {job.scenario.steps} steps on {job.model}",
            {"total_steps": job.scenario.steps, "model": job.model, "rollouts": job.use_rollouts},
        )
        if job.use_rollouts and not job.endpoint.startswith(("http://", "https://")):
            self.fail(
                job,
                f"cannot run rollouts: data.endpoint_base_url is {job.endpoint!r}, not an http(s) URL "
                "(hint: pass task_app_url= to the job, or script rewards with "
                "fake.scenario(reward_curve=...))",
                ts,
            )

    def _step(self, job: JobRecord, step: int, ts: float, target: Target | None = None) -> None:
        if job.use_rollouts:
            seeds = self._train_seeds(job, step)
            rewards = self._batch(job, step, seeds, "rl", self.next_batch(job, step, "rl", target))
            reward = round(sum(rewards) / len(rewards), 6)
        else:
            reward = round(job.scenario.scripted_reward(step), 6)
        loss = round(max(0.01, 1.0 - reward) * 2.0 / math.sqrt(step + 1), 6)
        job.add_step(ts, step, reward, loss)
        if self._evaluates_at(job, step):
            # Only a rollout batch queues the one after it: scripted rewards need no plan.
            then = self.next_batch(job, step, "eval", target) if job.use_rollouts else None
            self._evaluate(job, step, ts, then)

    def _end(self, job: JobRecord, outcome: str, ts: float) -> None:
        if outcome == "succeeded":
            if self._final_eval_pending(job, job.steps_done):
                self._evaluate(job, job.steps_done, ts)
            if job.terminal:  # the final evaluation's rollouts failed
                return
            job.final_reward = job.eval_means.get(job.steps_done)
            job.finished_at = ts
            job.set_phase(ts, "succeeded")
            job.add_event(
                ts,
                "rl.train.completed",
                f"Training completed: final_reward={job.final_reward}",
                {"final_reward": job.final_reward, "model_id": job.model_id, "steps": job.steps_done},
            )
        elif outcome in ("failed", "error"):
            data = {"step": job.steps_done + 1}
            self.fail(job, job.scenario.error or DEFAULT_ERROR, ts, data=data, status=outcome)
        else:
            self.cancel(job, ts, reason="cancelled by the scenario")

    # -- terminal transitions (also used by the API and FakeJob) ----------------------------
    def fail(
        self,
        job: JobRecord,
        error: str,
        ts: float,
        *,
        data: dict[str, Any] | None = None,
        status: str = "failed",
    ) -> None:
        if job.terminal:
            return
        job.error = error
        job.final_reward = job.rewards[-1] if job.rewards else None
        job.finished_at = ts
        job.set_phase(ts, status)
        job.add_event(ts, "rl.train.failed", error, {"error": error, **(data or {})}, level="error")

    def cancel(self, job: JobRecord, ts: float, *, reason: str) -> None:
        if job.terminal:
            return
        job.final_reward = job.rewards[-1] if job.rewards else None
        job.finished_at = ts
        job.set_phase(ts, "cancelled")
        job.add_event(ts, "rl.job.cancelled", f"Job cancelled: {reason}", {"step": job.steps_done}, "warning")

    # -- rewards ------------------------------------------------------------------------------
    def _evaluate(self, job: JobRecord, step: int, ts: float, then: BatchPlan | None = None) -> None:
        if job.use_rollouts:
            seeds = self._eval_seeds(job)
            rewards = self._batch(job, step, seeds, "eval", then)
        else:
            seeds = self._eval_seeds(job)
            rewards = [job.scenario.scripted_reward(step)]
        job.add_eval(ts, step, seeds, rewards)

    def _batch(
        self, job: JobRecord, step: int, seeds: list[int], mode: str, then: BatchPlan | None = None
    ) -> list[float]:
        """Rewards of one rollout per seed, in seed order (concurrent up to the config's
        ``rollout.max_concurrent_rollouts``); the first failed seed fails the job.

        *then* is the batch that follows in this same advance if nothing fails: it is queued on
        the job's feed so its first rollouts overlap this batch's last ones.
        """
        spec = RolloutSpec.from_config(job.config, job.model)
        feed = self._feeds.get(job.id)
        if feed is None:
            feed = self.driver.feed(job.endpoint, spec)
            if feed is not None:
                self._feeds[job.id] = feed
        job.batch_thread = threading.get_ident()
        try:
            with self._set_aside():
                records, failure = self.driver.run_batch(
                    job.endpoint,
                    spec,
                    job_id=job.id,
                    step=step,
                    steps=job.scenario.steps,
                    seeds=seeds,
                    mode=mode,
                    feed=feed,
                    then=then,
                )
        finally:
            job.batch_thread = None
        job.rollouts.extend(records)
        if failure is not None:
            raise failure
        rewards: list[float] = []
        for record in records:
            assert record.reward is not None
            rewards.append(record.reward)
        return rewards

    def next_batch(
        self, job: JobRecord, step: int, mode: str, target: Target | None = None
    ) -> BatchPlan | None:
        """The batch that runs right after *job*'s *mode* batch of *step* in the same advance if
        that one passes (an advance up to *target*, or to now): None if no batch follows, or if
        the next stage is not due in this advance."""
        if mode == "rl" and self._evaluates_at(job, step):
            return BatchPlan(step, tuple(self._eval_seeds(job)), "eval")
        stage = job.scenario.next_stage(True, step, job.outcome_override)
        if target is not None:
            due = target.kind == "end" or (target.kind == "step" and step < target.step)
        else:
            due = job.scenario.slot_position(stage.slot) <= self.position(job) + _EPS
        if not due:
            return None
        if stage.kind == "step":
            return BatchPlan(stage.step, tuple(self._train_seeds(job, stage.step)), "rl")
        final_eval = stage.outcome == "succeeded" and mode == "rl" and self._final_eval_pending(job, step)
        if stage.kind == "end" and final_eval:
            return BatchPlan(step, tuple(self._eval_seeds(job)), "eval")
        return None

    def _batch_size(self, job: JobRecord) -> int:
        rollout = job.config.get("rollout")
        size = rollout.get("episodes_per_batch") if isinstance(rollout, dict) else None
        if not isinstance(size, int) or isinstance(size, bool):
            size = 1
        return max(1, min(size, self.max_rollouts_per_step))  # at least one rollout a step

    def _train_seeds(self, job: JobRecord, step: int) -> list[int]:
        size = self._batch_size(job)
        return [(step - 1) * size + i for i in range(size)]

    def _eval_seeds(self, job: JobRecord) -> list[int]:
        evaluation = job.config.get("evaluation")
        seeds = evaluation.get("seeds") if isinstance(evaluation, dict) else None
        if isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds):
            return list(seeds[: self.max_rollouts_per_step])
        return list(range(self._batch_size(job)))

    def _evaluates_at(self, job: JobRecord, step: int) -> bool:
        """Whether training step *step* is followed by a periodic evaluation."""
        every = self._eval_every(job)
        return step % every == 0 if every else False

    @staticmethod
    def _final_eval_pending(job: JobRecord, step: int) -> bool:
        """Whether a job ending after *step* steps still owes its final evaluation."""
        return bool(step) and step not in job.eval_means

    @staticmethod
    def _eval_every(job: JobRecord) -> int | None:
        if job.scenario.eval_every is not None:
            return job.scenario.eval_every
        evaluation = job.config.get("evaluation")
        every = evaluation.get("every_n_iters") if isinstance(evaluation, dict) else None
        return every if isinstance(every, int) and not isinstance(every, bool) and every > 0 else None
