"""The RL job API's handlers (contract §1.2), its route table and the live event stream; the
request handler has matched the route, applied faults, checked the key and taken the store's lock."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.config.urls import http_url_problem
from pytest_synth_rl.errors import ConfigProblem
from pytest_synth_rl.fake.jobs import TERMINAL, JobState, iso
from pytest_synth_rl.fake.keys import SEALED_BOX_ALG, EnvKeyRejected, EnvKeys
from pytest_synth_rl.fake.lifecycle import Lifecycle
from pytest_synth_rl.fake.scenario import int_in
from pytest_synth_rl.fake.store import IdempotencyConflict, JobStore, StoreFull
from pytest_synth_rl.fake.wire import (
    BadBody,
    error_response,
    invalid,
    json_response,
    problems_response,
    request_json,
)

_PAYLOAD = "the RL job payload as a JSON object with Content-Type: application/json"
_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "error")
_SLICE = 0.25  # longest real-time wait between looks at a job on a real or scaled clock
_HEARTBEAT = 10.0  # real seconds between an event stream's keep-alive comments
_IDLE_LIMIT = 600.0  # real seconds without a new event before an event stream gives up


@dataclass
class ApiCall:
    """One request to a route, the job its path names, and (admin routes) the API root and reset."""

    lifecycle: Lifecycle
    request: httpx.Request
    job_id: str | None
    keys: EnvKeys
    api_base: str = ""
    reset: Callable[[], None] = lambda: None

    @property
    def store(self) -> JobStore:
        return self.lifecycle.store

    @functools.cached_property
    def params(self) -> httpx.QueryParams:
        return self.request.url.params


class EventStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """SSE bytes for one job's events after *since_seq*, open until the job is terminal."""

    def __init__(self, lifecycle: Lifecycle, job: JobState, since_seq: int) -> None:
        self._lifecycle = lifecycle
        self._job = job
        self._seq = max(0, since_seq)
        self._closed = False
        self._idle_since = self._last_beat = time.monotonic()

    def _pause(self, due: float | None) -> float:
        clock = self._lifecycle.clock
        if isinstance(clock, VirtualClock) and self._lifecycle.pacing == "clock" and due is not None:
            clock.advance(max(0.0, due - clock.now()))
            return 0.0
        if due is not None and not isinstance(clock, VirtualClock):
            speed = float(getattr(clock, "speed", 1.0))
            return min(max((due - clock.now()) / speed, 0.005), _SLICE)
        return 0.05  # a job that moves only by status polls (or not at all): let them happen

    def step(self) -> tuple[list[bytes], float | None]:
        """One look at the job: the chunks to send now, and the seconds to wait (None: the end)."""
        lifecycle, job = self._lifecycle, self._job
        with lifecycle.store.lock:
            lifecycle.observe(job)
            page: list[dict[str, Any]] = job.events_page(self._seq, 10**9)["events"]
            terminal, due = job.terminal, lifecycle.next_due(job)
        chunks = [f"id: {e['seq']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in page]
        self._seq = int(page[-1]["seq"]) if page else self._seq
        if terminal:
            return chunks, None
        now = time.monotonic()
        if page:
            self._idle_since = self._last_beat = now
            return chunks, 0.0
        if now - self._idle_since > _IDLE_LIMIT:
            return [b": no new event for 600 s; closing (the job is still running)\n\n"], None
        if now - self._last_beat > _HEARTBEAT:
            self._last_beat = now
            chunks.append(f": waiting for job {job.id} (status {job.status})\n\n".encode())
        return chunks, self._pause(due)

    def __iter__(self) -> Iterator[bytes]:
        while not self._closed:
            chunks, pause = self.step()
            yield from chunks
            if pause is None:
                return
            time.sleep(pause)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._closed:
            chunks, pause = await asyncio.to_thread(self.step)
            for chunk in chunks:
                yield chunk
            if pause is None:
                return
            await asyncio.sleep(pause)

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self._closed = True


class _Answer(Exception):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response


def _json_body(call: ApiCall, what: str, *, payload: bool = False) -> dict[str, Any]:
    raw = call.request.content
    try:
        body = request_json(raw)
    except BadBody as bad:
        if payload and bad.field:
            raise _Answer(invalid(bad.field, bad.problem, bad.hint)) from None
        raise _Answer(error_response(400, bad.code, f"{bad}; send {what}")) from None
    if isinstance(body, dict):
        return body
    if not payload:
        raise _Answer(error_response(400, "invalid_body", f"expected a JSON object: {what}"))
    got = f"a JSON {type(body).__name__}" if body is not None else "JSON null" if raw else "an empty body"
    message = f"expected the RL job payload as a JSON object, got {got}"
    raise _Answer(invalid("body", message, "build it with build_rl_payload() or RLJob.from_config()"))


def _int_param(call: ApiCall, name: str, default: int, low: int, high: int) -> int:
    raw = call.params.get(name)
    if not raw:
        return default
    with contextlib.suppress(ValueError):
        if low <= (value := int(raw)) <= high:
            return value
    message = f"must be an integer in {low}..{high}, got {raw!r}"
    raise _Answer(invalid(["query", name], message, f"omit {name} for the default ({default})"))


def _on_job(route: Callable[[ApiCall, JobState], httpx.Response]) -> Callable[[ApiCall], httpx.Response]:
    def handler(call: ApiCall) -> httpx.Response:
        assert call.job_id is not None
        store = call.store
        job = store.find(call.job_id)
        if job is not None:
            return route(call, job)
        evicted = store.evicted_reason(call.job_id)
        if evicted is not None:
            return error_response(404, "job_evicted", evicted)
        ids = ", ".join(store.recent_ids()) or "none yet"
        message = f"no RL job {call.job_id!r}; recent job ids: {ids}; use the id POST /rl/jobs returned"
        return error_response(404, "job_not_found", message)

    return handler


def legacy_payload(payload: Mapping[str, Any]) -> tuple[dict[str, Any], list[ConfigProblem]] | None:
    """``(payload as kept, problems)`` for an older client's create body; else None."""
    data = payload.get("data")
    if "data" not in payload and "endpoint_base_url" in payload:
        fields, where = payload, ""
    elif isinstance(data, Mapping) and "config" not in data and {"model", "trainer"} & data.keys():
        fields, where = data, "data."
    else:
        return None
    endpoint = fields.get("endpoint_base_url")
    config = fields.get("config")
    kept: dict[str, Any] = {
        "model": fields.get("model"),
        "endpoint_base_url": endpoint.rstrip("/") if isinstance(endpoint, str) else endpoint,
        "config": dict(config or {}) if isinstance(config, Mapping) else {},
    }
    for name in ("trainer", "trainer_id", "job_config_id"):
        if fields.get(name) is not None:
            kept[name] = fields[name]
    normalized: dict[str, Any] = {"job_type": "rl", "data": kept, "legacy_body": True}
    if isinstance(fields.get("metadata"), Mapping):
        normalized["metadata"] = dict(fields["metadata"])
    return normalized, _legacy_problems(fields, where)


def _legacy_problems(fields: Mapping[str, Any], where: str) -> list[ConfigProblem]:
    model, endpoint = fields.get("model"), fields.get("endpoint_base_url")
    trainer, config = fields.get("trainer"), fields.get("config")
    counts = trainer if isinstance(trainer, Mapping) else {}

    def expect(fine: object, expected: str, value: object) -> str | None:
        return None if fine else f"expected {expected}, got {value!r:.60}"

    found = {
        "model": expect(isinstance(model, str) and model.strip(), "the model id", model),
        "endpoint_base_url": http_url_problem(endpoint, "http://127.0.0.1:8114")
        if isinstance(endpoint, str)
        else expect(False, "the task app's URL", endpoint),
        "trainer": expect(trainer is None or isinstance(trainer, Mapping), "an object", trainer),
        **{
            f"trainer.{name}": expect(False, f"an integer >= {least}", value)
            for name, least in (("batch_size", 1), ("group_size", 2))
            if (value := counts.get(name)) is not None and not int_in(value, least, math.inf)
        },
        "config": expect(config is None or isinstance(config, Mapping), "an object", config),
    }
    return [ConfigProblem(where + key, problem, None) for key, problem in found.items() if problem]


def submit(call: ApiCall) -> httpx.Response:
    store = call.store
    payload = _json_body(call, _PAYLOAD, payload=True)
    legacy = legacy_payload(payload)
    if legacy is not None:
        payload = legacy[0]
    key = call.request.headers.get("idempotency-key")
    if key is not None:
        try:
            replayed = store.replayed(key, payload)
        except IdempotencyConflict as conflict:
            message = f"Idempotency-Key {key!r} was used for job {conflict.job_id} with another payload; "
            message += "use a new key, or resend that payload"
            return error_response(409, "idempotency_conflict", message, job_id=conflict.job_id)
        if replayed is not None:
            call.job_id = replayed.id
            call.lifecycle.sync(replayed)
            return json_response(200, replayed.status_bytes(), [("idempotent-replayed", "true")])
    problems = legacy[1] if legacy is not None else store.validate(payload)
    if problems:
        return problems_response(problems)
    try:
        job = store.create(payload, key)
    except StoreFull as full:
        return error_response(429, "too_many_jobs", f"{full.message}; {full.hint}")
    call.job_id = job.id
    return json_response(201, job.status_bytes())


def _time_param(call: ApiCall, name: str) -> float | None:
    raw = call.params.get(name)
    if not raw:
        return None
    value = math.nan
    try:
        value = float(raw)
    except ValueError:
        with contextlib.suppress(ValueError):
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
            value = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    if not math.isfinite(value):
        message = f"must be an ISO-8601 time or epoch seconds, got {raw!r:.80}"
        raise _Answer(invalid(["query", name], message, "e.g. 2026-01-01T00:00:00Z"))
    return value


def list_jobs(call: ApiCall) -> httpx.Response:
    params = call.params
    limit = _int_param(call, "limit", 20, 1, 1000)
    created_after = _time_param(call, "created_after")
    created_before = _time_param(call, "created_before")
    status, model, after = params.get("status"), params.get("model"), params.get("after")
    if status is not None and status not in _STATUSES:
        return invalid(["query", "status"], f"unknown status {status!r}", f"use one of {_STATUSES}")
    jobs = list(reversed(call.store.records()))
    if after:
        ids = [j.id for j in jobs]
        if after not in ids:
            return invalid(["query", "after"], f"unknown job id {after!r}", "send the last page's last id")
        jobs = jobs[ids.index(after) + 1 :]
    matching = (
        job
        for job in map(call.lifecycle.sync, jobs)  # each job brought up to date only once reached
        if status in (None, job.status)
        and model in (None, job.model)
        and (created_after is None or job.created_time > created_after)
        and (created_before is None or job.created_time < created_before)
    )
    selected = [job.status_body() for job in itertools.islice(matching, limit)]
    more = next(matching, None) is not None
    first, last = (selected[0]["id"], selected[-1]["id"]) if selected else (None, None)
    return json_response(
        200, {"object": "list", "data": selected, "has_more": more, "first_id": first, "last_id": last}
    )


@_on_job
def status(call: ApiCall, job: JobState) -> httpx.Response:
    job.polls += 1
    call.lifecycle.observe(job)
    stalled = call.lifecycle.stall_reason(job)
    if stalled is not None:
        return json_response(200, {**job.status_body(), "hint": stalled})
    return json_response(200, job.status_bytes())


@_on_job
def cancel(call: ApiCall, job: JobState) -> httpx.Response:
    call.lifecycle.sync(job)
    if job.status in TERMINAL:
        message = f"job {job.id} already {job.status}; only queued or running jobs can be cancelled"
        return error_response(409, "job_already_finished", message, job_status=job.status)
    call.lifecycle.cancel(job, reason="cancel requested via the API")
    return json_response(200, job.status_bytes())


@_on_job
def start(call: ApiCall, job: JobState) -> httpx.Response:
    call.lifecycle.sync(job)
    return json_response(200, job.status_bytes())


@_on_job
def events(call: ApiCall, job: JobState) -> httpx.Response:
    since = _int_param(call, "since_seq", 0, -1, 10**12)
    limit = _int_param(call, "limit", 200, 1, 10_000)
    call.lifecycle.observe(job)
    return json_response(200, job.events_page(since, limit))


@_on_job
def events_stream(call: ApiCall, job: JobState) -> httpx.Response:
    since = _int_param(call, "since_seq", 0, -1, 10**12)
    header = call.request.headers.get("last-event-id", "")
    if header.strip() and not call.params.get("since_seq"):  # a reconnecting EventSource
        text = header.strip()
        since = int(text) if text.isascii() and text.isdigit() and len(text) <= 13 else -1
        if not 0 <= since <= 10**12:
            message = f"must be the id of an event (an integer in 0..{10**12}), got {header!r:.80}"
            return invalid(["header", "last-event-id"], message, "send the last event's id, or no header")
    headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
    return httpx.Response(200, stream=EventStream(call.lifecycle, job, since), headers=headers)


@_on_job
def metrics(call: ApiCall, job: JobState) -> httpx.Response:
    after = _int_param(call, "after_step", -1, -1, 10**12)
    limit = _int_param(call, "limit", 200, 1, 10_000)
    call.lifecycle.observe(job)
    return json_response(200, job.metrics_page(after, limit, call.params.get("name")))


@_on_job
def timeline(call: ApiCall, job: JobState) -> httpx.Response:
    call.lifecycle.observe(job)
    return json_response(200, {"events": job.timeline, "job_id": job.id, "status": job.status})


def public_key(call: ApiCall) -> httpx.Response:
    return json_response(200, {"public_key": call.keys.public_key_b64, "alg": SEALED_BOX_ALG})


def env_keys(call: ApiCall) -> httpx.Response:
    body = _json_body(call, '{"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": <sealed box, base64>}')
    try:
        call.keys.open_upload(body.get("name"), body.get("ciphertext_b64"))
    except EnvKeyRejected as exc:
        return error_response(400, "invalid_env_key", f"environment key upload rejected: {exc}")
    updated = iso(call.lifecycle.clock.time())
    return json_response(
        200, {"id": "envkey_environment_api_key", "name": "ENVIRONMENT_API_KEY", "updated_at": updated}
    )


def env_keys_verify(call: ApiCall) -> httpx.Response:
    return json_response(200, {"present": call.keys.has_env_key})


def verify_endpoint(call: ApiCall) -> httpx.Response:
    body = _json_body(call, '{"endpoint_base_url": "<task app URL>"}')
    url = body.get("endpoint_base_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        message = f"must be the task app's http(s) base URL, got {url!r:.80}"
        return invalid(["body", "endpoint_base_url"], message, "send the job's data.endpoint_base_url")
    store = call.store
    client, any_url = call.lifecycle.driver.client, store.rollouts is True
    answer = call.keys.probe(url.rstrip("/"), client, any_url=any_url, set_aside=store.lock.set_aside)
    return json_response(200, answer)


#: ``(method, path below the API root, route name, handler)``; the name is what faults and the log use.
ROUTES: tuple[tuple[str, str, str, Callable[[ApiCall], httpx.Response]], ...] = (
    ("POST", "/rl/jobs", "submit", submit),
    ("GET", "/rl/jobs", "list", list_jobs),
    ("GET", "/rl/jobs/{job_id}", "status", status),
    ("POST", "/rl/jobs/{job_id}/cancel", "cancel", cancel),
    ("POST", "/rl/jobs/{job_id}/start", "start", start),
    ("GET", "/rl/jobs/{job_id}/events", "events", events),
    ("GET", "/rl/jobs/{job_id}/events/stream", "events_stream", events_stream),
    ("GET", "/rl/jobs/{job_id}/metrics", "metrics", metrics),
    ("GET", "/rl/jobs/{job_id}/timeline", "timeline", timeline),
    ("GET", "/learning/jobs/{job_id}", "status", status),
    ("GET", "/learning/jobs/{job_id}/events", "events", events),
    ("GET", "/learning/jobs/{job_id}/metrics", "metrics", metrics),
    ("GET", "/learning/jobs/{job_id}/timeline", "timeline", timeline),
    ("GET", "/orchestration/jobs/{job_id}", "status", status),
    ("GET", "/orchestration/jobs/{job_id}/events", "events", events),
    ("POST", "/rl/verify_task_app", "verify_task_app", verify_endpoint),
    ("GET", "/v1/crypto/public-key", "public_key", public_key),
    ("POST", "/v1/env-keys", "env_keys", env_keys),
    ("GET", "/v1/env-keys/verify", "env_keys_verify", env_keys_verify),
)
_HANDLERS = {name: handler for _, _, name, handler in ROUTES}


def dispatch(name: str, call: ApiCall) -> httpx.Response:
    try:
        return _HANDLERS[name](call)
    except _Answer as early:
        return early.response
