"""The state of one fake RL job, and how it renders on the wire (contract §1.3 and §6.2).

:class:`JobRecord` is plain data mutated only by the lifecycle engine under the backend's lock.
Rendering lives here too so that every route (and the admin API) shows the same shape. The
status body is cached per state version: a client polling a job that has not moved gets the
same bytes without re-encoding them.

A job keeps its whole history (clients page through events and metrics from the start), and a
10,000-step job has over 10,000 events and 20,000 metric points: as dicts they took about 1 KB a
step. History is kept as tuples instead (a training step, its event and both its metric points
are one), and rendered as the wire's dicts when read: about 0.2 KB a step.

A job also keeps a record of every rollout it ran (:class:`RolloutRecord`), and with it a bounded
view of each task-app answer: see :class:`RolloutLog`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple, overload

from pytest_synth_rl.fake.scenario import Scenario, Stage

__all__ = [
    "MAX_KEPT_RESPONSE",
    "MAX_KEPT_RESPONSES",
    "TERMINAL",
    "JobRecord",
    "RolloutLog",
    "RolloutRecord",
    "iso",
]

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "error"})
#: The largest task-app answer (its body's bytes) a rollout record keeps; a larger one is read
#: for its reward and then dropped (see :class:`RolloutRecord`).
MAX_KEPT_RESPONSE = 64 * 1024
#: The most answer bytes one job's rollout records keep in all (see :class:`RolloutLog`): half
#: the least a job counts for against the fake's job-data cap (``store.MAX_JOB_DATA /
#: store.MAX_JOBS``), and well above the ~90 KB of answers of a default 10-step job.
MAX_KEPT_RESPONSES = 128 * 1024


@functools.lru_cache(maxsize=4096)
def iso(ts: float) -> str:
    """ISO-8601 UTC with an explicit offset (parseable by ``datetime.fromisoformat`` on 3.10).

    Cached: on virtual clocks every test's jobs stamp the same few instants, dozens of times each.
    """
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


#: One encoder for every body: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _dumps(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode()


class _Event(NamedTuple):
    """One event as kept; its ``seq`` is its place in the job's list."""

    ts: float
    kind: str
    message: str
    level: str
    data: dict[str, Any]

    def event(self, seq: int, job_id: str) -> dict[str, Any]:
        return _event(seq, self.kind, self.message, self.level, self.data, self.ts, job_id)


class _Step(NamedTuple):
    """One training step as kept: its event and its two metric points are written when read."""

    ts: float
    step: int
    total: int
    reward: float
    loss: float

    def event(self, seq: int, job_id: str) -> dict[str, Any]:
        message = f"step {self.step}/{self.total}: reward={self.reward:.4f} loss={self.loss:.4f}"
        data = {"step": self.step, "total_steps": self.total, "reward": self.reward, "loss": self.loss}
        return _event(seq, "rl.train.step", message, "info", data, self.ts, job_id)

    def points(self, job_id: str) -> list[dict[str, Any]]:
        return [
            _point("train.reward", self.step, self.reward, self.ts, job_id),
            _point("train.loss", self.step, self.loss, self.ts, job_id),
        ]


class _Eval(NamedTuple):
    """One evaluation as kept: its event and its metric point are written when read."""

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
            "seeds": list(self.seeds),
            "rewards": list(self.rewards),
        }
        return _event(seq, "rl.eval.summary", message, "info", data, self.ts, job_id)

    def points(self, job_id: str) -> list[dict[str, Any]]:
        return [_point("eval.reward", self.step, self.mean, self.ts, job_id)]


def _event(
    seq: int, kind: str, message: str, level: str, data: dict[str, Any], ts: float, job_id: str
) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": kind,
        "message": message,
        "level": level,
        "data": data,
        "created_at": iso(ts),
        "job_id": job_id,
    }


def _point(name: str, step: int, value: float, ts: float, job_id: str) -> dict[str, Any]:
    return {"name": name, "step": step, "value": value, "created_at": iso(ts), "job_id": job_id}


@dataclass
class RolloutRecord:
    """One ``/rollout`` call the fake made to the task app on a job's behalf.

    The task app's answer is kept as its body's bytes (:attr:`response_body`, what it really
    costs: parsed JSON takes up to ~22 times its text) and decoded on each read of
    :attr:`response`. Only a bounded view is kept: an answer of more than
    :data:`MAX_KEPT_RESPONSE` bytes is read for its reward and then dropped, as is any answer past
    its job's :data:`MAX_KEPT_RESPONSES` (see :class:`RolloutLog`); :attr:`response_omitted`
    then says so, and :attr:`response_size` still gives its size.
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
    #: The answer's body as received, when it was JSON and is kept (see the class docstring).
    response_body: bytes | None = field(default=None, repr=False)
    #: Bytes of the answer's body (0 before an answer came).
    response_size: int = 0
    #: The answer was JSON but is not kept: too large, or past its job's budget.
    response_omitted: bool = False

    @property
    def response(self) -> Any:
        """The task app's answer as parsed JSON (a fresh object on each read), or None: no
        JSON answer came, or it was not kept (:attr:`response_omitted`)."""
        return None if self.response_body is None else json.loads(self.response_body)

    def keep_response(self, body: bytes) -> None:
        """Keep the JSON answer *body* if it is at most :data:`MAX_KEPT_RESPONSE` bytes."""
        self.response_size = len(body)
        kept = len(body) <= MAX_KEPT_RESPONSE
        self.response_body = body if kept else None
        self.response_omitted = not kept

    def omit_response(self) -> None:
        """Drop the kept answer, leaving its size and the flag that says it was dropped."""
        if self.response_body is not None:
            self.response_body = None
            self.response_omitted = True


class RolloutLog(Sequence[RolloutRecord]):
    """A job's rollout records, in the order they ran. :meth:`append` and :meth:`extend` (the
    only ways in) keep a record's answer only while the answers kept so far, and it, fit in
    :data:`MAX_KEPT_RESPONSES` bytes; later records keep the answer's size and
    ``response_omitted`` instead (the first answers stay: a record once read does not change).

    So a job holds at most :data:`MAX_KEPT_RESPONSES` bytes of answers (plus one small record
    per rollout), however many rollouts it runs and however large the task app's answers, and
    a fake at most that times the jobs it keeps (``store.MAX_JOBS``), about 125 MiB: within the
    256 KiB each job counts for at least against ``store.MAX_JOB_DATA``, of which it is half.
    Only while a batch runs do its records hold more: up to :data:`MAX_KEPT_RESPONSE` each,
    until the batch's records are added here.
    """

    __slots__ = ("_records", "kept_bytes")

    def __init__(self, records: Iterable[RolloutRecord] = ()) -> None:
        self._records: list[RolloutRecord] = []
        #: Bytes of the answers kept by the records added so far.
        self.kept_bytes = 0
        self.extend(records)

    def append(self, record: RolloutRecord) -> None:
        body = record.response_body
        if body is not None:
            if self.kept_bytes + len(body) <= MAX_KEPT_RESPONSES:
                self.kept_bytes += len(body)
            else:
                record.omit_response()
        self._records.append(record)

    def extend(self, records: Iterable[RolloutRecord]) -> None:
        for record in records:
            self.append(record)

    @overload
    def __getitem__(self, index: int) -> RolloutRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[RolloutRecord]: ...
    def __getitem__(self, index: int | slice) -> RolloutRecord | list[RolloutRecord]:
        return self._records[index]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[RolloutRecord]:
        return iter(self._records)

    def __repr__(self) -> str:
        return f"RolloutLog({self._records!r})"


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
    #: Size of the payload as JSON: what it costs to keep (see ``store.job_size``).
    payload_bytes: int = 0
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
    #: Mean reward of each evaluation, by step, in order (each evaluation saved a checkpoint).
    eval_means: dict[int, float] = field(default_factory=dict)
    #: History, as kept (see the module docstring): read it with :meth:`event_dicts`,
    #: :meth:`events_page`, :meth:`point_dicts` and :meth:`metrics_page`.
    events: list[_Event | _Step | _Eval] = field(default_factory=list)
    points: list[_Step | _Eval] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    #: Every rollout the job ran, each with a bounded view of its answer (see :class:`RolloutLog`).
    rollouts: RolloutLog = field(default_factory=RolloutLog)
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

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """One checkpoint per evaluation, in order."""
        return [
            {"step": step, "path": f"fake://checkpoints/{self.id}/step-{step:05d}"}
            for step in self.eval_means
        ]

    @property
    def point_count(self) -> int:
        """How many metric points the job has: two a training step, one an evaluation."""
        return 2 * len(self.rewards) + len(self.eval_means)

    # -- mutation helpers used by the lifecycle ---------------------------------------------
    def add_event(
        self,
        ts: float,
        type_: str,
        message: str,
        data: dict[str, Any] | None = None,
        level: str = "info",
    ) -> None:
        self.events.append(_Event(ts, type_, message, level, data or {}))
        self.touch(ts)

    def add_step(self, ts: float, step: int, reward: float, loss: float) -> None:
        """Training step *step* is done: its rewards, its event and its metric points."""
        self.steps_done = step
        self.rewards.append(reward)
        self.losses.append(loss)
        row = _Step(ts, step, self.scenario.steps, reward, loss)
        self.events.append(row)
        self.points.append(row)
        self.touch(ts)

    def add_eval(self, ts: float, step: int, seeds: list[int], rewards: list[float]) -> float:
        """An evaluation after *step* (which saves a checkpoint); returns its mean reward."""
        mean = round(sum(rewards) / len(rewards), 6)
        self.eval_means[step] = mean
        row = _Eval(ts, step, mean, tuple(seeds), tuple(round(r, 6) for r in rewards))
        self.events.append(row)
        self.points.append(row)
        self.touch(ts)
        return mean

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

    def event_dicts(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """The events after the first *start* (up to *stop*), as the wire shows them."""
        return [row.event(seq, self.id) for seq, row in enumerate(self.events[start:stop], start + 1)]

    def point_dicts(self, last: int | None = None) -> list[dict[str, Any]]:
        """The metric points (``train.reward``, ``train.loss``, ``eval.reward``) in order: every
        one, or the *last* ones."""
        rows = self.points if last is None else self.points[-last:]
        points = [point for row in rows for point in row.points(self.id)]
        return points if last is None else points[-last:]

    def events_page(self, since_seq: int, limit: int) -> dict[str, Any]:
        # Events are numbered 1..n in list order, so the page is a slice, not a scan.
        start = max(0, since_seq)
        page = self.event_dicts(start, start + limit)
        next_seq = page[-1]["seq"] if page else max(since_seq, 0)
        return {
            "events": page,
            "next_seq": next_seq,
            "has_more": start + limit < len(self.events),
            "job_id": self.id,
        }

    def metrics_page(self, after_step: int, limit: int, name: str | None) -> dict[str, Any]:
        points: list[dict[str, Any]] = []
        for row in self.points:
            if row.step <= after_step:
                continue
            for point in row.points(self.id):
                if name is not None and point["name"] != name:
                    continue
                if len(points) == limit:
                    return {"points": points, "has_more": True, "job_id": self.id}
                points.append(point)
        return {"points": points, "has_more": False, "job_id": self.id}

    def listing(self) -> dict[str, Any]:
        """The job in the admin job list: its state and counts, never its history, checkpoints
        or reward curve, so a list of :data:`~.store.MAX_JOBS` jobs stays small whatever they hold."""
        scenario = self.scenario.describe()
        curve = scenario["reward_curve"]
        if isinstance(curve, list):
            scenario["reward_curve"] = f"{len(curve)} values"
        return {
            "id": self.id,
            "status": self.status,
            "model": self.model,
            "created_at": iso(self.created_time),
            "updated_at": iso(self.updated_time or self.created_time),
            "progress": {"completed": self.steps_done, "total": self.scenario.steps},
            "final_reward": self.final_reward,
            "error": self.error,
            "scenario": scenario,
            "events_count": len(self.events),
            "rollouts_count": len(self.rollouts),
            "polls": self.polls,
            "use_rollouts": self.use_rollouts,
        }

    def summary(self) -> dict[str, Any]:
        """Status plus lifecycle bookkeeping, for the admin API."""
        body = self.status_body()
        body["scenario"] = self.scenario.describe()
        body["events_count"] = len(self.events)
        body["rollouts_count"] = len(self.rollouts)
        body["polls"] = self.polls
        body["use_rollouts"] = self.use_rollouts
        return body
