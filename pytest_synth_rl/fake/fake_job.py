"""FakeJob: a test's handle on one fake job, to inspect it and to push it around; every read first
brings the job up to date with the clock and returns a copy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.fake.jobs import JobState, RolloutRecord
from pytest_synth_rl.fake.lifecycle import Lifecycle, Target
from pytest_synth_rl.fake.scenario import Scenario, int_in

T = TypeVar("T")
#: The names :meth:`FakeJob.advance_to` takes besides a step number.
_NAMED = {
    **dict.fromkeys(("running", "started", "start"), Target("start")),
    **dict.fromkeys(("end", "done", "terminal"), Target("end")),
}


class _Read(Generic[T]):
    """A read-only attribute: *read* of the job (brought up to date first, if *sync*)."""

    def __init__(self, read: Callable[[JobState], T], *, sync: bool = True) -> None:
        self._read, self._sync = read, sync

    def __get__(self, job: FakeJob, owner: type[FakeJob] | None = None) -> T:
        return job.view(self._read, sync=self._sync)


class FakeJob:
    """One job in a :class:`FakeSynthBackend` (get it with ``fake.job(id)`` or ``fake.jobs``)."""

    def __init__(self, lifecycle: Lifecycle, state: JobState) -> None:
        self._lifecycle = lifecycle
        self._state = state

    def view(self, read: Callable[[JobState], T], *, sync: bool = True) -> T:
        """*read* of this job's state, brought up to date with the clock first if *sync*."""
        if not sync:
            return read(self._state)
        with self._lifecycle.store.lock:
            return read(self._lifecycle.sync(self._state))

    id = _Read(lambda job: job.id, sync=False)
    status = _Read(lambda job: job.status)
    events = _Read(lambda job: copy.deepcopy(job.event_dicts()))
    event_types = _Read(lambda job: [e["type"] for e in job.event_dicts()])
    metrics = _Read(lambda job: job.point_dicts())
    """Metric points (``train.reward``, ``train.loss``, ``eval.reward``) in order."""
    rewards: _Read[list[float]] = _Read(lambda job: list(job.rewards))
    """The per-step training rewards so far (step 1 first)."""
    rollouts: _Read[list[RolloutRecord]] = _Read(lambda job: list(job.rollouts))
    """Every ``/rollout`` call made for this job (training and evaluation), in order."""
    payload: _Read[dict[str, Any]] = _Read(lambda job: copy.deepcopy(job.payload), sync=False)
    scenario: _Read[Scenario] = _Read(lambda job: job.scenario, sync=False)
    error = _Read(lambda job: job.error)
    final_reward = _Read(lambda job: job.final_reward)
    polls = _Read(lambda job: job.polls, sync=False)
    """How many status polls this job has received."""
    uses_rollouts = _Read(lambda job: job.use_rollouts, sync=False)

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping (scenario, counts, polls), as the admin API lists it."""
        return self.view(lambda job: copy.deepcopy(job.summary()))

    def status_payload(self) -> dict[str, Any]:
        """The body ``GET /rl/jobs/{id}`` would return now (without counting as a poll)."""
        return self.view(lambda job: copy.deepcopy(job.status_body()))

    def advance_to(self, target: int | str) -> FakeJob:
        """Run the job's stages now, up to *target*: ``"running"``, a step number, or ``"end"``."""
        steps = self._state.scenario.steps
        made = _NAMED.get(target) if isinstance(target, str) else None
        if made is None and not int_in(target, 0, steps):
            hint = f"use 'running', a step in 0..{steps}, or 'end'"
            raise SynthUsageError([ConfigProblem("FakeJob.advance_to", f"unknown target {target!r}", hint)])
        self._lifecycle.advance(self._state, made or Target("step", int(target)))
        return self

    def succeed(self) -> FakeJob:
        """Finish the job successfully now, running its remaining steps."""
        self._lifecycle.succeed(self._state)
        return self

    def fail(self, message: str = "failed by the test (FakeJob.fail)") -> FakeJob:
        """Fail the job now with *message* as its error."""
        self._lifecycle.fail(self._state, message)
        return self

    def cancel(self) -> FakeJob:
        """Cancel the job now (as ``POST /rl/jobs/{id}/cancel`` would, minus the 409 when done)."""
        self._lifecycle.cancel(self._state, reason="cancelled by the test")
        return self

    def __repr__(self) -> str:
        job, steps = self._state, f"{self._state.steps_done}/{self._state.scenario.steps}"
        return f"FakeJob(id={job.id!r}, status={job.status!r}, steps={steps}, rollouts={len(job.rollouts)})"
