"""Checks of the arguments of job expectations (``to_succeed(within=...)`` and the rest).

A mistake there is the test author's: a :class:`~pytest_synth_rl.errors.SynthUsageError` naming
the call as written, raised before anything is polled.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

from pytest_synth_rl.errors import (
    ConfigProblem,
    SynthUsageError,
    a_type,
    closest,
    finite_number,
    keywords_checked,
)

T = TypeVar("T")
P = ParamSpec("P")

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
