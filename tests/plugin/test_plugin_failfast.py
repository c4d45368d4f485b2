"""An unreachable online backend fails fast, naming the option the user typed; a wait that times
out through ``synth_expect`` shows the statuses of its polls."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from pytest_synth_rl.client import reachability
from pytest_synth_rl.errors import BackendUnreachableError
from pytest_synth_rl.plugin.session import ServedFake, SynthRun
from pytest_synth_rl.plugin.settings import resolve_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_first(synth_rl_job):
    synth_rl_job().submit()


def test_second(synth_rl_job):
    synth_rl_job().submit()


def test_backend_handle(synth_backend):
    pass
"""


def _closed_port() -> int:
    """A loopback port nothing listens on (bound by the OS, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _copy_example(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)


def test_an_unreachable_backend_fails_every_test_with_one_message_naming_the_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_example(pytester)
    pytester.makepyfile(test_suite=SUITE)
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("SYNTH_API_KEY", "sk_live_failfast_key_0123456789")
    monkeypatch.delenv("BACKEND_BASE_URL", raising=False)
    monkeypatch.delenv("SYNTH_BACKEND_URL", raising=False)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist", f"--synth-backend={url}")
    result.assert_outcomes(errors=3)
    expected = (
        f"BackendUnreachableError: the backend at {url} (from --synth-backend={url}) is unreachable: "
        "ConnectionRefusedError: [Errno 111] Connection refused (3 attempts); every test that needs "
        "the backend fails with this message"
    )
    text = result.stdout.str()
    # One error per test, the message alone (the short summary repeats it, cut to the width).
    prefix = "pytest_synth_rl.errors."
    assert sum(1 for line in result.stdout.lines if line == prefix + expected) == 3, text
    assert f"hint: check the URL and that the backend is running, fix --synth-backend={url}" in text
    assert "BACKEND_BASE_URL" not in text
    assert "attempts (" not in text  # no retried request ever went out


def test_the_backend_is_probed_once_per_run_and_the_verdict_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    probes: list[str] = []
    real_probe = reachability.probe_backend

    def counting_probe(target: str) -> str | None:
        probes.append(target)
        return real_probe(target, delays=())

    monkeypatch.setattr(reachability, "probe_backend", counting_probe)
    settings = resolve_settings(
        env={"SYNTH_BACKEND_URL": url, "SYNTH_API_KEY": "sk_live_failfast_key_0123456789"}
    )
    run = SynthRun(settings)
    messages = []
    for _ in range(3):
        with pytest.raises(BackendUnreachableError) as caught:
            run.require_backend()
        messages.append(str(caught.value))
    assert probes == [url]
    assert len(set(messages)) == 1
    assert messages[0].startswith(f"the backend at {url} (from SYNTH_BACKEND_URL={url}) is unreachable: ")
    assert "fix SYNTH_BACKEND_URL=" in messages[0]


def test_a_reachable_backend_passes_the_probe_whatever_it_answers() -> None:
    with ServedFake.start() as served:  # answers GET / with a 404: still a backend that is up
        assert reachability.probe_backend(served.url) is None
    assert (
        reachability.probe_backend("ftp://127.0.0.1:21")
        == "it is not an http(s) URL with a host (scheme 'ftp')"
    )


def test_offline_runs_never_probe() -> None:
    run = SynthRun(resolve_settings(env={}))
    run.require_backend()  # offline: nothing to reach, nothing raised


TIMEOUT_SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.mark.synth_scenario(steps=2, duration=1_000_000)
def test_never_finishes(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=30)
"""


def test_a_synth_expect_timeout_shows_the_statuses_of_its_polls(pytester: pytest.Pytester) -> None:
    _copy_example(pytester)
    pytester.makepyfile(test_timeout=TIMEOUT_SUITE)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist", "--synth-poll-interval=10")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "(no polls)" not in text, text
    result.stdout.fnmatch_lines(
        [
            "*expected job * to finish within 30.0s, but it was still 'running' after 4 polls",
            "*statuses: running x4 (0s-30.0s)",
        ]
    )
