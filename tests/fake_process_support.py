"""A plain ``FakeSynthBackend(api_key=K).serve()`` in another process, for tests of clients that
share nothing with it: no clock, no environment variables, no memory."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

SCRIPT = """
import sys
from pytest_synth_rl.fake import FakeSynthBackend

with FakeSynthBackend(api_key=sys.argv[1]).serve() as url:
    print(url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
"""

#: Real seconds a step may take before the test gives up: only ever reached by a hang.
HANG_TIMEOUT = 120.0


@contextlib.contextmanager
def fake_in_another_process(
    workdir: Path, api_key: str, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Start the served fake in a child process; yields its URL. The child sees *env* (default:
    this process's environment without ``ENVIRONMENT_API_KEY``)."""
    script = workdir / "serve_fake.py"
    script.write_text(SCRIPT)
    child_env = dict(os.environ if env is None else env)
    child_env.pop("ENVIRONMENT_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, str(script), api_key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env,
        text=True,
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(HANG_TIMEOUT)
        url = line[0].strip() if line else ""
        assert url.startswith("http://127.0.0.1:"), f"the fake did not start (printed {url!r})"
        yield url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
