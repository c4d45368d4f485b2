"""Fuzzing every route of the mounted fake backend: odd input gets a clear 4xx, never a crash.

A fake that answers garbage with a 500 (or lets an exception escape into the client) would make a
user's test fail for the fake's reasons. Each property sends generated input through a real
``httpx.Client`` to the respx-mounted fake and checks the answer's shape: a 2xx when the input
is valid, else a 4xx whose JSON body names the problem. The config loader has its own fuzz tests
(``test_config_fuzz.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.config import validate_rl_payload
from pytest_synth_rl.fake import FakeSynthBackend

BASE = "https://api.usesynth.ai"
API = f"{BASE}/api"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JOB_ROUTES = ("", "/events", "/events/stream", "/metrics", "/timeline")

_PAYLOAD: dict[str, Any] = {
    "job_type": "rl",
    "compute": {"gpu_type": "H100", "gpu_count": 1, "topology": {"reference_placement": "none"}},
    "data": {
        "endpoint_base_url": "https://task-app.example.com",
        "base_model": "Qwen/Qwen3-0.6B",
        "config": {
            "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
            "services": {"task_url": "https://task-app.example.com"},
            "model": {"base": "Qwen/Qwen3-0.6B", "trainer_mode": "lora", "label": "fuzz"},
            "compute": {"gpu_type": "H100", "gpu_count": 1, "topology": {"reference_placement": "none"}},
            "topology": {"type": "single_node_split", "gpus_for_vllm": 1, "gpus_for_training": 1},
            "rollout": {
                "env_name": "arithmetic",
                "policy_name": "arithmetic-solver",
                "max_turns": 1,
                "episodes_per_batch": 2,
                "max_concurrent_rollouts": 1,
            },
        },
    },
    "tags": {"source": "fuzz"},
}


class Fuzzed:
    """The mounted fake, a client, and one real job to aim job routes at."""

    def __init__(self, fake: FakeSynthBackend, client: httpx.Client) -> None:
        self.fake = fake
        self.client = client
        self.auth = {"Authorization": f"Bearer {fake.api_key.value}"}
        response = client.post(f"{API}/rl/jobs", json=_PAYLOAD, headers=self.auth)
        assert response.status_code == 201, response.text
        self.job_id: str = response.json()["id"]

    def send(self, method: str, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        """Send and check the universal rules; any exception escaping the fake fails the test."""
        headers = {**self.auth, **kwargs.pop("headers", {})}
        response = self.client.request(method, url, headers=headers, **kwargs)
        check_answer(response)
        return response


def check_answer(response: httpx.Response) -> None:
    status = response.status_code
    assert status < 500, (
        f"{response.request.method} {response.request.url} -> {status}: {response.text[:300]}"
    )
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert status == 200
        return
    body = response.json()  # every answer, good or bad, is JSON
    if status >= 400:
        detail = body["detail"]
        if isinstance(detail, dict):
            message = detail["error"]["message"]
            assert isinstance(message, str)
            assert len(message) > 10
        else:
            assert detail
            assert all(item["msg"] and item["loc"] for item in detail)


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[Fuzzed]:
    # strict=False: an unknown path gets the served fake's 404 (strict mode raises by design).
    fake = FakeSynthBackend(clock=VirtualClock(), strict=False, rollouts=False)
    with fake, httpx.Client() as client:
        yield Fuzzed(fake, client)
    fake.close()


# -- strategies ----------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"0" + b"}" * depth


def _mutated_payload(path: list[str], value: Any) -> bytes:
    payload: Any = json.loads(json.dumps(_PAYLOAD))
    node = payload
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(payload).encode()


_PAYLOAD_PATHS = [
    ["job_type"],
    ["compute"],
    ["data"],
    ["tags"],
    ["data", "config"],
    ["data", "endpoint_base_url"],
    ["data", "base_model"],
    ["data", "config", "rollout"],
    ["data", "config", "rollout", "episodes_per_batch"],
    ["data", "config", "model"],
    ["data", "config", "algorithm", "variety"],
]

raw_bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.text(max_size=60).map(lambda t: t.encode("latin-1", "replace")),
    json_values.map(lambda v: b"\xef\xbb\xbf" + json.dumps(v).encode()),  # UTF-8 BOM
    json_values.map(lambda v: json.dumps(v).encode() + b"\x00"),
    st.builds(_nested, st.sampled_from([2, 50, 5_000, 200_000]), st.sampled_from(["list", "dict"])),
    st.integers(1, 3).map(lambda n: b'{"x":"' + b"y" * (n * 400_000) + b'"}'),  # up to 1.2 MB
    st.builds(_mutated_payload, st.sampled_from(_PAYLOAD_PATHS), json_values),
    st.sampled_from([b"NaN", b'{"a": Infinity}', b"1" * 5000, b"\x00" * 10, b'{"a":"\\ud800"}']),
)

odd_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["", "-1", "0", "1e3", "0x10", " 5", "5 ", "nan", "inf", "-0", "١٢", "9" * 5000]),
    st.floats(allow_nan=True).map(repr),
    st.text(max_size=12),
)

odd_job_ids = st.one_of(
    st.text(min_size=1, max_size=40),
    st.text(alphabet="/.%?#", min_size=1, max_size=8),
    st.sampled_from(["..", ".", "%2F", "a/b", "job_rl_000001/../x", "\u202e", "\U0001f600", "x" * 10_000]),
)


# -- properties ----------------------------------------------------------------------------------
@FUZZ
@given(
    body=raw_bodies,
    content_type=st.sampled_from(["application/json", "text/plain", "", "a/b; charset=latin-1"]),
)
def test_submit_answers_any_body_with_2xx_or_a_clear_4xx(
    fuzzed: Fuzzed, body: bytes, content_type: str
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    before = len(fuzzed.fake.jobs)
    response = fuzzed.send("POST", f"{API}/rl/jobs", content=body, headers=headers)
    assert response.status_code in (200, 201, 400, 409, 422), response.text[:300]
    created = len(fuzzed.fake.jobs) - before
    assert created == (1 if response.status_code == 201 else 0)


@FUZZ
@given(
    route=st.sampled_from(["/events", "/events/stream", "/metrics", "/list"]),
    params=st.dictionaries(
        st.sampled_from(["since_seq", "limit", "after_step", "status", "model", "after", "name", "zz"]),
        odd_numbers,
        max_size=3,
    ),
)
def test_query_parameters_are_validated_not_crashed_on(
    fuzzed: Fuzzed, route: str, params: dict[str, str]
) -> None:
    url = f"{API}/rl/jobs" if route == "/list" else f"{API}/rl/jobs/{fuzzed.job_id}{route}"
    response = fuzzed.send("GET", url, params=params)
    assert response.status_code in (200, 422), response.text[:300]
    if response.status_code == 422:
        named = {item["loc"][-1] for item in response.json()["detail"]}
        assert named <= set(params), (named, params)


@FUZZ
@given(
    job_id=odd_job_ids,
    suffix=st.sampled_from(JOB_ROUTES),
    encode=st.booleans(),
    method=st.sampled_from(["GET", "POST", "DELETE"]),
)
def test_odd_job_ids_get_a_4xx_that_names_the_path(
    fuzzed: Fuzzed, job_id: str, suffix: str, encode: bool, method: str
) -> None:
    segment = quote(job_id, safe="") if encode else job_id
    try:
        url = httpx.URL(f"{API}/rl/jobs/{segment}{suffix}")
    except httpx.InvalidURL:
        assume(False)  # the client refuses to send it (control characters): nothing reaches the fake
        raise
    response = fuzzed.send(method, url)
    # Only an id that arrives as one path segment is surely a job id: "?", "#", "/", "%2F" and dot
    # segments change the path itself (".../jobs/." is the list route); the rules above still hold.
    plain = url.path == f"/api/rl/jobs/{job_id}{suffix}" and "/" not in job_id
    if plain and job_id not in (".", "..", fuzzed.job_id):
        assert 400 <= response.status_code < 500, response.text[:300]
        if response.status_code == 404 and method == "GET" and not suffix:
            assert response.json()["detail"]["error"]["code"] == "job_not_found"


@FUZZ
@given(
    route=st.sampled_from(["submit", "cancel", "start", "status"]),
    header=st.sampled_from(["", "Bearer", "Bearer ", "Basic abc", "bearer wrong", "Bearer \u00e9\u00e9"]),
)
def test_bad_credentials_get_401_before_anything_else(fuzzed: Fuzzed, route: str, header: str) -> None:
    method, path = {
        "submit": ("POST", "/rl/jobs"),
        "cancel": ("POST", f"/rl/jobs/{fuzzed.job_id}/cancel"),
        "start": ("POST", f"/rl/jobs/{fuzzed.job_id}/start"),
        "status": ("GET", f"/rl/jobs/{fuzzed.job_id}"),
    }[route]
    encoded = header.encode("latin-1")
    response = fuzzed.client.request(
        method, f"{API}{path}", headers=[(b"Authorization", encoded)] if header else []
    )
    check_answer(response)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


@FUZZ
@given(
    body=raw_bodies, key=st.one_of(st.none(), st.text(alphabet=st.characters(max_codepoint=255), max_size=30))
)
def test_cancel_start_and_idempotent_submit_tolerate_junk(
    fuzzed: Fuzzed, body: bytes, key: str | None
) -> None:
    fresh = fuzzed.send("POST", f"{API}/rl/jobs", json=_PAYLOAD)
    job_id = fresh.json()["id"]
    for suffix in ("/start", "/cancel", "/cancel"):
        response = fuzzed.send("POST", f"{API}/rl/jobs/{job_id}{suffix}", content=body)
        assert response.status_code in (200, 409)
    assert fuzzed.fake.job(job_id).status == "cancelled"
    if key is not None:
        headers = {"Idempotency-Key": key.encode("latin-1")}  # any latin-1 header value
        first = fuzzed.send("POST", f"{API}/rl/jobs", content=body, headers=headers)
        again = fuzzed.send("POST", f"{API}/rl/jobs", content=body, headers=headers)
        if first.status_code == 201:
            assert again.status_code == 200
            assert again.json()["id"] == first.json()["id"]


def _junk(body: bytes) -> bytes:
    """*body*, made sure to be junk: a JSON object gets a key no admin route accepts, and an
    empty body (which means "no options", a valid request) becomes text that is not JSON."""
    if not body.strip():
        return body + b"not json"
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if isinstance(value, dict):
        return json.dumps({**value, "not_an_option": 1}).encode()
    return body


@FUZZ
@given(
    path=st.sampled_from(
        ["/scenario", "/faults", "/jobs/{job}/advance", "/jobs/{job}/fail", "/clock/advance"]
    ),
    body=st.one_of(
        raw_bodies,
        st.dictionaries(
            st.sampled_from(
                [
                    "outcome",
                    "steps",
                    "duration",
                    "polls",
                    "fail_at_step",
                    "error",
                    "route",
                    "status",
                    "probability",
                    "fail_next",
                    "pattern",
                    "latency",
                    "seconds",
                    "to",
                    "job",
                    "seed",
                ]
            ),
            json_values,
            max_size=4,
        ).map(lambda d: json.dumps(d).encode()),
    ).map(lambda body: _junk(body)),
)
def test_admin_routes_answer_junk_with_4xx(fuzzed: Fuzzed, path: str, body: bytes) -> None:
    target = path.replace("{job}", fuzzed.job_id)
    try:
        response = fuzzed.send("POST", f"{BASE}/_fake{target}", content=body)
        assert 400 <= response.status_code < 500, (
            f"POST /_fake{target} accepted junk {body[:120]!r}: {response.status_code} {response.text[:300]}"
        )
    finally:
        fuzzed.fake.clear_faults()  # a fault the fuzzer managed to add must not leak into other examples


# -- the served fake: junk over real HTTP ---------------------------------------------------------
class Served:
    """The fake served on loopback, a client with its key, and one job to aim job routes at."""

    def __init__(self, fake: FakeSynthBackend, url: str, client: httpx.Client) -> None:
        self.fake = fake
        self.url = url
        self.client = client
        created = client.post(f"{url}/api/rl/jobs", json=_PAYLOAD)
        assert created.status_code == 201, created.text
        self.job_id: str = created.json()["id"]

    def healthy(self) -> None:
        """A plain follow-up request still works: the junk left nothing broken behind."""
        clock = self.client.get(f"{self.url}/_fake/clock")
        assert clock.status_code == 200, clock.text
        status = self.client.get(f"{self.url}/api/rl/jobs/{self.job_id}")
        assert status.status_code == 200, status.text


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    fake = FakeSynthBackend(clock=VirtualClock(), rollouts=False)
    fake.scenario(steps=3, polls=10**6)  # the target job stays running through every example
    with fake.serve(read_timeout=30.0) as url:
        headers = {"Authorization": f"Bearer {fake.api_key.value}"}
        with httpx.Client(headers=headers, timeout=60.0) as client:
            yield Served(fake, url, client)
    fake.close()


#: Every route that reads a body, as ``(method, path)``; ``{job}`` is the target job.
BODY_ROUTES = [
    ("POST", "/api/rl/jobs"),
    ("POST", "/api/rl/verify_task_app"),
    ("POST", "/api/v1/env-keys"),
    ("POST", "/_fake/scenario"),
    ("POST", "/_fake/faults"),
    ("POST", "/_fake/clock/advance"),
    ("POST", "/_fake/jobs/{job}/advance"),
    ("POST", "/_fake/jobs/{job}/fail"),
]
#: Every other route (the live stream aside: it stays open by design).
OTHER_ROUTES = [
    ("GET", "/api/rl/jobs"),
    ("GET", "/api/rl/jobs/{job}"),
    ("GET", "/api/rl/jobs/{job}/events"),
    ("GET", "/api/rl/jobs/{job}/metrics"),
    ("GET", "/api/rl/jobs/{job}/timeline"),
    ("GET", "/api/learning/jobs/{job}"),
    ("GET", "/api/orchestration/jobs/{job}/events"),
    ("GET", "/api/v1/crypto/public-key"),
    ("GET", "/api/v1/env-keys/verify"),
    ("GET", "/_fake"),
    ("GET", "/_fake/scenario"),
    ("GET", "/_fake/jobs"),
    ("GET", "/_fake/jobs/{job}"),
    ("GET", "/_fake/requests"),
    ("GET", "/_fake/faults"),
    ("GET", "/_fake/clock"),
]
SERVED_FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SERVED_FUZZ
@given(route=st.sampled_from(BODY_ROUTES), body=raw_bodies.map(_junk))
def test_the_served_fake_answers_junk_bodies_on_every_route_with_a_4xx(
    served: Served, route: tuple[str, str], body: bytes
) -> None:
    method, path = route
    try:
        response = served.client.request(
            method, served.url + path.replace("{job}", served.job_id), content=body
        )
        if route == ("POST", "/api/rl/jobs") and _valid_payload_plus_extra_key(body):
            # Not junk after all: the backend tolerates unknown keys (as its models do), so a valid
            # job body with one more key is a job.
            assert response.status_code == 201, response.text[:300]
        else:
            assert 400 <= response.status_code < 500, (
                f"{method} {path} answered junk {body[:120]!r} with {response.status_code}: "
                f"{response.text[:300]}"
            )
        check_answer(response)
        served.healthy()
    finally:
        served.fake.clear_faults()


def _valid_payload_plus_extra_key(body: bytes) -> bool:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict) or "not_an_option" not in value:
        return False
    value.pop("not_an_option")
    return not validate_rl_payload(value)


@SERVED_FUZZ
@given(
    route=st.sampled_from(BODY_ROUTES + OTHER_ROUTES),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    suffix=st.sampled_from(["", "/", "/x", "/%00", "/..", "/%ff%fe", "//"]),
    query=st.dictionaries(
        st.sampled_from(["since_seq", "limit", "after_step", "x", ""]), odd_numbers, max_size=3
    ),
    header=st.binary(min_size=1, max_size=40).map(
        lambda raw: bytes(b for b in raw if b >= 0x21 and b != 0x7F)
    ),
    body=raw_bodies,
)
def test_the_served_fake_never_answers_anything_with_a_500_and_stays_healthy(
    served: Served,
    route: tuple[str, str],
    method: str,
    suffix: str,
    query: dict[str, str],
    header: bytes,
    body: bytes,
) -> None:
    path = route[1].replace("{job}", served.job_id) + suffix
    assume(not path.endswith("/events/stream"))
    try:
        response = served.client.request(
            method,
            served.url + path,
            params=query,
            content=body,
            headers=[(b"X-Junk", header.strip() or b"-")],
        )
        assert response.status_code < 500, f"{method} {path} -> {response.status_code}: {response.text[:300]}"
    finally:
        # A POST to /_fake/faults may have installed a fault on purpose (an empty body is a
        # valid fault: 503 on every route); it is cleared before the health check.
        served.fake.clear_faults()
        served.fake.scenario(steps=3, polls=10**6)
    served.healthy()
