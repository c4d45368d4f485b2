"""Handlers for the RL job API (contract §1.2), one function per route.

Each handler takes the job store and the parsed request pieces and returns an
:class:`httpx.Response`; the request handler has already matched the route, applied faults and
checked the key, and holds the store's lock.
Bad input always gets a 4xx with a message that names the parameter and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import httpx

from pytest_synth_rl.fake.jobs import TERMINAL, JobRecord, iso
from pytest_synth_rl.fake.legacy_body import legacy_payload
from pytest_synth_rl.fake.store import (
    SEALED_BOX_ALG,
    EnvKeyRejected,
    IdempotencyConflict,
    JobStore,
    StoreFull,
)
from pytest_synth_rl.fake.stream import EventStream
from pytest_synth_rl.fake.wire import (
    TooManyDigits,
    error_response,
    json_response,
    load_json,
    non_finite_field,
)

__all__ = ["HANDLERS", "Call"]

_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "error")


class Call:
    """The request as the handlers need it (path pieces already parsed)."""

    __slots__ = ("_params", "job_id", "request", "store")

    def __init__(self, store: JobStore, request: httpx.Request, job_id: str | None) -> None:
        self.store = store
        self.request = request
        self.job_id = job_id
        self._params: httpx.QueryParams | None = None

    @property
    def params(self) -> httpx.QueryParams:
        """The query parameters, parsed once (``request.url.params`` parses them on every read)."""
        if self._params is None:
            self._params = self.request.url.params
        return self._params


class _BadParam(Exception):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response


def _bad_query(name: str, message: str, hint: str) -> httpx.Response:
    """The 422 for query parameter *name*, in the shape FastAPI gives validation errors."""
    return json_response(422, {"detail": [{"loc": ["query", name], "msg": message, "hint": hint}]})


def _int_param(call: Call, name: str, default: int, low: int, high: int) -> int:
    raw = call.params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise _BadParam(
            _bad_query(
                name,
                f"must be an integer in {low}..{high}, got {raw!r}",
                f"omit {name} for the default ({default})",
            )
        )
    return value


def _job(call: Call) -> JobRecord | httpx.Response:
    assert call.job_id is not None
    job = call.store.find(call.job_id)
    if job is None:
        evicted = call.store.evicted_reason(call.job_id)
        if evicted is not None:
            return error_response(404, "job_evicted", evicted)
        known = call.store.recent_ids()
        return error_response(
            404,
            "job_not_found",
            f"no RL job {call.job_id!r} on this backend"
            + (f"; recent job ids: {', '.join(known)}" if known else "; no jobs were submitted yet")
            + ". Use the id returned by POST /rl/jobs.",
        )
    return job


# -- routes ------------------------------------------------------------------------------------
def submit(call: Call) -> httpx.Response:
    store = call.store
    raw = call.request.content
    try:
        payload = load_json(raw) if raw else None
    except TooManyDigits as exc:
        return json_response(
            422,
            {
                "detail": [
                    {
                        "loc": exc.field,
                        "msg": f"must be an integer of at most {exc.limit} digits, got {exc.digits} digits",
                        "hint": "no field of the RL job payload needs more than a few digits",
                    }
                ]
            },
        )
    # RecursionError: a body nested deeper than the interpreter's recursion limit (``[[[...]]]``)
    # is as unusable as malformed JSON and must get the same 400, not escape as a crash.
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return error_response(
            400,
            "invalid_json",
            f"the request body is not valid JSON ({exc}); send the RL job payload as a JSON object "
            "with Content-Type: application/json",
        )
    if not isinstance(payload, dict):
        got = (
            "an empty body"
            if not raw.strip()
            else "JSON null"
            if payload is None
            else f"a JSON {type(payload).__name__}"
        )
        return json_response(
            422,
            {
                "detail": [
                    {
                        "loc": "body",
                        "msg": f"expected the RL job payload as a JSON object, got {got}",
                        "hint": "build it with build_rl_payload() or RLJob.from_config()",
                    }
                ]
            },
        )
    bad = non_finite_field(payload)
    if bad is not None:
        name, number = bad
        return json_response(
            422,
            {
                "detail": [
                    {
                        "loc": name,
                        "msg": f"must be a finite number, got {number!r}",
                        "hint": "NaN, Infinity and numbers too large for a float are not valid JSON numbers",
                    }
                ]
            },
        )
    legacy = legacy_payload(payload)  # an older client's body (contract §1.2): its own checks
    if legacy is not None:
        payload = legacy[0]
    key = call.request.headers.get("idempotency-key")
    if key is not None:
        try:
            replayed = store.replay(key, payload)
        except IdempotencyConflict as conflict:
            return error_response(
                409,
                "idempotency_conflict",
                f"Idempotency-Key {key!r} was already used for job {conflict.job_id} with a different "
                "payload; use a new key for a different job, or resend the identical payload to get the "
                "same job",
                job_id=conflict.job_id,
            )
        if replayed is not None:
            call.job_id = replayed.id
            return json_response(200, replayed.status_bytes(), [("idempotent-replayed", "true")])
    problems = legacy[1] if legacy is not None else store.validate(payload)
    if problems:
        return json_response(
            422,
            {
                "detail": [{"loc": p.key, "msg": p.message, "hint": p.hint} for p in problems],
            },
        )
    try:
        job = store.create(payload, key)
    except StoreFull as full:
        return error_response(429, "too_many_jobs", f"{full.message}; {full.hint}")
    call.job_id = job.id
    return json_response(201, job.status_bytes())


def _time_param(call: Call, name: str) -> float | None:
    """An ISO-8601 time (``2026-01-01T00:00:00Z``) or epoch seconds, as epoch seconds; None if absent."""
    raw = call.params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            value = math.nan
        else:
            value = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    if not math.isfinite(value):
        raise _BadParam(
            _bad_query(
                name,
                f"must be an ISO-8601 time or epoch seconds, got {raw!r:.80}",
                "e.g. 2026-01-01T00:00:00Z",
            )
        )
    return value


def list_jobs(call: Call) -> httpx.Response:
    params = call.params
    limit = _int_param(call, "limit", 20, 1, 1000)
    created_after = _time_param(call, "created_after")
    created_before = _time_param(call, "created_before")
    status = params.get("status")
    if status is not None and status not in _STATUSES:
        return _bad_query("status", f"unknown status {status!r}", f"use one of {', '.join(_STATUSES)}")
    model = params.get("model")
    after = params.get("after")
    jobs = list(reversed(call.store.records()))  # newest first: insertion order, reversed
    if after:
        ids = [j.id for j in jobs]
        if after not in ids:
            return _bad_query("after", f"unknown job id {after!r}", "pass the last id of the previous page")
        jobs = jobs[ids.index(after) + 1 :]
    selected: list[dict[str, Any]] = []
    more = False
    for job in jobs:
        call.store.sync(job)
        if status is not None and job.status != status:
            continue
        if model is not None and job.model != model:
            continue
        if created_after is not None and job.created_time <= created_after:
            continue
        if created_before is not None and job.created_time >= created_before:
            continue
        if len(selected) == limit:
            more = True
            break
        selected.append(job.status_body())
    return json_response(
        200,
        {
            "object": "list",
            "data": selected,
            "has_more": more,
            "first_id": selected[0]["id"] if selected else None,
            "last_id": selected[-1]["id"] if selected else None,
        },
    )


def status(call: Call) -> httpx.Response:
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    job.polls += 1
    call.store.observe(job)
    stalled = call.store.stall_reason(job)
    if stalled is not None:
        body = job.status_body()
        body["hint"] = stalled
        return json_response(200, body)
    return json_response(200, job.status_bytes())


def cancel(call: Call) -> httpx.Response:
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    call.store.sync(job)
    if job.status in TERMINAL:
        return error_response(
            409,
            "job_already_finished",
            f"job {job.id} already {job.status}; only queued or running jobs can be cancelled",
            job_status=job.status,
        )
    call.store.cancel(job, reason="cancel requested via the API")
    return json_response(200, job.status_bytes())


def start(call: Call) -> httpx.Response:
    # Legacy clients call this; jobs here start on their own, so it only reports the job.
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    call.store.sync(job)
    return json_response(200, job.status_bytes())


def events(call: Call) -> httpx.Response:
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    since = _int_param(call, "since_seq", 0, -1, 10**12)
    limit = _int_param(call, "limit", 200, 1, 10_000)
    call.store.observe(job)
    return json_response(200, job.events_page(since, limit))


def _last_event_id(call: Call, default: int) -> int:
    """The SSE ``Last-Event-ID`` header (the ``id:`` of the last event a reconnecting client
    got) as the seq to resume after; *default* when it is absent or empty."""
    raw = call.request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 13 else None
    if value is None or value > 10**12:
        raise _BadParam(
            json_response(
                422,
                {
                    "detail": [
                        {
                            "loc": ["header", "last-event-id"],
                            "msg": f"must be the id of an event (an integer in 0..{10**12}), got {raw!r:.80}",
                            "hint": "send the id: of the last event received, or leave the header out to "
                            "start from since_seq (default 0)",
                        }
                    ]
                },
            )
        )
    return value


def events_stream(call: Call) -> httpx.Response:
    # Live SSE: open until the job is terminal, ending with its terminal event (see .stream).
    # A reconnecting client resumes after its Last-Event-ID, unless since_seq says where.
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    since = _int_param(call, "since_seq", 0, -1, 10**12)
    if not call.params.get("since_seq"):
        since = _last_event_id(call, since)
    return httpx.Response(
        200,
        stream=EventStream(call.store, job, since),
        headers=[("content-type", "text/event-stream"), ("cache-control", "no-cache")],
    )


def metrics(call: Call) -> httpx.Response:
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    after = _int_param(call, "after_step", -1, -1, 10**12)
    limit = _int_param(call, "limit", 200, 1, 10_000)
    call.store.observe(job)
    return json_response(200, job.metrics_page(after, limit, call.params.get("name")))


def timeline(call: Call) -> httpx.Response:
    job = _job(call)
    if isinstance(job, httpx.Response):
        return job
    call.store.observe(job)
    return json_response(200, {"events": job.timeline, "job_id": job.id, "status": job.status})


# -- the task app's key and pre-submit verification (contract §10.3, §10.5) ----------------------
def _json_object(call: Call, what: str) -> dict[str, Any] | httpx.Response:
    try:
        body = load_json(call.request.content) if call.request.content else None
    except TooManyDigits as exc:
        return error_response(400, "number_too_long", f"{exc}; send {what}")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return error_response(400, "invalid_json", f"the request body is not valid JSON ({exc}); send {what}")
    if not isinstance(body, dict):
        return error_response(400, "invalid_body", f"expected a JSON object: {what}")
    bad = non_finite_field(body)
    if bad is not None:
        return error_response(400, "not_finite", f"field {bad[0]!r} must be a finite number, got {bad[1]!r}")
    return body


def public_key(call: Call) -> httpx.Response:
    return json_response(200, {"public_key": call.store.public_key_b64, "alg": SEALED_BOX_ALG})


def env_keys(call: Call) -> httpx.Response:
    body = _json_object(call, '{"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": <sealed box, base64>}')
    if isinstance(body, httpx.Response):
        return body
    try:
        call.store.store_env_key(body.get("name"), body.get("ciphertext_b64"))
    except EnvKeyRejected as exc:
        return error_response(400, "invalid_env_key", f"environment key upload rejected: {exc}")
    return json_response(
        200,
        {
            "id": "envkey_environment_api_key",
            "name": "ENVIRONMENT_API_KEY",
            "updated_at": iso(call.store.clock.time()),
        },
    )


def env_keys_verify(call: Call) -> httpx.Response:
    return json_response(200, {"present": call.store.has_env_key})


def verify_task_app(call: Call) -> httpx.Response:
    body = _json_object(call, '{"endpoint_base_url": "<task app URL>"}')
    if isinstance(body, httpx.Response):
        return body
    url = body.get("endpoint_base_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return json_response(
            422,
            {
                "detail": [
                    {
                        "loc": ["body", "endpoint_base_url"],
                        "msg": f"must be the task app's http(s) base URL, got {url!r:.80}",
                        "hint": "send the same URL the job's data.endpoint_base_url will carry",
                    }
                ]
            },
        )
    return json_response(200, call.store.verify_task_app(url.rstrip("/")))


HANDLERS: dict[str, Callable[[Call], httpx.Response]] = {
    "submit": submit,
    "list": list_jobs,
    "status": status,
    "cancel": cancel,
    "start": start,
    "events": events,
    "events_stream": events_stream,
    "metrics": metrics,
    "timeline": timeline,
    "public_key": public_key,
    "env_keys": env_keys,
    "env_keys_verify": env_keys_verify,
    "verify_task_app": verify_task_app,
}


def dispatch(name: str, call: Call) -> httpx.Response:
    """Run the handler for route *name*, turning bad query parameters into their 422."""
    try:
        return HANDLERS[name](call)
    except _BadParam as bad:
        return bad.response
