"""The exception family every part of the plugin raises (redacted, with a hint), the one argument
checker, and ``closest``/``did_you_mean``: every did-you-mean's source."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, TypeVar

from pytest_synth_rl.secrets.masking import redact, redact_value

F = TypeVar("F", bound=Callable[..., Any])


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of *choices* that *word* most likely misspells, or None."""
    import difflib  # only a wrong call pays for it

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str], shown: str = "{!r}") -> str:
    """``did you mean 'x'?`` for a near miss of *word* among *choices* (formatted by *shown*), else ``""``."""
    found = closest(word, choices)
    return f"did you mean {shown.format(found)}?" if found is not None else ""


def a_type(value: object) -> str:
    """``an int``, ``a str``: the type of a value, with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def finite_number(value: object) -> float | None:
    """*value* as a float if it is a finite real number (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def seconds_problem(value: object, *, allow_zero: bool = False) -> str | None:
    """What is wrong with *value* as a number of seconds (> 0, or >= 0 with *allow_zero*), or None."""
    number = finite_number(value) if isinstance(value, (int, float)) else None
    if number is not None and (number > 0 or (allow_zero and number == 0)):
        return None
    return f"must be a finite number of seconds {'>= 0' if allow_zero else '> 0'}, got {value!r}"


def unknown_argument(call: str, name: str, guess: str | None, usage: str) -> ConfigProblem:
    """``call(name=...)`` where *call* takes no *name*: with a "did you mean" for *guess*."""
    suggestion = f"did you mean {call}({guess}=...)? " if guess else ""
    message = f"got {call}({name}=...); {call}() has no argument {name!r}"
    return ConfigProblem(f"{call}.{name}", message, f"{suggestion}{usage}")


def keywords_checked(func: F, *, call: str | None = None, subject: str = "arguments") -> F:
    """A wrong call is a :class:`SynthUsageError` naming the call, with a "did you mean"."""

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return func(*args, **kwargs)  # a coroutine function fails here too, before it runs
        except TypeError:
            problems = _call_problems(func, call, args, kwargs)
            if not problems:
                raise
        raise SynthUsageError(problems, subject=subject)

    if not inspect.iscoroutinefunction(func):
        return checked  # type: ignore[return-value]

    @functools.wraps(func)
    async def checked_async(*args: Any, **kwargs: Any) -> Any:  # stays a coroutine function
        __tracebackhide__ = True
        return await checked(*args, **kwargs)

    return checked_async  # type: ignore[return-value]


def _call_problems(
    func: Callable[..., Any], call: str | None, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[ConfigProblem]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    kind = inspect.Parameter
    params = list(signature.parameters.values())
    if any(p.kind is kind.VAR_KEYWORD for p in params):
        return []
    owner = None
    if params and params[0].name in ("self", "cls") and args:
        owner = type(args[0]) if params[0].name == "self" else args[0]
        params, args = params[1:], args[1:]
    if call is None and isinstance(owner, type):  # as the user spelled it: the subclass, say
        call = owner.__name__ if func.__name__ == "__init__" else f"{owner.__name__}.{func.__name__}"
    call = call or func.__qualname__.removesuffix(".__init__")
    bare = [p.replace(annotation=kind.empty) for p in params]
    usage = f"it takes {call}{signature.replace(parameters=bare, return_annotation=kind.empty)}"
    positional = [p.name for p in params if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
    by_keyword = [p.name for p in params if p.kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY)]
    problems: list[ConfigProblem] = []
    if len(args) > len(positional) and not any(p.kind is kind.VAR_POSITIONAL for p in params):
        extra = ", ".join(repr(a)[:60] for a in args[len(positional) :])
        keyword_only = [name for name in by_keyword if name not in positional]
        example = f"; e.g. {call}({keyword_only[0]}=...)" if keyword_only else ""
        taken = f"{call}() takes {len(positional)} positional argument(s), got {len(args)}"
        hint = f"pass the others by keyword{example}; {usage}"
        problems.append(ConfigProblem(call, f"{taken}: the extra {extra} has no parameter", hint))
    given = set(positional[: len(args)])
    for name in kwargs:
        if name not in by_keyword:
            problems.append(unknown_argument(call, name, closest(name, by_keyword), usage))
        elif name in given:
            twice = f"{name} was given twice, by position and as {name}="
            problems.append(ConfigProblem(f"{call}.{name}", twice, f"give it once; {usage}"))
        given.add(name)
    return problems + [
        ConfigProblem(f"{call}.{p.name}", f"{call}() is missing its argument {p.name}", usage)
        for p in params
        if p.default is kind.empty and p.kind is not kind.VAR_POSITIONAL and p.name not in given
    ]


def excerpt(text: str | bytes | None, limit: int = 500) -> str:
    """A short, redacted view of a response body for messages."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = redact(text)
    return text[:limit] + f"… ({len(text) - limit} more chars)" if len(text) > limit else text


def _masked_fields(record: Any) -> None:
    for name in (f.name for f in fields(record)):
        object.__setattr__(record, name, redact_value(getattr(record, name)))


class SynthError(Exception):
    """Base of every error raised by pytest-synth-rl; ``hint`` (how to fix it) is appended. Every
    attribute is masked as it is set: users' own reporting code reads them."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint or None
        super().__init__(str(self))

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value if name.startswith("__") else redact_value(value))

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong: where (``key``, a dotted TOML path or argument), what, how to fix."""

    key: str
    message: str
    hint: str | None = None
    line: int | None = None
    column: int | None = None

    def __post_init__(self) -> None:
        _masked_fields(self)

    def render(self) -> str:
        where = self.key or "<config>"
        if self.line is not None:
            at = f"line {self.line}, column {self.column}"
            where = f"{where} ({at})" if self.key else at
        return f"{where}: {self.message}" + (f" (hint: {self.hint})" if self.hint else "")


_Problems = Sequence[ConfigProblem] | str


class _ProblemsError(SynthError, ValueError):
    """Lists *every* problem, each with its key; the message says how many there are."""

    def __init__(self, problems: _Problems, hint: str | None, one: str, many: Callable[[int], str]) -> None:
        if isinstance(problems, str):
            problems, hint = [ConfigProblem(key="", message=problems, hint=hint)], None
        self.problems: list[ConfigProblem] = list(problems)
        lines = "\n".join(f"  - {p.render()}" for p in self.problems)
        message = f"{many(len(self.problems))}:\n{lines}"
        super().__init__(
            f"{one}: {self.problems[0].render()}" if len(self.problems) == 1 else message, hint=hint
        )

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.problems]


class ConfigError(_ProblemsError):
    """The RL config (TOML or overrides) is unusable; lists every problem found."""

    def __init__(
        self,
        problems: _Problems,
        *,
        path: str | None = None,
        hint: str | None = None,
        total: int | None = None,
    ) -> None:
        self.path = path
        self.total = total  # how many problems there are, when only some are listed
        source = f"RL config {path}" if path else "RL config"

        def many(count: int) -> str:
            listed = f"{total:,} problems ({count} lines listed)" if total and total > count else ""
            return f"{source} has {listed or f'{count} problems'}"

        super().__init__(problems, hint, f"{source} is invalid", many)


class SynthUsageError(_ProblemsError):
    """An argument, option, ini key or marker the caller wrote is wrong (not the RL config)."""

    def __init__(self, problems: _Problems, *, subject: str = "arguments", hint: str | None = None) -> None:
        super().__init__(problems, hint, f"invalid {subject}", lambda n: f"{n} problems with {subject}")


class MarkerError(SynthUsageError):
    """A ``synth_*`` marker on a test was written wrong: names the marker, the test and the fix."""

    def __init__(self, marker: str, test_id: str, problem: str, *, hint: str, argument: str = "") -> None:
        self.marker, self.test_id = marker, test_id
        self.problems = [ConfigProblem(key=argument or marker, message=problem, hint=hint)]
        SynthError.__init__(self, f"@pytest.mark.{marker} on {test_id}: {problem}", hint=hint)


class _WithFields(SynthError):
    """An error whose keywords set the fields its class declares (with their defaults)."""

    def __init__(self, message: str, *, hint: str | None = None, **given: Any) -> None:
        declared = {name for cls in type(self).__mro__ for name in vars(cls).get("__annotations__", {})}
        unknown = sorted(given.keys() - declared)
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s) {unknown}")
        for name, value in given.items():
            setattr(self, name, value)
        super().__init__(message, hint=hint)


class TaskAppError(_WithFields):
    """The task app could not be loaded, started, reached, or broke its contract."""

    url: str | None = None
    details: Mapping[str, Any] = MappingProxyType({})


@dataclass
class Attempt:
    """One HTTP attempt in a retried call: what happened and how long we waited after it."""

    method: str
    url: str
    status_code: int | None = None
    error: str | None = None
    waited: float = 0.0

    def render(self) -> str:
        outcome = f"HTTP {self.status_code}" if self.status_code is not None else (self.error or "?")
        waited = f" (then waited {self.waited:.2f}s)" if self.waited else ""
        return redact(f"{self.method} {self.url} -> {outcome}{waited}")


class BackendError(SynthError):
    """The backend answered badly, or not at all, after the retry budget was spent."""

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        url: str | None = None,
        status_code: int | None = None,
        response_text: str | bytes | None = None,
        attempts: Sequence[Attempt] = (),
        hint: str | None = None,
    ) -> None:
        self.method, self.url, self.status_code = method, url, status_code
        self.response_excerpt = excerpt(response_text)
        for attempt in attempts:  # masked as they leave: a poll records one on every request
            _masked_fields(attempt)
        self.attempts: list[Attempt] = list(attempts)
        parts = [message]
        if method and url:
            status = f" -> HTTP {status_code}" if status_code is not None else ""
            parts.append(f"request: {method} {url}{status}")
        if self.response_excerpt:
            parts.append(f"response: {self.response_excerpt}")
        if len(self.attempts) > 1:
            tries = "".join(f"\n    {i}. {a.render()}" for i, a in enumerate(self.attempts, 1))
            parts.append(f"attempts ({len(self.attempts)}):{tries}")
        super().__init__("\n  ".join(parts), hint=hint)


class BackendUnreachableError(SynthError):
    """Nothing answers at the online backend's URL; ``setting`` is where the URL came from."""

    def __init__(self, setting: str, url: str, problem: str) -> None:
        self.setting, self.url, self.problem = setting, url, problem
        super().__init__(
            f"the backend at {url} (from {setting}) is unreachable: {problem}; every test that "
            "needs the backend fails with this message",
            hint=f"check the URL and that the backend is running, fix {setting}, or run offline "
            "without it (--synth-backend=mock)",
        )


class JobSubmitError(BackendError):
    """Submitting the job failed: rejected payload, auth, or an unusable response."""


class EnvKeyUploadError(BackendError):
    """Handing the task app's key to the backend failed (key, public key, upload or check)."""


class TaskAppVerificationError(BackendError):
    """The backend could not verify the task app before submission (``POST /rl/verify_task_app``)."""


class JobFailedError(_WithFields):
    """The job reached a failed or cancelled terminal state and the caller asked to raise."""

    job_id: str | None = None
    status: str | None = None
    error: str | None = None
    result: Any = None


class JobTimeoutError(_WithFields, TimeoutError):
    """The job did not reach a terminal state within the timeout (on the job's clock)."""

    job_id: str | None = None
    timeout: float | None = None
    last_status: str | None = None
    history: Sequence[Any] = ()
