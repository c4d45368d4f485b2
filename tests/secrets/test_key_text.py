"""A key no HTTP header can carry is refused where it is given, without showing it.

Before: the key was accepted, and the first request failed deep in httpx or http.client with a
raw ``ValueError: Invalid header value`` or ``UnicodeEncodeError`` naming neither the key's
argument nor its variable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.secrets.masking import key_problem
from pytest_synth_rl.taskapp import InProcessTaskApp

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "arithmetic.toml"
ASCII_ONLY = "keys travel in HTTP headers, which take printable ASCII only"


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("sk_live_0123456789", None),
        ("with space and ~!@#", None),
        ("line\nbreak", "contains a line break (character 5 of 10); an HTTP header cannot carry it"),
        ("cr\r", "contains a line break (character 3 of 3); an HTTP header cannot carry it"),
        (
            "tab\there",
            f"contains '\\t' (character 4 of 8); {ASCII_ONLY}",
        ),
        (
            "ключ",
            f"contains 'к' (character 1 of 4); {ASCII_ONLY}",
        ),
        (
            "del\x7f",
            f"contains '\\x7f' (character 4 of 4); {ASCII_ONLY}",
        ),
    ],
)
def test_key_problem_names_the_character_and_its_place(key: str, problem: str | None) -> None:
    assert key_problem(key) == problem


BAD = "sk_live_ab\ncd_0123"


@pytest.mark.parametrize(
    ("make", "starts"),
    [
        (
            lambda: RLJob.from_config(CONFIG, api_key=BAD, task_app_url="http://127.0.0.1:9"),
            "invalid arguments: api_key: contains a line break (character 11 of 18)",
        ),
        (
            lambda: RLJob.from_config(
                CONFIG, api_key="sk_live_fine_0123", task_app_api_key=BAD, task_app_url="http://127.0.0.1:9"
            ),
            "invalid arguments: task_app_api_key: contains a line break (character 11 of 18)",
        ),
        (
            lambda: FakeSynthBackend(api_key=BAD),
            "invalid arguments: FakeSynthBackend.api_key: contains a line break",
        ),
        (
            lambda: InProcessTaskApp(app=object(), api_key=BAD),
            "api_key contains a line break (character 11 of 18)",
        ),
    ],
)
def test_library_entry_points_refuse_such_a_key(make: Callable[[], object], starts: str) -> None:
    with pytest.raises(SynthError) as info:
        make()
    assert str(info.value).startswith(starts)
    assert BAD not in str(info.value)
