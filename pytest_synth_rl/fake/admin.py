"""Admin routes under ``/_fake/``: script a served fake from another process (like moto's ``/moto-api/``).

Everything the Python API offers (scenarios, faults, job pushes, the request log, reset, moving a
virtual clock) is reachable as JSON, behind the API's own bearer key. Request bodies come back
redacted, and never the environment-key upload.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import ConfigError, ConfigProblem, SynthError, SynthUsageError, closest
from pytest_synth_rl.fake.fake_job import FakeJob
from pytest_synth_rl.fake.faults import make_fault
from pytest_synth_rl.fake.jobs import TERMINAL
from pytest_synth_rl.fake.lifecycle import Lifecycle
from pytest_synth_rl.fake.scenario import Scenario, error_text_problem, written
from pytest_synth_rl.fake.store import StoreFull
from pytest_synth_rl.fake.wire import (
    error_response,
    json_response,
    load_json,
    non_finite_field,
    problems_response,
)

__all__ = ["ADMIN_ROUTES", "DETAIL_ITEMS", "MAX_CLOCK_ADVANCE", "handle_admin"]

#: The most one ``POST /_fake/clock/advance`` moves the clock: a year of virtual time.
MAX_CLOCK_ADVANCE = 366 * 86400.0
#: Events, metric points and rollouts ``GET /_fake/jobs/{id}`` shows: the latest (a job may have
#: tens of thousands; the API's paged routes give them all).
DETAIL_ITEMS = 1000

ADMIN_ROUTES: tuple[str, ...] = (
    "GET /_fake",
    "POST /_fake/reset",
    "GET /_fake/scenario",
    "POST /_fake/scenario  {scenario fields..., optional 'job': 'next' | <job id>}",
    "GET /_fake/jobs",
    "GET /_fake/jobs/{job_id}",
    "POST /_fake/jobs/{job_id}/advance  {'to': 'running' | <step> | 'end'}",
    "POST /_fake/jobs/{job_id}/succeed",
    "POST /_fake/jobs/{job_id}/fail  {'error': '...'}",
    "POST /_fake/jobs/{job_id}/cancel",
    "GET /_fake/requests",
    "GET /_fake/faults",
    "POST /_fake/faults  {'route', 'status' | 'connect_error' | 'latency', "
    "'pattern' | 'fail_next' | 'probability', ...}",
    "DELETE /_fake/faults",
    "GET /_fake/clock",
    "POST /_fake/clock/advance  {'seconds': n}",
)

_SCENARIO_FIELDS = frozenset(f.name for f in dataclasses.fields(Scenario))
_FAULT_FIELDS = frozenset(inspect.signature(make_fault).parameters)


def _body(request: httpx.Request) -> dict[str, Any]:
    if not request.content:
        return {}
    try:
        parsed = load_json(request.content)  # a too-long integer: TooManyDigits, a 400 naming it
    except RecursionError:  # nested deeper than the parser can go: a bad body, not a crash
        raise ValueError("the admin request body is nested too deeply to parse") from None
    if not isinstance(parsed, dict):
        raise ValueError("the admin request body must be a JSON object")
    bad = non_finite_field(parsed)
    if bad is not None:
        name, number = bad
        raise ValueError(
            f"field {name!r} must be a finite number, got {number!r}: NaN and Infinity (and numbers "
            "too large for a float, like 1e400) are not accepted"
        )
    return parsed


#: What each job action reads from its body; anything else is a typo to report.
_JOB_ACTION_FIELDS: dict[str, frozenset[str]] = {
    "advance": frozenset({"to"}),
    "succeed": frozenset(),
    "fail": frozenset({"error"}),
    "cancel": frozenset(),
}


#: Unknown field names one error lists (a body may hold thousands), and the characters of each.
_SHOWN_UNKNOWN = 20
_SHOWN_NAME_CHARS = 40
#: Longest ``to`` an advance accepts: the named targets are a few characters.
_MAX_TARGET_CHARS = 64


def _unknown_fields(given: dict[str, Any], allowed: frozenset[str], what: str) -> httpx.Response | None:
    extra = sorted(set(given) - allowed)
    if not extra:
        return None
    shown = extra[:_SHOWN_UNKNOWN]
    names = "[" + ", ".join(f"{name[:_SHOWN_NAME_CHARS]!r}" for name in shown) + "]"
    if len(extra) > len(shown):
        names += f" (and {len(extra) - len(shown)} more)"
    guesses = []
    for name in shown:
        close = closest(name[:_SHOWN_NAME_CHARS], sorted(allowed))
        if close:
            guesses.append(f"{close!r} for {name[:_SHOWN_NAME_CHARS]!r}")
    guess = f"did you mean {', '.join(guesses)}? " if guesses else ""
    return error_response(
        422, "unknown_fields", f"unknown {what} fields {names}; {guess}allowed: {sorted(allowed)}"
    )


def _advance(job: FakeJob, body: dict[str, Any]) -> None:
    """``POST /_fake/jobs/{id}/advance {"to": ...}``; every problem is keyed ``advance.to``."""
    to = body.get("to", "end")
    if not (
        (isinstance(to, str) and len(to) <= _MAX_TARGET_CHARS)
        or (isinstance(to, int) and not isinstance(to, bool))
    ):
        message = f"must be 'running', a step number or 'end', got {written(to)}"
        raise SynthUsageError([ConfigProblem("advance.to", message, 'e.g. {"to": "end"} or {"to": 3}')])
    try:
        job.advance_to(to)
    except SynthUsageError as exc:  # FakeJob names its argument; the caller wrote "to"
        problems = [
            dataclasses.replace(p, key="advance.to") if p.key == "FakeJob.advance_to" else p
            for p in exc.problems
        ]
        raise SynthUsageError(problems) from None


#: The job actions that finish a job, and the status each leaves it in.
_FINISHING: dict[str, str] = {"succeed": "succeeded", "fail": "failed", "cancel": "cancelled"}


def _finish(lifecycle: Lifecycle, job: FakeJob, action: str, body: dict[str, Any]) -> httpx.Response:
    """``POST /_fake/jobs/{id}/succeed|fail|cancel``; a job already finished gets the 409 the
    API's cancel gives (``job_already_finished``, naming the job and its status), not a 200."""
    if action == "fail":
        error = body.get("error")
        problem = None if error is None else error_text_problem(error, "fail.error")
        if problem is not None:
            raise SynthUsageError([problem])
    with lifecycle.store.lock:
        before = job.status
        if before not in TERMINAL:
            if action == "succeed":
                job.succeed()
            elif action == "fail":
                job.fail(body.get("error") or "failed via the admin API")
            else:
                job.cancel()
        status = job.status
        if before in TERMINAL or status != _FINISHING[action]:
            # Finished before, or (while the push waited for a rollout batch) on its own.
            return error_response(
                409,
                "job_already_finished",
                f"job {job.id} already {status}; POST /_fake/jobs/{job.id}/{action} finishes only "
                "queued or running jobs",
                job_status=status,
            )
        return json_response(200, job.status_payload())


def _allowed_methods(parts: list[str]) -> list[str]:
    """The methods :data:`ADMIN_ROUTES` serve on the path *parts* (below ``/_fake``), for a 405."""
    allowed = set()
    for line in ADMIN_ROUTES:
        method, template = line.split()[:2]
        segments = template.split("/")[2:]  # "", "_fake", then the route's own segments
        if len(segments) == len(parts) and all(
            want == got or (want.startswith("{") and got) for want, got in zip(segments, parts, strict=True)
        ):
            allowed.add(method)
    return sorted(allowed)


def _job_detail(lifecycle: Lifecycle, job_id: str, api_base: str) -> dict[str, Any]:
    """The job's summary with its latest :data:`DETAIL_ITEMS` events, metric points and rollouts."""
    with lifecycle.store.lock:
        job = lifecycle.sync(lifecycle.store.get(job_id))
        summary = job.summary()
        summary["events"] = job.event_dicts(max(0, len(job.events) - DETAIL_ITEMS))
        summary["metric_points"] = job.point_dicts(last=DETAIL_ITEMS)
        summary["metric_points_count"] = job.point_count
        rollouts = job.rollouts[-DETAIL_ITEMS:]
    if max(len(job.events), job.point_count, len(job.rollouts)) > DETAIL_ITEMS:
        base = api_base.rstrip("/")
        summary["history_note"] = (
            f"the latest {DETAIL_ITEMS} events, metric points and rollouts at most; read every "
            f"event and metric point with GET {base}/rl/jobs/{job.id}/events?since_seq=0 and "
            f"GET {base}/rl/jobs/{job.id}/metrics, a page at a time"
        )
    summary["rollouts"] = [
        {
            "step": r.step,
            "seed": r.seed,
            "mode": r.mode,
            "run_id": r.run_id,
            "status_code": r.status_code,
            "reward": r.reward,
            "error": r.error,
            "elapsed": r.elapsed,
        }
        for r in rollouts
    ]
    return summary


def handle_admin(
    lifecycle: Lifecycle, request: httpx.Request, api_base: str, reset: Callable[[], None]
) -> httpx.Response:
    """Answer one ``/_fake/...`` request; errors become 4xx JSON naming the problem."""
    try:
        return _route(lifecycle, request, api_base, reset)
    except (ConfigError, SynthUsageError) as exc:
        return problems_response(exc.problems)
    except StoreFull as full:  # no room for another scenario or fault: as a full store's submit
        return error_response(429, full.code, f"{full.message}; {full.hint}")
    except SynthError as exc:
        return error_response(404, "not_found", str(exc))
    except ValueError as exc:
        return error_response(400, "bad_request", f"{exc}")
    except (TypeError, OverflowError) as exc:
        # A field of the wrong JSON type (``"probability": []``) fails deep inside the scenario or
        # fault constructor; it is still the caller's bad input, so it gets a 400, not a crash.
        return error_response(
            400,
            "bad_request",
            f"a field in the request body has the wrong type or size ({exc}); see GET /_fake for the routes",
        )


def _route(
    lifecycle: Lifecycle, request: httpx.Request, api_base: str, reset: Callable[[], None]
) -> httpx.Response:
    store = lifecycle.store
    parts = [p for p in request.url.path.split("/") if p][1:]  # drop "_fake"
    method = request.method
    key = (method, *parts[:1])
    if not parts and method == "GET":
        # Where this request came in (a served fake's loopback port), with the API's own path.
        here = request.url.copy_with(path=httpx.URL(api_base).path, query=None, fragment=None)
        return json_response(200, {"routes": list(ADMIN_ROUTES), "api_base": str(here)})
    if key == ("POST", "reset") and len(parts) == 1:
        bad = _unknown_fields(_body(request), frozenset(), "reset")
        if bad is not None:
            return bad
        reset()
        return json_response(200, {"ok": True})
    if parts[:1] == ["scenario"] and len(parts) == 1:
        if method == "GET":
            return json_response(200, store.default_scenario.describe())
        if method == "POST":
            body = _body(request)
            target = body.pop("job", None)
            bad = _unknown_fields(body, _SCENARIO_FIELDS, "scenario")
            if bad is not None:
                return bad
            made = Scenario(**body)
            if target is None:
                store.set_default(made)
            else:
                lifecycle.script(str(target), made)
            return json_response(200, made.describe())
    if parts[:1] == ["jobs"]:
        if len(parts) == 1 and method == "GET":
            with store.lock:
                records = [lifecycle.sync(record) for record in store.records()]
                return json_response(200, {"jobs": [r.listing() for r in records]})
        if len(parts) == 2 and method == "GET":
            return json_response(200, _job_detail(lifecycle, parts[1], api_base))
        if len(parts) == 3 and method == "POST":
            job = FakeJob(lifecycle, store.get(parts[1]))
            action = parts[2]
            body = _body(request)
            bad = _unknown_fields(body, _JOB_ACTION_FIELDS.get(action, frozenset()), f"{action}")
            if bad is not None and action in _JOB_ACTION_FIELDS:
                return bad
            if action == "advance":
                _advance(job, body)
            elif action in _FINISHING:
                return _finish(lifecycle, job, action, body)
            else:
                return error_response(
                    404, "not_found", f"unknown job action {action!r}; use advance, succeed, fail, cancel"
                )
            return json_response(200, job.status_payload())
    if parts[:1] == ["requests"] and method == "GET":
        return json_response(200, {"requests": [r.to_json() for r in store.requests]})
    if parts[:1] == ["faults"] and len(parts) == 1:
        if method == "GET":
            return json_response(200, {"faults": [f.to_json() for f in store.faults]})
        if method == "DELETE":
            store.clear_faults()
            return json_response(200, {"ok": True})
        if method == "POST":
            body = _body(request)
            bad = _unknown_fields(body, _FAULT_FIELDS, "fault")
            if bad is not None:
                return bad
            fault = store.add_fault(make_fault(**body))
            return json_response(201, fault.to_json())
    if parts[:1] == ["clock"]:
        clock = store.clock
        if len(parts) == 1 and method == "GET":
            return json_response(
                200, {"now": clock.now(), "time": clock.time(), "virtual": isinstance(clock, VirtualClock)}
            )
        if parts[1:] == ["advance"] and method == "POST":
            if not isinstance(clock, VirtualClock):
                return error_response(
                    409, "not_virtual", f"the fake runs on {clock!r}; only a VirtualClock can be advanced"
                )
            body = _body(request)
            bad = _unknown_fields(body, frozenset({"seconds"}), "clock advance")
            if bad is not None:
                return bad
            seconds = body.get("seconds")
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, (int, float))
                or not 0 <= seconds <= MAX_CLOCK_ADVANCE
            ):
                return error_response(
                    422,
                    "bad_seconds",
                    f"'seconds' must be a finite number from 0 to {MAX_CLOCK_ADVANCE:g}, got {seconds!r}",
                )
            clock.advance(float(seconds))
            return json_response(200, {"now": clock.now(), "time": clock.time()})
    allowed = _allowed_methods(parts)
    if allowed:  # the path is served, with another method: 405, as the API routes answer
        methods = ", ".join(allowed)
        return error_response(
            405,
            "method_not_allowed",
            f"{method} is not allowed on {request.url.path}; use {methods}",
            [("allow", methods)],
        )
    message = f"no admin route {method} {request.url.path}"
    return error_response(404, "route_not_found", message, routes=list(ADMIN_ROUTES))
