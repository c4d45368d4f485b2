"""RL model allow-list, experimental gating and fine-tuned sources (contract §7.2-§7.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import (
    EXPERIMENTAL_MODELS,
    FINE_TUNED_PREFIXES,
    KNOWN_BASE_MODELS,
    SUPPORTED_RL_MODELS,
    build_rl_payload,
    experimental_models,
)
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"
THINKING = "Qwen/Qwen3-4B-Thinking-2507"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS"):
        monkeypatch.delenv(name, raising=False)


def build(**kwargs: Any) -> dict[str, Any]:
    return build_rl_payload(MINIMAL, task_url=TASK_URL, **kwargs).payload


def test_catalog_sets_are_consistent() -> None:
    assert "Qwen/Qwen3-0.6B" in SUPPORTED_RL_MODELS
    assert THINKING in SUPPORTED_RL_MODELS & EXPERIMENTAL_MODELS
    assert "Qwen/Qwen3-32B" in KNOWN_BASE_MODELS - SUPPORTED_RL_MODELS
    assert "Qwen/Qwen3-Coder-480B-A35B-Instruct" in EXPERIMENTAL_MODELS - SUPPORTED_RL_MODELS
    assert SUPPORTED_RL_MODELS | EXPERIMENTAL_MODELS <= KNOWN_BASE_MODELS
    assert len(SUPPORTED_RL_MODELS) == 23
    assert FINE_TUNED_PREFIXES == ("ft:", "fft:", "qft:", "rl:")


@pytest.mark.parametrize("model", sorted(SUPPORTED_RL_MODELS - EXPERIMENTAL_MODELS))
def test_every_core_rl_model_builds_in_canonical_spelling(model: str) -> None:
    payload = build(overrides={"model.base": model.lower()})
    assert payload["data"]["base_model"] == model


def test_experimental_model_is_blocked_by_default() -> None:
    with pytest.raises(ConfigError) as info:
        build(overrides={"model.base": THINKING})
    assert info.value.keys == ["model.base"]
    assert "experimental" in info.value.problems[0].message
    assert "allow_experimental=True" in (info.value.problems[0].hint or "")
    assert "SDK_EXPERIMENTAL=1" in (info.value.problems[0].hint or "")


def test_experimental_model_allowed_by_argument() -> None:
    assert (
        build(overrides={"model.base": THINKING}, allow_experimental=True)["data"]["base_model"] == THINKING
    )


def test_experimental_model_allowed_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert build(overrides={"model.base": THINKING})["data"]["base_model"] == THINKING
    # an explicit False beats the environment
    with pytest.raises(ConfigError, match="experimental"):
        build(overrides={"model.base": THINKING}, allow_experimental=False)


def test_only_exactly_one_enables_experimental_via_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_EXPERIMENTAL", "true")
    with pytest.raises(ConfigError, match="experimental"):
        build(overrides={"model.base": THINKING})


def test_sdk_experimental_models_extends_the_gated_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", " Qwen/Qwen3-1.7B , ,Qwen/Qwen3-8B")
    assert {"Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B"} <= experimental_models()
    with pytest.raises(ConfigError, match="experimental"):
        build(overrides={"model.base": "Qwen/Qwen3-1.7B"})
    assert build(overrides={"model.base": "Qwen/Qwen3-1.7B"}, allow_experimental=True)["data"]["base_model"]
    assert build()["data"]["base_model"] == "Qwen/Qwen3-0.6B"  # not listed: still core


def test_allowing_experimental_does_not_make_a_non_rl_model_trainable() -> None:
    with pytest.raises(ConfigError, match="does not support RL"):
        build(overrides={"model.base": "Qwen/Qwen3-235B-A22B-Instruct-2507"}, allow_experimental=True)


@pytest.mark.parametrize("prefix", FINE_TUNED_PREFIXES)
def test_fine_tuned_sources_are_sent_verbatim_as_data_model(prefix: str) -> None:
    source = f"{prefix}Qwen/Qwen3-0.6B:job-42"
    payload = build(overrides={"model.base": None, "model.source": f"  {source} "})
    assert payload["data"]["model"] == source
    assert "base_model" not in payload["data"]
    assert payload["data"]["config"]["model"]["source"] == f"  {source} "


def test_a_plain_base_id_as_source_is_canonicalised() -> None:
    payload = build(overrides={"model.base": None, "model.source": "qwen/qwen3-4b"})
    assert payload["data"]["model"] == "Qwen/Qwen3-4B"


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("ft:not-a-model:job", "not a supported model"),
        ("ft:Qwen/Qwen3-32B:job", "does not support RL"),
        (f"ft:{THINKING}:job", "experimental"),
    ],
)
def test_fine_tuned_sources_are_checked_against_their_base(source: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(overrides={"model.base": None, "model.source": source})
    assert info.value.keys == ["model.source"]
    assert fragment in info.value.problems[0].message


def test_model_override_forces_source_mode_and_clears_base() -> None:
    payload = build(overrides={"model": "ft:Qwen/Qwen3-1.7B:abc"})
    assert payload["data"]["model"] == "ft:Qwen/Qwen3-1.7B:abc"
    assert "base_model" not in payload["data"]
    assert payload["data"]["config"]["model"]["base"] == "Qwen/Qwen3-0.6B"  # the table is untouched


def test_bad_model_override_is_reported_under_overrides_model() -> None:
    with pytest.raises(ConfigError) as info:
        build(overrides={"model": "gpt-4o"})
    assert info.value.keys == ["overrides.model"]
    assert "'gpt-4o' is not a supported model" in str(info.value)


def test_blank_model_override_is_ignored() -> None:
    assert build(overrides={"model": "  "})["data"]["base_model"] == "Qwen/Qwen3-0.6B"
