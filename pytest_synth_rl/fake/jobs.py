"""The state of one fake RL job, and how it renders on the wire (contract §1.3 and §6.2): history
is kept as compact tuples, rendered as the wire's dicts when read; the status body is cached."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from pytest_synth_rl.fake.scenario import Scenario, Stage

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "error"})
#: The largest task-app answer (bytes) a rollout record keeps; a larger one is read for its reward only.
MAX_KEPT_RESPONSE = 64 * 1024
#: The most answer bytes one job's rollout records keep in all.
MAX_KEPT_RESPONSES = 128 * 1024


@functools.lru_cache(maxsize=4096)
def iso(ts: float) -> str:
    """ISO-8601 UTC with an explicit offset (cached: virtual clocks stamp the same few instants)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _point(name: str, step: int, value: float, ts: float, job_id: str) -> dict[str, Any]:
    return {"name": name, "step": step, "value": value, "created_at": iso(ts), "job_id": job_id}


class _Event(NamedTuple):
    ts: float
    kind: str
    message: str
    level: str
    data: dict[str, Any]

    def event(self, seq: int, job_id: str) -> dict[str, Any]:
        row = {"seq": seq, "type": self.kind, "message": self.message, "level": self.level, "data": self.data}
        return {**row, "created_at": iso(self.ts), "job_id": job_id}


class _Step(NamedTuple):
    ts: float
    step: int
    total: int
    reward: float
    loss: float

    def event(self, seq: int, job_id: str) -> dict[str, Any]:
        message = f"step {self.step}/{self.total}: reward={self.reward:.4f} loss={self.loss:.4f}"
        data = {"step": self.step, "total_steps": self.total, "reward": self.reward, "loss": self.loss}
        return _Event(self.ts, "rl.train.step", message, "info", data).event(seq, job_id)

    def points(self, job_id: str) -> list[dict[str, Any]]:
        return [
            _point("train.reward", self.step, self.reward, self.ts, job_id),
            _point("train.loss", self.step, self.loss, self.ts, job_id),
        ]


class _Eval(NamedTuple):
    ts: float
    step: int
    mean: float
    seeds: tuple[int, ...]
    rewards: tuple[float, ...]

    def event(self, seq: int, job_id: str) -> dict[str, Any]:
        message = f"eval at step {self.step}: mean_reward={self.mean:.4f} over {len(self.seeds)} seeds"
        data = {
            "step": self.step,
            "mean_reward": self.mean,
            "seeds": [*self.seeds],
            "rewards": [*self.rewards],
        }
        return _Event(self.ts, "rl.eval.summary", message, "info", data).event(seq, job_id)

    def points(self, job_id: str) -> list[dict[str, Any]]:
        return [_point("eval.reward", self.step, self.mean, self.ts, job_id)]


@dataclass
class RolloutRecord:
    """One ``/rollout`` call the fake made to the task app on a job's behalf.

    The answer is kept as bytes, at most :data:`MAX_KEPT_RESPONSE` of them and within its job's
    :data:`MAX_KEPT_RESPONSES`; otherwise ``response_omitted`` says so and ``response_size`` stays.
    """

    step: int
    seed: int
    mode: str
    run_id: str
    url: str
    request: dict[str, Any]
    status_code: int | None = None
    reward: float | None = None
    error: str | None = None
    elapsed: float = 0.0
    response_body: bytes | None = field(default=None, repr=False)
    response_size: int = 0
    response_omitted: bool = False

    @property
    def response(self) -> Any:
        """The task app's answer as parsed JSON (a fresh object each read), or None if none was kept."""
        return None if self.response_body is None else json.loads(self.response_body)

    def keep_response(self, body: bytes) -> None:
        self.response_size = len(body)
        self.response_omitted = len(body) > MAX_KEPT_RESPONSE
        self.response_body = None if self.response_omitted else body


class RolloutLog(list[RolloutRecord]):
    """A job's rollout records; answers are kept only while they fit in :data:`MAX_KEPT_RESPONSES`."""

    kept_bytes = 0

    def append(self, record: RolloutRecord) -> None:
        body = record.response_body
        if body is not None and self.kept_bytes + len(body) <= MAX_KEPT_RESPONSES:
            self.kept_bytes += len(body)
        elif body is not None:
            record.response_body, record.response_omitted = None, True
        super().append(record)

    def extend(self, records: Iterable[RolloutRecord]) -> None:
        for record in records:
            self.append(record)


@dataclass
class JobState:
    """Everything the fake knows about one job (changed only by the lifecycle, under the store's lock)."""

    id: str
    payload: dict[str, Any]
    scenario: Scenario
    created_now: float
    created_time: float
    use_rollouts: bool = False
    idempotency_key: str | None = None
    payload_bytes: int = 0
    #: What the job counts against the store's data cap (set by the store).
    size: int = 0
    status: str = "queued"
    started: bool = False
    steps_done: int = 0
    polls: int = 0
    #: Status polls in a row that found the job and the clock as the poll before did.
    stalled_polls: int = 0
    last_poll: tuple[int, float] | None = field(default=None, repr=False)
    #: The thread running a rollout batch of this job with the store's lock set aside.
    batch_thread: int | None = field(default=None, repr=False)
    outcome_override: str | None = None
    error: str | None = None
    final_reward: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    updated_time: float = 0.0
    rewards: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    #: Mean reward of each evaluation, by step (each evaluation saved a checkpoint).
    eval_means: dict[int, float] = field(default_factory=dict)
    events: list[_Event | _Step | _Eval] = field(default_factory=list)
    points: list[_Step | _Eval] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    rollouts: RolloutLog = field(default_factory=RolloutLog)
    version: int = 0
    #: ``(version, next stage, its slot position)``, kept by the lifecycle.
    next_cache: tuple[int, Stage, float] | None = field(default=None, repr=False)
    _status_cache: tuple[int, bytes] | None = field(default=None, repr=False)

    @property
    def data(self) -> dict[str, Any]:
        data = self.payload.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def config(self) -> dict[str, Any]:
        config = self.data.get("config")
        return config if isinstance(config, dict) else {}

    def setting(self, section: str, key: str) -> Any:
        """``config[section][key]``; None if either is missing or *section* is not a table."""
        table = self.config.get(section)
        return table.get(key) if isinstance(table, dict) else None

    @property
    def model(self) -> str:
        return str(self.data.get("base_model") or self.data.get("model") or "unknown-model")

    @property
    def endpoint(self) -> str:
        return str(self.data.get("endpoint_base_url") or "")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def model_id(self) -> str:
        return f"rl:{self.model}:{self.id}"

    @property
    def point_count(self) -> int:
        return 2 * len(self.rewards) + len(self.eval_means)

    def add_event(
        self, ts: float, type_: str, message: str, data: dict[str, Any] | None = None, level: str = "info"
    ) -> None:
        self.events.append(_Event(ts, type_, message, level, data or {}))
        self.touch(ts)

    def add_step(self, ts: float, step: int, reward: float, loss: float) -> None:
        self.steps_done = step
        self.rewards.append(reward)
        self.losses.append(loss)
        row = _Step(ts, step, self.scenario.steps, reward, loss)
        self.events.append(row)
        self.points.append(row)
        self.touch(ts)

    def add_eval(self, ts: float, step: int, seeds: list[int], rewards: list[float]) -> float:
        mean = round(sum(rewards) / len(rewards), 6)
        self.eval_means[step] = mean
        row = _Eval(ts, step, mean, tuple(seeds), tuple(round(r, 6) for r in rewards))
        self.events.append(row)
        self.points.append(row)
        self.touch(ts)
        return mean

    @property
    def last_reward(self) -> float | None:
        return self.rewards[-1] if self.rewards else None

    def finish(
        self, ts: float, status: str, final: float | None, event: tuple[str, str, dict[str, Any], str]
    ) -> None:
        """End the job in *status* with reward *final*; *event* (kind, message, data, level) says so."""
        self.final_reward = final
        self.finished_at = ts
        self.set_phase(ts, status)
        self.add_event(ts, *event)

    def set_phase(self, ts: float, phase: str) -> None:
        self.status = phase
        self.timeline.append({"phase": phase, "created_at": iso(ts), "job_id": self.id})
        self.touch(ts)

    def touch(self, ts: float) -> None:
        self.updated_time = max(self.updated_time, ts)
        self.version += 1

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "model": self.model,
            "created_at": iso(self.created_time),
            "updated_at": iso(self.updated_time or self.created_time),
        }

    def status_body(self) -> dict[str, Any]:
        """The job as ``GET /rl/jobs/{id}`` returns it."""
        body: dict[str, Any] = {
            "id": self.id,
            "job_id": self.id,
            "object": "rl.job",
            "job_type": "rl",
            **self._head(),
            "started_at": iso(self.started_at) if self.started_at is not None else None,
            "finished_at": iso(self.finished_at) if self.finished_at is not None else None,
            "progress": {"completed": self.steps_done, "total": self.scenario.steps},
            "metrics": {"reward": self.last_reward, "loss": self.losses[-1] if self.losses else None},
            "endpoint_base_url": self.endpoint or None,
        }
        if self.idempotency_key is not None:
            body["idempotency_key"] = self.idempotency_key
        if self.terminal:
            body["final_reward"] = self.final_reward
            rewards = self.rewards
            metrics = {
                "final_reward": self.final_reward,
                "mean_reward": round(sum(rewards) / len(rewards), 6) if rewards else None,
                "best_reward": max(rewards) if rewards else None,
                "steps": self.steps_done,
                "rollouts": len(self.rollouts),
                "eval": {str(step): mean for step, mean in self.eval_means.items()},
            }
            body["results"] = {"metrics": metrics}
            if self.status == "succeeded":
                body["model_id"] = self.model_id
                body["checkpoints"] = [
                    {"step": step, "path": f"fake://checkpoints/{self.id}/step-{step:05d}"}
                    for step in self.eval_means
                ]
            if self.status in ("failed", "error"):
                body["error"] = self.error
        return body

    def status_bytes(self) -> bytes:
        cache = self._status_cache
        if cache is None or cache[0] != self.version:
            cache = self._status_cache = (self.version, _ENCODER.encode(self.status_body()).encode())
        return cache[1]

    def event_dicts(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """The events after the first *start* (up to *stop*), as the wire shows them."""
        return [row.event(seq, self.id) for seq, row in enumerate(self.events[start:stop], start + 1)]

    def point_dicts(self, last: int | None = None) -> list[dict[str, Any]]:
        """The metric points in order: every one, or the *last* ones."""
        rows = self.points if last is None else self.points[-last:]
        points = [point for row in rows for point in row.points(self.id)]
        return points if last is None else points[-last:]

    def events_page(self, since_seq: int, limit: int) -> dict[str, Any]:
        start = max(0, since_seq)
        page = self.event_dicts(start, start + limit)
        more, next_seq = start + limit < len(self.events), page[-1]["seq"] if page else start
        return {"events": page, "next_seq": next_seq, "has_more": more, "job_id": self.id}

    def metrics_page(self, after_step: int, limit: int, name: str | None) -> dict[str, Any]:
        rows = (row for row in self.points if row.step > after_step)
        found = (p for row in rows for p in row.points(self.id) if name is None or p["name"] == name)
        page = list(itertools.islice(found, limit + 1))
        return {"points": page[:limit], "has_more": len(page) > limit, "job_id": self.id}

    def _counts(self) -> dict[str, Any]:
        return {
            "events_count": len(self.events),
            "rollouts_count": len(self.rollouts),
            "polls": self.polls,
            "use_rollouts": self.use_rollouts,
        }

    def listing(self) -> dict[str, Any]:
        """The job in the admin job list: state and counts, never its history."""
        scenario = self.scenario.describe()
        if isinstance(scenario["reward_curve"], list):
            scenario["reward_curve"] = f"{len(scenario['reward_curve'])} values"
        return {
            **self._head(),
            "progress": {"completed": self.steps_done, "total": self.scenario.steps},
            "final_reward": self.final_reward,
            "error": self.error,
            "scenario": scenario,
            **self._counts(),
        }

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping, for the admin API."""
        return {**self.status_body(), "scenario": self.scenario.describe(), **self._counts()}
