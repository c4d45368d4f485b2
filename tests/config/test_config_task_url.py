"""Task-URL precedence (contract §3): overrides > argument or TASK_APP_URL > [services] > error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import build_rl_payload, resolve_task_url
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"

OVERRIDE = "http://127.0.0.1:9001"
ARGUMENT = "http://127.0.0.1:9002"
ENV = "http://127.0.0.1:9003"
CONFIG = "http://127.0.0.1:9004"
UNSET: Any = object()

# (override, argument, env TASK_APP_URL, [services].task_url, expected URL)
MATRIX = [
    (OVERRIDE, ARGUMENT, ENV, CONFIG, OVERRIDE),
    (UNSET, ARGUMENT, ENV, CONFIG, ARGUMENT),
    (UNSET, UNSET, ENV, CONFIG, ENV),
    (UNSET, UNSET, UNSET, CONFIG, CONFIG),
    ("   ", ARGUMENT, UNSET, CONFIG, ARGUMENT),  # blank override counts as missing
    (UNSET, "", ENV, CONFIG, ENV),  # empty argument falls through to the environment
    (UNSET, UNSET, "  ", CONFIG, CONFIG),  # blank environment counts as missing
    (UNSET, " ", ENV, CONFIG, CONFIG),  # SDK quirk: a whitespace argument hides TASK_APP_URL
    (OVERRIDE, UNSET, UNSET, "", OVERRIDE),
    (UNSET, f"  {ARGUMENT}/ ", UNSET, "", f"{ARGUMENT}/"),  # trimmed; trailing slash kept here
    (UNSET, UNSET, UNSET, None, "placeholder"),  # no [services]: the injected placeholder is sent
    (UNSET, ARGUMENT, UNSET, None, ARGUMENT),
]


@pytest.mark.parametrize(("override", "argument", "env", "config", "expected"), MATRIX)
def test_task_url_precedence(
    monkeypatch: pytest.MonkeyPatch, override: Any, argument: Any, env: Any, config: Any, expected: str
) -> None:
    monkeypatch.delenv("TASK_APP_URL", raising=False)
    if env is not UNSET:
        monkeypatch.setenv("TASK_APP_URL", env)
    overrides: dict[str, Any] = {"services": None} if config is None else {"services.task_url": config}
    if override is not UNSET:
        overrides["task_url"] = override
    kwargs = {} if argument is UNSET else {"task_url": argument}
    result = build_rl_payload(MINIMAL, overrides=overrides, **kwargs)
    assert result.task_url == expected
    assert result.payload["data"]["endpoint_base_url"] == expected.rstrip("/")
    assert result.payload["data"]["config"]["services"]["task_url"] == expected


@pytest.mark.parametrize("blank", ["", "   "])
def test_no_usable_task_url_is_an_error_on_services_task_url(
    monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    monkeypatch.setenv("TASK_APP_URL", blank)
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=blank, overrides={"task_url": blank})
    assert info.value.keys == ["services.task_url"]
    assert "TASK_APP_URL" in str(info.value)


def test_resolve_task_url_reports_the_source() -> None:
    choice = resolve_task_url(
        override=None, argument=None, config_value=CONFIG, environ={"TASK_APP_URL": ENV}
    )
    assert choice is not None
    assert (choice.url, choice.source) == (ENV, "TASK_APP_URL environment variable")
    assert resolve_task_url(override=None, argument=" ", config_value="", environ={}) is None


def test_special_override_values_must_be_strings() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, overrides={"task_url": 8114})
    assert info.value.keys == ["task_url"]
    assert "expected a string" in str(info.value)
