"""An ASGI adapter over a request handler, so any HTTP client can reach the fake backend.

The adapter only translates: ASGI scope and body in, :class:`httpx.Request` to the handler, the
:class:`httpx.Response` back out. One behaviour needs the server's help: an injected connection
fault must look like a connection failure to the client, not like an HTTP 500, so the adapter
aborts the socket before any byte of a response is written.
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
            response = self.handler(request)
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
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})

    @staticmethod
    def _to_request(scope: Scope, body: bytes) -> httpx.Request:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        host, port = scope.get("server") or ("127.0.0.1", 80)
        query = scope.get("query_string", b"")
        raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
        target = raw_path + (b"?" + query if query else b"")
        url = httpx.URL(f"{scope.get('scheme', 'http')}://{host}:{port}{target.decode('latin-1')}")
        return httpx.Request(scope["method"], url, headers=headers, content=body)
