"""A task app loaded from a ``.py`` path is executed once per file version, not once per start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

from pytest_synth_rl.taskapp import InProcessTaskApp
from pytest_synth_rl.taskapp.loading import load_module_from_path

APP_SOURCE = """
EXECUTIONS = []
EXECUTIONS.append(1)
VERSION = {version!r}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({{"type": "lifespan.startup.complete"}})
            elif message["type"] == "lifespan.shutdown":
                await send({{"type": "lifespan.shutdown.complete"}})
                return
    await receive()
    body = VERSION.encode()
    headers = [(b"content-type", b"text/plain")]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    await send({{"type": "http.response.body", "body": body}})
"""


def _write_app(path: Path, version: str) -> Path:
    path.write_text(APP_SOURCE.format(version=version), encoding="utf-8")
    return path


def _loaded_names(path: Path) -> list[str]:
    return [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("_synth_task_app_") and getattr(module, "__file__", None) == str(path.resolve())
    ]


def test_start_stop_cycles_do_not_grow_sys_modules(tmp_path: Path) -> None:
    path = _write_app(tmp_path / "cycling_app.py", "v1")
    for _ in range(5):
        with InProcessTaskApp(task_app_path=path, health_path=None, export_api_key=False) as served:
            assert httpx.get(served.url + "/anything").text == "v1"
    names = _loaded_names(path)
    assert len(names) == 1
    assert sys.modules[names[0]].EXECUTIONS == [1]  # executed once for all five starts


def test_a_changed_file_is_executed_again_and_replaces_the_old_module(tmp_path: Path) -> None:
    path = _write_app(tmp_path / "changing_app.py", "v1")
    first = load_module_from_path(path)
    assert load_module_from_path(path) is first
    _write_app(path, "v2-longer")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = load_module_from_path(path)
    assert second is not first
    assert second.VERSION == "v2-longer"
    assert _loaded_names(path) == [second.__name__]
    assert first.__name__ not in sys.modules


def test_a_module_removed_from_sys_modules_is_loaded_again(tmp_path: Path) -> None:
    path = _write_app(tmp_path / "evicted_app.py", "v1")
    first = load_module_from_path(path)
    del sys.modules[first.__name__]
    second = load_module_from_path(path)
    assert second is not first
    assert _loaded_names(path) == [second.__name__]
