"""HTTP plumbing of every fake route: JSON and FastAPI-shaped error bodies (``{"detail": {"error":
{code, message}}}``, ``{"detail": [{loc, msg, hint}]}``) and the request log, masked when read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import httpx

from pytest_synth_rl.errors import ConfigProblem
from pytest_synth_rl.recording.redaction import Redactor
from pytest_synth_rl.reporting.files import UnreadableDocument, parse_json_document
from pytest_synth_rl.secrets.masking import masked_header, redact

#: Bytes of a request body the log keeps; the rest is dropped and the record says so.
MAX_LOGGED_BODY = 64 * 1024
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def json_response(status: int, body: Any, headers: Sequence[tuple[str, str]] = ()) -> httpx.Response:
    content = body if isinstance(body, bytes) else _COMPACT.encode(body).encode()
    return httpx.Response(status, headers=[("content-type", "application/json"), *headers], content=content)


def masked_response(response: httpx.Response) -> httpx.Response:
    """*response* (read: errors and admin answers never stream) with every known secret masked."""
    text = response.content.decode("utf-8", "replace")
    masked = redact(text)
    if masked == text:
        return response
    headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
    return httpx.Response(response.status_code, headers=headers, content=masked.encode())


def error_response(
    status: int, code: str, message: str, headers: Sequence[tuple[str, str]] = (), **extra: Any
) -> httpx.Response:
    return json_response(
        status, {"detail": {"error": {"code": code, "message": redact(message), **extra}}}, headers
    )


def at_most(what: str, most: object, fix: str = "") -> str:
    """The message for a request past one of the fake's limits."""
    return f"{what}; this fake backend accepts at most {most}" + (f"; {fix}" if fix else "")


def method_not_allowed(method: str, path: str, allowed: Sequence[str]) -> httpx.Response:
    methods = ", ".join(allowed)
    message = f"{method} is not allowed on {path}; use {methods}"
    return error_response(405, "method_not_allowed", message, [("allow", methods)])


def invalid(loc: Any, msg: str, hint: str | None) -> httpx.Response:
    """A 422 in the shape FastAPI gives validation errors."""
    return json_response(422, {"detail": [{"loc": loc, "msg": msg, "hint": hint}]})


def problems_response(problems: Iterable[ConfigProblem]) -> httpx.Response:
    return json_response(
        422, {"detail": [{"loc": p.key, "msg": p.message, "hint": p.hint} for p in problems]}
    )


class BadBody(ValueError):
    """A body that is not JSON or holds a number no field can (``field``: ``""`` for the body)."""

    def __init__(self, code: str, problem: str, field: str = "", hint: str | None = None) -> None:
        self.code, self.problem, self.field, self.hint = code, problem, field, hint
        subject = f"field {field!r}" if field else "the request body"
        super().__init__(f"{subject} {problem}" + (f" ({hint})" if hint else ""))


_HINTS = {
    "number_too_long": "no field of this API needs more than a few digits",
    "not_finite": "NaN, Infinity and numbers too large for a float, like 1e400, are not valid JSON numbers",
}


def request_json(content: bytes) -> Any:
    """*content* parsed (None when empty); :class:`BadBody` for bad JSON, huge integers and NaN."""
    if not content:
        return None
    try:
        return parse_json_document(content)
    except UnreadableDocument as bad:
        field = bad.field or ("(the body)" if bad.code in _HINTS else "")
        raise BadBody(bad.code, bad.problem, field, _HINTS.get(bad.code)) from None


@dataclass
class LoggedRequest:
    """One request the fake received, with its answer and any injected fault; ``time`` is the
    fake clock's epoch time, ``headers`` are masked, ``json`` is the body (None when empty, not JSON or
    cut at :data:`MAX_LOGGED_BODY`); 401, 404 and 405 keep no body."""

    method: str
    url: str
    path: str
    route: str | None
    time: float
    status: int | None = None
    fault: str | None = None
    job_id: str | None = None
    error: str | None = None
    body_size: int = 0
    body_truncated: bool = False
    _raw_headers: httpx.Headers = field(default_factory=httpx.Headers, repr=False)
    _body: bytes = field(default=b"", repr=False)

    @classmethod
    def of(cls, request: httpx.Request, *, path: str, time: float) -> LoggedRequest:
        body = request.content
        record = cls(request.method, str(request.url), path, None, time, _raw_headers=request.headers)
        record.body_size, record.body_truncated = len(body), len(body) > MAX_LOGGED_BODY
        record._body = body[:MAX_LOGGED_BODY]
        return record

    def forget_body(self) -> None:
        self._body = b""

    @property
    def headers(self) -> dict[str, str]:
        return {name: masked_header(name, value) for name, value in self._raw_headers.multi_items()}

    @property
    def json(self) -> Any:
        if not self._body or self.body_truncated:
            return None
        try:
            return parse_json_document(self._body)
        except UnreadableDocument:
            return None

    @property
    def body_text(self) -> str:
        return redact(self._body.decode("utf-8", "replace"))

    def to_json(self) -> dict[str, Any]:
        """The record as the admin API shows it: the body as JSON when it is whole JSON, else text."""
        parsed = self.json
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        return {
            **shown,
            "url": redact(self.url),
            "headers": self.headers,
            "json": Redactor().json(parsed),
            "body": self.body_text if parsed is None and self._body else None,
        }
