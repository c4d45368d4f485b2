"""Recording live exchanges: httpx transports that forward, capture (redacted) and return.

Why a transport wrapper: the plugin's job client accepts an injected ``httpx`` transport, so
``RecordingTransport(inner)`` records exactly the backend conversation of that client and nothing
else (not the test's own calls to its in-process task app). To record *any* httpx client without
injecting anything, use :class:`~pytest_synth_rl.recording.replayer.Replayer` in a recording
mode: it hooks httpx through respx, which already patches httpx's connection layer safely and
restores it on exit, rather than this package monkeypatching ``httpx.HTTPTransport`` itself.

Responses are read in full before they are returned (a cassette needs the whole body), so a
streaming endpoint that never ends (SSE) cannot be recorded this way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from pytest_synth_rl.recording.cassette import (
    DROPPED_HEADERS,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    encode_body,
    header_value,
)
from pytest_synth_rl.recording.redaction import Redactor

__all__ = [
    "AsyncRecordingTransport",
    "Recorder",
    "RecordingTransport",
    "capture_request",
    "capture_response",
    "rebuild_response",
]

_FORM = "application/x-www-form-urlencoded"


def _body(content: bytes, headers: dict[str, Any], redactor: Redactor) -> tuple[Any, str | None]:
    body, encoding = encode_body(content, headers)
    if encoding == "base64":
        return encode_body(redactor.raw_bytes(content), headers)
    if isinstance(body, str):
        content_type = (header_value(headers, "content-type") or "").lower()
        return (redactor.query(body) if content_type.startswith(_FORM) else redactor.text(body)), encoding
    return redactor.json(body), encoding


def _kept(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in items if k.lower() not in DROPPED_HEADERS]


def capture_request(request: httpx.Request, redactor: Redactor) -> RecordedRequest:
    """The redacted cassette form of *request* (its body must have been read)."""
    headers = redactor.headers_of(_kept(request.headers.multi_items()))
    body, encoding = _body(request.content, headers, redactor)
    return RecordedRequest(
        method=request.method.upper(),
        url=redactor.url(str(request.url)),
        headers=headers,
        body=body,
        body_encoding=encoding,
    )


def capture_response(
    status: int, headers: httpx.Headers, content: bytes, redactor: Redactor
) -> RecordedResponse:
    """The redacted cassette form of a response whose *content* is already decoded."""
    clean = redactor.headers_of(_kept(headers.multi_items()))
    body, encoding = _body(content, clean, redactor)
    return RecordedResponse(status=status, headers=clean, body=body, body_encoding=encoding)


def rebuild_response(response: httpx.Response, content: bytes) -> httpx.Response:
    """A fresh response carrying the already-read, decoded *content* of *response*.

    The encoding and length headers describe the wire form, which no longer applies; httpx
    recomputes ``content-length`` from the content.
    """
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    extensions = {k: v for k, v in response.extensions.items() if k in ("http_version", "reason_phrase")}
    return httpx.Response(response.status_code, headers=headers, content=content, extensions=extensions)


class Recorder:
    """Appends redacted interactions to a cassette; safe to share between threads."""

    def __init__(self, cassette: Cassette, redactor: Redactor | None = None) -> None:
        self.cassette = cassette
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()

    def record(self, request: httpx.Request, response: httpx.Response, content: bytes) -> Interaction:
        interaction = Interaction(
            request=capture_request(request, self.redactor),
            response=capture_response(response.status_code, response.headers, content, self.redactor),
        )
        with self._lock:
            self.cassette.append(interaction)
        return interaction


class RecordingTransport(httpx.BaseTransport):
    """Forwards every request to *inner* (a real ``httpx.HTTPTransport`` by default) and records it.

    ``httpx.Client(transport=RecordingTransport(cassette=Cassette(path)))``; call :meth:`save`
    (or ``cassette.save()``) when done. The cassette only ever holds redacted data.
    """

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        cassette: Cassette | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.cassette = cassette if cassette is not None else Cassette()
        self.recorder = Recorder(self.cassette, redactor)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        response = self.inner.handle_request(request)
        try:
            content = response.read()
        finally:
            response.close()
        self.recorder.record(request, response, content)
        return rebuild_response(response, content)

    def close(self) -> None:
        self.inner.close()

    def save(self, path: str | Path | None = None, *, secrets: Iterable[str | None] = ()) -> Path:
        return self.cassette.save(path, secrets=secrets)


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    """The ``httpx.AsyncClient`` counterpart of :class:`RecordingTransport`."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        cassette: Cassette | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.cassette = cassette if cassette is not None else Cassette()
        self.recorder = Recorder(self.cassette, redactor)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        response = await self.inner.handle_async_request(request)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        self.recorder.record(request, response, content)
        return rebuild_response(response, content)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def save(self, path: str | Path | None = None, *, secrets: Iterable[str | None] = ()) -> Path:
        return self.cassette.save(path, secrets=secrets)
