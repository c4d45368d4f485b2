"""``python -m pytest_synth_rl serve``: the printed lines (flushed, read while it runs), its key,
Ctrl-C and SIGTERM, usage errors (exit 2, naming what was written), and the examples online."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fake_process_support import HANG_TIMEOUT, serve_command
from test_fake_support import EXAMPLES

from pytest_synth_rl.__main__ import main as cli
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake.backend import policies_from_specs

KEY = "sk_serve_command_0123456789"

POLICIES = """
from pytest_synth_rl import ScriptedPolicy

policy = ScriptedPolicy("42")
answer = 42


def make_nothing():
    return 5
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_url_and_key_at_once_and_a_signal_stops_it_with_exit_0(
    tmp_path: Path, signum: int
) -> None:
    with serve_command(tmp_path, "--api-key", KEY) as served:
        url_line, key_line, ready = served.lines
        assert served.proc.poll() is None  # read through the pipe while it still serves
        assert url_line.startswith("SYNTH_BACKEND_URL=http://127.0.0.1:")
        assert key_line == f"SYNTH_API_KEY={KEY}"
        assert f"ready at {served.url}" in ready
        assert "Ctrl-C or SIGTERM" in ready
        index = httpx.get(
            f"{served.url}/_fake", headers={"Authorization": f"Bearer {KEY}"}, timeout=HANG_TIMEOUT
        )
        assert index.status_code == 200
        assert served.stop(signum) == 0
    assert "Traceback" not in served.stderr.read_text()


@pytest.mark.parametrize("given", ["environment", "generated"])
def test_the_key_comes_from_synth_api_key_else_is_generated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    if given == "environment":
        monkeypatch.setenv("SYNTH_API_KEY", KEY)
    else:
        monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    with serve_command(tmp_path) as served:
        key = served.lines[1].removeprefix("SYNTH_API_KEY=")
        assert key == KEY if given == "environment" else key.startswith("sk_fake_") and len(key) > 20
        for sent, status in ((key, 200), (key + "x", 401)):
            answer = httpx.get(
                f"{served.url}/_fake", headers={"Authorization": f"Bearer {sent}"}, timeout=HANG_TIMEOUT
            )
            assert answer.status_code == status
        assert served.stop() == 0
    assert key not in served.stderr.read_text()


def test_the_env_prefix_splits_specs_into_a_policy_per_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "policies.py").write_text(POLICIES)
    monkeypatch.chdir(tmp_path)  # a file path is resolved against the current directory
    policies = policies_from_specs(
        ["unscramble=policies.py:policy", "pytest_synth_rl.fake.model:ArithmeticPolicy"]
    )
    assert sorted(policies) == ["*", "unscramble"]
    assert policies["unscramble"]("anything") == "42"  # type: ignore[arg-type]
    assert type(policies["*"]).__name__ == "ArithmeticPolicy"  # a class is a factory
    with pytest.raises(SynthUsageError, match="gives env 'unscramble' a second policy"):
        policies_from_specs(["unscramble=policies.py:policy", "unscramble = policies.py:policy"])


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--policy", "nope.py:policy"], ["policy file 'nope.py' does not exist", "current directory"]),
        (["--policy", "policies.py:polcy"], ["'polcy'", "did you mean 'policy'?"]),
        (["--policy", "policies.py:zzz"], ["'zzz'", "its policies: policy"]),
        (["--policy", "policies.py:answer"], ["policies.py:answer", "42 is not callable"]),
        (
            ["--policy", "policies.py:make_nothing"],
            ["policies.py:make_nothing", "5 is not callable (returned by"],
        ),
        (
            ["--policy", "polices:policy"],
            ["cannot import module 'polices'", "did you mean 'policies:policy'?"],
        ),
        (["--policy", "policies.py"], ["'policies.py' is not of the form 'path/to/file.py:NAME'"]),
        (["--policy", "=policies.py:policy"], ["=policies.py:policy", "has no env name before '='"]),
        (["--port", "70000"], ["--port", "invalid port '70000'", "0-65535"]),
        (["--port", "http"], ["invalid port 'http'"]),
        (["--pacing", "observd"], ["--pacing", "invalid pacing 'observd'", "did you mean 'observed'?"]),
        (["--speed", "-1"], ["--speed", "invalid speed '-1'", "must be a finite number > 0", "--speed 60"]),
        (["--speed", "fast"], ["--speed", "invalid speed 'fast'", "must be a number"]),
        (["--polcy", "policies.py:policy"], ["--polcy", "did you mean '--policy'?"]),
    ],
)
def test_a_bad_option_is_a_usage_error_naming_what_was_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    fragments: list[str],
) -> None:
    (tmp_path / "policies.py").write_text(POLICIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m` puts the current directory there
    try:
        code = cli(["serve", *args])
    except SystemExit as exit:  # argparse's own usage errors
        code = exit.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_a_port_in_use_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert cli(["serve", "--port", port]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert port in err
    assert "already in use" in err
    assert "--port 0" in err


def test_the_command_exits_2_on_a_bad_spec(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest_synth_rl", "serve", "--policy", "unscramble=gone.py:policy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert run.returncode == 2
    assert run.stdout == ""  # nothing served, so no URL printed
    assert "policy file 'gone.py' does not exist" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_the_examples_are_green_online_against_serve(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(EXAMPLES, pytester.path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    policy = "unscramble=examples/unscramble/policy.py:policy"
    with serve_command(pytester.path, "--api-key", KEY, "--policy", policy) as served:
        monkeypatch.setenv("SYNTH_API_KEY", KEY)
        result = pytester.runpytest_subprocess(
            "examples", f"--synth-backend={served.url}", "--synth-poll-interval=0.1", timeout=HANG_TIMEOUT * 3
        )
        code = served.stop()
    # Online, the offline-only tests skip; both "reward improves" checks run on the served rollouts.
    result.assert_outcomes(passed=6, skipped=3)
    assert code == 0
