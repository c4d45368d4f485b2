"""Checks of the arguments of job expectations (``to_succeed(within=...)`` and the rest).

A mistake in an expectation's arguments is the test author's, not the job's: it is reported as a
:class:`~pytest_synth_rl.errors.SynthUsageError` naming the call as written, before anything is
polled, never as a ``TypeError`` from deep inside a comparison or as an expectation that silently
checks nothing.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import ParamSpec, TypeVar

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, a_type, unknown_argument

__all__ = [
    "bounds_problems",
    "checked_call",
    "event_types_problems",
    "given_settings",
    "number_problem",
    "raise_problems",
    "setting_problem",
    "shown",
    "status_problem",
    "text_problem",
    "window_problem",
    "within_problem",
]

T = TypeVar("T")
P = ParamSpec("P")

_USAGE_SUBJECT = "expectation arguments"
_SHOWN_CHARS = 60
#: Statuses a job is known to pass through; a near miss of one (``"suceeded"``) is a typo that
#: would otherwise wait out the whole timeout.
_KNOWN_PROGRESS_STATUSES = ("queued", "pending", "running")


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _written(method: str, name: str, value: object) -> str:
    """The call as the user wrote it: ``to_succeed(within=inf)``."""
    return f"{method}({name}={shown(value)})"


def _got(method: str, name: str, value: object) -> str:
    """``to_have_final_reward(at_least='0.5'), a str``: the type when the repr alone could hide it."""
    written = _written(method, name, value)
    if isinstance(value, (str, bool)) or not isinstance(value, numbers.Real):
        return f"{written}, {a_type(value)}"
    return written


def _is_number(value: object) -> bool:
    """A real number that is not a bool (``True`` is an int to Python, never a bound to a user)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number_problem(
    method: str, name: str, value: object, *, positive: bool, expected: str, hint: str
) -> ConfigProblem | None:
    """The problem with *value* as a finite number (``> 0`` when *positive*), or None."""
    if _is_number(value):
        number = float(value)  # type: ignore[arg-type]  # _is_number: a numbers.Real
        if math.isfinite(number) and (number > 0 or not positive):
            return None
        got = _written(method, name, value)
    else:
        got = _got(method, name, value)
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                pass
            else:
                hint = f"write the number without quotes: {method}({name}={value.strip()}); {hint}"
    return ConfigProblem(key=f"{method}.{name}", message=f"got {got}; expected {expected}", hint=hint)


def within_problem(method: str, within: object) -> ConfigProblem | None:
    if within is None:
        return None
    return number_problem(
        method,
        "within",
        within,
        positive=True,
        expected="a finite number of seconds > 0 (measured on the job's clock)",
        hint=f"e.g. {method}(within=7200) waits up to two hours; leave within out to use the "
        "test's timeout (--synth-timeout)",
    )


def text_problem(
    method: str, name: str, value: object, *, expected: str, example: str
) -> ConfigProblem | None:
    """The problem with *value* as non-blank text, or None."""
    if isinstance(value, str) and value.strip():
        return None
    got = _written(method, name, value)
    if not isinstance(value, str):
        got += f", {a_type(value)}"
    hint = f"e.g. {method}({name}={example!r})"
    if _is_number(value):
        hint = f"write it as text: {method}({name}={str(value)!r})"
    return ConfigProblem(key=f"{method}.{name}", message=f"got {got}; expected {expected}", hint=hint)


def raise_problems(problems: Sequence[ConfigProblem | None]) -> None:
    found = [p for p in problems if p is not None]
    if found:
        raise SynthUsageError(found, subject=_USAGE_SUBJECT)


def _usage(signature: inspect.Signature, method: str) -> str:
    """``to_have_final_reward(*, at_least=None, at_most=None)``: the signature as a user reads it."""
    params = [
        p.replace(annotation=inspect.Parameter.empty)
        for p in signature.parameters.values()
        if p.name != "self"
    ]
    return f"{method}{signature.replace(parameters=params, return_annotation=inspect.Signature.empty)}"


def _call_problems(
    signature: inspect.Signature, method: str, args: Sequence[object], kwargs: Mapping[str, object]
) -> list[ConfigProblem]:
    """What is wrong with calling *method* with *args* and *kwargs* (``self`` not included)."""
    from pytest_synth_rl.config.known_keys import (
        near_miss,
    )  # local: only a wrong call pays for the config package

    params = [p for p in signature.parameters.values() if p.name != "self"]
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_keyword = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    usage = _usage(signature, method)
    problems: list[ConfigProblem] = []
    if len(args) > len(positional):
        extra = ", ".join(shown(a) for a in args[len(positional) :])
        keyword_only = [name for name in by_keyword if name not in positional]
        example = f"; e.g. {method}({keyword_only[0]}=...)" if keyword_only else ""
        problems.append(
            ConfigProblem(
                key=method,
                message=f"{method}() takes {len(positional)} positional argument(s), got "
                f"{len(args)}: the extra {extra} has no parameter",
                hint=f"pass the others by keyword{example}; it takes {usage}",
            )
        )
    given = set(positional[: len(args)])
    for name, value in kwargs.items():
        if name not in by_keyword:
            problems.append(
                unknown_argument(method, name, near_miss(name, by_keyword), f"it takes {usage}", shown(value))
            )
        elif name in given:
            problems.append(
                ConfigProblem(
                    key=f"{method}.{name}",
                    message=f"{name} was given twice, by position and as {name}=",
                    hint=f"give it once; it takes {usage}",
                )
            )
        given.add(name)
    for param in params:
        if param.default is inspect.Parameter.empty and param.name not in given:
            problems.append(
                ConfigProblem(
                    key=f"{method}.{param.name}",
                    message=f"{method}() is missing its argument {param.name}",
                    hint=f"it takes {usage}",
                )
            )
    return problems


def checked_call(method: Callable[P, T]) -> Callable[P, T]:
    """Turn a wrongly written call of an expectation (unknown or misspelled keyword, stray
    positional argument, missing argument) into a :class:`SynthUsageError` with a "did you mean",
    instead of Python's ``TypeError``."""
    signature = inspect.signature(method)
    name = method.__name__

    @functools.wraps(method)
    def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        __tracebackhide__ = True
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            problems = _call_problems(signature, name, args[1:], kwargs)
            if not problems:  # a failure the diagnosis does not know: Python's words, our type
                problems = [
                    ConfigProblem(key=name, message=f"cannot call {_usage(signature, name)} this way")
                ]
            raise SynthUsageError(problems, subject=_USAGE_SUBJECT) from None
        target = args[0]
        if isinstance(getattr(target, "checks_made", None), int):
            target.checks_made += 1  # type: ignore[attr-defined]
        return method(*args, **kwargs)

    return checked


def given_settings(interval: object, timeout: object) -> list[tuple[str, object]]:
    return [
        (name, value) for name, value in (("interval", interval), ("timeout", timeout)) if value is not None
    ]


def setting_problem(method: str, name: str, value: object) -> ConfigProblem | None:
    what = "between two polls" if name == "interval" else "to wait for the job"
    example = "interval=10" if name == "interval" else "timeout=7200"
    return number_problem(
        method,
        name,
        value,
        positive=True,
        expected=f"a finite number of seconds > 0 {what} (on the job's clock)",
        hint=f"e.g. {method}(job, {example}); leave it out for the job's default",
    )


def status_problem(status: object) -> ConfigProblem | None:
    from pytest_synth_rl.client.results import TERMINAL_STATUSES  # local: the client package is heavier
    from pytest_synth_rl.config.known_keys import near_miss

    known = sorted({*_KNOWN_PROGRESS_STATUSES, *TERMINAL_STATUSES})
    problem = text_problem(
        "to_reach_status", "status", status, expected="a job status such as 'running'", example="running"
    )
    if problem is not None or not isinstance(status, str):
        return problem
    wanted = status.strip().lower()
    guess = None if wanted in known else near_miss(wanted, known)
    if guess is None:
        return None  # a status this plugin does not know may still be the backend's own
    return ConfigProblem(
        key="to_reach_status.status",
        message=f"got {_written('to_reach_status', 'status', status)}, a near miss of the known "
        f"status {guess!r}: the job would never reach it, and the wait would last its whole timeout",
        hint=f"did you mean to_reach_status({guess!r})? known statuses: {', '.join(known)}",
    )


def bounds_problems(at_least: object, at_most: object) -> list[ConfigProblem | None]:
    method = "to_have_final_reward"
    hint = "e.g. to_have_final_reward(at_least=0.6) or to_have_final_reward(at_least=0.2, at_most=0.9)"
    if at_least is None and at_most is None:
        return [
            ConfigProblem(
                key=method,
                message=f"got {method}() with no bound: it would check nothing",
                hint=f"pass at_least=, at_most= or both, {hint}",
            )
        ]
    expected = "a finite number (the reward bound, inclusive)"
    problems = [
        None
        if value is None
        else number_problem(method, name, value, positive=False, expected=expected, hint=hint)
        for name, value in (("at_least", at_least), ("at_most", at_most))
    ]
    if not any(problems) and at_least is not None and at_most is not None:
        low, high = float(at_least), float(at_most)  # type: ignore[arg-type]  # both checked numbers
        if low > high:
            problems.append(
                ConfigProblem(
                    key=method,
                    message=f"got {method}(at_least={shown(at_least)}, at_most={shown(at_most)}): "
                    f"no reward is both >= {shown(at_least)} and <= {shown(at_most)}",
                    hint=f"swap them: {method}(at_least={shown(at_most)}, at_most={shown(at_least)})",
                )
            )
    return problems


def window_problem(window: object) -> ConfigProblem | None:
    if isinstance(window, numbers.Integral) and not isinstance(window, bool) and int(window) >= 0:
        return None
    got = _written("to_improve_reward", "window", window) if _is_number(window) else None
    return ConfigProblem(
        key="to_improve_reward.window",
        message=f"got {got or _got('to_improve_reward', 'window', window)}; expected a whole number "
        "of reward points >= 0 to average at each end of the curve",
        hint="e.g. to_improve_reward(by=0.2, window=3)",
    )


def event_types_problems(types: object) -> list[ConfigProblem | None]:
    method = "to_emit_events"
    hint = "e.g. to_emit_events(['rl.train.started', 'rl.train.completed'])"
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence):
        wrap = f"; for one type write to_emit_events([{types!r}])" if isinstance(types, str) else ""
        return [
            ConfigProblem(
                key=f"{method}.types",
                message=f"got {_got(method, 'types', types)}; expected a list of event type names",
                hint=f"{hint}{wrap}",
            )
        ]
    return [
        None
        if isinstance(item, str) and item
        else ConfigProblem(
            key=f"{method}.types",
            message=f"got {_written(method, 'types', types)}: item {index} is {shown(item)}, "
            f"{a_type(item)}; expected non-empty event type names",
            hint=hint,
        )
        for index, item in enumerate(types)
    ]
