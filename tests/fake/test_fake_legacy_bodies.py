"""The legacy create bodies of contract §1.2 get a job: ``JobsClient.rl.create``'s top-level
fields and the old ``RlClient.create_job``'s ``data`` without a ``config`` (both were 422)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_fake_support import served_client

from pytest_synth_rl.fake import FakeSynthBackend

KEY = "sk_test_legacy_bodies_key_01"
#: Not loopback: the fake runs no rollouts for these jobs (there is no task app behind them).
TASK_URL = "https://task-app.example.com"
TOP_LEVEL = {
    "model": "Qwen/Qwen3-0.6B",
    "endpoint_base_url": f"{TASK_URL}/",
    "trainer_id": "trainer_a",
}
RL_CLIENT = {
    "job_type": "rl",
    "data": {
        "model": "Qwen/Qwen3-0.6B",
        "endpoint_base_url": TASK_URL,
        "trainer": {"group_size": 4},
    },
}


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY) as served:
        served[0].scenario(steps=2, polls=3)
        yield served


@pytest.mark.parametrize("body", [TOP_LEVEL, RL_CLIENT], ids=["jobs-client", "rl-client"])
def test_a_legacy_create_body_gets_a_job_that_runs_to_the_end(
    served: tuple[FakeSynthBackend, httpx.Client], body: dict[str, Any]
) -> None:
    _, client = served
    created = client.post("/api/rl/jobs", json=body)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    statuses = [client.get(f"/api/rl/jobs/{job_id}").json() for _ in range(3)]
    assert statuses[-1]["status"] == "succeeded"
    assert statuses[-1]["model"] == "Qwen/Qwen3-0.6B"
    assert statuses[-1]["endpoint_base_url"] == TASK_URL


@pytest.mark.parametrize(
    ("body", "problems"),
    [
        (
            {"model": "", "endpoint_base_url": "htp://127.0.0.1:9", "trainer": {"group_size": 1}},
            [
                ("model", "expected the model id, got ''"),
                (
                    "endpoint_base_url",
                    "expected an http(s) URL such as http://127.0.0.1:8114, got 'htp://127.0.0.1:9' "
                    "(did you mean 'http://127.0.0.1:9'?)",
                ),
                ("trainer.group_size", "expected an integer >= 2, got 1"),
            ],
        ),
        (
            {
                "job_type": "rl",
                "data": {"model": "m", "endpoint_base_url": "http://127.0.0.1:9", "trainer": 3},
            },
            [("data.trainer", "expected an object, got 3")],
        ),
    ],
    ids=["top-level", "rl-client"],
)
def test_a_legacy_body_is_checked_for_what_it_carries(
    served: tuple[FakeSynthBackend, httpx.Client], body: dict[str, Any], problems: list[tuple[str, str]]
) -> None:
    fake, client = served
    refused = client.post("/api/rl/jobs", json=body)
    assert refused.status_code == 422
    assert [(p["loc"], p["msg"]) for p in refused.json()["detail"]] == problems
    assert fake.jobs == []


def test_a_current_body_without_its_config_is_still_judged_by_the_payload_rules(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    refused = client.post(
        "/api/rl/jobs", json={"job_type": "rl", "data": {"endpoint_base_url": "http://127.0.0.1:9"}}
    )
    assert refused.status_code == 422
    assert "data.config" in [p["loc"] for p in refused.json()["detail"]]
