"""An ``httpx.Client`` whose requests go straight to a handler function.

A client on ``httpx.MockTransport(handler)`` still runs every request through the steps around
the transport: auth flow, redirect loop, event hooks, cookie extraction through the standard
library's cookie jar, logging. The plugin's own offline jobs send about nine requests a test to
the fake, and those steps cost about a sixth of an offline job test. :class:`HandlerClient`
skips them while none of them could do anything (no auth, no redirects followed, no hooks, no
cookies held or set); otherwise it is an ordinary ``MockTransport`` client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

__all__ = ["HandlerClient"]


class HandlerClient(httpx.Client):
    """``httpx.Client(transport=httpx.MockTransport(handler))``, minus the no-op steps."""

    def __init__(self, handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> None:
        super().__init__(transport=httpx.MockTransport(handler), **kwargs)
        self._handler = handler

    def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        default = httpx.USE_CLIENT_DEFAULT
        plain = (
            not self.is_closed
            and (auth is None or auth is default)
            and self.auth is None
            and (follow_redirects is False or (follow_redirects is default and not self.follow_redirects))
            and not any(self.event_hooks.values())
            and not self.cookies
        )
        if not plain:
            return super().send(request, stream=stream, auth=auth, follow_redirects=follow_redirects)
        try:
            response = self._handler(request)
        except httpx.RequestError as exc:
            exc.request = request  # as httpx does around a transport
            raise
        response.request = request
        if "set-cookie" in response.headers:
            self.cookies.extract_cookies(response)
        if not stream:
            try:
                response.read()
            except BaseException:
                response.close()
                raise
        return response
