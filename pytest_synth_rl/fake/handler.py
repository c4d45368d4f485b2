"""The fake backend as a function: ``httpx.Request -> httpx.Response``, built from a job store.

:class:`RequestHandler` routes a request, logs it, applies injected faults (before the key is
checked, as real infrastructure failures would be), checks the bearer key and hands the call to
the API (:mod:`.api`) or admin (:mod:`.admin`) routes. It knows nothing of respx or ASGI: every
adapter (the respx mount, the ASGI app, ``httpx.MockTransport``) takes one of its two callables.
"""

from __future__ import annotations

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import api
from pytest_synth_rl.fake.admin import handle_admin
from pytest_synth_rl.fake.routes import match_route, route_listing
from pytest_synth_rl.fake.store import JobStore
from pytest_synth_rl.fake.wire import RecordedRequest, error_response, json_response, masked_response
from pytest_synth_rl.secrets.masking import Secret, mask_secret

__all__ = ["ADMIN_PREFIX", "MAX_BODY_BYTES", "FakeRouteError", "RequestHandler"]

ADMIN_PREFIX = "/_fake"
#: Largest request body the fake takes, served or in process (real payloads are a few KiB).
MAX_BODY_BYTES = 10 * 2**20


class FakeRouteError(SynthError, AssertionError):
    """A request reached the fake backend's host on a path it does not serve (strict mode).

    An ``AssertionError`` too, like respx's "not mocked" error, so it fails the test where the
    request was made instead of looking like a server-side 404 the client might swallow.
    """


class RequestHandler:
    """Answers requests to one fake backend: call it, or use :meth:`strict`."""

    def __init__(self, store: JobStore, *, api_base: str, api_path: str, api_key: Secret) -> None:
        self.store = store
        self.api_base = api_base
        self.api_path = api_path
        self.api_key = api_key

    def __call__(self, request: httpx.Request) -> httpx.Response:
        """The answer; unknown paths get a 404 listing the routes.

        An injected connection fault raises :class:`httpx.ConnectError` (the transport decides
        how to surface it).
        """
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
        """``(response, matched)``; *matched* is False for paths the API does not have. Errors
        and admin answers are masked (they echo what the client sent); successful API answers,
        the hot path of every poll, hold only what the fake made."""
        response, matched = self._route(request)
        if response.status_code >= 400 or request.url.path.startswith(ADMIN_PREFIX):
            response = masked_response(response)
        return response, matched

    def _route(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        request.read()  # a no-op for transports that already did; needed for streamed bodies
        if len(request.content) > MAX_BODY_BYTES:
            message = (
                f"the request body is {len(request.content)} bytes; this fake backend accepts at most "
                f"{MAX_BODY_BYTES} bytes"
            )
            return error_response(413, "body_too_large", message), True
        path = request.url.path
        store = self.store
        if path.startswith(ADMIN_PREFIX + "/") or path == ADMIN_PREFIX:
            # The admin routes reset the fake, inject faults and read request bodies: the same key
            # as the API, or any local process could.
            if not self._authorized(request):
                return self._unauthorized(), True
            return handle_admin(store, request, self.api_base), True
        with store.lock:
            record = RecordedRequest.of(request, path=path, time=store.clock.time())
            store.log(record)
            root = self.api_path
            if not (path == root or path.startswith(root + "/")):
                return self._unmatched(record, f"path is outside the API root {root}"), False
            found = match_route(request.method, path[len(root) :])
            if found is None:
                return self._unmatched(record, "no such route"), False
            record.job_id = found.job_id
            if found.route is None:
                allowed = ", ".join(found.allowed)
                record.status = 405
                record.forget_body()
                message = f"{request.method} is not allowed on {path}; use {allowed}"
                return error_response(405, "method_not_allowed", message, [("allow", allowed)]), True
            record.route = name = found.route.name
            if name == "env_keys":
                record.forget_body()
            injected = self._apply_faults(name, request, record)
            if injected is not None:
                record.status = injected.status_code
                return injected, True
            if not self._authorized(request):
                record.status = 401
                record.forget_body()  # anyone can send these: they must not fill the log
                return self._unauthorized(), True
            call = api.Call(store, request, found.job_id)
            response = api.dispatch(name, call)
            record.status = response.status_code
            record.job_id = call.job_id
            return response, True

    def _unmatched(self, record: RecordedRequest, why: str) -> httpx.Response:
        record.status = 404
        record.error = why
        record.forget_body()
        return json_response(
            404,
            {
                "detail": {
                    "error": {
                        "code": "route_not_found",
                        "message": f"{record.method} {record.path}: {why}. This fake backend serves "
                        f"the RL job API under {self.api_path}; see 'routes'.",
                        "routes": route_listing(self.api_path),
                    }
                }
            },
        )

    def _authorized(self, request: httpx.Request) -> bool:
        header: str | None = request.headers.get("authorization")
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token.strip() == str(self.api_key.value)

    def _unauthorized(self) -> httpx.Response:
        return error_response(
            401,
            "unauthorised",
            "missing or invalid API key: send 'Authorization: Bearer <key>' with the key this fake "
            f"backend accepts (FakeSynthBackend(api_key=...), currently {mask_secret(self.api_key.value)}); "
            "with the plugin, use the synth_backend fixture's api_key or set SYNTH_API_KEY to it",
            [("www-authenticate", "Bearer")],
        )

    def _apply_faults(
        self, route: str, request: httpx.Request, record: RecordedRequest
    ) -> httpx.Response | None:
        faults = self.store.faults
        fired = [f for f in faults if f.matches(route) and f.should_fail()] if faults else []
        if not fired:
            return None
        record.fault = "; ".join(f.describe() for f in fired)
        for fault in fired:
            if fault.kind == "latency":
                clock = self.store.clock
                if isinstance(clock, VirtualClock):
                    clock.advance(fault.latency)
                else:
                    with self.store.lock.set_aside():  # a real wait: other requests go on
                        clock.sleep(fault.latency)
        for fault in fired:
            if fault.kind == "connect":
                record.error = "connection error injected"
                raise httpx.ConnectError(
                    f"[FakeSynthBackend] injected connection error on {request.method} {request.url.path} "
                    f"(fault: {fault.describe()})",
                    request=request,
                )
            if fault.kind == "status":
                headers = [("retry-after", f"{fault.retry_after:g}")] if fault.retry_after is not None else []
                return error_response(
                    fault.status,
                    "injected_fault",
                    f"fault injected by FakeSynthBackend: {fault.describe()} (call {fault.seen})",
                    headers,
                )
        return None
