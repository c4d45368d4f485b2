"""A full plugin run leaves nothing behind: no threads, no sockets.

The run happens in a fresh interpreter (``pytester.runpython``) that counts its own threads and
socket file descriptors before ``pytest.main`` and after it returns, so nothing from this test
process (or another xdist worker) blurs the count.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_job_with_real_rollouts(synth_rl_job, synth_expect, synth_fake):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
    assert synth_fake.job(job.job_id).rollouts  # the fake really drove /rollout


@pytest.mark.synth_task_app("arithmetic_task_app.py", scope="test")
def test_a_private_task_app(synth_task_app):
    assert synth_task_app.url.startswith("http://127.0.0.1:")


def test_the_served_fake(synth_fake_server):
    import httpx

    auth = {"Authorization": "Bearer " + synth_fake_server.api_key.value}
    response = httpx.get(synth_fake_server.url + "/api/rl/jobs", headers=auth)
    assert response.status_code == 200
"""

DRIVER = """
import gc, json, os, sys, threading

import pytest


def sockets():
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(f"{fd}->{target}")
    return found


def threads():
    return {f"{t.name} daemon={t.daemon}" for t in threading.enumerate() if t is not threading.main_thread()}


before_threads, before_sockets = threads(), sockets()
code = pytest.main(["-q", "-p", "no:cacheprovider", "test_suite.py"])
gc.collect()
print("RESULT " + json.dumps({
    "exit": int(code),
    "new_threads": sorted(threads() - before_threads),
    "new_sockets": sorted(sockets() - before_sockets),
    "before_sockets": len(before_sockets),
}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets through /proc (Linux)")
def test_a_full_run_leaves_no_threads_or_sockets(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_suite=SUITE)
    driver = pytester.makepyfile(driver=DRIVER)
    result = pytester.runpython(driver)
    lines = [line for line in result.outlines if line.startswith("RESULT ")]
    assert lines, result.stdout.str() + result.stderr.str()
    found = json.loads(lines[-1][len("RESULT ") :])
    assert found["exit"] == 0, result.stdout.str()
    assert "3 passed" in result.stdout.str()
    assert found["new_threads"] == [], "threads left running after the run"
    assert found["new_sockets"] == [], "sockets left open after the run"
