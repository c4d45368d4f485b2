"""The fake backend as a function, ``httpx.Request -> httpx.Response``, that every adapter takes.

It routes, logs, applies injected faults (before the key check, as real infrastructure fails),
checks the bearer key and hands the call to the API or admin routes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import api
from pytest_synth_rl.fake.admin import handle_admin
from pytest_synth_rl.fake.keys import EnvKeys
from pytest_synth_rl.fake.lifecycle import Lifecycle
from pytest_synth_rl.fake.wire import LoggedRequest, error_response, masked_response, method_not_allowed
from pytest_synth_rl.secrets.masking import Secret, mask_secret

ADMIN_PREFIX = "/_fake"
#: Largest request body the fake takes, served or in process.
MAX_BODY_BYTES = 10 * 2**20
_PATTERNS = [
    (method, re.compile(path.strip("/").replace("{job_id}", "([^/]+)")), name)
    for method, path, name, _ in api.ROUTES
]


class RouteMatch(NamedTuple):
    """The route's name (None: the path exists, not with this method), the job id, the methods allowed."""

    name: str | None
    job_id: str | None
    allowed: tuple[str, ...] = ()


@functools.lru_cache(maxsize=4096)
def match_route(method: str, relative_path: str) -> RouteMatch | None:
    """The route for *relative_path* (below the API root), or None if the path is unknown."""
    allowed: list[str] = []
    job_id = None
    for route_method, pattern, name in _PATTERNS:
        found = pattern.fullmatch(relative_path.strip("/"))
        if found is not None:
            job_id = found.group(1) if pattern.groups else None
            if route_method == method:
                return RouteMatch(name, job_id)
            allowed.append(route_method)
    return RouteMatch(None, job_id, tuple(sorted(set(allowed)))) if allowed else None


def route_listing(api_root: str) -> list[str]:
    root = api_root.rstrip("/")
    return [f"{method} {root}{template}" for method, template, _, _ in api.ROUTES]


class FakeRouteError(SynthError, AssertionError):
    """A request reached the fake backend's host on a path it does not serve (strict mode)."""


class RequestHandler:
    """Answers requests to one fake backend: call it, or use :meth:`strict`."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        *,
        keys: EnvKeys,
        reset: Callable[[], None],
        api_base: str,
        api_key: Secret,
    ) -> None:
        self.lifecycle, self.keys, self.reset, self.api_key = lifecycle, keys, reset, api_key
        self.api_base = api_base
        self.api_path = urlsplit(api_base).path

    def __call__(self, request: httpx.Request) -> httpx.Response:
        """The answer (an injected connection fault raises :class:`httpx.ConnectError`)."""
        return self._answer(request)[0]

    def strict(self, request: httpx.Request) -> httpx.Response:
        """Like calling the handler, but an unknown path raises :class:`FakeRouteError`."""
        response, matched = self._answer(request)
        if not matched:
            lines = "\n".join(f"    {line}" for line in route_listing(self.api_base))
            raise FakeRouteError(
                f"FakeSynthBackend has no route {request.method} {request.url}\n  routes served:\n{lines}",
                hint="fix the URL in the client, or create the fake with strict=False to get a 404 instead",
            )
        return response

    def _answer(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        # Errors and admin answers echo what the client sent: masked.
        response, matched = self._route(request)
        if response.status_code >= 400 or request.url.path.startswith(ADMIN_PREFIX):
            response = masked_response(response)
        return response, matched

    def _route(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        request.read()
        if len(request.content) > MAX_BODY_BYTES:
            message = f"the request body is {len(request.content)} bytes; this fake backend accepts at most "
            return error_response(413, "body_too_large", f"{message}{MAX_BODY_BYTES} bytes"), True
        path, store = request.url.path, self.lifecycle.store
        if path.startswith(ADMIN_PREFIX + "/") or path == ADMIN_PREFIX:
            if not self._authorized(request):
                return self._unauthorized(), True
            return handle_admin(self.lifecycle, request, self.api_base, self.reset), True
        with store.lock:
            record = LoggedRequest.of(request, path=path, time=store.clock.time())
            store.log(record)
            response, matched = self._api(request, record)
            record.status = response.status_code
            # Unrouted requests must not fill the log; nor may sealed keys sit in it.
            if record.route in (None, "env_keys"):
                record.forget_body()
            return response, matched

    def route_of(self, method: str, path: str) -> RouteMatch | None:
        """The API route *path* is (None: outside the API, or no route)."""
        root = self.api_path
        if not (path == root or path.startswith(root + "/")):
            return None
        return match_route(method, path[len(root) :])

    def _api(self, request: httpx.Request, record: LoggedRequest) -> tuple[httpx.Response, bool]:
        path, root = record.path, self.api_path
        found = self.route_of(request.method, path)
        if found is None:
            inside = path == root or path.startswith(root + "/")
            record.error = why = "no such route" if inside else f"path is outside the API root {root}"
            message = f"{record.method} {path}: {why}. This fake backend serves the RL job API under {root}; "
            return error_response(
                404, "route_not_found", message + "see 'routes'.", routes=route_listing(root)
            ), False
        record.job_id = found.job_id
        if found.name is None:
            return method_not_allowed(request.method, path, found.allowed), True
        record.route = name = found.name
        injected = self._apply_faults(name, request, record)
        if injected is not None:
            return injected, True
        if not self._authorized(request):
            record.forget_body()
            return self._unauthorized(), True
        call = api.ApiCall(self.lifecycle, request, found.job_id, self.keys)
        response = api.dispatch(name, call)
        record.job_id = call.job_id
        return response, True

    def _authorized(self, request: httpx.Request) -> bool:
        header: str = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token.strip() == str(self.api_key.value)

    def _unauthorized(self) -> httpx.Response:
        message = (
            "missing or invalid API key: send 'Authorization: Bearer <key>' with the key this fake "
            f"backend accepts (FakeSynthBackend(api_key=...), currently {mask_secret(self.api_key.value)}); "
            "with the plugin, use the synth_backend fixture's api_key or set SYNTH_API_KEY to it"
        )
        return error_response(401, "unauthorised", message, [("www-authenticate", "Bearer")])

    def _apply_faults(
        self, route: str, request: httpx.Request, record: LoggedRequest
    ) -> httpx.Response | None:
        store = self.lifecycle.store
        fired = [f for f in store.faults if f.matches(route) and f.should_fail()] if store.faults else []
        if not fired:
            return None
        record.fault = "; ".join(f.describe() for f in fired)
        for fault in fired:
            if fault.kind == "latency":
                if isinstance(store.clock, VirtualClock):
                    store.clock.advance(fault.latency)
                else:
                    with store.lock.set_aside():  # a real wait: other requests go on
                        store.clock.sleep(fault.latency)
        for fault in fired:
            if fault.kind == "connect":
                record.error = "connection error injected"
                where = f"{request.method} {request.url.path} (fault: {fault.describe()})"
                raise httpx.ConnectError(
                    f"[FakeSynthBackend] injected connection error on {where}", request=request
                )
            if fault.kind == "status":
                headers = [("retry-after", f"{fault.retry_after:g}")] if fault.retry_after is not None else []
                message = f"fault injected by FakeSynthBackend: {fault.describe()} (call {fault.seen})"
                return error_response(fault.status, "injected_fault", message, headers)
        return None


class HandlerClient(httpx.Client):
    """``httpx.Client(transport=httpx.MockTransport(handler))`` that skips auth, redirects, hooks and
    cookies when none is set, calling the handler straight."""

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
            exc.request = request
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
