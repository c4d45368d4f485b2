"""FakeJob: a test's handle on one fake job, to inspect it and to push it around.

Every read first brings the job up to date with the clock (as an API call would) and returns a
copy, so a test cannot corrupt the fake's state through what it was given.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

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


class FakeJob:
    """One job in a :class:`FakeSynthBackend` (get it with ``fake.job(id)`` or ``fake.jobs``)."""

    def __init__(self, lifecycle: Lifecycle, state: JobState) -> None:
        self._lifecycle = lifecycle
        self._state = state

    @property
    def id(self) -> str:
        return self._state.id

    def _synced(self) -> JobState:
        return self._lifecycle.sync(self._state)

    def _read(self, read: Callable[[JobState], T]) -> T:
        with self._lifecycle.store.lock:
            return read(self._synced())

    @property
    def status(self) -> str:
        return self._synced().status

    @property
    def events(self) -> list[dict[str, Any]]:
        return self._read(lambda job: copy.deepcopy(job.event_dicts()))

    @property
    def event_types(self) -> list[str]:
        return self._read(lambda job: [e["type"] for e in job.event_dicts()])

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Metric points (``train.reward``, ``train.loss``, ``eval.reward``) in order."""
        return self._read(lambda job: job.point_dicts())

    @property
    def rewards(self) -> list[float]:
        """The per-step training rewards so far (step 1 first)."""
        return self._read(lambda job: list(job.rewards))

    @property
    def rollouts(self) -> list[RolloutRecord]:
        """Every ``/rollout`` call made for this job (training and evaluation), in order."""
        return self._read(lambda job: list(job.rollouts))

    @property
    def payload(self) -> dict[str, Any]:
        return copy.deepcopy(self._state.payload)

    @property
    def scenario(self) -> Scenario:
        return self._state.scenario

    @property
    def error(self) -> str | None:
        return self._synced().error

    @property
    def final_reward(self) -> float | None:
        return self._synced().final_reward

    @property
    def polls(self) -> int:
        """How many status polls this job has received."""
        return self._state.polls

    @property
    def uses_rollouts(self) -> bool:
        return self._state.use_rollouts

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping (scenario, counts, polls), as the admin API lists it."""
        return self._read(lambda job: copy.deepcopy(job.summary()))

    def status_payload(self) -> dict[str, Any]:
        """The body ``GET /rl/jobs/{id}`` would return now (without counting as a poll)."""
        return self._read(lambda job: copy.deepcopy(job.status_body()))

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
        job = self._state
        return (
            f"FakeJob(id={job.id!r}, status={job.status!r}, steps={job.steps_done}/"
            f"{job.scenario.steps}, rollouts={len(job.rollouts)})"
        )
