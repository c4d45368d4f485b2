"""Mounting the fake on respx, next to whatever respx routes the test already has.

respx keeps a list of active routers per interception layer and asks them in order; a router
that raises ``AllMockedAssertionError`` passes the request on to the next, one that raises
``PassThrough`` sends it to the real network. We register two routers of our own:

* **answer** (httpx layer, ``Client._transport_for_url``): requests to the fake's origin are
  answered right here, without httpcore round trips or respx pattern matching, which keeps a
  poll through the fake close to the cost of a bare ``httpx.MockTransport``. Everything else is
  handed on: to a later router at this layer that explicitly routes it, else down to the
  network layer.
* **guard** (httpcore layer, respx's default, the one ``respx.mock`` uses): loopback requests
  (the task app, the stub model) pass through unless another router explicitly routes them, so a
  user's strict ``respx.mock`` does not block the rollouts; requests to other hosts go to the
  user's routers, and if nobody mocks them they fail with respx's "not mocked" error, so a test
  never reaches the real network by accident.

Both are put first in their layer's list, so the fake's host cannot be shadowed by a catch-all
route, and both are removed on :meth:`RespxMount.stop` (respx stops patching when the last
router leaves).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import respx
from respx.mocks import Mocker
from respx.models import AllMockedAssertionError, PassThrough

from ..support.loopback import is_loopback_host

if TYPE_CHECKING:
    from .backend import FakeSynthBackend

__all__ = ["RespxMount"]

# respx wants the route a pass-through came from; ours come from routing logic, not a route.
_PASS_ROUTE = respx.Route()


def _explicitly_routed(mocker: type[Mocker] | None, request: httpx.Request, skip: object) -> bool:
    """True if a router (other than *skip*) in *mocker*'s layer has a route matching *request*."""
    if mocker is None:
        return False
    for router in mocker.routers:
        if router is skip:
            continue
        mount = getattr(router, "_mount", None)
        if isinstance(mount, RespxMount) and mount.origin.owns(request.url):
            return True  # another fake, on another origin
        for route in router.routes:
            try:
                if route.pattern.match(request):
                    return True
            except Exception:  # a user's odd pattern must not break our routing decision
                continue
    return False


class _Origin:
    """The fake's scheme/host/port, compared cheaply against each request."""

    def __init__(self, base_url: str) -> None:
        url = httpx.URL(base_url)
        self.scheme = url.scheme
        self.host = url.host
        self.port = url.port

    def owns(self, url: httpx.URL) -> bool:
        return url.host == self.host and url.scheme == self.scheme and url.port == self.port


class _AnswerRouter(respx.MockRouter):
    """httpx-layer router: answers the fake's origin, hands everything else on."""

    def __init__(self, mount: RespxMount) -> None:
        super().__init__(assert_all_called=False, assert_all_mocked=True, using="httpx")
        self._mount = mount

    def handler(self, request: httpx.Request) -> httpx.Response:
        mount = self._mount
        if mount.origin.owns(request.url):
            return mount.answer(request)
        if _explicitly_routed(self.Mocker, request, self):
            raise AllMockedAssertionError(f"RESPX: {request!r} left to the next router")
        raise PassThrough(f"not for the fake backend: {request!r}", request=request, origin=_PASS_ROUTE)

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        return self.handler(request)


class _GuardRouter(respx.MockRouter):
    """httpcore-layer router: loopback passes through, the fake answers its origin, others fail."""

    def __init__(self, mount: RespxMount) -> None:
        super().__init__(assert_all_called=False, assert_all_mocked=True, using="httpcore")
        self._mount = mount

    def handler(self, request: httpx.Request) -> httpx.Response:
        mount = self._mount
        if mount.origin.owns(request.url):
            return mount.answer(request)
        if _explicitly_routed(self.Mocker, request, self):
            raise AllMockedAssertionError(f"RESPX: {request!r} left to the next router")
        if is_loopback_host(request.url.host):
            raise PassThrough(f"loopback passes through: {request!r}", request=request, origin=_PASS_ROUTE)
        raise AllMockedAssertionError(
            f"RESPX: {request!r} not mocked! The FakeSynthBackend mounted here serves "
            f"{mount.fake.base_url} and lets loopback through; mock other hosts with respx routes."
        )

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        return self.handler(request)


class RespxMount:
    """The fake's presence in respx: two routers, first in their layers, and their removal."""

    def __init__(self, fake: FakeSynthBackend) -> None:
        self.fake = fake
        self.origin = _Origin(fake.base_url)
        self._routers: list[respx.MockRouter] = [_AnswerRouter(self), _GuardRouter(self)]

    def answer(self, request: httpx.Request) -> httpx.Response:
        response, matched = self.fake._handle(request)
        if not matched and self.fake.strict:
            raise self.fake.unmatched_error(request)
        return response

    def start(self) -> None:
        for router in self._routers:
            router.start()
            mocker = router.Mocker
            if mocker is not None and mocker.routers and mocker.routers[0] is not router:
                mocker.routers.remove(router)
                mocker.routers.insert(0, router)

    def stop(self) -> None:
        for router in reversed(self._routers):
            router.stop(quiet=True)

    @property
    def routers(self) -> list[Any]:
        return list(self._routers)
