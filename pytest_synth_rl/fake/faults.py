"""Deterministic fault injection, per route: which calls fail (``pattern``, ``fail_next``,
``probability`` with ``seed``, or every call) and how (``status``, ``connect_error``, ``latency``)."""

from __future__ import annotations

import dataclasses
import random
import threading
from dataclasses import dataclass, field
from typing import Literal

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, closest
from pytest_synth_rl.fake.scenario import bool_problem, int_in, number_in, written

#: Longest injected latency, in (clock) seconds: an hour. On a real clock it is slept.
MAX_LATENCY = 3600.0
#: Largest ``Retry-After`` a fault sends, in seconds: a day.
MAX_RETRY_AFTER = 86400.0
#: Longest ``pattern`` (characters).
MAX_PATTERN = 10_000
#: Most calls ``fail_next`` can fail.
MAX_FAIL_NEXT = 1_000_000_000
#: Largest ``seed`` (seeds are ints from 0 to 2**64 - 1).
MAX_SEED = 2**64 - 1

FaultKind = Literal["status", "connect", "latency"]
#: Every :data:`FaultKind`.
FAULT_KINDS: tuple[str, ...] = ("status", "connect", "latency")
#: Route names a fault can target ("*" targets every API route).
ROUTE_NAMES: tuple[str, ...] = (
    *("submit", "list", "status", "cancel", "start", "events", "events_stream", "metrics", "timeline"),
    "*",
)


@dataclass
class Fault:
    """One injected failure rule. Create it with :meth:`FakeSynthBackend.fault`."""

    route: str
    kind: FaultKind = "status"
    status: int = 503
    latency: float = 0.0
    retry_after: float | None = None
    pattern: str | None = None
    fail_next: int | None = None
    probability: float | None = None
    seed: int = 0
    cycle: bool = False
    #: How many calls this fault has seen and how many it failed.
    seen: int = 0
    injected: int = 0
    active: bool = True
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise SynthUsageError(problems)
        self._rng = random.Random(self.seed)
        if self.kind == "status" and self.status == 429 and self.retry_after is None:
            self.retry_after = 1.0

    def _problems(self) -> list[ConfigProblem]:
        """Everything wrong with this fault's fields, each named ``fault.<field>``."""
        problems: list[ConfigProblem] = []

        def bad(key: str, message: str, hint: str = "") -> None:
            problems.append(ConfigProblem(key, message, hint))

        if not isinstance(self.route, str) or self.route not in ROUTE_NAMES:
            close = closest(str(self.route), ROUTE_NAMES)
            guess = f"did you mean {close!r}? " if close else ""
            hint = f"{guess}use one of {', '.join(ROUTE_NAMES)}"
            bad("fault.route", f"unknown route {self.route!r:.60}", hint)
        if not isinstance(self.kind, str) or self.kind not in FAULT_KINDS:
            bad("fault.kind", f"unknown kind {self.kind!r:.40}", f"use one of {', '.join(FAULT_KINDS)}")
        given = {"pattern": self.pattern, "fail_next": self.fail_next, "probability": self.probability}
        selectors = [name for name, value in given.items() if value is not None]
        if len(selectors) > 1:
            bad("fault", f"choose one of pattern/fail_next/probability, got {selectors}")
        pattern = self.pattern
        text = pattern if isinstance(pattern, str) else ""
        if pattern is not None and (not 0 < len(text) <= MAX_PATTERN or set(text) - {"0", "1"}):
            message = f"must be a string of 1 to {MAX_PATTERN} characters 0/1, got {pattern!r:.40}"
            bad("fault.pattern", message, "e.g. '0110'")
        if self.fail_next is not None and not int_in(self.fail_next, 1, MAX_FAIL_NEXT):
            message = f"must be an int from 1 to {MAX_FAIL_NEXT}, got {written(self.fail_next)}"
            bad("fault.fail_next", message, "e.g. fail_next=2")
        if self.probability is not None and not number_in(self.probability, 0.0, 1.0):
            bad("fault.probability", f"must be in [0, 1], got {self.probability!r:.40}")
        if not int_in(self.status, 400, 599):
            message = f"must be an HTTP error status 400-599 (an int), got {written(self.status)}"
            bad("fault.status", message, "e.g. status=503")
        low = "(0" if self.kind == "latency" else "[0"  # a latency fault needs some latency
        if not number_in(self.latency, 0.0, MAX_LATENCY) or (self.kind == "latency" and self.latency <= 0):
            message = (
                f"must be a finite number of seconds in {low}, {MAX_LATENCY:g}], got {self.latency!r:.40}"
            )
            bad("fault.latency", message, "e.g. latency=30")
        if self.retry_after is not None and not number_in(self.retry_after, 0.0, MAX_RETRY_AFTER):
            message = f"must be a finite number of seconds from 0 to {MAX_RETRY_AFTER:g}"
            bad("fault.retry_after", f"{message}, got {self.retry_after!r:.40}")
        if not int_in(self.seed, 0, MAX_SEED):
            bad("fault.seed", f"must be an int from 0 to 2**64 - 1, got {written(self.seed)}", "e.g. seed=7")
        cycle = bool_problem(self.cycle, "fault.cycle", "cycle=True")
        return [*problems, cycle] if cycle is not None else problems

    def matches(self, route: str | None) -> bool:
        return self.active and route is not None and (self.route == "*" or self.route == route)

    def should_fail(self) -> bool:
        """Consume one matching call; True if this call is to fail."""
        with self._lock:
            index, self.seen = self.seen, self.seen + 1
            pattern, fail_next, probability = self.pattern, self.fail_next, self.probability
            if (pattern is not None and index >= len(pattern) and not self.cycle) or (
                fail_next is not None and self.injected >= fail_next
            ):
                self.active = False
                return False
            if pattern is not None:
                fail = pattern[index % len(pattern)] == "1"
            else:
                fail = fail_next is not None or probability is None or self._rng.random() < probability
            self.injected += fail
            return fail

    def remove(self) -> None:
        """Stop injecting this fault."""
        self.active = False

    def describe(self) -> str:
        how = {"status": f"HTTP {self.status}", "connect": "connection error"}
        return f"{how.get(self.kind, f'{self.latency:g}s latency')} on route {self.route!r}"

    def to_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}


def make_fault(
    route: str = "*",
    *,
    status: int | None = None,
    connect_error: bool = False,
    latency: float | None = None,
    retry_after: float | None = None,
    pattern: str | None = None,
    fail_next: int | None = None,
    probability: float | None = None,
    seed: int = 0,
    cycle: bool = False,
) -> Fault:
    """A :class:`Fault` from the keyword form the API takes; all problems (its own, the fault's) at once."""
    flag = bool_problem(connect_error, "fault.connect_error", "connect_error=True")
    problems = [] if flag is None else [flag]
    connect_error = connect_error is True
    given = {"status": status is not None, "connect": connect_error, "latency": latency is not None}
    kinds = [kind for kind, on in given.items() if on]
    if len(kinds) > 1:
        message = f"choose one fault kind, got {' and '.join(kinds)}"
        problems.append(ConfigProblem("fault", message, "status=, connect_error=True or latency="))
    kind: FaultKind = "connect" if connect_error else "latency" if latency is not None else "status"
    status, latency = 503 if status is None else status, 0.0 if latency is None else latency
    try:
        fault = Fault(route, kind, status, latency, retry_after, pattern, fail_next, probability, seed, cycle)
    except SynthUsageError as exc:
        problems.extend(exc.problems)
    if problems:
        raise SynthUsageError(problems)
    return fault
