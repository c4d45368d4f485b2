"""Memory of the served fake backend under many requests and under huge request bodies.

Ours: process RSS (from ``/proc/self/statm``) of one process serving ``FakeSynthBackend().serve()``
and sending it requests over loopback, against the RSS after a warm-up of 200 requests (imports,
the server, the client's pool and the first job warmed up):

* after 10,000 more requests (status polls, unauthorized and unknown-path requests, in turn);
  the request log is a bounded ring, so this stays flat. Target: <= 1.10x.
* after four 50 MB POSTs (each refused with 413 once past the body limit, read and dropped, never
  kept). Target: <= 1.25x.

Run alone: ``python bench/bench_fake_memory.py``.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import report  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402

WARM_UP = 200
REQUESTS = 10_000
BIG_POSTS = 4
BIG_BODY_MB = 50
REQUESTS_TARGET = 1.10
BIG_TARGET = 1.25
PAYLOAD = {
    "job_type": "rl",
    "data": {"endpoint_base_url": "https://task-app.example.com", "base_model": "Qwen/Qwen3-0.6B"},
}


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        resident_pages = int(handle.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def settled_rss() -> float:
    gc.collect()
    return rss_mb()


def send_many(client: httpx.Client, url: str, job_id: str, count: int) -> None:
    """*count* requests, in turn: a status poll, an unauthorized poll, an unknown path."""
    for index in range(count):
        kind = index % 3
        if kind == 0:
            client.get(f"{url}/api/rl/jobs/{job_id}")
        elif kind == 1:
            client.get(f"{url}/api/rl/jobs/{job_id}", headers={"Authorization": "Bearer wrong"})
        else:
            client.get(f"{url}/api/nowhere/{index}")


def send_big(client: httpx.Client, url: str) -> list[int]:
    statuses = []
    for _ in range(BIG_POSTS):
        body = b'{"x":"' + b"y" * (BIG_BODY_MB * 2**20) + b'"}'
        statuses.append(client.post(f"{url}/api/rl/jobs", content=body).status_code)
        del body
    return statuses


def main(requests: int = REQUESTS) -> list[str]:
    fake = FakeSynthBackend(validate=False)
    fake.scenario(steps=2, polls=10**4)
    lines: list[str] = []
    try:
        with fake.serve() as url:
            headers = {"Authorization": f"Bearer {fake.api_key.value}"}
            with httpx.Client(headers=headers, timeout=120.0) as client:
                job_id = client.post(f"{url}/api/rl/jobs", json=PAYLOAD).json()["id"]
                send_many(client, url, job_id, WARM_UP)
                before = settled_rss()
                send_many(client, url, job_id, requests)
                after = settled_rss()
                kept = len(fake.requests)
                lines.append(
                    report(
                        f"RSS after {requests} requests to the served fake ({kept} kept in its log)",
                        ours=after,
                        baseline_name=f"RSS after {WARM_UP} warm-up requests",
                        baseline=before,
                        unit="MB",
                        ratio=after / before,
                        target_text=f"<= {REQUESTS_TARGET:g}x",
                        met=after / before <= REQUESTS_TARGET,
                    )
                )
                statuses = send_big(client, url)
                big = settled_rss()
                lines.append(
                    report(
                        f"RSS after {BIG_POSTS} {BIG_BODY_MB} MB POSTs to the served fake "
                        f"(answers {statuses})",
                        ours=big,
                        baseline_name="RSS before them",
                        baseline=after,
                        unit="MB",
                        ratio=big / after,
                        target_text=f"<= {BIG_TARGET:g}x",
                        met=big / after <= BIG_TARGET,
                    )
                )
    finally:
        fake.close()
    return lines


if __name__ == "__main__":
    main()
