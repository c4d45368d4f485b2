"""Memory of the served fake (a child process) under many requests and under huge bodies.

Its RSS after 10,000 requests vs after a 200-request warm-up (target <= 1.10x: the request log
is a bounded ring), and after four 50 MB POSTs refused with 413 (<= 1.25x).
Run alone: ``python bench/bench_fake_memory.py [--quick]`` (2,000 requests, two POSTs).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, report, rss_mb, run_alone  # noqa: E402

WARM_UP = 200
REQUESTS = 10_000
QUICK_REQUESTS = 2_000
BIG_POSTS = 4
QUICK_BIG_POSTS = 2
BIG_BODY_MB = 50
REQUESTS_TARGET = 1.10
BIG_TARGET = 1.25
KEY = "sk_test_bench_fake_memory_0123"
PAYLOAD = {
    "job_type": "rl",
    "data": {"endpoint_base_url": "https://task-app.example.com", "base_model": "Qwen/Qwen3-0.6B"},
}
SERVER = """
import sys
from pytest_synth_rl.fake import FakeSynthBackend

fake = FakeSynthBackend(api_key=sys.argv[1], validate=False)
with fake.serve() as url:
    print(url, flush=True)
    sys.stdin.read()
fake.close()
"""


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


def big_body() -> Iterator[bytes]:
    """A JSON body of about ``BIG_BODY_MB`` MB, streamed so this process never holds it whole."""
    yield b'{"x":"'
    block = b"y" * 2**20
    for _ in range(BIG_BODY_MB):
        yield block
    yield b'"}'


def send_big(client: httpx.Client, url: str, posts: int) -> list[int]:
    size = str(BIG_BODY_MB * 2**20 + 8)
    return [
        client.post(f"{url}/api/rl/jobs", content=big_body(), headers={"Content-Length": size}).status_code
        for _ in range(posts)
    ]


def main(requests: int | None = None) -> list[str]:
    requests = SETTINGS.pick(REQUESTS, QUICK_REQUESTS) if requests is None else requests
    posts = SETTINGS.pick(BIG_POSTS, QUICK_BIG_POSTS)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, KEY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=300.0) as client:
            job_id = client.post(f"{url}/api/rl/jobs", json=PAYLOAD).json()["id"]
            send_many(client, url, job_id, WARM_UP)
            before = rss_mb(server.pid)
            send_many(client, url, job_id, requests)
            after = rss_mb(server.pid)
            kept = len(client.get(f"{url}/_fake/requests").json()["requests"])
            lines.append(
                report(
                    f"RSS of the served fake after {requests} requests ({kept} kept in its log)",
                    ours=after,
                    baseline_name=f"after {WARM_UP} warm-up requests",
                    baseline=before,
                    unit="MB",
                    ratio=after / before,
                    target_text=f"<= {REQUESTS_TARGET:g}x",
                    met=after / before <= REQUESTS_TARGET,
                )
            )
            statuses = send_big(client, url, posts)
            big = rss_mb(server.pid)
            lines.append(
                report(
                    f"RSS of the served fake after {posts} {BIG_BODY_MB} MB POSTs (answers {statuses})",
                    ours=big,
                    baseline_name="before them",
                    baseline=after,
                    unit="MB",
                    ratio=big / after,
                    target_text=f"<= {BIG_TARGET:g}x",
                    met=big / after <= BIG_TARGET,
                )
            )
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    return lines


if __name__ == "__main__":
    run_alone(main)
