"""The typed shape of an RL config: which keys exist, their types, and defaults that get sent.

This mirrors the SDK's RL config models (contract §2.1, validator step 14): the same keys are
required, the same conversions apply (``"2"`` -> ``2`` for integers, ``1`` -> ``1.0`` for floats),
unknown keys and sections are forwarded untouched, and the defaults the SDK serialises are added:

* ``[policy]``: ``max_tokens = 512``, ``temperature = 0.7``, ``top_p = 0.95``,
  ``repetition_penalty = 1.0`` whenever the section exists;
* ``[verifier.rubric]``: ``enabled = false`` whenever that sub-table exists.

Every other section has only ``None`` defaults, which are dropped, so nothing else is added.
Free-form sections (``[topology]``, ``[vllm]``, ``[reference]``, ``[lora]``, ``[rubric]``,
``[tags]``) only have to be tables.
"""

from __future__ import annotations

from typing import Any

from pytest_synth_rl.config.fields import Field, Section, check_section
from pytest_synth_rl.config.problems import KeyPath, ProblemList

__all__ = ["RL_CONFIG", "check_rl_schema"]


def _req(kind: Any, example: str | None = None, expect: str | None = None) -> Field:
    return Field(kind, required=True, nullable=False, example=example, expect=expect)


def _opt(kind: Any, example: str | None = None) -> Field:
    return Field(kind, example=example)


def _default(kind: Any, value: Any, example: str | None = None) -> Field:
    return Field(kind, default=value, nullable=False, example=example)


def _sub(section: Section, *, required: bool = False) -> Field:
    return Field("section", section=section, required=required, nullable=not required)


def _exactly_one_model_id(table: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if bool(table.get("source")) == bool(table.get("base")):
        both = bool(table.get("source"))
        problems.add(
            (*path, "base"),
            "both base and source are set; expected exactly one"
            if both
            else "missing; expected exactly one of base (a base model id) or source (a fine-tuned model id)",
            'keep `base = "Qwen/Qwen3-0.6B"` for a base model or `source = "ft:…"` for a fine-tuned one',
        )


def _exactly_one_policy_model(table: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if not (bool(table.get("model_name")) ^ bool(table.get("source"))):
        both = bool(table.get("model_name"))
        problems.add(
            (*path, "model_name"),
            "both model_name and source are set; expected exactly one"
            if both
            else "missing; expected exactly one of model_name or source",
            'set `model_name = "Qwen/Qwen3-0.6B"` or `source = "ft:…"`, not both',
        )


ALGORITHM = Section(
    {
        "type": _req("str", 'type = "online"'),
        "method": _req("str", 'method = "policy_gradient"'),
        "variety": _req("str", 'variety = "gspo"'),
    }
)

SERVICES = Section(
    {
        "task_url": _req(
            "str", 'task_url = ""', expect="a string (may be empty when the URL comes from the caller)"
        ),
        "verifier_url": _opt("str"),
    }
)

TOPOLOGY = Section(
    {
        "type": _opt("str", 'type = "single_node_split"'),
        "gpus_for_vllm": _opt("int", "gpus_for_vllm = 1"),
        "gpus_for_training": _opt("int", "gpus_for_training = 1"),
        "gpus_for_ref": _opt("int", "gpus_for_ref = 0"),
        "tensor_parallel": _opt("int", "tensor_parallel = 1"),
        "reference_placement": _opt("str", 'reference_placement = "none"'),
    }
)

COMPUTE = Section(
    {
        "gpu_type": _req("str", 'gpu_type = "H100"'),
        "gpu_count": _req("int", "gpu_count = 1"),
        "nodes": _opt("int", "nodes = 1"),
        "topology": _sub(TOPOLOGY),
    }
)

MODEL = Section(
    {
        "source": _opt("str", 'source = "ft:Qwen/Qwen3-0.6B:job-id"'),
        "base": _opt("str", 'base = "Qwen/Qwen3-0.6B"'),
        "trainer_mode": _req("str", 'trainer_mode = "lora"'),
        "label": _req("str", 'label = "my-rl-model"'),
    },
    after=_exactly_one_model_id,
)

POLICY = Section(
    {
        "model_name": _opt("str", 'model_name = "Qwen/Qwen3-0.6B"'),
        "source": _opt("str"),
        "max_tokens": _default("int", 512, "max_tokens = 512"),
        "temperature": _default("float", 0.7, "temperature = 0.7"),
        "top_p": _default("float", 0.95, "top_p = 0.95"),
        "top_k": _opt("int", "top_k = 50"),
        "repetition_penalty": _default("float", 1.0, "repetition_penalty = 1.0"),
        "stop_sequences": _opt("list_str"),
        "trainer_mode": _req("str", 'trainer_mode = "lora"'),
        "label": _req("str", 'label = "my-rl-model"'),
        "inference_url": _opt("str"),
    },
    after=_exactly_one_policy_model,
)

ROLLOUT = Section(
    {
        "env_name": _req("str", 'env_name = "math"'),
        "policy_name": _req("str", 'policy_name = "math-single-step"'),
        "env_config": _opt("table"),
        "policy_config": _opt("table"),
        "max_turns": _req("int", "max_turns = 1"),
        "episodes_per_batch": _req("int", "episodes_per_batch = 4"),
        "max_concurrent_rollouts": _req("int", "max_concurrent_rollouts = 2"),
        "batches_per_step": _opt("int", "batches_per_step = 1"),
    }
)

WEIGHT_SYNC = Section(
    {
        "enable": _opt("bool", "enable = true"),
        "targets": _opt("list_str"),
        "mode": _opt("str"),
        "direct": _opt("bool"),
        "verify_every_k": _opt("int"),
    }
)

LORA = Section(
    {
        "r": _opt("int", "r = 16"),
        "alpha": _opt("int", "alpha = 32"),
        "dropout": _opt("float", "dropout = 0.05"),
        "target_modules": _opt("list_str"),
    }
)

_REWARD_KEYS: dict[str, Field] = {
    "step_rewards_enabled": _opt("bool"),
    "step_rewards_mode": _opt("str", 'step_rewards_mode = "off"'),
    "step_rewards_indicator_lambda": _opt("float"),
    "step_rewards_beta": _opt("float"),
    "step_rewards_strategy": _opt("str"),
    "event_rewards_kind": _opt("str", 'event_rewards_kind = "unique"'),
}

REWARDS = Section(dict(_REWARD_KEYS))

TRAINING = Section(
    {
        "num_epochs": _req("int", "num_epochs = 1"),
        "iterations_per_epoch": _req("int", "iterations_per_epoch = 1"),
        "gradient_accumulation_steps": _opt("int"),
        "max_accumulated_minibatch": _opt("int"),
        "max_turns": _req("int", "max_turns = 1"),
        "batch_size": _req("int", "batch_size = 2"),
        "group_size": _req("int", "group_size = 2"),
        "learning_rate": _req("float", "learning_rate = 5e-6"),
        "log_interval": _opt("int"),
        "weight_sync_interval": _opt("int"),
        **_REWARD_KEYS,  # deprecated flat spelling of [training.rewards]
        "weight_sync": _sub(WEIGHT_SYNC),
        "lora": _sub(LORA),
        "rewards": _sub(REWARDS),
    }
)

EVALUATION = Section(
    {
        "instances": _req("int", "instances = 8"),
        "every_n_iters": _req("int", "every_n_iters = 10"),
        "seeds": _req("list_int", "seeds = [0, 1, 2]"),
    }
)

VERIFIER_OPTIONS = Section(
    {
        "event": _opt("bool"),
        "outcome": _opt("bool"),
        "provider": _opt("str"),
        "model": _opt("str"),
        "rubric_id": _opt("str"),
        "rubric_overrides": _opt("table"),
        "tracks": _opt("list_str"),
        "weights": _opt("table_float"),
        "max_concurrency": _opt("int"),
    }
)

VERIFIER_RUBRIC = Section(
    {
        "enabled": _default("bool", False),
        "reward_blend": _opt("table_float"),
    }
)

VERIFIER = Section(
    {
        "type": _opt("str"),
        "timeout_s": _opt("int"),
        "enabled": _opt("bool"),
        "reward_blend": _opt("table_float"),
        "rubric": _sub(VERIFIER_RUBRIC),
        "options": _sub(VERIFIER_OPTIONS),
    }
)

SMOKE = Section(
    {
        **{name: _opt("str") for name in ("task_url", "env_name", "policy_name", "policy", "model")},
        "max_steps": _opt("int"),
        "mock_backend": _opt("str"),
        "mock_port": _opt("int"),
        "return_trace": _opt("bool"),
        "use_mock": _opt("bool"),
        "task_app_name": _opt("str"),
        "task_app_port": _opt("int"),
        "task_app_env_file": _opt("str"),
        "task_app_force": _opt("bool"),
        "sqld_auto_start": _opt("bool"),
        "sqld_db_path": _opt("str"),
        "sqld_hrana_port": _opt("int"),
        "sqld_http_port": _opt("int"),
    }
)

RL_CONFIG = Section(
    {
        "algorithm": _sub(ALGORITHM, required=True),
        "services": _sub(SERVICES, required=True),
        "compute": _sub(COMPUTE),
        "topology": _opt("table"),
        "vllm": _opt("table"),
        "reference": _opt("table"),
        "model": _sub(MODEL),
        "policy": _sub(POLICY),
        "lora": _opt("table"),
        "rollout": _sub(ROLLOUT),
        "evaluation": _sub(EVALUATION),
        "training": _sub(TRAINING),
        "rubric": _opt("table"),
        "verifier": _sub(VERIFIER),
        "tags": _opt("table"),
        "smoke": _sub(SMOKE),
    }
)


def check_rl_schema(config: object, problems: ProblemList) -> dict[str, Any]:
    """Type-check and convert a whole RL config; returns the converted config (defaults added)."""
    return check_section(RL_CONFIG, config, (), problems)
