"""An ASGI adapter over a request handler, so any HTTP client can reach the fake backend.

The adapter only translates: ASGI scope and body in, :class:`httpx.Request` to the handler, the
:class:`httpx.Response` back out. The handler is blocking (it may run rollouts against a task
app), so it runs in a worker thread and one slow request never holds up another client. A
response whose body is a stream (the live event stream) is pulled chunk by chunk, also off the
event loop, and sent as it comes; a client that hangs up ends the stream.

One behaviour needs the server's help: an injected connection fault must look like a connection
failure to the client, not like an HTTP 500, so the adapter aborts the socket before any byte of
a response is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from ..support.asgi import Receive, Scope, Send, read_body, serve_lifespan

__all__ = ["FakeASGIApp"]


def _abort_connection(send: Send) -> bool:
    """Abort the client's TCP connection (uvicorn's protocols keep it on ``send.__self__``)."""
    owner = getattr(send, "__self__", None)
    transport = getattr(owner, "transport", None)
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()
        return True
    return False


class FakeASGIApp:
    """ASGI 3 application serving one ``httpx.Request -> httpx.Response`` handler."""

    def __init__(self, handler: Callable[[httpx.Request], httpx.Response]) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        request = self._to_request(scope, body)
        try:
            response = await asyncio.to_thread(self.handler, request)
        except httpx.ConnectError:
            if _abort_connection(send):
                # Let the transport notice it is closed before uvicorn looks at the cycle.
                for _ in range(3):
                    await asyncio.sleep(0)
                return
            # No socket to abort: start a response and end it early, which clients also see
            # as a broken connection.
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
            )
            return
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()]
        try:
            body = response.content
        except httpx.ResponseNotRead:
            await self._stream(response, headers, receive, send)
            return
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _stream(
        response: httpx.Response, headers: list[tuple[bytes, bytes]], receive: Receive, send: Send
    ) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message.get("type") == "http.disconnect":
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        chunks = response.iter_raw()
        headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
        try:
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            while not gone.is_set():
                chunk = await asyncio.to_thread(next, chunks, None)
                if chunk is None:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            await asyncio.to_thread(response.close)

    @staticmethod
    def _to_request(scope: Scope, body: bytes) -> httpx.Request:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        host, port = scope.get("server") or ("127.0.0.1", 80)
        query = scope.get("query_string", b"")
        raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
        target = raw_path + (b"?" + query if query else b"")
        url = httpx.URL(f"{scope.get('scheme', 'http')}://{host}:{port}{target.decode('latin-1')}")
        return httpx.Request(scope["method"], url, headers=headers, content=body)
