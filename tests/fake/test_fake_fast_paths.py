"""The fake backend's shortcuts give the answers the long way gave: the store lock's reentry,
query parameters parsed once per request, the finite-number check, and the memo of payload
checks seen through ``POST /rl/jobs``."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import httpx
import pytest
from test_fake_support import API, auth, rl_payload

from pytest_synth_rl.config.validate import CHECKS
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.api import ApiCall
from pytest_synth_rl.fake.store import StoreLock
from pytest_synth_rl.fake.wire import BadBody, request_json

#: Seconds a helper thread may take; only a deadlock gets near it.
GENEROUS = 30.0


# -- the store lock ----------------------------------------------------------------------------
def test_a_reentered_lock_is_freed_by_its_last_release_only() -> None:
    lock = StoreLock()
    for _ in range(3):
        lock.acquire()
    lock.release()
    lock.release()
    assert lock.held
    seen: list[object] = []

    def other_thread() -> None:
        seen.append(lock.held)
        try:
            lock.release()
        except RuntimeError as exc:
            seen.append(str(exc))

    worker = threading.Thread(target=other_thread, daemon=True)
    worker.start()
    worker.join(GENEROUS)
    assert seen == [False, "cannot release a StoreLock this thread does not hold"]
    assert lock.held  # the refused release took nothing from the owner
    lock.release()
    assert not lock.held
    with pytest.raises(RuntimeError, match="this thread does not hold"):
        lock.release()


def test_a_waiting_thread_gets_the_lock_after_the_owners_last_release() -> None:
    lock = StoreLock()
    order: list[str] = []
    waiting = threading.Event()

    def other_thread() -> None:
        waiting.set()
        with lock:
            order.append("other thread")

    with lock:
        with lock:
            worker = threading.Thread(target=other_thread, daemon=True)
            worker.start()
            assert waiting.wait(GENEROUS)
        assert lock.held
        order.append("owner's last release")
    worker.join(GENEROUS)
    assert order == ["owner's last release", "other thread"]
    assert not lock.held


def test_a_thread_waiting_for_a_condition_is_woken_by_the_release_that_meets_it() -> None:
    lock = StoreLock()
    ready: list[bool] = []
    depth_after: list[bool] = []

    def other_thread() -> None:
        with lock:
            ready.append(True)

    def waiter() -> None:
        with lock, lock:
            worker = threading.Thread(target=other_thread, daemon=True)
            worker.start()
            lock.wait_until(lambda: bool(ready))  # sets the lock aside until the other thread ran
            lock.release()
            depth_after.append(lock.held)  # taken back at depth 2: one release leaves it held
            lock.acquire()
            worker.join(GENEROUS)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    thread.join(GENEROUS)
    assert not thread.is_alive()
    assert ready == [True]
    assert depth_after == [True]
    assert not lock.held


# -- query parameters --------------------------------------------------------------------------
def test_each_call_reads_its_own_requests_query(fake: FakeSynthBackend) -> None:
    lifecycle, keys = fake.lifecycle, fake.keys
    first = ApiCall(lifecycle, httpx.Request("GET", f"{API}/rl/jobs?limit=1"), None, keys)
    second = ApiCall(lifecycle, httpx.Request("GET", f"{API}/rl/jobs?limit=2&status=queued"), None, keys)
    assert first.params.get("limit") == "1"
    assert first.params is first.params  # parsed once
    assert second.params.get("limit") == "2"
    assert second.params.get("status") == "queued"
    assert first.params.get("status") is None


def test_the_metrics_page_follows_each_requests_parameters(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    response = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    job_id = response.json()["id"]
    fake.job(job_id).succeed()
    url = f"{API}/rl/jobs/{job_id}/metrics"
    everything = client.get(url, params={"after_step": -1, "limit": 1000}, headers=auth(fake)).json()
    later = client.get(url, params={"after_step": 1, "limit": 2}, headers=auth(fake)).json()
    losses = client.get(url, params={"name": "train.loss"}, headers=auth(fake)).json()
    assert len(everything["points"]) > 2
    assert [p["step"] for p in later["points"]] == [2, 2]
    assert later["has_more"]
    assert {p["name"] for p in losses["points"]} == {"train.loss"}


# -- finite numbers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"a": 1, "b": [True, None, "NaN", 2.5, {"c": 1e308}]}, None),
        ({"a": [1.0, {"b": float("nan")}], "c": float("inf")}, "a[1].b"),
        ([0.0, [-math.inf]], "[1][0]"),
        (float("-inf"), "(the body)"),
        ({"late": {"deep": [[[float("inf")]]]}}, "late.deep[0][0][0]"),
    ],
)
def test_the_first_non_finite_number_is_named(value: Any, found: str | None) -> None:
    body = json.dumps(value).encode()
    if found is None:
        assert request_json(body) == value
        return
    with pytest.raises(BadBody) as caught:
        request_json(body)
    assert (caught.value.code, caught.value.field) == ("not_finite", found)


# -- remembered payload checks through the API -----------------------------------------------------
def test_a_payload_that_differs_by_one_value_is_checked_again(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    CHECKS.clear()
    url = f"{API}/rl/jobs"

    def batch_size(value: object) -> int:
        payload: dict[str, Any] = rl_payload()
        payload["data"]["config"]["training"]["batch_size"] = value
        return client.post(url, json=payload, headers=auth(fake)).status_code

    assert batch_size(2) == 201
    hits = CHECKS.info().hits
    assert batch_size(2) == 201
    assert CHECKS.info().hits == hits + 1  # the same config: its check was remembered
    for look_alike in (2.5, [2], "two"):
        assert batch_size(look_alike) == 422, look_alike
    assert batch_size(2) == 201
