"""``python -m pytest_synth_rl serve`` in another process, for tests of clients that share nothing
with it: no clock, no environment variables, no memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Real seconds a step may take before the test gives up: only ever reached by a hang.
HANG_TIMEOUT = 120.0


def _default_sigint() -> None:
    """In the child: Ctrl-C as in a terminal, even when the test run ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class ServeProcess:
    """A running ``serve`` command: its process, its first three stdout lines, its stderr file."""

    proc: subprocess.Popen[str]
    lines: list[str]
    stderr: Path

    @property
    def url(self) -> str:
        return self.lines[0].removeprefix("SYNTH_BACKEND_URL=")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send *signum*; the exit code (a hang fails the test)."""
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=HANG_TIMEOUT)


def _first_lines(proc: subprocess.Popen[str], count: int, stderr: Path) -> list[str]:
    lines: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: lines.extend(stdout.readline() for _ in range(count)))
    reader.start()
    reader.join(HANG_TIMEOUT)
    assert not reader.is_alive(), f"serve printed {lines!r} and then nothing: {stderr.read_text()}"
    return [line.rstrip("\n") for line in lines]


@contextlib.contextmanager
def serve_command(workdir: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[ServeProcess]:
    """Run ``serve --port 0 *args`` in *workdir* until it has printed its three lines; stopped with
    SIGTERM on exit if still running. The child sees *env* (default: this process's environment
    without ``ENVIRONMENT_API_KEY``)."""
    child_env = dict(os.environ if env is None else env)
    child_env.pop("ENVIRONMENT_API_KEY", None)
    stderr = workdir / "serve.stderr"
    with stderr.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_synth_rl", "serve", "--port", "0", *args],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=child_env,
            text=True,
            preexec_fn=_default_sigint,
        )
    try:
        lines = _first_lines(proc, 3, stderr)
        assert lines[0].startswith("SYNTH_BACKEND_URL=http://127.0.0.1:"), f"{lines!r}: {stderr.read_text()}"
        yield ServeProcess(proc, lines, stderr)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def fake_in_another_process(
    workdir: Path, api_key: str, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """The fake served with *api_key* in a child process (see :func:`serve_command`); yields its URL."""
    with serve_command(workdir, "--api-key", api_key, env=env) as served:
        yield served.url
