"""FakeJob: a test's handle on one fake job, to inspect it and to push it around.

Every read brings the job up to date with the clock first (the same lazy rule as an API call),
so ``fake.job(id).status`` after ``clock.advance(600)`` is what a poll would say. Reads return
copies: a test cannot corrupt the fake's state by mutating what it was given.
"""

from __future__ import annotations

import copy
from typing import Any

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.fake.jobs import JobRecord, RolloutRecord
from pytest_synth_rl.fake.lifecycle import Target
from pytest_synth_rl.fake.scenario import Scenario
from pytest_synth_rl.fake.store import JobStore

__all__ = ["FakeJob"]


class FakeJob:
    """One job in a :class:`FakeSynthBackend` (get it with ``fake.job(id)`` or ``fake.jobs``)."""

    def __init__(self, store: JobStore, record: JobRecord) -> None:
        self._store = store
        self._record = record

    @property
    def id(self) -> str:
        return self._record.id

    def _synced(self) -> JobRecord:
        return self._store.sync(self._record)

    # -- reading --------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return self._synced().status

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._store.lock:
            return copy.deepcopy(self._synced().event_dicts())

    @property
    def event_types(self) -> list[str]:
        with self._store.lock:
            return [e["type"] for e in self._synced().event_dicts()]

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Metric points (``train.reward``, ``train.loss``, ``eval.reward``) in order."""
        with self._store.lock:
            return self._synced().point_dicts()  # new dicts of plain values: a copy already

    @property
    def rewards(self) -> list[float]:
        """The per-step training rewards so far (step 1 first)."""
        with self._store.lock:
            return list(self._synced().rewards)

    @property
    def rollouts(self) -> list[RolloutRecord]:
        """Every ``/rollout`` call made for this job (training and evaluation), in order."""
        with self._store.lock:
            return list(self._synced().rollouts)

    @property
    def payload(self) -> dict[str, Any]:
        return copy.deepcopy(self._record.payload)

    @property
    def scenario(self) -> Scenario:
        return self._record.scenario

    @property
    def error(self) -> str | None:
        return self._synced().error

    @property
    def final_reward(self) -> float | None:
        return self._synced().final_reward

    @property
    def polls(self) -> int:
        """How many status polls this job has received."""
        return self._record.polls

    @property
    def uses_rollouts(self) -> bool:
        return self._record.use_rollouts

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping (scenario, counts, polls), as the admin API lists it."""
        with self._store.lock:
            return copy.deepcopy(self._synced().summary())

    def status_payload(self) -> dict[str, Any]:
        """The body ``GET /rl/jobs/{id}`` would return now (without counting as a poll)."""
        with self._store.lock:
            return copy.deepcopy(self._synced().status_body())

    # -- pushing ----------------------------------------------------------------------------------
    def advance_to(self, target: int | str) -> FakeJob:
        """Run the job's stages now, up to *target*: ``"running"``, a step number, or ``"end"``.

        Stages run with the current clock time as their timestamp, rollouts included.
        """
        made: Target
        if target in ("running", "started", "start"):
            made = Target("start")
        elif target in ("end", "done", "terminal"):
            made = Target("end")
        elif (
            isinstance(target, int)
            and not isinstance(target, bool)
            and 0 <= target <= self._record.scenario.steps
        ):
            made = Target("step", target)
        else:
            raise SynthUsageError(
                [
                    ConfigProblem(
                        "FakeJob.advance_to",
                        f"unknown target {target!r}",
                        f"use 'running', a step in 0..{self._record.scenario.steps}, or 'end'",
                    )
                ]
            )
        self._store.advance(self._record, made)
        return self

    def succeed(self) -> FakeJob:
        """Finish the job successfully now, running its remaining steps."""
        self._store.succeed(self._record)
        return self

    def fail(self, message: str = "failed by the test (FakeJob.fail)") -> FakeJob:
        """Fail the job now with *message* as its error."""
        self._store.fail(self._record, message)
        return self

    def cancel(self) -> FakeJob:
        """Cancel the job now (as ``POST /rl/jobs/{id}/cancel`` would, minus the 409 when done)."""
        self._store.cancel(self._record, reason="cancelled by the test")
        return self

    def __repr__(self) -> str:
        record = self._record
        return (
            f"FakeJob(id={record.id!r}, status={record.status!r}, steps={record.steps_done}/"
            f"{record.scenario.steps}, rollouts={len(record.rollouts)})"
        )
