"""A served fake's errors and admin answers echo what a client sent; a key sent there is masked."""

from __future__ import annotations

import httpx

from pytest_synth_rl.fake import FakeSynthBackend

KEY = "sk_live_echoed_0123456789abcdef"


def test_a_key_echoed_by_an_error_or_an_admin_answer_is_masked() -> None:
    # Before, a route 404, a query 422, a scenario 422 and the request log's paths held it raw.
    fake = FakeSynthBackend(api_key=KEY)
    with (
        fake.serve() as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as client,
    ):
        answers = [
            client.get(f"/api/{KEY}"),
            client.get("/api/rl/jobs", params={"limit": KEY}),
            client.post("/_fake/scenario", json={"outcome": KEY}),
            client.get("/_fake/requests"),
        ]
    assert [answer.status_code for answer in answers] == [404, 422, 422, 200]
    for answer in answers:
        assert KEY not in answer.text
        assert KEY[:20] not in answer.text  # nor a long piece of it
    assert "sk_l…ef" in answers[0].json()["detail"]["error"]["message"]
    logged = [entry["path"] for entry in answers[3].json()["requests"]]
    assert logged[:2] == ["/api/sk_l…ef", "/api/rl/jobs"]
