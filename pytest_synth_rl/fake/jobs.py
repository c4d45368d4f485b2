"""The state of one fake RL job, and how it renders on the wire (contract §1.3 and §6.2).

:class:`JobRecord` is plain data mutated only by the lifecycle engine under the backend's lock.
Rendering lives here too so that every route (and the admin API) shows the same shape. The
status body is cached per state version: a client polling a job that has not moved gets the
same bytes without re-encoding them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .scenario import Scenario, Stage

__all__ = ["TERMINAL", "JobRecord", "RolloutRecord", "iso"]

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "error"})


@functools.lru_cache(maxsize=4096)
def iso(ts: float) -> str:
    """ISO-8601 UTC with an explicit offset (parseable by ``datetime.fromisoformat`` on 3.10).

    Cached: on virtual clocks every test's jobs stamp the same few instants, dozens of times each.
    """
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


@dataclass
class RolloutRecord:
    """One ``/rollout`` call the fake made to the task app on a job's behalf."""

    step: int
    seed: int
    mode: str
    run_id: str
    url: str
    request: dict[str, Any]
    status_code: int | None = None
    response: Any = None
    reward: float | None = None
    error: str | None = None
    elapsed: float = 0.0


@dataclass
class JobRecord:
    """Everything the fake knows about one job."""

    id: str
    payload: dict[str, Any]
    scenario: Scenario
    created_now: float
    created_time: float
    use_rollouts: bool
    idempotency_key: str | None = None
    status: str = "queued"
    started: bool = False
    steps_done: int = 0
    polls: int = 0
    #: Status polls in a row that found the job and the clock exactly as the poll before did.
    stalled_polls: int = 0
    #: ``(version, clock now)`` at the last status poll, to tell a stalled job from a slow one.
    last_poll: tuple[int, float] | None = field(default=None, repr=False)
    #: The thread running a rollout batch of this job with the store's lock set aside (None when
    #: no batch runs); nothing else moves the job meanwhile.
    batch_thread: int | None = field(default=None, repr=False)
    outcome_override: str | None = None
    error: str | None = None
    final_reward: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    updated_time: float = 0.0
    rewards: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    eval_means: dict[int, float] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[RolloutRecord] = field(default_factory=list)
    version: int = 0
    #: ``(version, next stage, its slot position)``, maintained by the lifecycle.
    next_cache: tuple[int, Stage, float] | None = field(default=None, repr=False)
    _status_cache: tuple[int, bytes] | None = field(default=None, repr=False)

    # -- facts derived from the payload ---------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        data = self.payload.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def config(self) -> dict[str, Any]:
        config = self.data.get("config")
        return config if isinstance(config, dict) else {}

    @property
    def model(self) -> str:
        value = self.data.get("base_model") or self.data.get("model") or "unknown-model"
        return str(value)

    @property
    def endpoint(self) -> str:
        return str(self.data.get("endpoint_base_url") or "")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def model_id(self) -> str:
        return f"rl:{self.model}:{self.id}"

    # -- mutation helpers used by the lifecycle ---------------------------------------------
    def add_event(
        self,
        ts: float,
        type_: str,
        message: str,
        data: dict[str, Any] | None = None,
        level: str = "info",
    ) -> dict[str, Any]:
        event = {
            "seq": len(self.events) + 1,
            "type": type_,
            "message": message,
            "level": level,
            "data": data or {},
            "created_at": iso(ts),
            "job_id": self.id,
        }
        self.events.append(event)
        self.touch(ts)
        return event

    def add_point(self, ts: float, name: str, step: int, value: float) -> None:
        self.points.append(
            {"name": name, "step": step, "value": value, "created_at": iso(ts), "job_id": self.id}
        )

    def set_phase(self, ts: float, phase: str) -> None:
        self.status = phase
        self.timeline.append({"phase": phase, "created_at": iso(ts), "job_id": self.id})
        self.touch(ts)

    def touch(self, ts: float) -> None:
        self.updated_time = max(self.updated_time, ts)
        self.version += 1

    # -- rendering ---------------------------------------------------------------------------
    def status_body(self) -> dict[str, Any]:
        """The job as ``GET /rl/jobs/{id}`` returns it."""
        total = self.scenario.steps
        body: dict[str, Any] = {
            "id": self.id,
            "job_id": self.id,
            "object": "rl.job",
            "job_type": "rl",
            "status": self.status,
            "model": self.model,
            "created_at": iso(self.created_time),
            "updated_at": iso(self.updated_time or self.created_time),
            "started_at": iso(self.started_at) if self.started_at is not None else None,
            "finished_at": iso(self.finished_at) if self.finished_at is not None else None,
            "progress": {"completed": self.steps_done, "total": total},
            "metrics": {
                "reward": self.rewards[-1] if self.rewards else None,
                "loss": self.losses[-1] if self.losses else None,
            },
            "endpoint_base_url": self.endpoint or None,
        }
        if self.idempotency_key is not None:
            body["idempotency_key"] = self.idempotency_key
        if self.terminal:
            body["final_reward"] = self.final_reward
            body["results"] = {"metrics": self.result_metrics()}
            if self.status == "succeeded":
                body["model_id"] = self.model_id
                body["checkpoints"] = list(self.checkpoints)
            if self.status in ("failed", "error"):
                body["error"] = self.error
        return body

    def status_bytes(self) -> bytes:
        cache = self._status_cache
        if cache is not None and cache[0] == self.version:
            return cache[1]
        encoded = _dumps(self.status_body())
        self._status_cache = (self.version, encoded)
        return encoded

    def result_metrics(self) -> dict[str, Any]:
        rewards = self.rewards
        return {
            "final_reward": self.final_reward,
            "mean_reward": round(sum(rewards) / len(rewards), 6) if rewards else None,
            "best_reward": max(rewards) if rewards else None,
            "steps": self.steps_done,
            "rollouts": len(self.rollouts),
            "eval": {str(step): mean for step, mean in self.eval_means.items()},
        }

    def events_page(self, since_seq: int, limit: int) -> dict[str, Any]:
        # Events are numbered 1..n in list order, so the page is a slice, not a scan.
        start = max(0, since_seq)
        page = self.events[start : start + limit]
        next_seq = page[-1]["seq"] if page else max(since_seq, 0)
        return {
            "events": page,
            "next_seq": next_seq,
            "has_more": start + limit < len(self.events),
            "job_id": self.id,
        }

    def metrics_page(self, after_step: int, limit: int, name: str | None) -> dict[str, Any]:
        points = [p for p in self.points if p["step"] > after_step and (name is None or p["name"] == name)]
        return {"points": points[:limit], "has_more": len(points) > limit, "job_id": self.id}

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping, for the admin API."""
        body = self.status_body()
        body["scenario"] = self.scenario.describe()
        body["events_count"] = len(self.events)
        body["rollouts_count"] = len(self.rollouts)
        body["polls"] = self.polls
        body["use_rollouts"] = self.use_rollouts
        return body
