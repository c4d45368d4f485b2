"""The fake backend as a function, ``httpx.Request -> httpx.Response``, that every adapter takes:
it routes, logs, applies injected faults (before the key check), checks the bearer key and answers
from the API's routes or the admin routes under ``/_fake/``, which script a served fake as JSON."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import ConfigError, ConfigProblem, SynthError, SynthUsageError, closest
from pytest_synth_rl.fake import api
from pytest_synth_rl.fake.api import ApiCall
from pytest_synth_rl.fake.fake_job import FakeJob
from pytest_synth_rl.fake.faults import make_fault
from pytest_synth_rl.fake.jobs import TERMINAL
from pytest_synth_rl.fake.keys import EnvKeys
from pytest_synth_rl.fake.lifecycle import Lifecycle
from pytest_synth_rl.fake.scenario import Scenario, error_text_problem, number_in, written
from pytest_synth_rl.fake.store import StoreFull
from pytest_synth_rl.fake.wire import (
    LoggedRequest,
    at_most,
    error_response,
    json_response,
    masked_response,
    method_not_allowed,
    problems_response,
    request_json,
)
from pytest_synth_rl.secrets.masking import Secret, mask_secret

ADMIN_PREFIX = "/_fake"
#: Largest request body the fake takes, served or in process.
MAX_BODY_BYTES = 10 * 2**20
_API_ROUTES = {(method, path.strip("/")): name for method, path, name, _ in api.ROUTES}


def _shape(path: str, jobs: int) -> tuple[str, str | None]:
    """*path*'s segments, the one after ``jobs`` (segment *jobs*) as ``{job_id}``; and that id."""
    parts = [p for p in path.split("/") if p]
    if parts[jobs : jobs + 1] != ["jobs"] or len(parts) <= jobs + 1:
        return "/".join(parts), None
    return "/".join([*parts[: jobs + 1], "{job_id}", *parts[jobs + 2 :]]), parts[jobs + 1]


class RouteMatch(NamedTuple):
    """The route's name (None: the path exists, not with this method), the job id, the methods allowed."""

    name: str | None
    job_id: str | None
    allowed: tuple[str, ...] = ()


@functools.lru_cache(maxsize=4096)
def match_route(method: str, path: str, root: str) -> RouteMatch | None:
    """The API route *path* is (None: outside the API root *root*, or no such path)."""
    if not (path == root or path.startswith(root + "/")):
        return None
    shape, job_id = _shape(path[len(root) :], 1)
    name = _API_ROUTES.get((method, shape))
    if name is not None:
        return RouteMatch(name, job_id)
    allowed = tuple(sorted({m for m, path in _API_ROUTES if path == shape}))
    return RouteMatch(None, job_id, allowed) if allowed else None


def is_admin(path: str) -> bool:
    return path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


def route_listing(api_root: str) -> list[str]:
    root = api_root.rstrip("/")
    return [f"{method} {root}{template}" for method, template, _, _ in api.ROUTES]


class FakeRouteError(SynthError, AssertionError):
    """A request reached the fake backend's host on a path it does not serve (strict mode)."""


# -- admin routes (/_fake/) ------------------------------------------------------------------
#: The most one ``POST /_fake/clock/advance`` moves the clock: a year of virtual time.
MAX_CLOCK_ADVANCE = 366 * 86400.0
#: The latest events, metric points and rollouts ``GET /_fake/jobs/{id}`` shows.
DETAIL_ITEMS = 1000
#: Unknown field names one error lists, and the characters of each.
_SHOWN_UNKNOWN = 20
_SHOWN_NAME_CHARS = 40
#: Longest ``to`` an advance accepts.
_MAX_TARGET_CHARS = 64
#: The job actions that finish a job, and the status each leaves it in.
_FINISHING: dict[str, str] = {"succeed": "succeeded", "fail": "failed", "cancel": "cancelled"}


def _unknown_fields(given: dict[str, Any], allowed: frozenset[str], what: str) -> httpx.Response | None:
    extra = sorted(set(given) - allowed)
    if not extra:
        return None
    shown = [name[:_SHOWN_NAME_CHARS] for name in extra[:_SHOWN_UNKNOWN]]
    names = "[" + ", ".join(map(repr, shown)) + "]"
    if len(extra) > len(shown):
        names += f" (and {len(extra) - len(shown)} more)"
    guesses = [f"{close!r} for {name!r}" for name in shown if (close := closest(name, sorted(allowed)))]
    guess = f"did you mean {', '.join(guesses)}? " if guesses else ""
    message = f"unknown {what} fields {names}; {guess}allowed: {sorted(allowed)}"
    return error_response(422, "unknown_fields", message)


def _job(call: ApiCall) -> FakeJob:
    return FakeJob(call.lifecycle, call.store.get(call.job_id or ""))


def _index(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    here = call.request.url.copy_with(path=httpx.URL(call.api_base).path, query=None, fragment=None)
    return json_response(200, {"routes": list(ADMIN_ROUTES), "api_base": str(here)})


def _set_scenario(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    target = body.pop("job", None)
    made = Scenario(**body)
    if target is None:
        call.store.set_default(made)
    else:
        call.lifecycle.script(str(target), made)
    return json_response(200, made.describe())


def _jobs(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    with call.store.lock:
        records = [call.lifecycle.sync(record) for record in call.store.records()]
        return json_response(200, {"jobs": [r.listing() for r in records]})


def _job_detail(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    with call.store.lock:
        job = call.lifecycle.sync(call.store.get(call.job_id or ""))
        summary = job.summary()
        summary["events"] = job.event_dicts(max(0, len(job.events) - DETAIL_ITEMS))
        summary["metric_points"] = job.point_dicts(last=DETAIL_ITEMS)
        summary["metric_points_count"] = job.point_count
        rollouts = job.rollouts[-DETAIL_ITEMS:]
    if max(len(job.events), job.point_count, len(job.rollouts)) > DETAIL_ITEMS:
        base = f"GET {call.api_base.rstrip('/')}/rl/jobs/{job.id}"
        summary["history_note"] = (
            f"the latest {DETAIL_ITEMS} items; all: {base}/events?since_seq=0, {base}/metrics"
        )
    shown = ("step", "seed", "mode", "run_id", "status_code", "reward", "error", "elapsed")
    summary["rollouts"] = [{name: getattr(r, name) for name in shown} for r in rollouts]
    return json_response(200, summary)


def _advance_job(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    to = body.get("to", "end")
    if not ((isinstance(to, str) and len(to) <= _MAX_TARGET_CHARS) or type(to) is int):  # not a bool
        message = f"must be 'running', a step number or 'end', got {written(to)}"
        raise SynthUsageError([ConfigProblem("advance.to", message, 'e.g. {"to": "end"} or {"to": 3}')])
    job = _job(call)
    try:
        job.advance_to(to)
    except SynthUsageError as exc:
        problems = [dataclasses.replace(p, key="advance.to") for p in exc.problems]
        raise SynthUsageError(problems) from None
    return json_response(200, job.status_payload())


def _finish(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    action = call.request.url.path.rstrip("/").rsplit("/", 1)[-1]
    error = body.get("error")
    problem = None if error is None else error_text_problem(error, "fail.error")
    if problem is not None:
        raise SynthUsageError([problem])
    job = _job(call)
    with call.store.lock:
        before = job.status
        if before not in TERMINAL:
            getattr(job, action)(*([error or "failed via the admin API"] if action == "fail" else []))
        status = job.status
        if before in TERMINAL or status != _FINISHING[action]:
            message = f"job {job.id} already {status}; only queued or running jobs can {action}"
            return error_response(409, "job_already_finished", message, job_status=status)
        return json_response(200, job.status_payload())


def _clock(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    clock = call.lifecycle.clock
    return json_response(
        200, {"now": clock.now(), "time": clock.time(), "virtual": isinstance(clock, VirtualClock)}
    )


def _advance_clock(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
    clock = call.lifecycle.clock
    if not isinstance(clock, VirtualClock):
        message = f"the fake runs on {clock!r}; only a VirtualClock can be advanced"
        return error_response(409, "not_virtual", message)
    seconds: Any = body.get("seconds")
    if not number_in(seconds, 0, MAX_CLOCK_ADVANCE):
        message = f"'seconds' must be a finite number from 0 to {MAX_CLOCK_ADVANCE:g}, got {seconds!r}"
        return error_response(422, "bad_seconds", message)
    clock.advance(float(seconds))
    return json_response(200, {"now": clock.now(), "time": clock.time()})


_Handler = Callable[[ApiCall, dict[str, Any]], httpx.Response]


def _then_ok(act: Callable[[ApiCall], object]) -> _Handler:
    def handler(call: ApiCall, body: dict[str, Any]) -> httpx.Response:
        act(call)
        return json_response(200, {"ok": True})

    return handler


def _listing(name: str) -> _Handler:
    """``GET /_fake/<name>``: the store's *name* list, each item as JSON."""
    return lambda call, _: json_response(200, {name: [item.to_json() for item in getattr(call.store, name)]})


#: What a route's body may hold (its name in a typo message, and its fields), or None: no body.
_Reads = tuple[str, frozenset[str]] | None
_NOTHING: frozenset[str] = frozenset()
#: Each route as ``GET /_fake`` lists it, what its body may hold and what answers it.
_TABLE: tuple[tuple[str, _Reads, _Handler], ...] = (
    ("GET /_fake", None, _index),
    ("POST /_fake/reset", ("reset", _NOTHING), _then_ok(lambda call: call.reset())),
    ("GET /_fake/scenario", None, lambda call, _: json_response(200, call.store.default_scenario.describe())),
    (
        "POST /_fake/scenario  {scenario fields..., optional 'job': 'next' | <job id>}",
        ("scenario", frozenset(f.name for f in dataclasses.fields(Scenario)) | {"job"}),
        _set_scenario,
    ),
    ("GET /_fake/jobs", None, _jobs),
    ("GET /_fake/jobs/{job_id}", None, _job_detail),
    (
        "POST /_fake/jobs/{job_id}/advance  {'to': 'running' | <step> | 'end'}",
        ("advance", frozenset({"to"})),
        _advance_job,
    ),
    ("POST /_fake/jobs/{job_id}/succeed", ("succeed", _NOTHING), _finish),
    ("POST /_fake/jobs/{job_id}/fail  {'error': '...'}", ("fail", frozenset({"error"})), _finish),
    ("POST /_fake/jobs/{job_id}/cancel", ("cancel", _NOTHING), _finish),
    ("GET /_fake/requests", None, _listing("requests")),
    ("GET /_fake/faults", None, _listing("faults")),
    (
        "POST /_fake/faults  {'route', 'status' | 'connect_error' | 'latency', "
        "'pattern' | 'fail_next' | 'probability', ...}",
        ("fault", frozenset(inspect.signature(make_fault).parameters)),
        lambda call, body: json_response(201, call.store.add_fault(make_fault(**body)).to_json()),
    ),
    ("DELETE /_fake/faults", None, _then_ok(lambda call: call.store.clear_faults())),
    ("GET /_fake/clock", None, _clock),
    ("POST /_fake/clock/advance  {'seconds': n}", ("clock advance", frozenset({"seconds"})), _advance_clock),
)
ADMIN_ROUTES: tuple[str, ...] = tuple(line for line, _, _ in _TABLE)
#: ``(method, path below /_fake/, with {job_id})`` to what the route reads and its handler.
_ROUTES: dict[tuple[str, str], tuple[_Reads, _Handler]] = {
    (line.split()[0], line.split()[1][len("/_fake/") :]): (reads, handler) for line, reads, handler in _TABLE
}


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
            lines = "".join(f"\n    {line}" for line in route_listing(self.api_base))
            message = f"FakeSynthBackend has no route {request.method} {request.url}; routes served:{lines}"
            raise FakeRouteError(message, hint="fix the URL, or use FakeSynthBackend(strict=False) for a 404")
        return response

    def _answer(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        # Errors and admin answers echo what the client sent: masked.
        response, matched = self._route(request)
        if response.status_code >= 400 or is_admin(request.url.path):
            response = masked_response(response)
        return response, matched

    def _route(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        request.read()
        if len(request.content) > MAX_BODY_BYTES:
            message = at_most(f"the request body is {len(request.content)} bytes", f"{MAX_BODY_BYTES} bytes")
            return error_response(413, "body_too_large", message), True
        path, store = request.url.path, self.lifecycle.store
        if is_admin(path):
            if not self._authorized(request):
                return self._unauthorized(), True
            return self._admin(request), True
        with store.lock:
            record = LoggedRequest.of(request, path=path, time=store.clock.time())
            store.log(record)
            response, matched = self._api(request, record)
            record.status = response.status_code
            # Unrouted requests must not fill the log; nor may sealed keys sit in it.
            if record.route in (None, "env_keys"):
                record.forget_body()
            return response, matched

    def _api(self, request: httpx.Request, record: LoggedRequest) -> tuple[httpx.Response, bool]:
        path, root = record.path, self.api_path
        found = match_route(request.method, path, root)
        if found is None:
            inside = path == root or path.startswith(root + "/")
            record.error = why = "no such route" if inside else f"path is outside the API root {root}"
            message = f"{record.method} {path}: {why}; see 'routes'"
            return error_response(404, "route_not_found", message, routes=route_listing(root)), False
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
        call = ApiCall(self.lifecycle, request, found.job_id, self.keys)
        response = api.dispatch(name, call)
        record.job_id = call.job_id
        return response, True

    def _admin(self, request: httpx.Request) -> httpx.Response:
        method, path, store = request.method, request.url.path, self.lifecycle.store
        parts = [p for p in path.split("/") if p][1:]  # drop "_fake"
        shape, job_id = _shape("/".join(parts), 0)
        call = ApiCall(self.lifecycle, request, job_id, self.keys, self.api_base, self.reset)
        found = _ROUTES.get((method, shape))
        try:
            if found is None and method == "POST" and job_id and len(parts) == 3:
                store.get(job_id)  # an unknown job: 404
                message = f"unknown job action {parts[2]!r}; use advance, succeed, fail, cancel"
                return error_response(404, "not_found", message)
            if found is None:
                allowed = sorted(m for m, route in _ROUTES if route == shape)
                if allowed:
                    return method_not_allowed(method, path, allowed)
                message = f"no admin route {method} {path}"
                return error_response(404, "route_not_found", message, routes=list(ADMIN_ROUTES))
            reads, handler = found
            if job_id:
                store.get(job_id)
            body = request_json(request.content) if reads and request.content else {}
            if not isinstance(body, dict):
                raise ValueError("the admin request body must be a JSON object")
            bad = _unknown_fields(body, reads[1], reads[0]) if reads else None
            return bad if bad is not None else handler(call, body)
        except (ConfigError, SynthUsageError) as exc:
            return problems_response(exc.problems)
        except StoreFull as full:
            return error_response(429, full.code, f"{full.message}; {full.hint}")
        except SynthError as exc:
            return error_response(404, "not_found", str(exc))
        except (ValueError, TypeError, OverflowError) as exc:  # bad JSON, or a field of a wrong type or size
            return error_response(400, "bad_request", f"{exc}; see GET /_fake")

    def _authorized(self, request: httpx.Request) -> bool:
        header: str = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token.strip() == str(self.api_key.value)

    def _unauthorized(self) -> httpx.Response:
        key = mask_secret(self.api_key.value)
        message = "missing or invalid API key: send 'Authorization: Bearer <key>' with the key of "
        message += f"FakeSynthBackend(api_key=...) ({key}; the synth_backend fixture's api_key)"
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
