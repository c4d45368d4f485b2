"""What the fake does with a task app's answer to ``/rollout`` that is hostile to it: one that
never ends (it trickles), one that is huge, one that is nested too deeply. Each must fail or
bound the rollout the way every other broken answer does, never the fake.

The task apps here are raw-socket servers on loopback, so each answer is exactly the bytes a
test writes, framing included."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hang_guard import finishes
from raw_server import GENEROUS, RawServer, read_request
from test_fake_support import TASK_KEY, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend, RolloutRecord
from pytest_synth_rl.fake.http_post import PostFailure, PostPool

#: The most of one answer a rollout record keeps, and of all its answers a job keeps (the docs' limits).
MAX_KEPT_RESPONSE = 64 * 1024
MAX_KEPT_RESPONSES = 128 * 1024
#: The rollout timeout of the trickle tests, and how often a trickling app sends one byte: more
#: often than the timeout, so no single read waits that long, while the whole answer (bounded
#: by TRICKLE_BYTES) would take far longer than the timeout.
TIMEOUT = 0.3
TRICKLE_INTERVAL = 0.05
TRICKLE_BYTES = 200

#: What an app answers a rollout request (its parsed JSON body) with: the whole HTTP answer's
#: bytes, or a :class:`Trickle`.
Answer = Callable[[dict[str, Any]], "bytes | Trickle"]


class Trickle:
    """An answer whose *head* is sent at once (or trickled too, with ``head_too``) and whose
    body then comes one byte per :data:`TRICKLE_INTERVAL`, never whole."""

    def __init__(self, head: bytes, *, head_too: bool = False) -> None:
        self.head = head
        self.head_too = head_too


def http_answer(body: bytes, status: str = "200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status.encode(),
        len(body),
        body,
    )


def rollout_answer(request: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A valid rollout answer (both eras' reward keys, the ids echoed) plus *extra* keys."""
    reward = {"outcome_reward": 0.5}
    return {
        "run_id": request["run_id"],
        "trace_correlation_id": request["trace_correlation_id"],
        "reward_info": reward,
        "metrics": reward,
        **extra,
    }


class RawTaskApp(RawServer):
    """A task app on a loopback socket: each ``POST /rollout`` gets ``answer(request)``; every
    connection thread ends when :attr:`stop` is set (or its peer goes away)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.stop = threading.Event()
        self.requests = 0
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(GENEROUS)
        buffer = b""
        while not self.stop.is_set():
            read = read_request(conn, buffer)
            if read is None:
                return
            _, body, buffer = read
            self.requests += 1
            answer = self.answer(json.loads(body))
            if isinstance(answer, Trickle):
                self._trickle(conn, answer)
                return
            conn.sendall(answer)

    def _trickle(self, conn: socket.socket, answer: Trickle) -> None:
        pending = answer.head if answer.head_too else b""
        if not answer.head_too:
            conn.sendall(answer.head)
        for index in range(TRICKLE_BYTES):
            if self.stop.wait(TRICKLE_INTERVAL):
                return
            conn.sendall(pending[index : index + 1] or b" ")

    def close(self) -> None:
        self.stop.set()
        super().close()


@pytest.fixture
def task_app() -> Iterator[Callable[[Answer], RawTaskApp]]:
    apps: list[RawTaskApp] = []

    def start(answer: Answer) -> RawTaskApp:
        apps.append(RawTaskApp(answer))
        return apps[-1]

    yield start
    for app in apps:
        app.close()


@dataclass(frozen=True)
class Ended:
    """A job run to its end, as the fake saw it."""

    status: str
    error: str
    rollouts: list[RolloutRecord]


def run_job(client: httpx.Client, url: str, *, rollout_timeout: float = GENEROUS, steps: int = 1) -> Ended:
    """A job against the task app at *url*, run to its end (it runs when it is looked at)."""
    with FakeSynthBackend(
        clock=VirtualClock(), task_app_api_key=TASK_KEY, rollout_timeout=rollout_timeout
    ) as fake:
        fake.scenario(immediate=True, steps=steps)
        job = fake.job(finishes(lambda: submit(client, fake, rl_payload(url))))
        ended = Ended(finishes(lambda: job.status), job.error or "", job.rollouts)
    fake.close()
    return ended


# -- a rollout that never ends: the timeout is for the whole rollout ----------------------------
TRICKLES = {
    "content-length": Trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
    "chunked": Trickle(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"),
    "read-to-end": Trickle(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"),
    "head": Trickle(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * TRICKLE_BYTES, head_too=True),
}


@pytest.mark.parametrize("name", list(TRICKLES))
def test_an_answer_trickled_slower_than_the_timeout_allows_fails_the_post_as_timed_out(
    task_app: Callable[[Answer], RawTaskApp], name: str
) -> None:
    # Before, the timeout bounded each read: a byte per 0.05 s kept a 0.3 s post going until
    # the app gave up, which then read as the app having closed the connection mid-answer.
    app = task_app(lambda request: TRICKLES[name])
    posts = PostPool(timeout=TIMEOUT)
    with pytest.raises(PostFailure) as caught:
        finishes(lambda: posts.post(app.url + "/rollout", b"{}", {}))
    posts.close()
    assert caught.value.kind == "timeout"
    doing = "waiting for the response" if name == "head" else "reading the response body"
    assert str(caught.value) == f"timed out after {TIMEOUT:g}s {doing}"


def test_a_post_may_be_given_its_own_timeout(task_app: Callable[[Answer], RawTaskApp]) -> None:
    app = task_app(lambda request: TRICKLES["content-length"])
    posts = PostPool(timeout=GENEROUS)
    with pytest.raises(PostFailure) as caught:
        finishes(lambda: posts.post(app.url + "/rollout", b"{}", {}, timeout=TIMEOUT))
    posts.close()
    assert (caught.value.kind, str(caught.value)) == (
        "timeout",
        f"timed out after {TIMEOUT:g}s reading the response body",
    )


def test_a_task_app_that_trickles_its_answer_fails_the_job_at_the_rollout_timeout(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    app = task_app(lambda request: TRICKLES["content-length"])
    job = run_job(client, app.url, rollout_timeout=TIMEOUT)
    assert job.status == "failed"
    assert job.error.startswith("task app rollout failed at step 1 (rl; seed ")
    assert f"POST {app.url}/rollout: timed out after {TIMEOUT:g}s " in job.error
    assert "(hint: make the rollout faster, or give it longer" in job.error


def test_a_rollout_timeout_set_after_the_first_rollouts_applies_to_the_next_ones(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    # Before, the connections were made with the timeout of the first rollout and kept it.
    trickling = threading.Event()

    def answer(request: dict[str, Any]) -> bytes | Trickle:
        if trickling.is_set():
            return TRICKLES["content-length"]
        return http_answer(json.dumps(rollout_answer(request)).encode())

    app = task_app(answer)
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, rollout_timeout=GENEROUS) as fake:
        fake.scenario(immediate=True, steps=1)
        first = fake.job(finishes(lambda: submit(client, fake, rl_payload(app.url))))
        assert finishes(lambda: first.status) == "succeeded", first.error
        fake.use_rollout_timeout(TIMEOUT)
        trickling.set()
        second = fake.job(finishes(lambda: submit(client, fake, rl_payload(app.url))))
        assert finishes(lambda: second.status) == "failed"
        error = second.error or ""
    fake.close()
    assert f"POST {app.url}/rollout: timed out after {TIMEOUT:g}s " in error


# -- a huge answer: each job keeps a bounded view of its answers --------------------------------
def test_a_huge_answer_is_read_for_its_reward_but_not_kept(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    # Before, every parsed answer was kept whole on its job: a few MB per rollout, never counted.
    trace = "a" * (2 * MAX_KEPT_RESPONSE)
    app = task_app(
        lambda request: http_answer(json.dumps(rollout_answer(request, trace={"x": trace})).encode())
    )
    job = run_job(client, app.url)
    assert job.status == "succeeded", job.error
    assert job.rollouts
    for record in job.rollouts:
        assert record.reward == 0.5
        assert record.status_code == 200
        assert record.response is None
        assert record.response_body is None
        assert record.response_omitted
        assert record.response_size > 2 * MAX_KEPT_RESPONSE


def test_a_job_keeps_its_answers_up_to_its_budget_then_only_their_size(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    padding = "p" * (MAX_KEPT_RESPONSE // 2)
    app = task_app(lambda request: http_answer(json.dumps(rollout_answer(request, trace=padding)).encode()))
    job = run_job(client, app.url, steps=3)
    assert job.status == "succeeded", job.error
    kept = [record for record in job.rollouts if not record.response_omitted]
    omitted = [record for record in job.rollouts if record.response_omitted]
    assert kept
    assert omitted
    assert job.rollouts[: len(kept)] == kept  # the first answers are the ones kept
    assert sum(len(record.response_body or b"") for record in job.rollouts) <= MAX_KEPT_RESPONSES
    assert kept[0].response == rollout_answer(kept[0].request, trace=padding)
    assert all(record.response is None and record.response_size > len(padding) for record in omitted)
    assert all(record.reward == 0.5 for record in job.rollouts)


def test_small_answers_are_all_kept_and_read_as_json(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    app = task_app(
        lambda request: http_answer(json.dumps(rollout_answer(request, details={"n": 1})).encode())
    )
    job = run_job(client, app.url, steps=2)
    assert job.status == "succeeded", job.error
    for record in job.rollouts:
        assert not record.response_omitted
        assert record.response == rollout_answer(record.request, details={"n": 1})
        assert record.response_size == len(record.response_body or b"")


# -- an answer nested too deeply to decode ------------------------------------------------------
DEEP = 100_000


def deep_answer(request: dict[str, Any]) -> bytes:
    ids = json.dumps(rollout_answer(request))[1:-1]
    return http_answer(b'{"trace": ' + b"[" * DEEP + b"]" * DEEP + b", " + ids.encode() + b"}")


def test_an_answer_nested_too_deeply_fails_the_rollout_like_unreadable_json(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    # Before: "step stage raised RecursionError: maximum recursion depth exceeded while decoding
    # a JSON array ...", with no seed, run_id, URL or hint.
    app = task_app(deep_answer)
    job = run_job(client, app.url)
    assert job.status == "failed"
    assert job.error.startswith("task app rollout failed at step 1 (rl; seed 0, run_id ")
    assert f"POST {app.url}/rollout: the response is nested too deeply to decode" in job.error
    assert "RecursionError" not in job.error
    assert "(hint: return a flat RolloutResponse" in job.error


def test_an_error_answer_nested_too_deeply_still_fails_with_its_status(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp]
) -> None:
    # A 400 body is read to tell a rejected key from the app's own refusal: before, a deeply
    # nested one raised RecursionError out of the rollout.
    body = b'{"detail": ' + b"[" * DEEP + b"]" * DEEP + b', "error": "bad key"}'
    app = task_app(lambda request: http_answer(body, "400 Bad Request"))
    job = run_job(client, app.url)
    assert job.status == "failed"
    assert job.error.startswith("task app rollout failed at step 1 (rl; seed 0, run_id ")
    assert f"POST {app.url}/rollout: HTTP 400: " in job.error
    assert "RecursionError" not in job.error


@pytest.mark.parametrize("echoed", [["a list"], {"an": "object"}])
def test_an_id_echoed_as_something_other_than_a_string_is_an_echo_mismatch(
    client: httpx.Client, task_app: Callable[[Answer], RawTaskApp], echoed: object
) -> None:
    # Before, a list or object could not be looked up among the ids sent: "step stage raised
    # TypeError: unhashable type".
    def answer(request: dict[str, Any]) -> bytes:
        return http_answer(json.dumps({**rollout_answer(request), "run_id": echoed}).encode())

    app = task_app(answer)
    job = run_job(client, app.url)
    assert job.status == "failed"
    assert job.error.startswith("task app rollout failed at step 1 (rl; seed 0, run_id ")
    assert f"id echo mismatch: response run_id is a {type(echoed).__name__}, expected " in job.error
