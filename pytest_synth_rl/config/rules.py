"""The SDK's pre-validation rules for RL configs (contract §7.1, rules 1-12), collecting all.

These run on the config *as written*, before any type conversion, and are deliberately loose
where the SDK is loose (``gpu_count`` only has to be truthy here; its type is checked later by
:mod:`.schema`). They exist separately from the schema because the SDK applies both, and some
rules are stricter than the types (an empty ``rollout.env_name`` is a valid string but not a
usable environment name).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.problems import KeyPath, ProblemList

__all__ = ["RL_ALGORITHM", "check_algorithm_triple", "inject_defaults", "precheck", "truthy"]

#: The only algorithm triple the RL builder supports: (type, method, variety).
RL_ALGORITHM = ("online", "policy_gradient", "gspo")
_TOLERATED_METHODS = ("policy_gradient", "ppo", "gspo")
_ALGO_HINT = 'RL jobs need type = "online", method = "policy_gradient", variety = "gspo" under [algorithm]'

_TRAINING_KEYS = {
    "num_epochs": ("the number of training epochs", "num_epochs = 1"),
    "iterations_per_epoch": ("the number of iterations per epoch", "iterations_per_epoch = 1"),
    "max_turns": ("the maximum turns per episode", "max_turns = 1"),
    "batch_size": ("the batch size", "batch_size = 2"),
    "group_size": ("the GSPO group size", "group_size = 2"),
    "learning_rate": ("the learning rate", "learning_rate = 5e-6"),
}
_EVALUATION_KEYS = {
    "instances": ("the number of evaluation instances", "instances = 8"),
    "every_n_iters": ("how often to evaluate, in iterations", "every_n_iters = 10"),
    "seeds": ("the evaluation seeds", "seeds = [0, 1, 2]"),
}


def truthy(value: object) -> bool:
    """Python truthiness as the SDK tests it, without letting an exotic ``__bool__`` escape."""
    try:
        return bool(value)
    except Exception:
        return True


def _is(value: object, text: str) -> bool:
    return isinstance(value, str) and value == text


def precheck(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rules 1-11: required sections and keys, algorithm names, model/compute/rollout basics."""
    _algorithm(config, problems)
    if "policy" not in config and "model" not in config:
        problems.add(
            ("model",),
            "missing; expected a [model] table (base or source, trainer_mode, label)",
            'add [model] with base = "Qwen/Qwen3-0.6B", trainer_mode = "lora", label = "my-rl-model"',
        )
    _model_identity(config, problems)
    compute = _required_table(config, "compute", "with gpu_type and gpu_count", problems)
    if compute is not None:
        if not truthy(compute.get("gpu_type")):
            problems.add(
                ("compute", "gpu_type"),
                f'missing or empty; expected a GPU type like "H100", got {describe(compute.get("gpu_type"))}',
                'add `gpu_type = "H100"` under [compute]',
            )
        if not truthy(compute.get("gpu_count")):
            problems.add(
                ("compute", "gpu_count"),
                f"missing or zero; expected a non-zero GPU count, got {describe(compute.get('gpu_count'))}",
                "add `gpu_count = 1` under [compute]",
            )
    rollout = _required_table(config, "rollout", "with env_name, policy_name and episode settings", problems)
    if rollout is not None:
        for key, example in (
            ("env_name", 'env_name = "math"'),
            ("policy_name", 'policy_name = "math-single-step"'),
        ):
            if not truthy(rollout.get(key)):
                what = "an environment the task app serves" if key == "env_name" else "a policy name"
                problems.add(
                    ("rollout", key),
                    f"missing or empty; expected a string naming {what}, got {describe(rollout.get(key))}",
                    f"add `{example}` under [rollout]",
                )
    _topology(config, compute, problems)
    _required_keys(config, "training", _TRAINING_KEYS, problems)
    _required_keys(config, "evaluation", _EVALUATION_KEYS, problems)


def _algorithm(config: Mapping[str, Any], problems: ProblemList) -> None:
    algorithm = config.get("algorithm")
    if not truthy(algorithm):
        problems.add(("algorithm",), "missing or empty; expected an [algorithm] table", _ALGO_HINT)
        return
    if not isinstance(algorithm, Mapping):
        problems.add(("algorithm",), f"expected a table, got {describe(algorithm)}", _ALGO_HINT)
        return
    algo_type = algorithm.get("type")
    if algo_type is not None and not _is(algo_type, "online"):
        problems.add(
            ("algorithm", "type"), f'expected "online" (RL is online), got {describe(algo_type)}', _ALGO_HINT
        )
    method = algorithm.get("method", "")
    if truthy(method) and not any(_is(method, name) for name in _TOLERATED_METHODS):
        problems.add(
            ("algorithm", "method"), f'expected "policy_gradient", got {describe(method)}', _ALGO_HINT
        )
    if not truthy(algorithm.get("variety")):
        problems.add(
            ("algorithm", "variety"),
            f'missing or empty; expected "gspo", got {describe(algorithm.get("variety"))}',
            _ALGO_HINT,
        )


def _model_identity(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rule 6: a non-empty [policy] is checked instead of [model], as in the SDK."""
    policy = config.get("policy", {})
    model = config.get("model", {})
    if truthy(policy):
        section, ids = "policy", ("model_name", "source")
        table = policy
    elif truthy(model):
        section, ids = "model", ("base", "source")
        table = model
    else:
        return
    if not isinstance(table, Mapping):
        problems.add((section,), f"expected a table, got {describe(table)}", f"write [{section}] as a table")
        return
    if not any(truthy(table.get(name)) for name in ids):
        problems.add(
            (section, ids[0]),
            f'missing; expected {ids[0]} (a base model id such as "Qwen/Qwen3-0.6B") or {ids[1]} '
            "(a fine-tuned model id)",
            f'add `{ids[0]} = "Qwen/Qwen3-0.6B"` under [{section}]',
        )
    mode = table.get("trainer_mode")
    if not truthy(mode):
        problems.add(
            (section, "trainer_mode"),
            f'missing or empty; expected "lora", "qlora" or "full", got {describe(mode)}',
            f'add `trainer_mode = "lora"` under [{section}]',
        )
    if not truthy(table.get("label")):
        problems.add(
            (section, "label"),
            f"missing or empty; expected a label for the trained model, got {describe(table.get('label'))}",
            f'add `label = "my-rl-model"` under [{section}]',
        )


def _required_table(
    config: Mapping[str, Any], name: str, what: str, problems: ProblemList
) -> Mapping[str, Any] | None:
    value = config.get(name, {})
    if not truthy(value):
        problems.add(
            (name,), f"missing or empty; expected a [{name}] table {what}", f"add a [{name}] table {what}"
        )
        return None
    if not isinstance(value, Mapping):
        problems.add((name,), f"expected a table, got {describe(value)}", f"write [{name}] as a table {what}")
        return None
    return value


def _topology(config: Mapping[str, Any], compute: Mapping[str, Any] | None, problems: ProblemList) -> None:
    """Rule 9: a non-empty top-level [topology] or [compute.topology]."""
    if truthy(config.get("topology")):
        return
    if compute is not None and truthy(compute.get("topology", {})):
        return
    problems.add(
        ("topology",),
        "missing or empty; expected a non-empty [topology] or [compute.topology] table",
        'add [compute.topology] with type = "single_node_split", gpus_for_vllm = 1, gpus_for_training = 1',
    )


def _required_keys(
    config: Mapping[str, Any], name: str, keys: Mapping[str, tuple[str, str]], problems: ProblemList
) -> None:
    """Rules 10-11: an optional section that, once present, needs all of its keys."""
    section = config.get(name, {})
    if not truthy(section):
        return
    if not isinstance(section, Mapping):
        problems.add((name,), f"expected a table, got {describe(section)}", f"write [{name}] as a table")
        return
    for key, (what, example) in keys.items():
        if key not in section:
            problems.add(
                (name, key),
                f"missing; expected {what} (required whenever [{name}] is present)",
                f"add `{example}` under [{name}]",
            )


def inject_defaults(config: MutableMapping[str, Any], problems: ProblemList) -> None:
    """Rule 12: ``services.task_url = "placeholder"`` when [services] is absent, and
    ``compute.topology.reference_placement = "none"`` when not set."""
    if "services" not in config:
        config["services"] = {"task_url": "placeholder"}
    compute = config.get("compute")
    if not isinstance(compute, MutableMapping):
        return  # already reported by precheck
    if "topology" not in compute:
        compute["topology"] = {}
    topology = compute["topology"]
    if not isinstance(topology, MutableMapping):
        problems.add(
            ("compute", "topology"),
            f"expected a table, got {describe(topology)}",
            "write it as a [compute.topology] table",
        )
        return
    topology.setdefault("reference_placement", "none")


def _normalized(value: object) -> str:
    return "" if value is None else str(value).strip().lower()


def check_algorithm_triple(algorithm: Mapping[str, Any], path: KeyPath, problems: ProblemList) -> None:
    """Builder check (§7.2): after trimming and lower-casing, the triple must be the RL one.

    The pre-validator tolerates ``method = "ppo"``/``"gspo"`` and any non-empty ``variety``; this
    is where they are refused.
    """
    for key, wanted in zip(("type", "method", "variety"), RL_ALGORITHM, strict=True):
        value = algorithm.get(key)
        if _normalized(value) != wanted:
            problems.add(
                (*path, key),
                f'expected "{wanted}" (the payload builder supports only this RL algorithm), '
                f"got {describe(value)}",
                _ALGO_HINT,
            )
