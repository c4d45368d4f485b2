"""RL config -> validated config -> job payload: ``build_rl_payload(path, task_url=...)`` reads a TOML file,
applies overrides, checks it by the SDK's rules (every problem in one ConfigError) and returns the body."""

from __future__ import annotations

from pytest_synth_rl.config.loader import (
    SPECIAL_KEYS,
    apply_overrides,
    load_rl_config,
    parse_toml,
    read_toml_file,
)
from pytest_synth_rl.config.payload import (
    RLBuildResult,
    build_rl_payload,
    build_rl_payload_from_mapping,
    validate_rl_payload,
)
from pytest_synth_rl.config.rules import SynthConfigWarning
from pytest_synth_rl.config.urls import normalize_backend_url, resolve_task_url
from pytest_synth_rl.config.validate import (
    EXPERIMENTAL_MODELS,
    FINE_TUNED_PREFIXES,
    KNOWN_BASE_MODELS,
    SUPPORTED_RL_MODELS,
    collect_config_problems,
    experimental_models,
    validate_rl_config,
)

__all__ = [
    "EXPERIMENTAL_MODELS",
    "FINE_TUNED_PREFIXES",
    "KNOWN_BASE_MODELS",
    "SPECIAL_KEYS",
    "SUPPORTED_RL_MODELS",
    "RLBuildResult",
    "SynthConfigWarning",
    "apply_overrides",
    "build_rl_payload",
    "build_rl_payload_from_mapping",
    "collect_config_problems",
    "experimental_models",
    "load_rl_config",
    "normalize_backend_url",
    "parse_toml",
    "read_toml_file",
    "resolve_task_url",
    "validate_rl_config",
    "validate_rl_payload",
]
