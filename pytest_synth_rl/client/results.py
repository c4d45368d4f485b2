"""What a job is once read: the status vocabulary, poll records, final results, and who watches polls.

Every status decision in the package goes through :func:`job_status` and the spellings in
:data:`TERMINAL_STATUSES` (``completed``, ``error``, ``canceled``, ... in any case). Imports nothing
heavy: the plugin registers its poll observer at pytest start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

SUCCESS_STATUSES: frozenset[str] = frozenset({"succeeded", "completed"})
#: ``error`` is what the SDK's learning constants call a failed job (synth-ai 0.5.0).
FAILURE_STATUSES: frozenset[str] = frozenset({"failed", "error"})
CANCELLED_STATUSES: frozenset[str] = frozenset({"cancelled", "canceled"})
TERMINAL_STATUSES: frozenset[str] = SUCCESS_STATUSES | FAILURE_STATUSES | CANCELLED_STATUSES
_OUTCOMES = {"succeeded": SUCCESS_STATUSES, "failed": FAILURE_STATUSES, "cancelled": CANCELLED_STATUSES}

#: Status runs a job handle keeps: a job that flaps between two statuses forever stays bounded.
MAX_STATUS_RUNS = 1000
#: Poll records one wait keeps (see :func:`add_poll`): two for each of as many runs.
MAX_POLL_RECORDS = 2 * MAX_STATUS_RUNS

Paths = tuple[tuple[str, ...], ...]
#: Where an in-flight status reports its step, total steps and latest reward (first found wins).
STEP_PATHS: Paths = (("progress", "completed"), ("step",), ("current_step",), ("metrics", "step"))
TOTAL_STEPS_PATHS: Paths = (("progress", "total"), ("total_steps",))
REWARD_PATHS: Paths = (("metrics", "reward"), ("reward",), ("metrics", "mean_reward"))
#: Where a finished job may report its reward, most specific first (the shape is not specified).
_FINAL_REWARD_PATHS: Paths = (
    ("final_reward",),
    ("results", "final_reward"),
    ("result", "final_reward"),
    ("metrics", "final_reward"),
    ("results", "metrics", "final_reward"),
    ("results", "metrics", "reward"),
    ("metrics", "reward"),
)


#: Called as ``observer(poller, record)`` after every status poll of every job in the process.
PollObserver = Callable[[Any, Any], None]
_observers: list[PollObserver] = []


def observe_polls(observer: PollObserver) -> Callable[[], None]:
    """Watch every poll of every job (a raising observer warns like ``on_status``); returns the stopper."""
    _observers.append(observer)
    return lambda: _observers.remove(observer) if observer in _observers else None


def poll_observers() -> tuple[PollObserver, ...]:
    return tuple(_observers)


def value_at(payload: Any, path: tuple[str, ...]) -> Any:
    """``payload[path[0]][path[1]]...``, or None where a step is missing or not a mapping."""
    for key in path:
        payload = payload.get(key) if isinstance(payload, Mapping) else None
    return payload


def number_at(payload: Mapping[str, Any], paths: Paths) -> float | None:
    """The first finite number (not a bool, not a string) at one of *paths* in *payload*."""
    for path in paths:
        value = value_at(payload, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def add_status_run(runs: list[list[Any]], status: str, at: float) -> None:
    """Add one status sample to *runs* (``[status, first, last]``, equal neighbours merged)."""
    if runs and runs[-1][0] == status:
        runs[-1][2] = at
    elif len(runs) < MAX_STATUS_RUNS:
        runs.append([status, at, at])


def add_poll(history: list[PollRecord], record: PollRecord) -> PollRecord:
    """Add one poll to *history*, folding equal runs and the oldest past the bound; return the kept record."""
    if len(history) >= 2 and history[-1].payload == record.payload == history[-2].payload:
        record = history[-1] = replace(record, polls=history[-1].polls + 1)
        return record
    history.append(record)
    if len(history) > MAX_POLL_RECORDS:
        folded = history.pop(1)
        history[1] = replace(history[1], polls=history[1].polls + folded.polls)
    return history[-1]


def polls_in(history: Iterable[object]) -> int:
    """How many polls *history* stands for (a record without a count is one poll)."""
    return sum(getattr(record, "polls", 1) for record in history)


def job_status(payload: Mapping[str, Any]) -> str:
    """The job's status, lower-cased and stripped: ``status`` first, then ``state``; ``""`` if none."""
    for key in ("status", "state"):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip().lower()
    return ""


def outcome_of(status: str) -> str | None:
    """Canonical outcome for a terminal status (``succeeded``/``failed``/``cancelled``), else None."""
    status = status.strip().lower()
    return next((outcome for outcome, spellings in _OUTCOMES.items() if status in spellings), None)


def is_terminal(status: str) -> bool:
    return status.strip().lower() in TERMINAL_STATUSES


def extract_final_reward(payload: Mapping[str, Any]) -> float | None:
    """The job's final reward as a float, from the first of the known places that holds a number."""
    for path in _FINAL_REWARD_PATHS:
        value = value_at(payload, path)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                continue
    return None


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, Mapping):
        texts = (value.get(k) for k in ("message", "detail", "error"))
        return next((t for t in texts if isinstance(t, str) and t), None) or str(value)
    return value if isinstance(value, str) else str(value)


def extract_error(payload: Mapping[str, Any], status: str | None = None) -> str | None:
    """``error``, ``error_message``, else ``message`` for a job that failed (finished ones say "done")."""
    for key in ("error", "error_message"):
        text = _text(payload.get(key))
        if text:
            return text
    status = job_status(payload) if status is None else status
    return _text(payload.get("message")) if outcome_of(status) in ("failed", "cancelled") else None


@dataclass(frozen=True)
class PollRecord:
    """One status poll (``at`` epoch s, ``elapsed`` since polling began); ``polls``: equal answers folded."""

    at: float
    elapsed: float
    status: str
    payload: dict[str, Any]
    polls: int = 1


@dataclass(frozen=True)
class EventPage:
    """One page of job events and the cursor to pass as ``since_seq`` for the next page."""

    events: list[dict[str, Any]]
    next_seq: int

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    @property
    def types(self) -> list[str]:
        return [str(e.get("type", "")) for e in self.events]


@dataclass(frozen=True, eq=False)
class JobResult(Mapping[str, Any]):
    """A job that reached a terminal status: a mapping over its last status payload, like the
    upstream SDK's return value, with typed fields."""

    job_id: str
    status: str
    final_reward: float | None
    results: dict[str, Any]
    error: str | None
    raw: dict[str, Any]
    history: list[PollRecord] = field(default_factory=list)
    elapsed: float = 0.0

    @classmethod
    def from_payload(
        cls,
        job_id: str,
        payload: Mapping[str, Any],
        *,
        history: list[PollRecord] | None = None,
        elapsed: float = 0.0,
    ) -> JobResult:
        raw, results = dict(payload), payload.get("results")
        status = job_status(raw)
        error, reward = extract_error(raw, status), extract_final_reward(raw)
        results = dict(results) if isinstance(results, Mapping) else {}
        return cls(job_id, status, reward, results, error, raw, list(history or []), elapsed)

    @property
    def outcome(self) -> str | None:
        """``succeeded`` / ``failed`` / ``cancelled`` whatever the backend's spelling."""
        return outcome_of(self.status)

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    @property
    def cancelled(self) -> bool:
        return self.outcome == "cancelled"

    @property
    def polls(self) -> int:
        return polls_in(self.history)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def __repr__(self) -> str:
        return (
            f"JobResult(job_id={self.job_id!r}, status={self.status!r}, "
            f"final_reward={self.final_reward!r}, error={self.error!r}, polls={self.polls}, "
            f"elapsed={self.elapsed:.1f})"
        )
