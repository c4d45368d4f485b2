"""Mounting a request handler on respx, next to whatever respx routes the test already has.

One ``respx.MockRouter``, built and started with respx's public API, with two routes in order:

* the backend's origin (scheme, host, port): the side effect is the handler;
* everything else: loopback (the task app, the stub model) passes through to the real socket;
  any other host is not mocked here. That side effect raises respx's "not mocked" assertion,
  which respx answers by asking the next active router, so a user's routes for other hosts
  keep working, and if nobody mocks the host the test fails instead of reaching the network.

respx asks active routers in the order they started: a user's router started before the fake
can route loopback or the backend's host itself; one started after only sees what the fake does
not answer. Between fakes on the same origin, the one mounted last answers (the others step
aside the same way), as a nested fake would expect.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable

import httpx
import respx
from respx.models import AllMockedAssertionError

from pytest_synth_rl.taskapp.loopback import is_loopback_host

__all__ = ["mount", "unmount"]

#: Calls respx keeps per router before they are dropped: a job polled for hours must not grow it.
_KEEP_CALLS = 1000

# Routers currently mounted per origin, newest last: only the newest answers its origin.
_mounted: dict[tuple[str, str, int], list[respx.MockRouter]] = {}
_mounted_lock = threading.Lock()


def mount(handler: Callable[[httpx.Request], httpx.Response], base_url: str) -> respx.MockRouter:
    """Start and return a respx router whose requests to *base_url*'s origin go to *handler*.

    Stop it with :func:`unmount`.
    """
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
