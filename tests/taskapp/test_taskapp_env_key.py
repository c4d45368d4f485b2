"""Lending ENVIRONMENT_API_KEY to running task apps and giving the caller's values back."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from pytest_synth_rl.secrets.masking import redact
from pytest_synth_rl.taskapp.in_process import ALIASES_VAR, KEY_VAR, acquire_env_key, release_env_key


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    monkeypatch.delenv(ALIASES_VAR, raising=False)


def test_single_key_set_then_unset() -> None:
    token = acquire_env_key("key-one-1234567890")
    assert os.environ[KEY_VAR] == "key-one-1234567890"
    assert ALIASES_VAR not in os.environ
    release_env_key(token)
    assert KEY_VAR not in os.environ
    release_env_key(token)  # releasing twice is harmless
    assert KEY_VAR not in os.environ


def test_previous_values_are_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "caller-key-000000")
    monkeypatch.setenv(ALIASES_VAR, "caller-alias-00000")
    token = acquire_env_key("lent-key-1111111111")
    assert os.environ[KEY_VAR] == "lent-key-1111111111"
    assert os.environ[ALIASES_VAR] == "caller-alias-00000"
    release_env_key(token)
    assert os.environ[KEY_VAR] == "caller-key-000000"
    assert os.environ[ALIASES_VAR] == "caller-alias-00000"


def test_overlapping_leases_keep_every_running_key_accepted() -> None:
    first = acquire_env_key("first-key-aaaaaaaa")
    second = acquire_env_key("second-key-bbbbbbb")
    third = acquire_env_key("third-key-ccccccccc")
    assert os.environ[KEY_VAR] == "third-key-ccccccccc"
    assert os.environ[ALIASES_VAR].split(",") == ["first-key-aaaaaaaa", "second-key-bbbbbbb"]
    release_env_key(third)  # the latest stops first: the previous one is primary again
    assert os.environ[KEY_VAR] == "second-key-bbbbbbb"
    assert os.environ[ALIASES_VAR] == "first-key-aaaaaaaa"
    release_env_key(first)  # out of order is fine too
    assert os.environ[KEY_VAR] == "second-key-bbbbbbb"
    assert ALIASES_VAR not in os.environ
    release_env_key(second)
    assert KEY_VAR not in os.environ
    assert ALIASES_VAR not in os.environ


def test_same_key_twice_is_not_duplicated_as_alias() -> None:
    a = acquire_env_key("shared-key-12345678")
    b = acquire_env_key("shared-key-12345678")
    assert ALIASES_VAR not in os.environ
    release_env_key(a)
    assert os.environ[KEY_VAR] == "shared-key-12345678"
    release_env_key(b)
    assert KEY_VAR not in os.environ


def test_a_value_changed_by_someone_else_is_left_alone() -> None:
    token = acquire_env_key("lent-key-2222222222")
    os.environ[KEY_VAR] = "set-by-the-test-33333"
    release_env_key(token)
    assert os.environ[KEY_VAR] == "set-by-the-test-33333"
    del os.environ[KEY_VAR]


def test_aliases_set_while_running_are_honoured() -> None:
    first = acquire_env_key("first-key-dddddddd")
    os.environ[ALIASES_VAR] = "user-alias-eeeeeee"
    second = acquire_env_key("second-key-fffffff")
    assert os.environ[ALIASES_VAR].split(",") == ["user-alias-eeeeeee", "first-key-dddddddd"]
    release_env_key(second)
    release_env_key(first)
    assert KEY_VAR not in os.environ


def test_lent_keys_are_registered_for_redaction() -> None:
    token = acquire_env_key("registered-key-99999999")
    release_env_key(token)
    assert "registered-key-99999999" not in redact("header was registered-key-99999999")


IMPORT_TIME_APP = """
import os
from pathlib import Path

import httpx

KEY_AT_IMPORT = os.environ["ENVIRONMENT_API_KEY"]  # a KeyError if the key came later


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": KEY_AT_IMPORT.encode()})
"""


def test_a_task_app_reading_its_key_at_import_gets_the_lent_key(tmp_path: Path) -> None:
    from pytest_synth_rl.taskapp import InProcessTaskApp

    path = tmp_path / "reads_key_at_import.py"
    path.write_text(IMPORT_TIME_APP)
    with InProcessTaskApp(task_app_path=path, api_key="import-time-key-0123456789") as app:
        assert httpx.get(f"{app.url}/health").text == "import-time-key-0123456789"
    assert KEY_VAR not in os.environ


def test_a_task_app_failing_to_import_gives_the_environment_back(tmp_path: Path) -> None:
    from pytest_synth_rl.errors import TaskAppError
    from pytest_synth_rl.taskapp import InProcessTaskApp

    path = tmp_path / "broken_at_import.py"
    path.write_text("raise RuntimeError('no dataset')\n")
    with pytest.raises(TaskAppError, match="no dataset"):
        InProcessTaskApp(task_app_path=path, api_key="lent-then-withdrawn-key-01").start()
    assert KEY_VAR not in os.environ
