"""The one exception family every part of the plugin raises.

Each error carries structured fields (so tests can assert on them) and renders a message that
says *where* (file, key, URL), *what was expected* and *how to fix it*. Messages pass through
:func:`~pytest_synth_rl.secrets.masking.redact` so no API key survives into a traceback.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_synth_rl.secrets.masking import redact

__all__ = [
    "Attempt",
    "BackendError",
    "BackendUnreachableError",
    "ConfigError",
    "ConfigProblem",
    "EnvKeyUploadError",
    "JobFailedError",
    "JobSubmitError",
    "JobTimeoutError",
    "MarkerError",
    "SynthError",
    "SynthUsageError",
    "TaskAppError",
    "TaskAppVerificationError",
    "closest",
    "did_you_mean",
    "keywords_checked",
    "seconds_problem",
]

_EXCERPT_LIMIT = 500


#: How alike a near miss must be to its target to be suggested: one cutoff for every did-you-mean.
CLOSE_MATCH_CUTOFF = 0.6


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of *choices* that *word* most likely misspells, or None: every did-you-mean's source."""
    import difflib

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=CLOSE_MATCH_CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``did you mean 'x'?`` for a near miss of *word* among *choices*, else ``""``."""
    found = closest(word, choices)
    return f"did you mean {found!r}?" if found is not None else ""


def a_type(value: object) -> str:
    """``an int``, ``a str``: the type of a value the user passed, with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def seconds_problem(value: object, *, allow_zero: bool = False) -> str | None:
    """What is wrong with *value* as a number of seconds (a bool, a string, NaN, infinity, a
    negative number, or 0 unless *allow_zero*), or None when it is fine."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    finite = number and math.isfinite(value)  # type: ignore[arg-type]
    if finite and (value > 0 or (allow_zero and value == 0)):  # type: ignore[operator]
        return None
    bound = ">= 0" if allow_zero else "> 0"
    return f"must be a finite number of seconds {bound}, got {value!r}"


def unknown_argument(
    call: str, name: str, guess: str | None, usage: str, shown: str = "..."
) -> ConfigProblem:
    """``call(name=...)`` where *call* takes no *name*: with a "did you mean" for *guess*."""
    did_you_mean = f"did you mean {call}({guess}=...)? " if guess else ""
    return ConfigProblem(
        key=f"{call}.{name}",
        message=f"got {call}({name}={shown}); {call}() has no argument {name!r}",
        hint=f"{did_you_mean}{usage}",
    )


F = TypeVar("F", bound=Callable[..., Any])


def keywords_checked(func: F) -> F:
    """*func* (a function, method or ``__init__``), where a keyword it does not take is a
    :class:`SynthUsageError` with a "did you mean", not Python's bare ``TypeError``.

    Costs nothing on a good call: the signature is only read once the call failed, and a
    keyword the signature lacks means the call never entered *func*, so no ``TypeError`` of its
    own body is ever mistaken for a misspelt argument.
    """

    if inspect.iscoroutinefunction(func):  # an async method stays one (awaited, it checks)

        @functools.wraps(func)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            try:
                awaitable = func(*args, **kwargs)
            except TypeError:
                problems = _unknown_keywords(func, args, kwargs)
                if not problems:
                    raise
            else:
                return await awaitable
            raise SynthUsageError(problems)

        return checked_async  # type: ignore[return-value]

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return func(*args, **kwargs)
        except TypeError:
            problems = _unknown_keywords(func, args, kwargs)
            if not problems:
                raise
        raise SynthUsageError(problems)

    return checked  # type: ignore[return-value]


def _call_name(func: Callable[..., Any], first: str | None, args: tuple[Any, ...]) -> str:
    """How the user spelled the call: ``RLJob.from_config`` even where the method is defined on
    a base class, ``InProcessTaskApp`` for a constructor."""
    owner = None
    if args and first == "self":
        owner = type(args[0]).__name__
    elif args and first == "cls" and isinstance(args[0], type):
        owner = args[0].__name__
    if owner is None:
        return func.__qualname__.removesuffix(".__init__")
    return owner if func.__name__ == "__init__" else f"{owner}.{func.__name__}"


def _unknown_keywords(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[ConfigProblem]:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    first = next(iter(parameters), None)
    known = [name for name, p in parameters.items() if name not in ("self", "cls") and p.kind in by_keyword]
    call = _call_name(func, first, args)
    usage = f"{call}() takes {', '.join(k + '=' for k in known)}" if known else f"{call}() takes no keywords"
    return [unknown_argument(call, name, closest(name, known), usage) for name in kwargs if name not in known]


def excerpt(text: str | bytes | None, limit: int = _EXCERPT_LIMIT) -> str:
    """A short, redacted, single-string view of a response body for messages."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = redact(text)
    if len(text) > limit:
        return text[:limit] + f"… ({len(text) - limit} more chars)"
    return text


class SynthError(Exception):
    """Base of every error raised by pytest-synth-rl.

    ``hint`` is the "how to fix it" sentence; it is appended to the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = redact(message)
        self.hint = redact(hint) if hint else None
        super().__init__(self._render())

    def _render(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message

    def __str__(self) -> str:
        return self._render()


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with an RL config: where (``key`` as a dotted TOML path), what, how to fix."""

    key: str
    message: str
    hint: str | None = None
    line: int | None = None
    column: int | None = None

    def render(self) -> str:
        where = self.key or "<config>"
        if self.line is not None and not self.key:
            where = f"line {self.line}, column {self.column}"  # a file-wide problem: its place
        elif self.line is not None:
            where += f" (line {self.line}, column {self.column})"
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class _ProblemsError(SynthError, ValueError):
    """What :class:`ConfigError` and :class:`SynthUsageError` share: *every* problem is listed,
    each with its key, the message saying how many there are."""

    def __init__(
        self,
        problems: Sequence[ConfigProblem] | str,
        *,
        hint: str | None,
        one: str,
        many: Callable[[int], str],
    ) -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem(key="", message=problems, hint=hint)]
            hint = None
        self.problems: list[ConfigProblem] = list(problems)
        if len(self.problems) == 1:
            message = f"{one}: {self.problems[0].render()}"
        else:
            lines = "\n".join(f"  - {p.render()}" for p in self.problems)
            message = f"{many(len(self.problems))}:\n{lines}"
        super().__init__(message, hint=hint)

    @property
    def keys(self) -> list[str]:
        """The key of every problem (a dotted TOML path or an argument name), for assertions."""
        return [p.key for p in self.problems]


class ConfigError(_ProblemsError):
    """The RL config (TOML or overrides) is unusable. Lists *every* problem found, not just one."""

    def __init__(
        self,
        problems: Sequence[ConfigProblem] | str,
        *,
        path: str | None = None,
        hint: str | None = None,
        total: int | None = None,
    ) -> None:
        self.path = path
        #: How many problems there are, when only some are listed (thousands of bad items).
        self.total = total
        source = f"RL config {path}" if path else "RL config"

        def many(count: int) -> str:
            if total is not None and total > count:
                return f"{source} has {total:,} problems ({count} lines listed)"
            return f"{source} has {count} problems"

        super().__init__(problems, hint=hint, one=f"{source} is invalid", many=many)


class SynthUsageError(_ProblemsError):
    """An argument or setting the caller wrote is wrong (not the RL config itself).

    Fault, scenario, retry-policy and job arguments, command-line options, ini keys and markers
    land here, so ``ConfigError`` keeps meaning "the RL TOML or its payload is invalid". Like
    ``ConfigError`` it lists every problem with the argument it concerns and a hint.
    """

    def __init__(
        self,
        problems: Sequence[ConfigProblem] | str,
        *,
        subject: str = "arguments",
        hint: str | None = None,
    ) -> None:
        self.subject = subject
        super().__init__(
            problems,
            hint=hint,
            one=f"invalid {subject}",
            many=lambda count: f"{count} problems with {subject}",
        )


class MarkerError(SynthUsageError):
    """A ``synth_*`` marker on a test was written wrong: names the marker, the test and the fix."""

    def __init__(self, marker: str, test_id: str, problem: str, *, hint: str, argument: str = "") -> None:
        self.marker = marker
        self.test_id = test_id
        self.problems = [ConfigProblem(key=argument or marker, message=problem, hint=hint)]
        self.subject = f"@pytest.mark.{marker}"
        SynthError.__init__(self, f"@pytest.mark.{marker} on {test_id}: {problem}", hint=hint)


class TaskAppError(SynthError):
    """The task app could not be loaded, started, reached, or broke its contract."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        hint: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.details = dict(details or {})
        super().__init__(message, hint=hint)


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
        text = f"{self.method} {self.url} -> {outcome}"
        if self.waited:
            text += f" (then waited {self.waited:.2f}s)"
        return redact(text)


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
        self.method = method
        self.url = url
        self.status_code = status_code
        self.response_excerpt = excerpt(response_text)
        self.attempts: list[Attempt] = list(attempts)
        parts = [message]
        if method and url:
            status = f" -> HTTP {status_code}" if status_code is not None else ""
            parts.append(f"request: {method} {url}{status}")
        if self.response_excerpt:
            parts.append(f"response: {self.response_excerpt}")
        if len(self.attempts) > 1:
            parts.append(
                f"attempts ({len(self.attempts)}):\n"
                + "\n".join(f"    {i}. {a.render()}" for i, a in enumerate(self.attempts, 1))
            )
        super().__init__("\n  ".join(parts), hint=hint)


class BackendUnreachableError(SynthError):
    """Nothing answers at the online backend's URL: the run's one probe could not connect.

    ``setting`` is how the user gave the URL (``--synth-backend=...``, an environment variable or
    the ini key), so the message points at what to fix.
    """

    def __init__(self, setting: str, url: str, problem: str) -> None:
        self.setting = setting
        self.url = url
        self.problem = problem
        super().__init__(
            f"the backend at {url} (from {setting}) is unreachable: {problem}; every test that "
            "needs the backend fails with this message",
            hint=f"check the URL and that the backend is running, fix {setting}, or run offline "
            "without it (--synth-backend=mock)",
        )


class JobSubmitError(BackendError):
    """Submitting the job failed: rejected payload, auth, or an unusable response."""


class EnvKeyUploadError(BackendError):
    """Handing the task app's key to the backend failed: the key itself, the public key, the upload,
    or the check that the backend holds it."""


class TaskAppVerificationError(BackendError):
    """The backend could not verify the task app before submission (``POST /rl/verify_task_app``)."""


class JobFailedError(SynthError):
    """The job reached a failed or cancelled terminal state and the caller asked to raise."""

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        status: str | None = None,
        error: str | None = None,
        result: Any = None,
        hint: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.status = status
        self.error = error
        self.result = result
        super().__init__(message, hint=hint)


class JobTimeoutError(SynthError, TimeoutError):
    """The job did not reach a terminal state within the timeout (measured on the job's clock)."""

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        timeout: float | None = None,
        last_status: str | None = None,
        history: Sequence[Any] = (),
        hint: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.last_status = last_status
        self.history = list(history)
        super().__init__(message, hint=hint)
