"""An ``httpx.Client`` whose requests go straight to a handler function.

It skips the client's steps around the transport (auth, redirects, hooks, cookie jar), about a
sixth of an offline job test, while none of them could do anything; otherwise it is an ordinary
``MockTransport`` client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx


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
