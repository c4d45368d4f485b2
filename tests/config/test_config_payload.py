"""The job payload built from an RL config is the one the upstream SDK sends (contract §3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import (
    RLBuildResult,
    build_rl_payload,
    build_rl_payload_from_mapping,
    load_rl_config,
    normalize_backend_url,
    validate_rl_config,
)
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TASK_URL = "http://127.0.0.1:8114"
BACKEND = "https://api.usesynth.ai"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS"):
        monkeypatch.delenv(name, raising=False)


def canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True)


# Written out by hand from the contract's §3 table for the §2.2 config.
EXPECTED_MINIMAL: dict[str, Any] = {
    "job_type": "rl",
    "compute": {"gpu_type": "H100", "gpu_count": 1, "topology": {"reference_placement": "none"}},
    "data": {
        "endpoint_base_url": "http://127.0.0.1:8114",
        "base_model": "Qwen/Qwen3-0.6B",
        "config": {
            "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
            "services": {"task_url": "http://127.0.0.1:8114"},
            "model": {"base": "Qwen/Qwen3-0.6B", "trainer_mode": "lora", "label": "plugin-smoke"},
            "compute": {"gpu_type": "H100", "gpu_count": 1, "topology": {"reference_placement": "none"}},
            "topology": {"type": "single_node_split", "gpus_for_vllm": 1, "gpus_for_training": 1},
            "rollout": {
                "env_name": "math",
                "policy_name": "math-single-step",
                "max_turns": 1,
                "episodes_per_batch": 4,
                "max_concurrent_rollouts": 2,
            },
            "training": {
                "num_epochs": 1,
                "iterations_per_epoch": 1,
                "max_turns": 1,
                "batch_size": 2,
                "group_size": 2,
                "learning_rate": 5e-6,
            },
            "reference": {"placement": "none"},
        },
    },
    "tags": {"source": "train-cli"},
    "metadata": {"backend_base_url": "https://api.usesynth.ai/api"},
}


def test_minimal_config_builds_exactly_the_contract_payload() -> None:
    result = build_rl_payload(MINIMAL, task_url=TASK_URL, backend_url=BACKEND)
    assert isinstance(result, RLBuildResult)
    assert canonical(result.payload) == canonical(EXPECTED_MINIMAL)
    assert result.task_url == TASK_URL
    assert result.idempotency is None


def test_backend_from_overrides_is_the_same_as_the_argument_and_the_argument_wins() -> None:
    via_override = build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"backend": BACKEND})
    assert canonical(via_override.payload) == canonical(EXPECTED_MINIMAL)
    both = build_rl_payload(
        MINIMAL, task_url=TASK_URL, overrides={"backend": "https://other.example"}, backend_url=BACKEND
    )
    assert both.payload["metadata"] == {"backend_base_url": "https://api.usesynth.ai/api"}


def test_without_a_backend_there_is_no_metadata_key() -> None:
    payload = build_rl_payload(MINIMAL, task_url=TASK_URL).payload
    assert "metadata" not in payload
    expected = {key: value for key, value in EXPECTED_MINIMAL.items() if key != "metadata"}
    assert canonical(payload) == canonical(expected)


@pytest.mark.parametrize(
    ("url", "api_base"),
    [
        ("https://api.usesynth.ai", "https://api.usesynth.ai/api"),
        ("https://api.usesynth.ai/", "https://api.usesynth.ai/api"),
        ("https://api.usesynth.ai/api", "https://api.usesynth.ai/api"),
        ("https://api.usesynth.ai/api/", "https://api.usesynth.ai/api"),
        ("http://127.0.0.1:8000//", "http://127.0.0.1:8000/api"),
        ("http://127.0.0.1:8000/v2", "http://127.0.0.1:8000/v2/api"),
    ],
)
def test_normalize_backend_url_appends_api_once(url: str, api_base: str) -> None:
    assert normalize_backend_url(url) == api_base
    assert normalize_backend_url(api_base) == api_base
    payload = build_rl_payload(MINIMAL, task_url=TASK_URL, backend_url=url).payload
    assert payload["metadata"]["backend_base_url"] == api_base


def test_idempotency_key_is_returned_for_the_header_not_put_in_the_body() -> None:
    result = build_rl_payload(MINIMAL, task_url=TASK_URL, idempotency="idem-123")
    assert result.idempotency == "idem-123"
    assert "idem-123" not in canonical(result.payload)


def test_trailing_slash_is_stripped_from_the_endpoint_but_kept_in_services() -> None:
    payload = build_rl_payload(MINIMAL, task_url=" http://127.0.0.1:8114/ ").payload
    assert payload["data"]["endpoint_base_url"] == "http://127.0.0.1:8114"
    assert payload["data"]["config"]["services"]["task_url"] == "http://127.0.0.1:8114/"


def test_full_config_matches_the_sdk_golden_payload() -> None:
    """``rl_full.expected.json`` is what the SDK 0.4.12 builder produced for ``rl_full.toml``
    with ``backend https://x/api/`` and no task URL argument."""
    expected = json.loads((CONFIGS / "rl_full.expected.json").read_text())
    payload = build_rl_payload(CONFIGS / "rl_full.toml", backend_url="https://x/api/").payload
    assert canonical(payload) == canonical(expected)


def test_full_config_conversions_defaults_and_forwarding() -> None:
    payload = build_rl_payload(CONFIGS / "rl_full.toml").payload
    config = payload["data"]["config"]
    # typed keys are converted as the SDK converts them
    assert config["compute"]["gpu_count"] == 2
    assert isinstance(config["training"]["learning_rate"], float)
    assert '"learning_rate": 1.0' in canonical(config)
    assert config["training"]["weight_sync"]["enable"] is True
    assert config["training"]["lora"]["dropout"] == 0.0
    assert config["evaluation"]["seeds"] == [0, 1, 2]
    # free-form tables are not converted
    assert config["rubric"]["weights"] == {"env": 1, "event": 0.5}
    # [policy] defaults are serialised; explicit values kept
    assert config["policy"] == {
        "model_name": "Qwen/Qwen3-1.7B",
        "max_tokens": 512,
        "temperature": 0.7,
        "top_p": 0.95,
        "top_k": 40,
        "repetition_penalty": 1.0,
        "trainer_mode": "lora",
        "label": "full-example",
    }
    # base model: canonical spelling in data.base_model, as written inside the config
    assert payload["data"]["base_model"] == "Qwen/Qwen3-1.7B"
    assert "model" not in payload["data"]
    assert config["model"]["base"] == "qwen/qwen3-1.7b"
    # [reference] placement defaulted, other keys kept
    assert config["reference"] == {"port": 8002, "placement": "none"}
    # [smoke] is CLI-only
    assert "smoke" not in config
    # unknown sections and keys are forwarded untouched
    assert config["data"] == {"split": "train"}
    assert config["rollout"]["ops"] == ["agent", "env"]
    assert config["vllm"] == {"max_model_len": 4096}
    # TOML [tags] go into the config; payload tags are fixed
    assert config["tags"] == {"team": "rl"}
    assert payload["tags"] == {"source": "train-cli"}
    # the config's own task URL is used when nothing overrides it
    assert payload["data"]["endpoint_base_url"] == "http://127.0.0.1:8765"
    # compute is a copy of the validated [compute], not the same object
    assert payload["compute"] == config["compute"]
    assert payload["compute"] is not config["compute"]
    assert payload["compute"]["topology"]["reference_placement"] == "none"


def test_explicit_reference_placement_and_topology_are_kept() -> None:
    payload = build_rl_payload(
        MINIMAL,
        task_url=TASK_URL,
        overrides={"reference.placement": "shared", "compute.topology.reference_placement": "dedicated"},
    ).payload
    config = payload["data"]["config"]
    assert config["reference"] == {"placement": "shared"}
    assert payload["compute"]["topology"] == {"reference_placement": "dedicated"}
    assert config["topology"] == {"type": "single_node_split", "gpus_for_vllm": 1, "gpus_for_training": 1}


def test_policy_section_alone_is_not_enough_for_the_builder() -> None:
    config = load_rl_config(MINIMAL)
    del config["model"]
    config["policy"] = {"model_name": "Qwen/Qwen3-0.6B", "trainer_mode": "lora", "label": "p"}
    with pytest.raises(ConfigError) as info:
        build_rl_payload_from_mapping(config, task_url=TASK_URL)
    assert info.value.keys == ["model"]
    assert "[model]" in info.value.problems[0].message
    # ...unless overrides["model"] supplies the model (source mode)
    payload = build_rl_payload_from_mapping(
        config, task_url=TASK_URL, overrides={"model": "rl:Qwen/Qwen3-0.6B:job-1"}
    ).payload
    assert payload["data"]["model"] == "rl:Qwen/Qwen3-0.6B:job-1"
    assert "base_model" not in payload["data"]


def test_build_from_mapping_does_not_touch_the_input_or_share_containers() -> None:
    config = load_rl_config(MINIMAL)
    snapshot = canonical(config)
    first = build_rl_payload_from_mapping(config, task_url=TASK_URL, source="shared-config")
    assert canonical(config) == snapshot
    first.payload["data"]["config"]["rollout"]["env_name"] = "mutated"
    first.payload["compute"]["gpu_count"] = 99
    second = build_rl_payload_from_mapping(config, task_url=TASK_URL)
    assert second.payload["data"]["config"]["rollout"]["env_name"] == "math"
    assert second.payload["compute"]["gpu_count"] == 1
    assert canonical(second.payload) == canonical(build_rl_payload(MINIMAL, task_url=TASK_URL).payload)


def test_build_rl_payload_wants_a_path_and_says_what_to_use_for_dicts() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(load_rl_config(MINIMAL), task_url=TASK_URL)  # type: ignore[arg-type]
    assert "build_rl_payload_from_mapping" in str(info.value)
    with pytest.raises(ConfigError, match="expected a mapping"):
        build_rl_payload_from_mapping(["not", "a", "table"], task_url=TASK_URL)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="task_url expected a string"):
        build_rl_payload(MINIMAL, task_url=8114)  # type: ignore[arg-type]


def test_load_rl_config_applies_overrides_but_does_not_validate_or_inject() -> None:
    config = load_rl_config(MINIMAL, overrides={"training.batch_size": 8, "task_url": "http://ignored"})
    assert config["training"]["batch_size"] == 8
    assert config["services"] == {"task_url": ""}
    assert "reference" not in config
    assert "topology" not in config["compute"]


def test_validate_rl_config_returns_the_normalised_config() -> None:
    config = load_rl_config(MINIMAL, overrides={"services": None, "smoke.max_steps": "3"})
    normalised = validate_rl_config(config)
    assert normalised["services"] == {"task_url": "placeholder"}
    assert normalised["compute"]["topology"] == {"reference_placement": "none"}
    assert normalised["smoke"] == {"max_steps": 3}  # kept here; dropped from the payload
    assert "reference" not in normalised
    assert "services" not in config  # input untouched


def test_values_json_cannot_carry_are_refused_with_their_key(tmp_path: Path) -> None:
    path = tmp_path / "dated.toml"
    path.write_text(MINIMAL.read_text() + '\n[data]\nsplit = "train"\nsince = 2024-01-02\nscale = inf\n')
    with pytest.raises(ConfigError) as info:
        build_rl_payload(path, task_url=TASK_URL)
    assert info.value.keys == ["data.since", "data.scale"]
    assert 'quote it as a string: "2024-01-02"' in str(info.value)
    assert "finite" in info.value.problems[1].message
