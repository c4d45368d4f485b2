"""The backend's API as data, and retrying it: :class:`Call` (a request and how to read its answer),
:class:`Sender`, :class:`RetryPolicy` and the runners. An operation is a generator ("steps") yielding an
``httpx.Request`` (answered with the response or the transport error), seconds to sleep, or an awaitable;
:func:`drive` and :func:`async_drive` run it. Errors are made here, one place per status code.
"""

from __future__ import annotations

import email.utils
import functools
import math
import random
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import httpx

from pytest_synth_rl.client.results import EventPage
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import (
    Attempt,
    BackendError,
    ConfigProblem,
    JobSubmitError,
    SynthError,
    SynthUsageError,
    excerpt,
    keywords_checked,
)
from pytest_synth_rl.reporting.files import UnreadableDocument, parse_json_document
from pytest_synth_rl.secrets.masking import SecretHeaders, get_logger

T = TypeVar("T")
E = TypeVar("E", bound=BackendError)
ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)
#: An operation: yields requests, sleeps (seconds) and awaitables; returns its value.
Steps = Generator[httpx.Request | float | Awaitable[Any], Any, T]

#: Seconds for one HTTP request (connect, read, write, pool) when we create the client.
DEFAULT_REQUEST_TIMEOUT = 30.0

logger = get_logger("pytest_synth_rl.client")

#: Transport failures that say nothing about the request itself, so sending it again may work.
#: Safe for POST too: submissions carry an ``Idempotency-Key`` that is the same on every retry.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.TimeoutException, httpx.ReadError)
RETRYABLE_ERRORS += (httpx.WriteError, httpx.RemoteProtocolError)


def _problem(key: str, message: str) -> SynthUsageError:
    return SynthUsageError([ConfigProblem(f"RetryPolicy.{key}", message, "see RetryPolicy docs")])


@dataclass
class RetryPolicy:
    """How hard to try: ``max_attempts`` sends, jittered exponential backoff, ``Retry-After``
    honoured up to ``max_retry_after``, at most ``total_budget`` clock seconds in all."""

    max_attempts: int = 6
    backoff_base: float = 0.5
    backoff_multiplier: float = 2.0
    backoff_max: float = 30.0
    max_retry_after: float = 60.0
    total_budget: float = 180.0
    jitter: bool = True
    seed: int | None = None
    _rng: random.Random | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise _problem("max_attempts", f"must be >= 1, got {self.max_attempts!r}")
        for name in ("backoff_base", "backoff_max", "max_retry_after", "total_budget"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise _problem(name, f"must be a finite number >= 0, got {value!r}")
        if self.backoff_multiplier < 1:
            raise _problem("backoff_multiplier", f"must be >= 1, got {self.backoff_multiplier!r}")
        self._rng = random.Random(self.seed) if self.seed is not None else None

    @classmethod
    def never(cls) -> RetryPolicy:
        """Send once; report the first failure as is."""
        return cls(max_attempts=1)

    def retries_status(self, status_code: int) -> bool:
        """429 and server errors but 501 (not implemented, it never gets better)."""
        return status_code == 429 or (500 <= status_code <= 599 and status_code != 501)

    def retries_error(self, exc: Exception) -> bool:
        return isinstance(exc, RETRYABLE_ERRORS)

    def backoff(self, retry_number: int) -> float:
        """Wait before retry *retry_number* (0 for the first retry)."""
        cap = min(self.backoff_max, self.backoff_base * self.backoff_multiplier**retry_number)
        if self.jitter and self._rng is None:  # unseeded (it reads os.urandom) only when first needed
            self._rng = random.Random()
        return self._rng.uniform(0.0, cap) if self._rng is not None and self.jitter else cap


# ``RetryPolicy(max_attemps=3)``: a usage error with a "did you mean", not a bare ``TypeError``.
RetryPolicy.__init__ = keywords_checked(RetryPolicy.__init__)  # type: ignore[method-assign]


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date read against
    *now_epoch*); None if unparseable, 0 for a past date."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(text).timestamp() - now_epoch
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class Sent:
    """The final response and every attempt; ``exhausted``: a retryable failure we stopped retrying."""

    response: httpx.Response
    attempts: list[Attempt]
    exhausted: bool = False
    stop_reason: str = ""


def retrying(
    request: httpx.Request, policy: RetryPolicy, clock: Clock, error_cls: type[BackendError] = BackendError
) -> Steps[Sent]:
    """Send *request* until it gets a final response; raise *error_cls* if it never gets one."""
    method, url, started = request.method, str(request.url), clock.now()
    attempts: list[Attempt] = []
    while True:
        outcome = yield request
        if isinstance(outcome, httpx.Response):
            what, retry = f"HTTP {outcome.status_code}", policy.retries_status(outcome.status_code)
            attempt = Attempt(method, url, status_code=outcome.status_code)
        else:
            what, retry = _describe(outcome), policy.retries_error(outcome)
            attempt = Attempt(method, url, error=what)
        attempts.append(attempt)
        stop_reason = ""  # why retrying stopped early, when it did
        if retry:
            wait = policy.backoff(len(attempts) - 1)
            if isinstance(outcome, httpx.Response) and outcome.status_code in (429, 503):
                advised = parse_retry_after(outcome.headers.get("retry-after"), clock.time())
                wait = wait if advised is None else min(advised, policy.max_retry_after)
            if len(attempts) >= policy.max_attempts:
                stop_reason = f"retry limit RetryPolicy.max_attempts={policy.max_attempts} reached"
            elif clock.now() - started + wait > policy.total_budget:
                budget = policy.total_budget
                stop_reason = f"waiting {wait:.2f}s more would exceed RetryPolicy.total_budget={budget:g}s"
        if not retry or stop_reason:
            if isinstance(outcome, httpx.Response):
                return Sent(outcome, attempts, bool(stop_reason), stop_reason)
            tries = f" after {len(attempts)} attempts" if len(attempts) > 1 else ""
            message = f"could not reach the backend: {method} {url} failed{tries}: {what}"
            message += f"; {stop_reason}" if stop_reason else ""
            hint = "check that the backend URL (backend_url= / BACKEND_BASE_URL) is right and reachable; "
            hint += "transient errors were retried per the job's RetryPolicy"
            raise error_cls(message, method=method, url=url, attempts=attempts, hint=hint) from outcome
        attempt.waited = wait
        count = (len(attempts) + 1, policy.max_attempts)
        logger.warning("%s %s -> %s; retrying in %.2fs (attempt %d of %d)", method, url, what, wait, *count)
        yield wait


def drive(steps: Steps[T], client: httpx.Client, clock: Clock) -> T:
    """Run *steps* blocking; an awaitable (an async ``on_status``) is not awaited."""
    reply: Any = None
    while True:
        try:
            effect = steps.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = None
        if isinstance(effect, httpx.Request):
            try:
                reply = client.send(effect)
            except httpx.TransportError as exc:
                reply = exc
            except SynthError as exc:  # raised by a transport of ours (a cassette): httpx's frames go
                raise exc.with_traceback(None) from exc.__cause__
        elif isinstance(effect, (int, float)):
            clock.sleep(effect)


async def async_drive(steps: Steps[T], client: httpx.AsyncClient, clock: Clock) -> T:
    """Run *steps* over ``httpx.AsyncClient`` and ``clock.async_sleep``"""
    reply: Any = None
    while True:
        try:
            effect = steps.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = None
        if isinstance(effect, httpx.Request):
            try:
                reply = await client.send(effect)
            except httpx.TransportError as exc:
                reply = exc
            except SynthError as exc:  # raised by a transport of ours (a cassette): httpx's frames go
                raise exc.with_traceback(None) from exc.__cause__
        elif isinstance(effect, (int, float)):
            await clock.async_sleep(effect)
        else:
            try:
                await effect
            except Exception as exc:
                reply = exc


def read_json(response: httpx.Response) -> tuple[Any, str | None]:
    """The response's JSON, or ``({}, note)`` when it is not JSON (or holds NaN, an integer too long
    or deep nesting): a proxy's HTML page must not crash a poll loop; the note keeps it diagnosable."""
    if not response.content:
        return {}, None
    try:
        return parse_json_document(response.content), None
    except UnreadableDocument as error:
        content_type = response.headers.get("content-type", "")
        note = f"unreadable JSON body ({error}; content-type {content_type or 'not set'!r}) treated as {{}}"
        logger.warning("%s %s: %s", response.request.method, response.request.url, note)
        return {}, note


def read_object(response: httpx.Response) -> tuple[dict[str, Any], str | None]:
    """Like :func:`read_json` but always a dict: a JSON array or scalar also counts as ``{}``."""
    body, note = read_json(response)
    if isinstance(body, dict):
        return body, note
    return {}, note or f"JSON {type(body).__name__} where an object was expected, treated as {{}}"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One backend operation: the request, what counts as success, how to read it."""

    operation: str
    method: str
    url: str
    parse: Callable[[httpx.Response], T]
    # The type whose repr masks the API key they carry.
    headers: SecretHeaders
    params: Mapping[str, str | int] | None = None
    json: Any = None
    ok_statuses: frozenset[int] = frozenset(range(200, 300))
    error_cls: type[BackendError] = BackendError
    job_id: str | None = None
    fallback: Call[T] | None = None
    fell_back_from: str | None = None
    action: str | None = None
    fix: str | None = None

    def build(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        url: httpx.URL | str | None = self.url
        params = dict(self.params) if self.params else None
        # Parsed once and cached (httpx would parse it for every request), where httpx builds the same URL.
        if (
            not client.params
            and self.url.startswith(("http://", "https://"))
            and not {"?", "#"} & set(self.url)
        ):
            url = _url(f"{self.url}?{httpx.QueryParams(params)}" if params else self.url)
            params = None if url is not None else params
        headers = dict(self.headers)
        return client.build_request(
            self.method, url or self.url, params=params, json=self.json, headers=headers
        )


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL | None:
    try:
        return httpx.URL(url)
    except httpx.InvalidURL:
        return None


class Sender(Generic[ClientT]):
    def __init__(self, client: ClientT, retry: RetryPolicy, clock: Clock) -> None:
        self.client: ClientT = client
        self.retry, self.clock = retry, clock
        self.fallback_routes: set[str] = set()
        self._last_built: tuple[Call[Any], httpx.Request] | None = None

    def request(self, call: Call[Any]) -> httpx.Request:
        last = self._last_built
        if last is not None and last[0] is call and not self.client.cookies:
            return last[1]
        request = call.build(self.client)
        if call.method == "GET" and call.json is None:
            self._last_built = (call, request)
        return request

    def send(self, call: Call[T]) -> Steps[T]:
        while True:
            sent = yield from retrying(self.request(call), self.retry, self.clock, call.error_cls)
            status = sent.response.status_code
            if status == 404 and call.fallback is not None:
                call = replace(call.fallback, fell_back_from=call.url)
                continue
            if status not in call.ok_statuses:
                raise error_for(call, sent)
            value = call.parse(sent.response)
            if call.fell_back_from is not None:
                self.fallback_routes.add(call.operation)
            return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def extract_job_id(response: httpx.Response) -> str:
    """The new job's id (``job_id``, else ``id``); an answer without one is a failed submission."""
    body, note = read_object(response)
    for key in ("job_id", "id"):
        value = body.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    reason = f" ({note})" if note else ""
    message = f"the backend accepted the job (HTTP {response.status_code}) but its answer has no job id "
    hint = "check that backend_url points at the Synth API (this answer is not from its RL jobs route)"
    raise answer_error(JobSubmitError, response, f"{message}under 'job_id' or 'id'{reason}", hint)


def answer_error(
    error_cls: type[E],
    response: httpx.Response,
    message: str,
    hint: str,
    attempts: list[Attempt] | None = None,
) -> E:
    request = response.request
    return error_cls(
        message,
        method=request.method,
        url=str(request.url),
        status_code=response.status_code,
        response_text=response.text,
        attempts=attempts or [],
        hint=hint,
    )


def _objects(body: Any, key: str) -> list[dict[str, Any]]:
    """The objects of the list under *key* (or nested under ``data``/``result``/``items``, or bare)."""
    found: Any = body if isinstance(body, list) else []
    if isinstance(body, Mapping):
        for inner in (body, *(body.get(wrapper) for wrapper in ("data", "result", "items"))):
            inner = inner.get(key) if isinstance(inner, Mapping) else inner
            if isinstance(inner, list):
                found = inner
                break
    return [item for item in found if isinstance(item, dict)]


def json_list(response: httpx.Response, key: str) -> list[dict[str, Any]]:
    return _objects(read_json(response)[0], key)


def event_page(response: httpx.Response, since_seq: int) -> EventPage:
    """A page of events; the cursor is the answer's ``next_seq``, else the highest ``seq`` seen."""
    body, _ = read_json(response)
    events = _objects(body, "events")
    next_seq = _int(body.get("next_seq")) if isinstance(body, Mapping) else None
    if next_seq is None:
        next_seq = max([since_seq, *(s for s in (_int(e.get("seq")) for e in events) if s is not None)])
    return EventPage(events=events, next_seq=next_seq)


def _problems_422(response: httpx.Response) -> list[str]:
    """Readable problem lines from a validation error body (FastAPI ``detail`` or our ``problems``)."""
    body, _ = read_json(response)
    items: Any = None
    if isinstance(body, Mapping):
        items = next(
            (body[k] for k in ("detail", "problems", "errors") if isinstance(body.get(k), list)), None
        )
        if items is None and isinstance(body.get("detail"), str):
            return [body["detail"]]
    lines: list[str] = []
    for item in items or []:
        if isinstance(item, Mapping):
            loc = item.get("loc") or item.get("key") or item.get("path")
            if isinstance(loc, (list, tuple)):
                loc = ".".join(str(part) for part in loc)
            msg = item.get("msg") or item.get("message") or item
            lines.append(f"{loc}: {msg}" if loc else str(msg))
        else:
            lines.append(str(item))
    return lines


#: The hints for a status whatever the call (the rest depend on it, see :func:`_hint`).
_STATUS_HINTS = {
    422: "the backend rejected the request body: fix the problems above in the RL config or overrides",
    429: "rate limited by the backend; retry later, or allow more with RetryPolicy(max_attempts=...)",
    500: "the backend failed on this request and it is not one worth retrying",
}


def _hint(call: Call[Any], status: int, exhausted: bool) -> str:
    base = call.url.split("/rl/jobs")[0].split("/learning/jobs")[0]
    if status in (401, 403):
        return (
            f"the backend at {base} rejected the API key: check SYNTH_API_KEY (or api_key=) and that the "
            "key belongs to this backend"
        )
    if call.fix is not None and status < 500 and status != 429:
        return call.fix
    if status == 404 and call.operation in ("submit", "list"):
        hint = f"no RL jobs route at {call.url}: check backend_url / BACKEND_BASE_URL (now {base})"
        if call.operation == "submit":
            hint += "; the job API lives under /api, which is appended when missing"
        return hint
    if status == 404:
        return (
            f"job {call.job_id!r} is unknown to {base}: check the job id and that backend_url is the "
            "backend that created it"
        )
    if status >= 500:
        kept = "the backend kept failing; the request was retried per RetryPolicy. Retry later, or raise "
        return kept + "RetryPolicy(max_attempts=, total_budget=)" if exhausted else _STATUS_HINTS[500]
    return _STATUS_HINTS.get(status, "the backend rejected the request; see its answer above")


def error_for(call: Call[Any], sent: Sent) -> BackendError:
    response, status, tries = sent.response, sent.response.status_code, len(sent.attempts)
    message = f"{call.action or f'{call.operation} failed'}: HTTP {status}"
    message += f" after {tries} attempts" if tries > 1 else ""
    message += f"; {sent.stop_reason}" if sent.exhausted and sent.stop_reason else ""
    message += f" (after {call.fell_back_from} answered 404)" if call.fell_back_from else ""
    if status == 422:
        lines = _problems_422(response) or ["(the answer lists no problems)"]
        message += "\n  problems:\n" + "\n".join(f"    - {excerpt(line, 300)}" for line in lines)
    return answer_error(call.error_cls, response, message, _hint(call, status, sent.exhausted), sent.attempts)
