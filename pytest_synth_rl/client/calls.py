"""The backend's API as data: which request each operation sends and what its answer means.

A :class:`Call` is a request plus the function that reads a good answer; a :class:`Sender` runs
calls as steps (:mod:`.retry`). Errors are made here, one place per status code, with a hint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import httpx

from pytest_synth_rl.client.results import EventPage
from pytest_synth_rl.client.retry import RetryPolicy, Sent, Steps, retrying
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import Attempt, BackendError, JobSubmitError, excerpt
from pytest_synth_rl.reporting.files import UnreadableDocument, parse_json_document
from pytest_synth_rl.secrets.masking import SecretHeaders, get_logger

T = TypeVar("T")
E = TypeVar("E", bound=BackendError)
ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)

#: Seconds for one HTTP request (connect, read, write, pool) when we create the client.
DEFAULT_REQUEST_TIMEOUT = 30.0

logger = get_logger("pytest_synth_rl.client")


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
    """One backend operation: the request, what counts as success, how to read it. ``fallback``
    answers a 404 (older deployments); ``action`` says what failed, ``fix`` overrides the hint."""

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
        """The request, built by *client* so its defaults (headers, cookies, timeout) apply."""
        url: httpx.URL | str = self.url
        params = dict(self.params) if self.params else None
        parsed = None if client.params else _parsed_url(self.url, params)
        if parsed is not None:
            url, params = parsed, None
        return client.build_request(
            self.method, url, params=params, json=self.json, headers=dict(self.headers)
        )


def _parsed_url(url: str, params: Mapping[str, str | int] | None) -> httpx.URL | None:
    """*url* with *params* as its query, parsed once and cached (httpx would parse it for every
    request); None where httpx could build another URL from the parts, left to httpx."""
    if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
        return None
    return _url(f"{url}?{httpx.QueryParams(params)}" if params else url)


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL | None:
    try:
        return httpx.URL(url)
    except httpx.InvalidURL:
        return None


class Sender(Generic[ClientT]):
    """Sends calls over one client, retrying per *retry* on *clock*; remembers operations that
    answered on their fallback route only, and resends a poll's request as first built."""

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
        """Steps that send *call* (and its fallback on a 404) and return the answer's value."""
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
    """*error_cls* for an answer we cannot use, with its request, status, body and attempts."""
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
    if status >= 500 and exhausted:
        return (
            "the backend kept failing; the request was retried per RetryPolicy. Retry later, or "
            "raise RetryPolicy(max_attempts=, total_budget=)"
        )
    if status >= 500:
        return "the backend failed on this request and it is not one worth retrying"
    return _STATUS_HINTS.get(status, "the backend rejected the request; see its answer above")


def error_for(call: Call[Any], sent: Sent) -> BackendError:
    """The error for an unsuccessful answer, with a hint and every attempt made."""
    response = sent.response
    status = response.status_code
    what = call.action or f"{call.operation} failed"
    detail = f"HTTP {status}"
    if len(sent.attempts) > 1:
        detail += f" after {len(sent.attempts)} attempts"
    if sent.exhausted and sent.stop_reason:
        detail += f"; {sent.stop_reason}"
    if call.fell_back_from:
        detail += f" (after {call.fell_back_from} answered 404)"
    message = f"{what}: {detail}"
    if status == 422:
        lines = _problems_422(response) or ["(the answer lists no problems)"]
        message += "\n  problems:\n" + "\n".join(f"    - {excerpt(line, 300)}" for line in lines)
    return answer_error(call.error_cls, response, message, _hint(call, status, sent.exhausted), sent.attempts)
