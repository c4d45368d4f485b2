"""Serving the fake on a loopback port: the ASGI adapter on the task app's uvicorn thread.

Reuses :class:`~pytest_synth_rl.taskapp.serving.ServerThread` (port 0, readiness from the server,
fast stop, TCP_NODELAY) rather than :class:`InProcessTaskApp`, whose task-app key export and
``/health`` probe mean nothing for a backend.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from pytest_synth_rl.fake.asgi import DEFAULT_READ_TIMEOUT, FakeASGIApp
from pytest_synth_rl.taskapp.serving import ServerThread

__all__ = ["FakeServer"]


class FakeServer:
    """One served request handler; :meth:`start` returns its base URL."""

    def __init__(
        self,
        handler: Callable[[httpx.Request], httpx.Response],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout: float = 15.0,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> None:
        self._thread = ServerThread(
            FakeASGIApp(handler, read_timeout=read_timeout),
            host=host,
            port=port,
            lifespan="off",
            description="fake Synth backend",
            read_timeout=read_timeout,
        )
        self._timeout = startup_timeout
        self.url: str | None = None

    def start(self) -> str:
        self._thread.start(self._timeout)
        self.url = self._thread.url
        return self.url

    def stop(self) -> None:
        self._thread.stop()
        self.url = None
