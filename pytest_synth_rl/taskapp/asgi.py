"""ASGI chores shared by the plugin's own plain-ASGI servers (the served fake, the stub model)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer a lifespan scope: nothing to start or stop, but uvicorn expects the handshake."""
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """The whole request body. Past *limit* bytes the rest is read and dropped (so the client is
    not left writing into a closed socket); the truncated body then fails to parse upstream."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            break
        chunk = event.get("body", b"")
        size += len(chunk)
        if limit is None or size <= limit:
            chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks)
