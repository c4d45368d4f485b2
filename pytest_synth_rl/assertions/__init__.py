"""Polling assertions on the test's clock: ``eventually`` and ``expect_job(job).to_succeed()...``;
a failure carries the job's history (statuses, last events, reward curve)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pytest_synth_rl.client.results import polls_in
from pytest_synth_rl.clock import Clock, RealClock
from pytest_synth_rl.errors import (
    ConfigProblem,
    JobTimeoutError,
    SynthUsageError,
    a_type,
    closest,
    finite_number,
    keywords_checked,
    seconds_problem,
)
from pytest_synth_rl.reporting.render import format_duration, reward_curve_line, status_timeline
from pytest_synth_rl.secrets.masking import redact

if TYPE_CHECKING:
    from pytest_synth_rl.client import RLJob
    from pytest_synth_rl.client.results import JobResult

__all__ = [
    "EventuallyTimeout",
    "JobExpectation",
    "JobHistory",
    "collect_job_history",
    "eventually",
    "expect_job",
    "job_rewards",
    "reward_curve",
]

T = TypeVar("T")
P = ParamSpec("P")

_LAST_EVENTS = 8
_EVENT_PAGE = 200
_REWARD_METRIC_NAMES = ("train.reward", "reward", "train.mean_reward")
_SUBJECT = "expectation arguments"
#: Statuses a job passes through (contract §1.3); a near miss of one would wait out the timeout.
_PROGRESS_STATUSES = ("queued", "pending", "running", "validating", "processing")


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _written(method: str, name: str, value: object) -> str:
    return f"{method}({name}={shown(value)})"


def _got(method: str, name: str, value: object) -> str:
    written = _written(method, name, value)
    return written if _is_number(value) else f"{written}, {a_type(value)}"


def raise_problems(problems: Sequence[ConfigProblem | None]) -> None:
    __tracebackhide__ = True
    found = [p for p in problems if p is not None]
    if found:
        raise SynthUsageError(found, subject=_SUBJECT)


def number_problem(
    method: str, name: str, value: object, *, positive: bool, expected: str, hint: str
) -> ConfigProblem | None:
    number = finite_number(value)
    if number is not None and (number > 0 or not positive):
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            float(value)
            hint = f"write the number without quotes: {method}({name}={value.strip()}); {hint}"
    return ConfigProblem(f"{method}.{name}", f"got {_got(method, name, value)}; expected {expected}", hint)


def _seconds(method: str, name: str, value: object, what: str, hint: str) -> ConfigProblem | None:
    if value is None:
        return None
    expected = f"a finite number of seconds > 0 {what}"
    return number_problem(method, name, value, positive=True, expected=expected, hint=hint)


def within_problem(method: str, within: object) -> ConfigProblem | None:
    hint = f"e.g. {method}(within=7200) waits up to two hours; leave within out to use the test's timeout"
    return _seconds(method, "within", within, "(measured on the job's clock)", hint + " (--synth-timeout)")


def settings_problems(method: str, interval: object, timeout: object) -> list[ConfigProblem | None]:
    problems = []
    for name, value, what, example in (
        ("interval", interval, "between two polls", 10),
        ("timeout", timeout, "to wait for the job", 7200),
    ):
        hint = f"e.g. {method}(job, {name}={example}); leave it out for the job's default"
        problems.append(_seconds(method, name, value, f"{what} (on the job's clock)", hint))
    return problems


def text_problem(
    method: str, name: str, value: object, *, expected: str, example: str
) -> ConfigProblem | None:
    if isinstance(value, str) and value.strip():
        return None
    got = _written(method, name, value) + ("" if isinstance(value, str) else f", {a_type(value)}")
    hint = f"write it as text: {method}({name}={str(value)!r})" if _is_number(value) else None
    return ConfigProblem(
        f"{method}.{name}", f"got {got}; expected {expected}", hint or f"e.g. {method}({name}={example!r})"
    )


def status_problem(status: object) -> ConfigProblem | None:
    from pytest_synth_rl.client.results import TERMINAL_STATUSES  # local: the client is heavier

    known = sorted({*_PROGRESS_STATUSES, *TERMINAL_STATUSES})
    problem = text_problem(
        "to_reach_status", "status", status, expected="a job status such as 'running'", example="running"
    )
    if problem is not None or not isinstance(status, str):
        return problem
    wanted = status.strip().lower()
    guess = None if wanted in known else closest(wanted, known)
    if guess is None:
        return None  # not a known status, nor a slip of one: it may be the backend's own
    return ConfigProblem(
        "to_reach_status.status",
        f"got {_written('to_reach_status', 'status', status)}, a near miss of the known status {guess!r}: "
        "the job would never reach it, and the wait would last its whole timeout",
        f"did you mean to_reach_status({guess!r})? known statuses: {', '.join(known)}",
    )


def bounds_problems(at_least: object, at_most: object) -> list[ConfigProblem | None]:
    method = "to_have_final_reward"
    hint = "e.g. to_have_final_reward(at_least=0.6) or to_have_final_reward(at_least=0.2, at_most=0.9)"
    if at_least is None and at_most is None:
        message = f"got {method}() with no bound: it would check nothing"
        return [ConfigProblem(method, message, f"pass at_least=, at_most= or both, {hint}")]
    expected = "a finite number (the reward bound, inclusive)"
    problems = [
        None
        if value is None
        else number_problem(method, name, value, positive=False, expected=expected, hint=hint)
        for name, value in (("at_least", at_least), ("at_most", at_most))
    ]
    low, high = finite_number(at_least), finite_number(at_most)
    if not any(problems) and low is not None and high is not None and low > high:
        low_text, high_text = shown(at_least), shown(at_most)
        problems.append(
            ConfigProblem(
                method,
                f"got {method}(at_least={low_text}, at_most={high_text}): "
                f"no reward is both >= {low_text} and <= {high_text}",
                f"swap them: {method}(at_least={high_text}, at_most={low_text})",
            )
        )
    return problems


def window_problem(window: object) -> ConfigProblem | None:
    if isinstance(window, numbers.Integral) and not isinstance(window, bool) and int(window) >= 0:
        return None
    return ConfigProblem(
        "to_improve_reward.window",
        f"got {_got('to_improve_reward', 'window', window)}; expected a whole number "
        "of reward points >= 0 to average at each end of the curve",
        "e.g. to_improve_reward(by=0.2, window=3)",
    )


def event_types_problems(types: object) -> list[ConfigProblem | None]:
    method = "to_emit_events"
    hint = "e.g. to_emit_events(['rl.train.started', 'rl.train.completed'])"
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence):
        wrap = f"; for one type write to_emit_events([{types!r}])" if isinstance(types, str) else ""
        message = f"got {_got(method, 'types', types)}; expected a list of event type names"
        return [ConfigProblem(f"{method}.types", message, f"{hint}{wrap}")]
    return [
        ConfigProblem(
            f"{method}.types",
            f"got {_written(method, 'types', types)}: item {index} is {shown(item)}, "
            f"{a_type(item)}; expected non-empty event type names",
            hint,
        )
        for index, item in enumerate(types)
        if not (isinstance(item, str) and item)
    ]


def checked_call(method: Callable[P, T]) -> Callable[P, T]:
    """A wrong call is a :class:`SynthUsageError` with a "did you mean"; any call counts a check."""
    checked = keywords_checked(method, call=method.__name__, subject=_SUBJECT)

    @functools.wraps(method)
    def counted(*args: P.args, **kwargs: P.kwargs) -> T:
        __tracebackhide__ = True
        args[0].checks_made += 1  # type: ignore[attr-defined]
        return checked(*args, **kwargs)

    return counted


class EventuallyTimeout(AssertionError):
    """``eventually`` ran out of time; the message lists what each attempt saw."""


def eventually(
    check: Callable[[], T],
    *,
    timeout: float,
    interval: float = 1.0,
    clock: Clock | None = None,
    description: str | None = None,
) -> T:
    """Call *check* until it returns a truthy value (returned) without ``AssertionError``, sleeping
    *interval* on *clock* between attempts, the last at the deadline; other errors propagate."""
    __tracebackhide__ = True
    hint = "e.g. eventually(check, timeout=30, interval=1)"
    checks = (("timeout", seconds_problem(timeout, allow_zero=True)), ("interval", seconds_problem(interval)))
    problems = [ConfigProblem(f"eventually.{name}", problem, hint) for name, problem in checks if problem]
    if problems:
        raise SynthUsageError(problems)
    clock = clock or RealClock()
    start = clock.now()
    attempts: list[tuple[float, str]] = []
    while True:
        elapsed = clock.now() - start
        try:
            value = check()
        except AssertionError as exc:
            attempts.append((elapsed, f"AssertionError: {exc}".splitlines()[0]))
        else:
            if value:
                return value
            attempts.append((elapsed, f"returned {value!r}"))
        remaining = timeout - (clock.now() - start)
        if remaining <= 0:
            break
        clock.sleep(min(interval, remaining))
    what = description or getattr(check, "__name__", "check")
    lines = [f"  t={format_duration(t)}: {outcome}" for t, outcome in attempts[-5:]]
    if len(attempts) > 5:
        lines.insert(0, f"  … {len(attempts) - 5} earlier attempts")
    raise EventuallyTimeout(
        redact(
            f"{what} did not pass within {format_duration(timeout)} ({len(attempts)} attempts, "
            f"every {format_duration(interval)}):\n" + "\n".join(lines)
        )
    )


@dataclass
class JobHistory:
    """What a job went through, as far as the client saw it."""

    job_id: str | None
    #: ``(elapsed, status, polls)``: each poll record kept, and how many polls it stands for.
    statuses: list[tuple[float, str, int]] = field(default_factory=list)
    events: list[Mapping[str, Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    final_status: str | None = None
    final_reward: float | None = None
    error: str | None = None

    def render(self) -> str:
        lines = [f"job {self.job_id or '<not submitted>'}: status {self.final_status or '?'}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        lines.append(f"  statuses: {status_timeline(self.statuses)}")
        lines.append(f"  reward curve: {reward_curve_line(self.rewards)}")
        if self.final_reward is not None:
            lines.append(f"  final reward: {self.final_reward:.4f}")
        if self.events:
            lines.append(f"  last {min(len(self.events), _LAST_EVENTS)} of {len(self.events)} events:")
            for event in self.events[-_LAST_EVENTS:]:
                message = str(event.get("message") or "")
                lines.append(f"    #{event.get('seq', '?')} {event.get('type', '?')} {message}".rstrip())
        else:
            lines.append("  events: (none)")
        return "\n".join(lines)


def _safe(fetch: Callable[[], T], default: T) -> T:
    """A fetch for a failure message's context: its own failure must not hide the first."""
    try:
        return fetch()
    except Exception:
        return default


def _all_events(job: RLJob) -> list[Mapping[str, Any]]:
    events: list[Mapping[str, Any]] = []
    since = 0
    for _ in range(50):  # bounded, against a cursor that never advances
        page = job.events(since_seq=since, limit=_EVENT_PAGE)
        batch = list(getattr(page, "events", None) or [])
        events.extend(batch)
        next_seq = getattr(page, "next_seq", None)
        cursor = next_seq if isinstance(next_seq, int) else batch[-1].get("seq") if batch else None
        if len(batch) < _EVENT_PAGE or not isinstance(cursor, int) or cursor <= since:
            break
        since = cursor
    return events


def job_rewards(job: RLJob) -> list[float]:
    """The job's reward curve: metric points, else (longer to fetch) the event log."""
    rewards = reward_curve(job.metrics(after_step=-1, limit=10_000))
    return rewards or reward_curve(events=_all_events(job))


def reward_curve(
    metrics: Sequence[Mapping[str, Any]] = (), events: Sequence[Mapping[str, Any]] = ()
) -> list[float]:
    """The job's reward per training step: ``train.reward`` metric points, else step events."""
    for name in _REWARD_METRIC_NAMES:
        points = [p for p in metrics if p.get("name") == name and isinstance(p.get("value"), (int, float))]
        if points:
            points.sort(key=lambda p: p.get("step", 0))
            return [float(p["value"]) for p in points]
    rewards = []
    for event in events:
        data = event.get("data") or {}
        if str(event.get("type", "")).endswith("train.step") and isinstance(data.get("reward"), (int, float)):
            rewards.append(float(data["reward"]))
    return rewards


def collect_job_history(job: RLJob, result: Any = None, polls: Sequence[Any] = ()) -> JobHistory:
    """A job's history from a poll result (if any), events and metrics; *polls*: a timed-out wait's."""
    history = JobHistory(job_id=job.job_id)
    records = [*polls, *((getattr(result, "history", None) or []) if result is not None else [])]
    history.statuses = [(float(r.elapsed), str(r.status), getattr(r, "polls", 1)) for r in records]
    if result is not None:
        history.final_status = getattr(result, "status", None)
        history.final_reward = getattr(result, "final_reward", None)
        history.error = getattr(result, "error", None)
    elif job.job_id:
        status: dict[str, Any] = _safe(job.get_status, {})
        history.final_status = str(status.get("status") or status.get("state") or "?")
        history.error = status.get("error") if isinstance(status.get("error"), str) else None
    if job.job_id:
        history.events = _safe(lambda: _all_events(job), [])
        metrics: list[dict[str, Any]] = _safe(lambda: job.metrics(after_step=-1, limit=10_000), [])
        history.rewards = reward_curve(metrics, history.events)
    return history


class JobExpectation:
    """Chained expectations about one job; wrong arguments are a ``SynthUsageError`` before any poll."""

    def __init__(
        self,
        job: RLJob,
        *,
        clock: Clock | None = None,
        interval: float | None = None,
        timeout: float | None = None,
    ) -> None:
        raise_problems(settings_problems("JobExpectation", interval, timeout))
        self.job = job
        self.clock = clock or getattr(job, "clock", None) or RealClock()
        self.interval = interval
        self.timeout = timeout
        #: The finished job's result once an expectation waited (what ``synth_baseline`` also takes).
        self.result: JobResult | None = None
        self.checks_made = 0  # 0 at the end of a test: it checked nothing

    def _fail(self, summary: str, polls: Sequence[Any] = ()) -> AssertionError:
        history = collect_job_history(self.job, self.result, polls)
        # Redacted: the backend's own words may echo a key back into CI logs.
        return AssertionError(redact(f"{summary}\n{history.render()}"))

    def _wait(self, within: float | None) -> None:
        given = {"timeout": within if within is not None else self.timeout, "interval": self.interval}
        kwargs: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
        try:
            self.result = self.job.poll_until_complete(**kwargs)
        except JobTimeoutError as exc:
            limit = exc.timeout if exc.timeout is not None else within
            raise self._fail(
                f"expected job {self.job.job_id} to finish within {format_duration(limit)}, "
                f"but it was still {exc.last_status!r} after {polls_in(exc.history)} polls",
                exc.history,
            ) from None

    def _end(
        self, method: str, within: float | None, flag: str, verb: str, *more: ConfigProblem | None
    ) -> JobExpectation:
        __tracebackhide__ = True
        raise_problems([within_problem(method, within), *more])
        self._wait(within)
        if flag and not getattr(self.result, flag, False):
            ended = getattr(self.result, "status", "?")
            raise self._fail(f"expected job {self.job.job_id} to {verb}, but it ended {ended!r}")
        return self

    @checked_call
    def to_finish(self, within: float | None = None) -> JobExpectation:
        """The job reaches any terminal status within *within* seconds (on the job's clock)."""
        __tracebackhide__ = True
        return self._end("to_finish", within, "", "")

    @checked_call
    def to_succeed(self, within: float | None = None) -> JobExpectation:
        """The job reaches ``succeeded`` (or ``completed``) within *within* seconds."""
        __tracebackhide__ = True
        return self._end("to_succeed", within, "succeeded", "succeed")

    @checked_call
    def to_fail(self, within: float | None = None, *, error_contains: str | None = None) -> JobExpectation:
        """The job ends ``failed`` (or ``error``), its error containing *error_contains* if given."""
        __tracebackhide__ = True
        expected, example = "non-blank text the job's error must contain", "CUDA out of memory"
        text = text_problem("to_fail", "error_contains", error_contains, expected=expected, example=example)
        self._end("to_fail", within, "failed", "fail", None if error_contains is None else text)
        error = getattr(self.result, "error", None) or ""
        if error_contains is not None and error_contains not in error:
            raise self._fail(f"expected the job's error to contain {error_contains!r}, got {error!r}")
        return self

    @checked_call
    def to_be_cancelled(self, within: float | None = None) -> JobExpectation:
        """The job ends ``cancelled`` (any spelling)."""
        __tracebackhide__ = True
        return self._end("to_be_cancelled", within, "cancelled", "be cancelled")

    @checked_call
    def to_reach_status(self, status: str, within: float | None = None) -> JobExpectation:
        """The job's status becomes *status* (case-insensitive) within *within* seconds."""
        __tracebackhide__ = True
        raise_problems([status_problem(status), within_problem("to_reach_status", within)])
        wanted = status.strip().lower()
        seen: list[tuple[float, str, int]] = []
        start = self.clock.now()

        def check() -> bool:
            payload = self.job.get_status()
            current = str(payload.get("status") or payload.get("state") or "").lower()
            seen.append((self.clock.now() - start, current, 1))
            return current == wanted

        limit = within if within is not None else (self.timeout if self.timeout is not None else 7200.0)
        try:
            eventually(check, timeout=limit, interval=self.interval or 10.0, clock=self.clock)
        except EventuallyTimeout:
            raise self._fail(
                f"expected job {self.job.job_id} to reach status {status!r} within {format_duration(limit)}; "
                f"saw {status_timeline(seen)}"
            ) from None
        return self

    @checked_call
    def to_have_final_reward(
        self, *, at_least: float | None = None, at_most: float | None = None
    ) -> JobExpectation:
        """The finished job's final reward lies within the given bounds (at least one is needed)."""
        __tracebackhide__ = True
        raise_problems(bounds_problems(at_least, at_most))
        if self.result is None:
            self._wait(None)
        reward = getattr(self.result, "final_reward", None)
        if reward is None:
            raise self._fail(f"expected job {self.job.job_id} to report a final reward, but it has none")
        if at_least is not None and reward < at_least:
            raise self._fail(f"expected final reward >= {at_least}, got {reward:.4f}")
        if at_most is not None and reward > at_most:
            raise self._fail(f"expected final reward <= {at_most}, got {reward:.4f}")
        return self

    @checked_call
    def to_improve_reward(self, *, by: float = 0.0, window: int = 1) -> JobExpectation:
        """The reward curve rose by at least *by*; ``window=k`` compares means of the first and last *k*."""
        __tracebackhide__ = True
        expected = "a finite number: the least rise from the start of the reward curve to its end"
        hint = "e.g. to_improve_reward(by=0.2); a negative by tolerates a drop that small"
        by_problem = number_problem(
            "to_improve_reward", "by", by, positive=False, expected=expected, hint=hint
        )
        raise_problems([by_problem, window_problem(window)])
        if self.result is None:
            self._wait(None)
        rewards = collect_job_history(self.job, self.result).rewards
        if len(rewards) < 2:
            raise self._fail(
                f"expected the reward to improve by {by}, but the job reported {len(rewards)} reward point(s)"
            )
        k = max(1, min(window, len(rewards) // 2))
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        if last - first < by:
            compared = (
                f"; means of the first and last {k} of {len(rewards)} points" if k > 1 or k < window else ""
            )
            compared += f", as window={window} is more than half the curve" if k < window else ""
            raise self._fail(
                f"expected the reward to improve by at least {by}, but it went {first:.4f} -> {last:.4f} "
                f"(change {last - first:+.4f}{compared})"
            )
        return self

    @checked_call
    def to_emit_events(self, types: Sequence[str]) -> JobExpectation:
        """The job's events contain *types* in this order (others may come between)."""
        __tracebackhide__ = True
        raise_problems(event_types_problems(types))
        events = _all_events(self.job) if self.job.job_id else []
        seen = [str(e.get("type")) for e in events]
        position = 0
        for wanted in types:
            try:
                position = seen.index(wanted, position) + 1
            except ValueError:
                raise self._fail(
                    f"expected events {list(types)} in order; {wanted!r} is missing after "
                    f"position {position}. Seen: {seen}"
                ) from None
        return self


def expect_job(
    job: RLJob, *, clock: Clock | None = None, interval: float | None = None, timeout: float | None = None
) -> JobExpectation:
    """Start expectations about *job* (an ``RLJob``); *interval* and *timeout* default to the job's."""
    __tracebackhide__ = True
    return start_expectation("expect_job", job, clock=clock, interval=interval, timeout=timeout)


def start_expectation(
    call: str, job: RLJob, *, clock: Clock | None, interval: float | None, timeout: float | None
) -> JobExpectation:
    """:func:`expect_job` as *call* (``synth_expect`` for the fixture), named in its errors."""
    __tracebackhide__ = True
    poll, problem = getattr(job, "poll_until_complete", None), None
    if inspect.iscoroutinefunction(poll):
        problem = ConfigProblem(
            f"{call}.job",
            f"got {call}(<AsyncRLJob>); expectations wait by blocking, so they take an RLJob",
            "await the async job's own methods (result = await job.poll_until_complete(); "
            "assert result.status == 'succeeded'), or make a blocking job with synth_rl_job()",
        )
    elif not callable(poll):
        problem = ConfigProblem(
            f"{call}.job",
            f"got {call}({shown(job)}), {a_type(job)}; expected the RLJob itself",
            "pass the job, not what it returned: job = synth_rl_job(); job.submit(); "
            "synth_expect(job).to_succeed()",
        )
    raise_problems([problem, *settings_problems(call, interval, timeout)])
    return JobExpectation(job, clock=clock, interval=interval, timeout=timeout)
