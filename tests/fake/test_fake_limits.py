"""The fake stays bounded under load an outside tester threw at ``FakeSynthBackend().serve()``:
many of the largest jobs, an endless body, a huge target, a huge integer, admin routes called
with the wrong method. Each test failed before its fix.

Sizes are asserted, never durations: memory through ``tracemalloc`` (what the fake allocates
does not depend on the machine), bodies by the bytes sent before the answer came.
"""

from __future__ import annotations

import json
import select
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest
from test_fake_support import API, auth, error_message, open_socket, read_answer, rl_payload, served_client

from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake import store as store_module
from pytest_synth_rl.fake.asgi import MAX_TARGET_CHARS
from pytest_synth_rl.fake.handler import DETAIL_ITEMS, MAX_BODY_BYTES
from pytest_synth_rl.fake.store import MAX_JOB_DATA, MAX_JOBS, job_size
from pytest_synth_rl.taskapp.serving import MAX_REQUEST_LINE

KEY = "sk_test_limits_key_0123456789"
#: Seconds; only a hang gets near it.
GENEROUS = 60.0
STEPS = 10_000
CURVE = [round(0.1 + 0.8 * i / STEPS, 6) for i in range(STEPS)]


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


def run_job(client: httpx.Client) -> str:
    """Submit a job and look at it once (a scripted ``immediate`` job is then finished)."""
    created = client.post("/api/rl/jobs", json=rl_payload())
    assert created.status_code == 201, created.text
    job_id: str = created.json()["id"]
    client.get(f"/api/rl/jobs/{job_id}")
    return job_id


# -- 1. memory: one job is a few megabytes, and the jobs kept are bounded ----------------------
@pytest.mark.parametrize(("eval_every", "megabytes"), [(None, 4), (1, 8)])
def test_the_largest_job_keeps_a_few_megabytes(
    fake: FakeSynthBackend, client: httpx.Client, eval_every: int | None, megabytes: int
) -> None:
    # Before: 10.7 MB (24.8 MB evaluating after every step), as one dict per event and point.
    fake.scenario(steps=STEPS, reward_curve=CURVE, immediate=True, eval_every=eval_every)
    client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))  # warm caches up
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        job_id = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).json()["id"]
        status = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()["status"]
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert status == "succeeded"
    assert kept < megabytes * 2**20, f"one {STEPS}-step job keeps {kept / 2**20:.1f} MiB"
    job = fake.job(job_id)
    assert len(job.rewards) == STEPS  # still the whole history
    assert job.events[-1]["type"] == "rl.train.completed"
    assert len(job.metrics) == 2 * STEPS + (STEPS if eval_every else 1)


def test_the_largest_jobs_one_after_another_keep_a_bounded_store(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    """The tester's recipe (in process): the largest jobs, each submitted and read."""
    fake.scenario(steps=STEPS, reward_curve=CURVE, immediate=True)
    first = submitted = None
    for _ in range(50):
        submitted = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).json()["id"]
        first = first or submitted
        assert client.get(f"{API}/rl/jobs/{submitted}", headers=auth(fake)).status_code == 200
    kept = fake.store.records()
    assert len(kept) < 50
    assert sum(job_size(job) for job in kept) <= MAX_JOB_DATA
    assert kept[-1].id == submitted
    gone = client.get(f"{API}/rl/jobs/{first}", headers=auth(fake))
    assert gone.status_code == 404
    assert gone.json()["detail"]["error"]["code"] == "job_evicted"


def test_past_the_job_limit_the_oldest_finished_job_is_evicted_and_says_so(
    served: tuple[FakeSynthBackend, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_JOBS", 3)
    fake, client = served
    fake.scenario(immediate=True)
    keyed = client.post("/api/rl/jobs", json=rl_payload(), headers={"Idempotency-Key": "k1"}).json()["id"]
    client.get(f"/api/rl/jobs/{keyed}")
    ids = [keyed] + [run_job(client) for _ in range(3)]
    assert [j["id"] for j in client.get("/_fake/jobs").json()["jobs"]] == ids[1:]
    for route in (f"/api/rl/jobs/{keyed}", f"/api/rl/jobs/{keyed}/events", f"/_fake/jobs/{keyed}"):
        answer = client.get(route)
        assert answer.status_code == 404
        assert f"job '{keyed}' was evicted: this fake keeps at most 3 jobs" in error_message(answer)
    # Its idempotency key went with it: the same submit makes a new job.
    again = client.post("/api/rl/jobs", json=rl_payload(), headers={"Idempotency-Key": "k1"})
    assert again.status_code == 201
    assert again.json()["id"] not in ids
    never = client.get("/api/rl/jobs/job_rl_999999")
    assert (never.status_code, never.json()["detail"]["error"]["code"]) == (404, "job_not_found")


def test_unfinished_jobs_are_never_evicted_a_full_store_answers_429(
    fake: FakeSynthBackend, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_JOBS", 2)
    running = [
        client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).json()["id"] for _ in "ab"
    ]
    full = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert full.status_code == 429
    message = error_message(full)
    assert "this fake keeps at most 2 jobs" in message
    assert "the 2 jobs it keeps are unfinished" in message
    assert "cancel some, or reset the fake" in message
    assert [job.id for job in fake.jobs] == running
    fake.job(running[0]).cancel()
    after = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert after.status_code == 201
    assert after.json()["id"] == "job_rl_000003"  # the refused submit used no id
    assert [job.id for job in fake.jobs] == [running[1], "job_rl_000003"]


def test_the_data_limit_follows_a_rescripted_job_eviction_and_reset(
    fake: FakeSynthBackend, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kept sizes are summed as jobs come and go (not recounted per submission): each way a
    # job's size changes must reach the sum.
    monkeypatch.setattr(store_module, "MAX_JOB_DATA", 4 * 2**20)
    first = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).json()["id"]
    assert client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).status_code == 201
    fake.scenario_for(first, steps=STEPS, reward_curve=CURVE)  # 6.4 MB of history to come
    full = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert full.status_code == 429
    assert "about 4 MiB of job data, and the 2 jobs it keeps are unfinished (about 6.2 MiB" in error_message(
        full
    )
    fake.job(first).cancel()
    evicting = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert evicting.status_code == 201
    assert first not in [job.id for job in fake.jobs]
    fake.reset()
    fake.scenario(steps=6500, reward_curve=CURVE[:6500])  # 4.18 of 4.19 MB: fits an empty store only
    assert client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).status_code == 201


def test_the_admin_job_list_holds_summaries_only(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    _, client = served
    client.post("/_fake/scenario", json={"steps": STEPS, "reward_curve": CURVE, "immediate": True})
    job_id = run_job(client)
    listing = client.get("/_fake/jobs")
    (entry,) = listing.json()["jobs"]
    assert len(listing.content) < 2048  # before: the whole reward curve, ~90 KB
    assert (entry["id"], entry["status"], entry["events_count"]) == (job_id, "succeeded", STEPS + 4)
    assert entry["progress"] == {"completed": STEPS, "total": STEPS}
    assert entry["scenario"]["reward_curve"] == f"{STEPS} values"
    assert entry["final_reward"] == CURVE[-1]
    assert "checkpoints" not in entry
    assert "events" not in entry


def test_the_admin_job_detail_shows_the_latest_history_and_where_the_rest_is(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    client.post("/_fake/scenario", json={"steps": STEPS, "immediate": True})
    job_id = run_job(client)
    detail = client.get(f"/_fake/jobs/{job_id}").json()
    assert len(detail["events"]) == len(detail["metric_points"]) == DETAIL_ITEMS
    assert detail["events"][-1]["type"] == "rl.train.completed"
    assert detail["events"][0]["seq"] == detail["events_count"] - DETAIL_ITEMS + 1
    assert detail["metric_points_count"] == 2 * STEPS + 1
    assert f"/rl/jobs/{job_id}/events?since_seq=0" in detail["history_note"]
    # The API still pages through all of it.
    first = client.get(f"/api/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 3}).json()
    assert [e["seq"] for e in first["events"]] == [1, 2, 3]
    points = client.get(f"/api/rl/jobs/{job_id}/metrics", params={"after_step": STEPS - 1}).json()
    assert [(p["name"], p["step"]) for p in points["points"]] == [
        ("train.reward", STEPS),
        ("train.loss", STEPS),
        ("eval.reward", STEPS),
    ]


def test_a_small_jobs_admin_detail_is_whole(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    fake, client = served
    fake.scenario(steps=3, immediate=True)
    job_id = run_job(client)
    detail = client.get(f"/_fake/jobs/{job_id}").json()
    assert detail["events"] == fake.job(job_id).events
    assert detail["metric_points"] == fake.job(job_id).metrics
    assert "history_note" not in detail


# -- 2. a body over the limit gets 413 as soon as that is known ---------------------------------
def test_an_endless_chunked_body_gets_413_once_past_the_limit(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    head = f"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    chunk = b"%x\r\n%s\r\n" % (2**20, b" " * 2**20)
    sent = 0
    with open_socket(client) as sock:
        sock.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
        try:
            # Before the fix the fake read on to the end: the body never ends, so 408 at last.
            while sent < 64 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(chunk)
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed after the answer, as it should be
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"connection: close" in answer.lower()
    assert f"more than {MAX_BODY_BYTES} bytes (read no further)".encode() in answer
    assert sent < 64  # MiB: the answer came once the limit (10 MiB, plus socket buffers) arrived
    assert fake.requests == []
    assert client.post("/api/rl/jobs", json=rl_payload()).status_code == 201


def test_a_declared_length_over_the_limit_gets_413_before_any_body(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    with open_socket(client) as sock:
        sock.sendall(
            f"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Length: {2**30}\r\n\r\n".encode()
        )
        answer = read_answer(sock)  # before: waited for the body, then 408
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert f"the request body is {2**30} bytes; this fake backend accepts at most".encode() in answer


# -- 3. a target that is too long is 414, naming the limit ---------------------------------------
@pytest.mark.parametrize("length", [MAX_TARGET_CHARS + 1, 70_000, 4 * MAX_REQUEST_LINE])
def test_a_target_over_the_limit_gets_414_naming_it(
    served: tuple[FakeSynthBackend, httpx.Client], length: int
) -> None:
    _, client = served
    target = b"/api/rl/jobs/" + b"a" * (length - len(b"/api/rl/jobs/"))
    with open_socket(client) as sock:
        sock.sendall(
            b"GET " + target + f" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()
        )
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 414"), answer[:200]
    # Whole in one read, the fake answers; in pieces, the server does, before h11 gives up on it.
    assert (
        f"is {length} characters; this fake backend accepts at most {MAX_TARGET_CHARS}".encode() in answer
        or f"the request line is longer than {MAX_REQUEST_LINE} bytes".encode() in answer
    ), answer[-300:]
    assert b"is not a path" not in answer
    assert client.get("/api/rl/jobs").status_code == 200


def test_a_target_at_the_limit_is_served(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    _, client = served
    job_path = "/api/rl/jobs/" + "a" * (MAX_TARGET_CHARS - len("/api/rl/jobs/"))
    answer = client.get(job_path)
    assert (answer.status_code, answer.json()["detail"]["error"]["code"]) == (404, "job_not_found")


# -- 4. integers too long for Python: a 4xx naming the field ------------------------------------
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("route", "body", "status", "names"),
    [
        ("/api/rl/jobs", None, 422, "data.config.training.num_epochs"),
        ("/api/v1/env-keys", f'{{"name": {HUGE}}}', 400, "'name'"),
        ("/api/rl/verify_task_app", f'{{"endpoint_base_url": [1, -{HUGE}]}}', 400, "'endpoint_base_url[1]'"),
        ("/_fake/scenario", f'{{"steps": {HUGE}}}', 400, "'steps'"),
        ("/_fake/faults", f'{{"route": "*", "status": {HUGE}}}', 400, "'status'"),
    ],
)
def test_an_integer_with_too_many_digits_gets_a_4xx_naming_the_field(
    served: tuple[FakeSynthBackend, httpx.Client], route: str, body: str | None, status: int, names: str
) -> None:
    fake, client = served
    if body is None:
        text = json.dumps(rl_payload()).replace('"num_epochs": 1', f'"num_epochs": {HUGE}')
        assert HUGE in text
        body = text
    answer = client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    message = error_message(answer)
    assert names in message
    assert "at most 4300 digits" in message
    assert "set_int_max_str_digits" not in answer.text
    assert fake.jobs == []
    assert fake.faults == []


# -- 5. admin routes answer a wrong method with 405 and Allow, as the API does -----------------
@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/_fake/scenario", "GET, POST"),
        ("GET", "/_fake/reset", "POST"),
        ("POST", "/_fake", "GET"),
        ("POST", "/_fake/jobs", "GET"),
        ("DELETE", "/_fake/jobs/{job}", "GET"),
        ("GET", "/_fake/jobs/{job}/succeed", "POST"),
        ("PUT", "/_fake/faults", "DELETE, GET, POST"),
        ("POST", "/_fake/clock", "GET"),
        ("GET", "/_fake/clock/advance", "POST"),
    ],
)
def test_admin_routes_called_with_another_method_get_405_with_allow(
    served: tuple[FakeSynthBackend, httpx.Client], method: str, path: str, allowed: str
) -> None:
    fake, client = served
    fake.scenario(steps=2)
    job_id = run_job(client)
    answer = client.request(method, path.format(job=job_id))
    assert answer.status_code == 405, answer.text
    assert answer.headers["allow"] == allowed
    assert error_message(answer) == f"{method} is not allowed on {path.format(job=job_id)}; use {allowed}"
    assert fake.default_scenario.steps == 2
    assert fake.job(job_id).status == "running"


@pytest.mark.parametrize(("method", "path"), [("GET", "/_fake/teapot"), ("POST", "/_fake/jobs/x/y/z")])
def test_admin_paths_that_do_not_exist_still_get_404(
    served: tuple[FakeSynthBackend, httpx.Client], method: str, path: str
) -> None:
    _, client = served
    answer = client.request(method, path)
    assert answer.status_code == 404
    assert "GET /_fake/jobs" in answer.json()["detail"]["error"]["routes"]


def test_the_limits_are_what_the_readme_says() -> None:
    assert (MAX_JOBS, MAX_JOB_DATA, MAX_TARGET_CHARS, DETAIL_ITEMS) == (1000, 256 * 2**20, 8192, 1000)
