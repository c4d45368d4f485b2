"""Every file the plugin reads back refuses an integer too long for Python, NaN, Infinity and deep
nesting through one reader, naming the file and the field: shard reports (``merge``), baselines
(the baseline check and ``merge-baselines``) and cassettes (replay)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_synth_rl.__main__ import main as cli
from pytest_synth_rl.baselines import BaselineError, BaselineStore, check_baseline
from pytest_synth_rl.recording import CassetteError, use_cassette
from pytest_synth_rl.recording.cassette import encode_body

TEST_ID = "tests/test_rl.py::test_train"
DEEP = "[" * 300 + "]" * 300

#: (JSON text of the bad value, what the message says about it, the field's path below the value).
BAD = {
    "huge-int": ("9" * 5000, "must be an integer of at most 4300 digits, got 5000 digits", ""),
    "negative-huge-int": ("-" + "1" * 4400, "must be an integer of at most 4300 digits, got 4400 digits", ""),
    "nan": ("NaN", "must be a finite number, got nan", ""),
    "infinity": ("-Infinity", "must be a finite number, got -inf", ""),
    "overflowing-float": ("1e400", "must be a finite number, got inf", ""),
    "deep": (DEEP, "is nested too deeply to parse (more than 200 levels)", "[0]"),
}
CASES = pytest.mark.parametrize(("bad", "problem", "below"), list(BAD.values()), ids=list(BAD))


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


def _shard(tmp_path: Path, bad: str) -> Path:
    shard = tmp_path / "shard.json"
    good = '{"test_id": "t.py::a", "job_id": "job_rl_000001", "status": "succeeded"}'
    shard.write_text(f'{{"version": 1, "jobs": [{good}, {{"test_id": "t.py::b", "final_reward": {bad}}}]}}')
    return shard


@CASES
def test_merge_names_the_shard_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str, problem: str, below: str
) -> None:
    shard = _shard(tmp_path, bad)
    out = tmp_path / "out.json"
    assert cli(["merge", str(shard), "--report", str(out)]) == 2
    err = _error(capsys)
    assert err.startswith(f"error: shard report {shard} at jobs[1].final_reward{below}")
    assert f": {problem}\n  hint: " in err
    assert not out.exists()


def test_the_merge_command_exits_2_on_a_huge_integer_without_a_traceback(tmp_path: Path) -> None:
    # Before, the message was Python's own ("Exceeds the limit (4300 digits) ...") and named no file.
    shard = _shard(tmp_path, "9" * 5000)
    run = subprocess.run(
        [sys.executable, "-m", "pytest_synth_rl", "merge", str(shard)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.startswith(
        f"error: shard report {shard} at jobs[1].final_reward: must be an integer of at most 4300 digits"
    )
    assert "Traceback" not in run.stderr
    assert "set_int_max_str_digits" not in run.stderr


def _baseline(store: BaselineStore, bad: str) -> Path:
    path = store.path_for(TEST_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"version": 1, "test_id": "{TEST_ID}", "metrics": {{"a": 1, "final_reward": {bad}}}}}')
    return path


@CASES
def test_the_baseline_check_names_the_file_and_the_field(
    tmp_path: Path, bad: str, problem: str, below: str
) -> None:
    store = BaselineStore(tmp_path / "baselines")
    path = _baseline(store, bad)
    with pytest.raises(BaselineError) as caught:
        check_baseline(store, TEST_ID, {"a": 1.0, "final_reward": 0.5})
    assert caught.value.message.startswith(f"baseline file {path} at metrics.final_reward{below}")
    assert caught.value.message.endswith(f": {problem}")
    assert "--synth-update-baselines" in str(caught.value.hint)


@CASES
def test_merging_baselines_names_the_file_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str, problem: str, below: str
) -> None:
    store = BaselineStore(tmp_path / "shard")
    path = _baseline(store, bad)
    assert cli(["merge-baselines", str(store.directory), "--into", str(tmp_path / "out")]) == 2
    err = _error(capsys)
    assert err.startswith(f"error: baseline file {path} at metrics.final_reward{below}")
    assert f": {problem}\n  hint: " in err
    assert not (tmp_path / "out").exists()


@CASES
def test_replaying_a_cassette_names_the_file_and_the_field(
    tmp_path: Path, bad: str, problem: str, below: str
) -> None:
    path = tmp_path / "c.json"
    request = '{"method": "GET", "url": "https://api.usesynth.ai/api/rl/jobs/j", "headers": {}, "body": null}'
    response = (
        f'{{"status": 200, "headers": {{"content-type": "application/json"}}, "body": {{"reward": {bad}}}}}'
    )
    path.write_text(f'{{"version": 1, "interactions": [{{"request": {request}, "response": {response}}}]}}')
    with pytest.raises(CassetteError) as caught, use_cassette(path, mode="none"):
        pass
    assert caught.value.message.startswith(f"{path} at interactions[0].response.body.reward{below}")
    assert caught.value.message.endswith(f": {problem}")


@pytest.mark.parametrize("body", ['{"reward": NaN}', '{"big": ' + "9" * 5000 + "}", "[" * 197 + "]" * 197])
def test_a_recorded_body_the_reader_would_refuse_is_kept_as_text(body: str) -> None:
    # Recorded as parsed JSON, the body would make its own cassette unreadable (a 5000-digit integer
    # even made recording fail with Python's ValueError).
    headers = {"content-type": "application/json"}
    assert encode_body(body.encode(), headers) == (body, "text")


def test_a_recorded_body_the_reader_takes_stays_json() -> None:
    nested = "[" * 196 + "]" * 196  # with the cassette's four levels above it: exactly the limit
    assert encode_body(nested.encode(), {"content-type": "application/json"})[1] is None
