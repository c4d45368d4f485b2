"""InProcessTaskApp against the baselines it must keep up with, medians of wall and CPU.

Start + stop and loopback latency vs a bare ``uvicorn.Server`` thread (<= 1.5x each); start +
stop vs the upstream SDK's ``InProcessTaskApp`` when importable (>= 3x faster); latency vs a
``proto=0`` socket's Nagle trap (>= 10x faster). Run alone: ``python bench/bench_taskapp.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, medians, report, run_alone  # noqa: E402
from pytest_synth_rl.taskapp import InProcessTaskApp  # noqa: E402

START_STOP_ROUNDS = 15
LATENCY_REQUESTS = 300
NAGLE_REQUESTS = 25
UPSTREAM_ROUNDS = 5
KEY = "bench-key-0123456789abcdef"


def make_app() -> Any:
    """The same small task-app-shaped FastAPI app for every contender."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, bool]:
        return {"healthy": True}

    @app.get("/task_info")
    async def task_info() -> dict[str, Any]:
        return {"taskset": {"id": "bench"}}

    return app


# -- contenders -----------------------------------------------------------------------------------
class BareUvicorn:
    """uvicorn as most people thread it: bind by host/port, poll ``started``, set ``should_exit``."""

    def __init__(self, app: Any, sock: socket.socket | None = None) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, log_level="warning")
        self.server = uvicorn.Server(config)
        self.sock = sock
        sockets = [sock] if sock is not None else None
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": sockets}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.001)
        if self.sock is not None:
            port = self.sock.getsockname()[1]
        else:
            port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()


def naive_socket() -> socket.socket:
    """A listening socket made the obvious way: ``proto`` defaults to 0, not IPPROTO_TCP."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def ours_start_stop(app: Any) -> None:
    with InProcessTaskApp(app, api_key=KEY):
        pass


def bare_start_stop(app: Any) -> None:
    with BareUvicorn(app):
        pass


def upstream_start_stop_factory() -> Callable[[Any], None] | None:
    if importlib.util.find_spec("synth_ai") is None:
        return None
    # Importing synth_ai sets up a job-queue database under ~/.synth_ai unless told otherwise;
    # a benchmark has no business writing to the home directory.
    scratch = tempfile.mkdtemp(prefix="bench-synth-ai-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ.setdefault("EXPERIMENT_QUEUE_DB_PATH", os.path.join(scratch, "experiment_queue.db"))
    try:
        # Imported by name: synth_ai is optional and untyped. Importing it installs SIGINT/SIGTERM
        # handlers (contract §5), which is why this only happens when the benchmark runs.
        upstream_module = importlib.import_module("synth_ai.sdk.task.in_process")
    except Exception:
        return None
    upstream_cls: Any = upstream_module.InProcessTaskApp

    def run(app: Any) -> None:
        async def once() -> None:
            async with upstream_cls(app=app, tunnel_mode="local", api_key=KEY):
                pass

        asyncio.run(once())

    return run


def latencies(urls: dict[str, str], requests: int, rounds: int = 10) -> dict[str, Sample]:
    """Wall and CPU seconds per GET /health for each server, over one kept-alive connection each.

    The requests are split into *rounds* that alternate between the servers (medians of the
    rounds' means), so a burst of load on the machine hits every server alike. CPU is this
    process's: the client and, in-process, the server's thread.
    """
    headers = {"X-API-Key": KEY}
    clients = {name: httpx.Client(trust_env=False) for name in urls}
    per_round = max(1, requests // rounds)

    def burst(name: str) -> None:
        client, url = clients[name], urls[name] + "/health"
        for _ in range(per_round):
            client.get(url, headers=headers).raise_for_status()

    try:
        for name, client in clients.items():
            for _ in range(min(20, requests)):
                client.get(urls[name] + "/health", headers=headers).raise_for_status()
        times = medians({name: lambda n=name: burst(n) for name in urls}, rounds, warm_up=False)
    finally:
        for client in clients.values():
            client.close()
    return {name: sample / per_round for name, sample in times.items()}


# -- main -----------------------------------------------------------------------------------------
def main() -> list[str]:
    lines: list[str] = []
    app = make_app()

    times = medians(
        {"ours": lambda: ours_start_stop(app), "bare": lambda: bare_start_stop(app)},
        SETTINGS.pick(START_STOP_ROUNDS, 5),
    )
    ratio = times["ours"].wall / times["bare"].wall
    lines.append(
        report(
            "task app start+stop",
            ours=times["ours"].wall * 1000,
            ours_cpu=times["ours"].cpu * 1000,
            baseline_name="bare uvicorn thread",
            baseline=times["bare"].wall * 1000,
            baseline_cpu=times["bare"].cpu * 1000,
            unit="ms",
            ratio=ratio,
            target_text="<= 1.5x",
            met=ratio <= 1.5,
        )
    )

    with InProcessTaskApp(app, api_key=KEY) as ours, BareUvicorn(app) as bare_url:
        measured = latencies({"ours": ours.url, "bare": bare_url}, SETTINGS.pick(LATENCY_REQUESTS, 100))
    ours_latency, bare_latency = measured["ours"], measured["bare"]
    ratio = ours_latency.wall / bare_latency.wall
    lines.append(
        report(
            "task app loopback latency",
            ours=ours_latency.wall * 1000,
            ours_cpu=ours_latency.cpu * 1000,
            baseline_name="bare uvicorn",
            baseline=bare_latency.wall * 1000,
            baseline_cpu=bare_latency.cpu * 1000,
            unit="ms/request",
            ratio=ratio,
            target_text="<= 1.5x",
            met=ratio <= 1.5,
        )
    )

    upstream = upstream_start_stop_factory()
    if upstream is None:
        line = (
            "task app start+stop vs upstream: skipped (synth_ai.sdk.task.in_process is not importable; "
            "pip install synth-ai to measure it)"
        )
        print(line, flush=True)
        lines.append(line)
    else:
        times = medians(
            {"ours": lambda: ours_start_stop(app), "upstream": lambda: upstream(app)},
            SETTINGS.pick(UPSTREAM_ROUNDS, 3),
        )
        speedup = times["upstream"].wall / times["ours"].wall
        lines.append(
            report(
                "task app start+stop vs upstream",
                ours=times["ours"].wall * 1000,
                ours_cpu=times["ours"].cpu * 1000,
                baseline_name="synth-ai InProcessTaskApp(local)",
                baseline=times["upstream"].wall * 1000,
                baseline_cpu=times["upstream"].cpu * 1000,
                unit="ms",
                ratio=speedup,
                target_text=">= 3x faster",
                met=speedup >= 3.0,
            )
        )

    with InProcessTaskApp(app, api_key=KEY) as ours, BareUvicorn(app, sock=naive_socket()) as naive_url:
        measured = latencies(
            {"ours": ours.url, "naive": naive_url}, SETTINGS.pick(NAGLE_REQUESTS, 10), rounds=5
        )
    ours_latency, naive_latency = measured["ours"], measured["naive"]
    speedup = naive_latency.wall / ours_latency.wall
    lines.append(
        report(
            "task app latency vs proto=0 socket",
            ours=ours_latency.wall * 1000,
            ours_cpu=ours_latency.cpu * 1000,
            baseline_name="uvicorn on a proto=0 socket",
            baseline=naive_latency.wall * 1000,
            baseline_cpu=naive_latency.cpu * 1000,
            unit="ms/request",
            ratio=speedup,
            target_text=">= 10x faster",
            met=speedup >= 10.0,
        )
    )
    return lines


if __name__ == "__main__":
    run_alone(main)
