"""Every route of the fake's RL job API, through plain httpx with the fake mounted on respx."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
import pytest
from test_fake_support import API, auth, poll_to_end, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import DEFAULT_API_KEY, FakeRouteError, FakeSynthBackend
from pytest_synth_rl.fake.scenario import DEFAULT_DURATION
from pytest_synth_rl.plugin.jobs import job_tags
from pytest_synth_rl.plugin.session import offline_job_id_prefix


# -- auth ------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-key-0123456789"}, {"Authorization": f"Basic {DEFAULT_API_KEY}"}],
    ids=["missing", "wrong", "not-bearer"],
)
def test_requests_without_the_right_bearer_key_get_401(
    fake: FakeSynthBackend, client: httpx.Client, headers: dict[str, str]
) -> None:
    response = client.get(f"{API}/rl/jobs", headers=headers)
    assert response.status_code == 401
    error = response.json()["detail"]["error"]
    assert error["code"] == "unauthorised"
    assert "Authorization: Bearer" in error["message"]
    assert "FakeSynthBackend(api_key=" in error["message"]
    # never echoes what was sent, nor the accepted key in full
    assert "wrong-key-0123456789" not in response.text
    assert DEFAULT_API_KEY not in response.text
    assert response.headers["www-authenticate"] == "Bearer"


def test_custom_api_key_is_the_only_one_accepted(client: httpx.Client) -> None:
    key = "sk_test_custom_0123456789abcdef"
    with FakeSynthBackend(api_key=key, clock=VirtualClock()) as fake:
        ok = client.get(f"{API}/rl/jobs", headers={"Authorization": f"Bearer {key}"})
        bad = client.get(f"{API}/rl/jobs", headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"})
        assert (ok.status_code, bad.status_code) == (200, 401)
        assert key not in repr(fake)
        assert key not in repr(fake.api_key)
        assert all(key not in str(r.headers) and key not in repr(r) for r in fake.requests)
        assert fake.requests[0].headers["authorization"].startswith("Bearer sk_t")


# -- submit ------------------------------------------------
def test_submit_returns_the_queued_job(fake: FakeSynthBackend, client: httpx.Client) -> None:
    response = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert response.status_code == 201
    body = response.json()
    assert body["id"] == body["job_id"]
    assert body["status"] == "queued"
    assert body["progress"] == {"completed": 0, "total": 10}
    assert body["metrics"] == {"reward": None, "loss": None}
    assert datetime.fromisoformat(body["created_at"]).timestamp() == fake.clock.time()
    assert fake.job(body["id"]).payload == rl_payload()


def test_submit_rejects_non_json_and_non_objects_with_4xx(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    headers = {**auth(fake), "Content-Type": "application/json"}
    not_json = client.post(f"{API}/rl/jobs", content=b"{not json", headers=headers)
    assert not_json.status_code == 400
    assert "not valid JSON" in not_json.json()["detail"]["error"]["message"]
    a_list = client.post(f"{API}/rl/jobs", json=[1, 2], headers=auth(fake))
    assert a_list.status_code == 422
    assert "JSON object" in a_list.json()["detail"][0]["msg"]
    empty = client.post(f"{API}/rl/jobs", headers=auth(fake))
    assert empty.status_code == 422
    assert "empty body" in empty.json()["detail"][0]["msg"]
    assert fake.jobs == []


def test_submit_lists_every_payload_problem(fake: FakeSynthBackend, client: httpx.Client) -> None:
    payload = rl_payload()
    del payload["data"]["config"]["algorithm"]
    del payload["data"]["config"]["rollout"]["env_name"]
    payload["data"]["config"]["compute"]["gpu_count"] = 0
    response = client.post(f"{API}/rl/jobs", json=payload, headers=auth(fake))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) >= 2
    assert all({"loc", "msg", "hint"} <= set(item) for item in detail)
    locs = " ".join(str(item["loc"]) for item in detail)
    assert "algorithm" in locs
    assert "env_name" in locs or "rollout" in locs
    assert fake.jobs == []


def test_validation_can_be_turned_off(client: httpx.Client) -> None:
    with FakeSynthBackend(clock=VirtualClock(), validate=False) as fake:
        response = client.post(f"{API}/rl/jobs", json={"anything": True}, headers=auth(fake))
        assert response.status_code == 201
        assert response.json()["model"] == "unknown-model"


# -- idempotency ------------------------------------------------
def test_same_idempotency_key_and_body_returns_the_same_job(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    headers = {**auth(fake), "Idempotency-Key": "run-42"}
    first = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=headers)
    again = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(fake.jobs) == 1
    other_key = client.post(
        f"{API}/rl/jobs", json=rl_payload(), headers={**auth(fake), "Idempotency-Key": "x"}
    )
    assert other_key.json()["id"] != first.json()["id"]


def test_same_idempotency_key_with_a_different_body_conflicts(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    headers = {**auth(fake), "Idempotency-Key": "run-43"}
    first = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=headers)
    changed = rl_payload()
    changed["data"]["config"]["training"]["learning_rate"] = 1e-5
    conflict = client.post(f"{API}/rl/jobs", json=changed, headers=headers)
    assert conflict.status_code == 409
    error = conflict.json()["detail"]["error"]
    assert error["code"] == "idempotency_conflict"
    assert first.json()["id"] in error["message"]
    assert "new key" in error["message"]
    assert len(fake.jobs) == 1


# -- status, list, cancel ------------------------------------------------
def test_status_of_a_finished_job_has_the_documented_fields(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    job_id = submit(client, fake)
    body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "succeeded"
    assert body["progress"] == {"completed": 10, "total": 10}
    assert isinstance(body["final_reward"], float)
    assert body["model_id"] == f"rl:Qwen/Qwen3-0.6B:{job_id}"
    assert body["checkpoints"]
    assert {"step", "path"} <= set(body["checkpoints"][-1])
    assert body["results"]["metrics"]["final_reward"] == body["final_reward"]
    assert body["metrics"]["reward"] is not None
    assert "error" not in body
    finished = datetime.fromisoformat(body["finished_at"]) - datetime.fromisoformat(body["created_at"])
    assert finished.total_seconds() == DEFAULT_DURATION


def test_unknown_job_is_a_404_naming_known_ids(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    response = client.get(f"{API}/rl/jobs/job_nope", headers=auth(fake))
    assert response.status_code == 404
    message = response.json()["detail"]["error"]["message"]
    assert "job_nope" in message
    assert job_id in message


def test_list_is_newest_first_with_limit_status_filter_and_paging(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    ids = [submit(client, fake) for _ in range(3)]
    fake.job(ids[0]).fail("boom")
    listing = client.get(f"{API}/rl/jobs", headers=auth(fake)).json()
    assert listing["object"] == "list"
    assert [j["id"] for j in listing["data"]] == ids[::-1]
    assert listing["has_more"] is False
    page = client.get(f"{API}/rl/jobs", params={"limit": 2}, headers=auth(fake)).json()
    assert [j["id"] for j in page["data"]] == [ids[2], ids[1]]
    assert page["has_more"] is True
    rest = client.get(f"{API}/rl/jobs", params={"after": page["last_id"]}, headers=auth(fake)).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]]
    failed = client.get(f"{API}/rl/jobs", params={"status": "failed"}, headers=auth(fake)).json()
    assert [j["id"] for j in failed["data"]] == [ids[0]]
    bad = client.get(f"{API}/rl/jobs", params={"status": "exploded"}, headers=auth(fake))
    assert bad.status_code == 422
    assert "queued" in bad.json()["detail"][0]["hint"]
    bad_limit = client.get(f"{API}/rl/jobs", params={"limit": "ten"}, headers=auth(fake))
    assert bad_limit.status_code == 422
    assert bad_limit.json()["detail"][0]["loc"] == ["query", "limit"]


def test_list_filters_on_creation_time_and_refuses_a_time_it_cannot_read(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    first = submit(client, fake)
    start = fake.clock.time()
    fake.clock.sleep(100)
    second = submit(client, fake)

    def listed(**params: object) -> list[str]:
        body = client.get(f"{API}/rl/jobs", params=params, headers=auth(fake)).json()
        return [j["id"] for j in body["data"]]

    midway = datetime.fromtimestamp(start + 50, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    assert listed(created_after=midway) == [second]
    assert listed(created_before=midway) == [first]
    assert listed(created_after=str(start + 50)) == [second]  # epoch seconds work too
    assert listed(created_after=str(start + 100)) == []  # strictly after
    for raw in ("abc", "nan", "2026-13-01"):
        bad = client.get(f"{API}/rl/jobs", params={"created_after": raw}, headers=auth(fake))
        assert bad.status_code == 422
        assert bad.json()["detail"][0]["loc"] == ["query", "created_after"]
        assert bad.json()["detail"][0]["msg"] == f"must be an ISO-8601 time or epoch seconds, got {raw!r}"


def test_cancel_stops_a_running_job_and_refuses_a_finished_one(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    job_id = submit(client, fake)
    fake.clock.sleep(DEFAULT_DURATION / 3)  # a third of the way through the default job
    cancelled = client.post(f"{API}/rl/jobs/{job_id}/cancel", json={}, headers=auth(fake))
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert fake.job(job_id).event_types[-1] == "rl.job.cancelled"
    fake.clock.sleep(1000)
    assert fake.job(job_id).status == "cancelled"  # stays cancelled as time passes
    again = client.post(f"{API}/rl/jobs/{job_id}/cancel", json={}, headers=auth(fake))
    assert again.status_code == 409
    assert "already cancelled" in again.json()["detail"]["error"]["message"]


def test_legacy_start_route_reports_the_job(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    response = client.post(f"{API}/rl/jobs/{job_id}/start", json={}, headers=auth(fake))
    assert response.status_code == 200
    assert response.json()["id"] == job_id


# -- events, metrics, timeline ------------------------------------------------
def test_events_page_with_since_seq_and_limit(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    poll_to_end(client, fake, job_id)
    everything = client.get(f"{API}/rl/jobs/{job_id}/events", headers=auth(fake)).json()
    events = everything["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["rl.job.created", "rl.train.started"]
    assert types.count("rl.train.step") == 10
    assert types[-2:] == ["rl.eval.summary", "rl.train.completed"]
    assert all({"seq", "type", "message", "level", "data", "created_at", "job_id"} <= set(e) for e in events)
    step = next(e for e in events if e["type"] == "rl.train.step")
    assert {"step", "reward", "loss"} <= set(step["data"])
    page = client.get(
        f"{API}/rl/jobs/{job_id}/events", params={"since_seq": 3, "limit": 4}, headers=auth(fake)
    ).json()
    assert [e["seq"] for e in page["events"]] == [4, 5, 6, 7]
    assert page["next_seq"] == 7
    assert page["has_more"] is True
    tail = client.get(
        f"{API}/rl/jobs/{job_id}/events", params={"since_seq": len(events)}, headers=auth(fake)
    ).json()
    assert tail["events"] == []
    assert tail["next_seq"] == len(events)
    bad = client.get(f"{API}/rl/jobs/{job_id}/events", params={"since_seq": "x"}, headers=auth(fake))
    assert bad.status_code == 422


def test_metrics_points_after_step(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    poll_to_end(client, fake, job_id)
    points = client.get(f"{API}/rl/jobs/{job_id}/metrics", headers=auth(fake)).json()["points"]
    rewards = [p for p in points if p["name"] == "train.reward"]
    assert [p["step"] for p in rewards] == list(range(1, 11))
    assert {p["name"] for p in points} >= {"train.reward", "train.loss"}
    assert all({"name", "step", "value", "created_at"} <= set(p) for p in points)
    later = client.get(
        f"{API}/rl/jobs/{job_id}/metrics", params={"after_step": 8, "limit": 200}, headers=auth(fake)
    ).json()["points"]
    assert {p["step"] for p in later} == {9, 10}


def test_timeline_and_learning_fallbacks_agree(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    poll_to_end(client, fake, job_id)
    timeline = client.get(f"{API}/rl/jobs/{job_id}/timeline", headers=auth(fake)).json()
    assert [e["phase"] for e in timeline["events"]] == ["queued", "running", "succeeded"]
    for suffix in ("", "/events", "/metrics", "/timeline"):
        rl = client.get(f"{API}/rl/jobs/{job_id}{suffix}", headers=auth(fake)).json()
        learning = client.get(f"{API}/learning/jobs/{job_id}{suffix}", headers=auth(fake)).json()
        assert rl == learning
    orchestration = client.get(f"{API}/orchestration/jobs/{job_id}", headers=auth(fake))
    assert orchestration.json()["status"] == "succeeded"


def test_event_stream_is_server_sent_events(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    poll_to_end(client, fake, job_id)
    response = client.get(
        f"{API}/rl/jobs/{job_id}/events/stream", params={"since_seq": 12}, headers=auth(fake)
    )
    assert response.headers["content-type"] == "text/event-stream"
    assert response.text.count("data: ") == 2
    assert "event: rl.train.completed" in response.text


# -- unknown routes and methods ------------------------------------------------
def test_unknown_route_raises_in_strict_mode_listing_routes(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    with pytest.raises(FakeRouteError) as caught:
        client.get(f"{API}/rl/jobz", headers=auth(fake))
    message = str(caught.value)
    assert "GET https://api.usesynth.ai/api/rl/jobz" in message
    assert "POST https://api.usesynth.ai/api/rl/jobs" in message
    assert "strict=False" in message
    assert fake.requests[-1].status == 404


def test_unknown_route_is_a_404_listing_routes_when_not_strict(client: httpx.Client) -> None:
    with FakeSynthBackend(clock=VirtualClock(), strict=False) as fake:
        response = client.get("https://api.usesynth.ai/v2/jobs", headers=auth(fake))
        assert response.status_code == 404
        error = response.json()["detail"]["error"]
        assert "POST /api/rl/jobs" in error["routes"]
        assert "outside the API root" in error["message"]


def test_wrong_method_is_405_with_allow(fake: FakeSynthBackend, client: httpx.Client) -> None:
    response = client.delete(f"{API}/rl/jobs", headers=auth(fake))
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    job_id = submit(client, fake)
    cancel_by_get = client.get(f"{API}/rl/jobs/{job_id}/cancel", headers=auth(fake))
    assert cancel_by_get.status_code == 405
    assert cancel_by_get.headers["allow"] == "POST"


def test_handle_is_usable_without_any_mounting() -> None:
    backend = FakeSynthBackend(clock=VirtualClock())
    request = httpx.Request("POST", f"{API}/rl/jobs", json=rl_payload(), headers=auth(backend))
    response = backend.handle(request)
    assert response.status_code == 201
    unknown = backend.handle(httpx.Request("GET", f"{API}/nothing", headers=auth(backend)))
    assert unknown.status_code == 404
    # through a plain MockTransport as well
    with httpx.Client(transport=httpx.MockTransport(backend.handle)) as plain:
        listing = plain.get(f"{API}/rl/jobs", headers=auth(backend)).json()
    assert len(listing["data"]) == 1
    backend.close()


def test_request_log_records_route_status_body_and_time(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    fake.clock.sleep(30)
    client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake))
    submitted, polled = fake.requests
    assert (submitted.method, submitted.route, submitted.status, submitted.job_id) == (
        "POST",
        "submit",
        201,
        job_id,
    )
    assert submitted.json == rl_payload()
    assert (polled.route, polled.status, polled.job_id) == ("status", 200, job_id)
    assert polled.time - submitted.time == 30
    assert polled.path == f"/api/rl/jobs/{job_id}"
    assert fake.calls("status") == [polled]
    fake.reset()
    assert fake.requests == []
    assert fake.jobs == []


def test_bad_settings_are_reported_together() -> None:
    with pytest.raises(SynthUsageError) as caught:
        FakeSynthBackend(
            api_key="",
            rollouts="sometimes",  # type: ignore[arg-type]
            max_rollouts_per_step=0,
            rollout_timeout=-1,
            policy=lambda body: "x",
            replies=["y"],
        )
    assert caught.value.keys == [
        "FakeSynthBackend.api_key",
        "FakeSynthBackend.rollouts",
        "FakeSynthBackend.max_rollouts_per_step",
        "FakeSynthBackend.rollout_timeout",
        "FakeSynthBackend.policy",
    ]
    with pytest.raises(SynthUsageError, match="must be an http\\(s\\) URL"):
        FakeSynthBackend("api.usesynth.ai")


@pytest.mark.parametrize("prefix", ["", "job/../", "job rl ", "x" * 41, 7])
def test_a_job_id_prefix_that_cannot_sit_in_a_url_path_is_refused(prefix: object) -> None:
    with pytest.raises(SynthUsageError) as caught:
        FakeSynthBackend(job_id_prefix=prefix)  # type: ignore[arg-type]
    assert caught.value.keys == ["FakeSynthBackend.job_id_prefix"]
    assert "must be 1-40 letters, digits, '_' or '-'" in str(caught.value)


def test_job_ids_are_the_prefix_and_a_counter(client: httpx.Client) -> None:
    with FakeSynthBackend(job_id_prefix="job_rl_gw3_") as fake:
        ids = [submit(client, fake) for _ in range(2)]
        assert ids == ["job_rl_gw3_000001", "job_rl_gw3_000002"]
        assert client.get(f"{API}/rl/jobs/{ids[1]}", headers=auth(fake)).json()["id"] == ids[1]


def test_a_reset_with_a_prefix_counts_from_one_again_and_one_without_goes_on(client: httpx.Client) -> None:
    with FakeSynthBackend(job_id_prefix="job_rl_gw3_") as fake:
        assert submit(client, fake) == "job_rl_gw3_000001"
        fake.reset(job_id_prefix="job_rl_t1_")
        assert [submit(client, fake) for _ in range(2)] == ["job_rl_t1_000001", "job_rl_t1_000002"]
        fake.reset()  # the same prefix: an id is never given twice
        assert submit(client, fake) == "job_rl_t1_000003"


@pytest.mark.parametrize("prefix", ["", "job/../", "x" * 41, 7])
def test_a_reset_prefix_that_cannot_sit_in_a_url_path_is_refused_and_changes_nothing(
    client: httpx.Client, prefix: object
) -> None:
    with FakeSynthBackend(job_id_prefix="job_rl_a_") as fake:
        first = submit(client, fake)
        with pytest.raises(SynthUsageError) as caught:
            fake.reset(job_id_prefix=prefix)  # type: ignore[arg-type]
        assert caught.value.keys == ["FakeSynthBackend.reset.job_id_prefix"]
        assert f"must be 1-40 letters, digits, '_' or '-' (it goes into URL paths), got {prefix!r}" in str(
            caught.value
        )
        assert submit(client, fake) == "job_rl_a_000002"
        assert client.get(f"{API}/rl/jobs/{first}", headers=auth(fake)).status_code == 200


def test_offline_job_id_prefixes_are_a_hash_of_the_test_id() -> None:
    assert offline_job_id_prefix("t.py::test_a") == "job_rl_75a2b72a2c_"
    assert offline_job_id_prefix("t.py::test_a[\udcff]") != offline_job_id_prefix("t.py::test_a")


def test_a_key_in_a_test_id_leaves_no_fingerprint_in_job_ids_or_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, the offline job id was a hash of the raw id and the job's tags sent the key itself.
    key = "sk_live_tagged_key_0123456789"
    keyed = f"t.py::test_a[{key}]"
    before = offline_job_id_prefix(keyed)
    monkeypatch.setenv("SYNTH_API_KEY", key)
    assert offline_job_id_prefix(keyed) == offline_job_id_prefix("t.py::test_a[sk_l…89]") != before
    assert job_tags(keyed)["test"] == "t.py::test_a[sk_l…89]"


@pytest.mark.parametrize("policy", [42, "42", object()])
def test_use_policy_refuses_what_is_no_policy_as_the_constructor_does(policy: object) -> None:
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as info:
        fake.use_policy(policy)  # type: ignore[arg-type]
    assert info.value.keys == ["FakeSynthBackend.use_policy"]
    assert "a policy is policy(request) -> reply" in str(info.value)
    with pytest.raises(SynthUsageError):
        FakeSynthBackend(policy=policy)  # type: ignore[arg-type]
