"""Mounting a request handler on respx, next to whatever respx routes the test already has.

One router with two routes: the backend's origin goes to the handler; anything else passes
through on loopback or raises respx's "not mocked", which lets the next active router (a user's)
answer. Between fakes on one origin, the one mounted last answers.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable

import httpx
import respx
from respx.models import AllMockedAssertionError

from pytest_synth_rl.taskapp.loopback import is_loopback_host

#: Calls respx keeps per router before they are dropped: a job polled for hours must not grow it.
_KEEP_CALLS = 1000

# Routers currently mounted per origin, newest last: only the newest answers its origin.
_mounted: dict[tuple[str, str, int], list[respx.MockRouter]] = {}
_mounted_lock = threading.Lock()


def mount(handler: Callable[[httpx.Request], httpx.Response], base_url: str) -> respx.MockRouter:
    """Start and return a respx router whose requests to *base_url*'s origin go to *handler*."""
    origin = httpx.URL(base_url)
    port = origin.port or (443 if origin.scheme == "https" else 80)
    key = (origin.scheme, origin.host, port)
    router = respx.MockRouter(assert_all_called=False)

    def answer(request: httpx.Request) -> httpx.Response:
        if _mounted.get(key, [None])[-1] is not router:
            raise AllMockedAssertionError(f"RESPX: {request!r} left to the fake mounted last")
        if len(router.calls) >= _KEEP_CALLS:
            router.reset()
        return handler(request)

    def elsewhere(request: httpx.Request) -> httpx.Request:
        if is_loopback_host(request.url.host):
            return request  # respx passes a request returned by a side effect through
        raise AllMockedAssertionError(
            f"RESPX: {request!r} not mocked! The FakeSynthBackend mounted here serves {base_url} and "
            "lets loopback through; mock other hosts with respx routes."
        )

    for effect in (answer, elsewhere):
        # respx reads a side effect's signature on every call; a fixed one makes that a lookup.
        setattr(effect, "__signature__", inspect.signature(effect))  # noqa: B010 (a function attribute)
    router.route(scheme=origin.scheme, host=origin.host, port=port).side_effect = answer
    router.route().side_effect = elsewhere
    with _mounted_lock:
        _mounted.setdefault(key, []).append(router)
    router.start()
    return router


def unmount(router: respx.MockRouter) -> None:
    """Stop a router :func:`mount` started."""
    router.stop()
    with _mounted_lock:
        for key, routers in list(_mounted.items()):
            if router in routers:
                routers.remove(router)
            if not routers:
                del _mounted[key]
