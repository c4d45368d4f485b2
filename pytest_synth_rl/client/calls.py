"""The backend's job API as data: which request each operation sends and what its answer means.

A :class:`Call` is a request description plus the function that turns a good answer into a
value. Building calls and reading answers involves no I/O, so :class:`~.sync.RLJob` and
:class:`~.aio.AsyncRLJob` share all of it and differ only in how they send. Errors are made here
too, one place per status code, with the hint that fixes the usual cause.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import httpx

from pytest_synth_rl.client.results import EventPage
from pytest_synth_rl.client.retry import Sent
from pytest_synth_rl.errors import BackendError, JobSubmitError, excerpt
from pytest_synth_rl.secrets.masking import SecretHeaders, get_logger

__all__ = [
    "Call",
    "error_for",
    "event_page",
    "extract_job_id",
    "json_list",
    "read_body",
    "read_object",
    "status_payload",
]

T = TypeVar("T")

logger = get_logger("pytest_synth_rl.client")


def read_body(response: httpx.Response) -> tuple[Any, str | None]:
    """The response's JSON, or ``({}, note)`` when it is not JSON (the note names the content-type).

    Proxies and load balancers answer with HTML pages; reading those as "no information" rather
    than crashing keeps a poll loop alive through a blip, and the note keeps it diagnosable.
    """
    if not response.content:
        return {}, None
    try:
        return response.json(), None
    except ValueError:
        content_type = response.headers.get("content-type", "")
        note = f"non-JSON body (content-type {content_type or 'not set'!r}) treated as {{}}"
        logger.warning("%s %s: %s", response.request.method, response.request.url, note)
        return {}, note


def read_object(response: httpx.Response) -> tuple[dict[str, Any], str | None]:
    """Like :func:`read_body` but always a dict: a JSON array or scalar also counts as ``{}``."""
    body, note = read_body(response)
    if isinstance(body, dict):
        return body, note
    if note is None:
        note = f"JSON {type(body).__name__} where an object was expected, treated as {{}}"
    return {}, note


@dataclass(frozen=True)
class Call(Generic[T]):
    """One backend operation: the request to send, what counts as success, how to read it.

    ``fallback`` is an alternative route to try when this one answers 404 (older deployments
    served job events under ``/learning/jobs``).
    """

    operation: str
    method: str
    url: str
    parse: Callable[[httpx.Response], T]
    headers: Mapping[str, str]
    params: Mapping[str, str | int] | None = None
    json: Any = None
    ok_statuses: frozenset[int] | None = None
    error_cls: type[BackendError] = BackendError
    job_id: str | None = None
    fallback: Call[T] | None = None
    fell_back_from: str | None = None
    #: For calls outside the job API: what failed (the error's opening words) and how to fix a
    #: rejection that is not about the API key or rate limits.
    action: str | None = None
    fix: str | None = None

    def __post_init__(self) -> None:
        # Headers carry the API key: whatever mapping a caller passed, hold it in the type whose
        # repr masks credentials, so no traceback local or dataclass repr shows the key.
        if not isinstance(self.headers, SecretHeaders):
            object.__setattr__(self, "headers", SecretHeaders(self.headers))

    def succeeded(self, status_code: int) -> bool:
        if self.ok_statuses is not None:
            return status_code in self.ok_statuses
        return 200 <= status_code < 300

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

    def next_after(self, sent: Sent) -> Call[T] | None:
        """The call to make next, if this answer means "try the other route"."""
        if sent.response.status_code == 404 and self.fallback is not None:
            return replace(self.fallback, fell_back_from=self.url)
        return None

    def outcome(self, sent: Sent) -> T:
        """The value of a successful answer, or the error for an unsuccessful one."""
        if not self.succeeded(sent.response.status_code):
            raise error_for(self, sent)
        return self.parse(sent.response)


def _parsed_url(url: str, params: Mapping[str, str | int] | None) -> httpx.URL | None:
    """*url* with *params* as its query (encoded as httpx encodes them), parsed once; None where
    httpx could build another URL from the string and params (a relative URL, one with a query
    or fragment of its own, one httpx refuses), which are then left to httpx.

    httpx parses a URL string for every request, and again to add params, which costs about as
    much as the rest of building it; a suite sends every job's submission to the same URL."""
    if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
        return None
    return _url(f"{url}?{httpx.QueryParams(params)}" if params else url)


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL | None:
    """The parsed URL (immutable, so one object serves every request to it)."""
    try:
        return httpx.URL(url)
    except httpx.InvalidURL:
        return None


# -- reading answers ---------------------------------------------------------------------------
def status_payload(response: httpx.Response) -> dict[str, Any]:
    return read_object(response)[0]


def extract_job_id(response: httpx.Response, *, url: str) -> str:
    """The new job's id (``job_id``, else ``id``); an answer without one is a failed submission."""
    body, note = read_object(response)
    for key in ("job_id", "id"):
        value = body.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    reason = f" ({note})" if note else ""
    raise JobSubmitError(
        f"the backend accepted the job (HTTP {response.status_code}) but its answer has no job id "
        f"under 'job_id' or 'id'{reason}",
        method="POST",
        url=url,
        status_code=response.status_code,
        response_text=response.text,
        hint="check that backend_url points at the Synth API (this answer is not from its RL jobs route)",
    )


def _nested_list(body: Any, key: str) -> list[Any] | None:
    if isinstance(body, list):
        return body
    if not isinstance(body, Mapping):
        return None
    value = body.get(key)
    if isinstance(value, list):
        return value
    for wrapper in ("data", "result", "items"):
        inner = body.get(wrapper)
        if isinstance(inner, list):
            return inner
        if isinstance(inner, Mapping) and isinstance(inner.get(key), list):
            return list(inner[key])
    return None


def json_list(response: httpx.Response, key: str) -> list[dict[str, Any]]:
    """The list under *key* (also accepted nested under ``data``/``result``/``items``, or bare)."""
    body, _ = read_body(response)
    found = _nested_list(body, key) or []
    return [item for item in found if isinstance(item, dict)]


def _seq(event: Mapping[str, Any]) -> int | None:
    value = event.get("seq")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def event_page(response: httpx.Response, since_seq: int) -> EventPage:
    """A page of events; the cursor is the answer's ``next_seq``, else the highest ``seq`` seen."""
    body, _ = read_body(response)
    events = [e for e in (_nested_list(body, "events") or []) if isinstance(e, dict)]
    next_seq: int | None = None
    if isinstance(body, Mapping):
        candidate = body.get("next_seq")
        if isinstance(candidate, int) and not isinstance(candidate, bool):
            next_seq = candidate
    if next_seq is None:
        seqs = [s for s in (_seq(e) for e in events) if s is not None]
        next_seq = max([since_seq, *seqs])
    return EventPage(events=events, next_seq=next_seq)


# -- errors ------------------------------------------------------------------------------------
def _problems_422(response: httpx.Response) -> list[str]:
    """Readable problem lines from a validation error body (FastAPI ``detail`` or our ``problems``)."""
    body, _ = read_body(response)
    items: Any = None
    if isinstance(body, Mapping):
        for key in ("detail", "problems", "errors"):
            if isinstance(body.get(key), list):
                items = body[key]
                break
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


def _hint(call: Call[Any], status: int, response: httpx.Response, exhausted: bool) -> str:
    base = call.url.split("/rl/jobs")[0].split("/learning/jobs")[0]
    if status in (401, 403):
        return (
            f"the backend at {base} rejected the API key: check SYNTH_API_KEY (or api_key=) and that the "
            "key belongs to this backend"
        )
    if call.fix is not None and status < 500 and status != 429:
        return call.fix
    if status == 404:
        if call.operation == "submit":
            return (
                f"no RL jobs route at {call.url}: check backend_url / BACKEND_BASE_URL (now {base}); "
                "the job API lives under /api, which is appended when missing"
            )
        if call.operation == "list":
            return f"no RL jobs route at {call.url}: check backend_url / BACKEND_BASE_URL (now {base})"
        return (
            f"job {call.job_id!r} is unknown to {base}: check the job id and that backend_url is the "
            "backend that created it"
        )
    if status == 422:
        return "the backend rejected the request body: fix the problems above in the RL config or overrides"
    if status == 429:
        return "rate limited by the backend; retry later, or allow more with RetryPolicy(max_attempts=...)"
    if status >= 500:
        if exhausted:
            return (
                "the backend kept failing; the request was retried per RetryPolicy. Retry later, or "
                "raise RetryPolicy(max_attempts=, total_budget=)"
            )
        return "the backend failed on this request and it is not one worth retrying"
    return "the backend rejected the request; see its answer above"


def error_for(call: Call[Any], sent: Sent) -> BackendError:
    """The error for an unsuccessful answer, with a hint and every attempt made."""
    response = sent.response
    status = response.status_code
    what = call.action or {
        "submit": "submitting the RL job failed",
        "status": f"reading the status of job {call.job_id!r} failed",
        "cancel": f"cancelling job {call.job_id!r} failed",
        "list": "listing RL jobs failed",
    }.get(call.operation, f"reading {call.operation} of job {call.job_id!r} failed")
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
    cls = call.error_cls
    return cls(
        message,
        method=call.method,
        url=str(response.request.url),
        status_code=status,
        response_text=response.text,
        attempts=sent.attempts,
        hint=_hint(call, status, response, sent.exhausted),
    )
