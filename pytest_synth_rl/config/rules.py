"""The SDK's rules beyond the types (contract §7.1 rules 1-13, §7.2's algorithm triple).

The pre-validator runs on the config as written and is loose where the SDK is (``gpu_count`` only
has to be truthy); the reward sections ([verifier], deprecated [rubric]) are strict since SDK 0.4.4.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.problems import KeyPath, ProblemList
from pytest_synth_rl.config.schema import RL_CONFIG, Field, Section, check_section, section_of

#: The only algorithm triple the RL builder supports: (type, method, variety).
RL_ALGORITHM = ("online", "policy_gradient", "gspo")
_ALGO_HINT = 'RL jobs need type = "online", method = "policy_gradient", variety = "gspo" under [algorithm]'
#: Rules 10-11: what each required key of [training] and [evaluation] holds (the schema lists them).
_REQUIRED_KEYS = {
    "num_epochs": "the number of training epochs",
    "iterations_per_epoch": "the number of iterations per epoch",
    "max_turns": "the maximum turns per episode",
    "batch_size": "the batch size",
    "group_size": "the GSPO group size",
    "learning_rate": "the learning rate",
    "instances": "the number of evaluation instances",
    "every_n_iters": "how often to evaluate, in iterations",
    "seeds": "the evaluation seeds",
}


def truthy(value: object) -> bool:
    """Python truthiness as the SDK tests it, without letting an exotic ``__bool__`` escape."""
    try:
        return bool(value)
    except Exception:
        return True


def _table(
    problems: ProblemList, path: KeyPath, value: object, hint: str, *, missing: str | None = None
) -> Mapping[str, Any] | None:
    """*value* if it is a non-empty table; else a problem (when *missing* says how to word one) and None."""
    if not truthy(value):
        if missing is not None:
            problems.add(path, f"missing or empty; expected {missing}", hint)
        return None
    if not isinstance(value, Mapping):
        problems.add(path, f"expected a table, got {describe(value)}", hint)
        return None
    return value


#: Rules 3-9: keys that must be truthy once their table is there: (key, what is wrong, example).
_TRUTHY_KEYS = {
    "compute": (
        ("gpu_type", 'empty; expected a GPU type like "H100"', 'gpu_type = "H100"'),
        ("gpu_count", "zero; expected a non-zero GPU count", "gpu_count = 1"),
    ),
    "rollout": (
        (
            "env_name",
            "empty; expected a string naming an environment the task app serves",
            'env_name = "math"',
        ),
        ("policy_name", "empty; expected a string naming a policy name", 'policy_name = "math-single-step"'),
    ),
    "model": (
        ("trainer_mode", 'empty; expected "lora", "qlora" or "full"', 'trainer_mode = "lora"'),
        ("label", "empty; expected a label for the trained model", 'label = "my-rl-model"'),
    ),
}
#: Rules 5 and 8: tables that must be there and non-empty, with what they need.
_REQUIRED_TABLES = {
    "compute": "with gpu_type and gpu_count",
    "rollout": "with env_name, policy_name and episode settings",
}


def _truthy_keys(problems: ProblemList, table: Mapping[str, Any], section: str, kind: str) -> None:
    for key, wrong, example in _TRUTHY_KEYS[kind]:
        if not truthy(table.get(key)):
            message = f"missing or {wrong}, got {describe(table.get(key))}"
            problems.add((section, key), message, f"add `{example}` under [{section}]")


def precheck(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rules 1-11: required sections and keys, algorithm names, model/compute/rollout basics."""
    algorithm = _table(
        problems, ("algorithm",), config.get("algorithm"), _ALGO_HINT, missing="an [algorithm] table"
    )
    if algorithm is not None:
        kind, method, variety = algorithm.get("type"), algorithm.get("method", ""), algorithm.get("variety")
        if kind is not None and not (isinstance(kind, str) and kind == "online"):
            problems.add(
                ("algorithm", "type"), f'expected "online" (RL is online), got {describe(kind)}', _ALGO_HINT
            )
        if truthy(method) and not (isinstance(method, str) and method in ("policy_gradient", "ppo", "gspo")):
            problems.add(
                ("algorithm", "method"), f'expected "policy_gradient", got {describe(method)}', _ALGO_HINT
            )
        if not truthy(variety):
            message = f'missing or empty; expected "gspo", got {describe(variety)}'
            problems.add(("algorithm", "variety"), message, _ALGO_HINT)
    if "policy" not in config and "model" not in config:
        problems.add(
            ("model",),
            "missing; expected a [model] table (base or source, trainer_mode, label)",
            'add [model] with base = "Qwen/Qwen3-0.6B", trainer_mode = "lora", label = "my-rl-model"',
        )
    _model_identity(config, problems)
    tables: dict[str, Mapping[str, Any]] = {}
    for name, what in _REQUIRED_TABLES.items():
        value = config.get(name, {})
        if not truthy(value):
            problems.add(
                (name,), f"missing or empty; expected a [{name}] table {what}", f"add a [{name}] table {what}"
            )
        elif (table := _table(problems, (name,), value, f"write [{name}] as a table {what}")) is not None:
            tables[name] = table
            _truthy_keys(problems, table, name, name)
    compute = tables.get("compute")
    if not truthy(config.get("topology")) and not (
        compute is not None and truthy(compute.get("topology", {}))
    ):
        problems.add(
            ("topology",),
            "missing or empty; expected a non-empty [topology] or [compute.topology] table",
            'add [compute.topology] with type = "single_node_split", gpus_for_vllm = 1, '
            "gpus_for_training = 1",
        )
    for name in ("training", "evaluation"):  # rules 10-11: once present, a section needs all its keys
        table = _table(problems, (name,), config.get(name, {}), f"write [{name}] as a table")
        schema = RL_CONFIG.fields[name].section
        if table is None or schema is None:
            continue
        for key, spec in schema.fields.items():
            if spec.required and key not in table:
                problems.add(
                    (name, key),
                    f"missing; expected {_REQUIRED_KEYS[key]} (required whenever [{name}] is present)",
                    f"add `{spec.example}` under [{name}]",
                )


def _model_identity(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rule 6: a non-empty [policy] is checked instead of [model], as in the SDK."""
    policy, model = config.get("policy", {}), config.get("model", {})
    if truthy(policy):
        section, ids, value = "policy", ("model_name", "source"), policy
    elif truthy(model):
        section, ids, value = "model", ("base", "source"), model
    else:
        return
    table = _table(problems, (section,), value, f"write [{section}] as a table")
    if table is None:
        return
    if not any(truthy(table.get(name)) for name in ids):
        problems.add(
            (section, ids[0]),
            f'missing; expected {ids[0]} (a base model id such as "Qwen/Qwen3-0.6B") or {ids[1]} '
            "(a fine-tuned model id)",
            f'add `{ids[0]} = "Qwen/Qwen3-0.6B"` under [{section}]',
        )
    _truthy_keys(problems, table, section, "model")


def inject_defaults(config: MutableMapping[str, Any], problems: ProblemList) -> None:
    """Rule 12: ``services.task_url = "placeholder"`` when [services] is absent, and
    ``compute.topology.reference_placement = "none"`` when not set."""
    if "services" not in config:
        config["services"] = {"task_url": "placeholder"}
    compute = config.get("compute")
    if not isinstance(compute, MutableMapping):
        return  # already reported by precheck
    topology = compute.setdefault("topology", {})
    if isinstance(topology, MutableMapping):
        topology.setdefault("reference_placement", "none")
    else:
        hint = "write it as a [compute.topology] table"
        problems.add(("compute", "topology"), f"expected a table, got {describe(topology)}", hint)


def check_algorithm_triple(algorithm: Mapping[str, Any], path: KeyPath, problems: ProblemList) -> None:
    """Builder check (§7.2): trimmed and lower-cased, the triple must be the RL one (``ppo`` fails here)."""
    for key, wanted in zip(("type", "method", "variety"), RL_ALGORITHM, strict=True):
        value = algorithm.get(key)
        if ("" if value is None else str(value).strip().lower()) != wanted:
            problems.add(
                (*path, key),
                f'expected "{wanted}" (the payload builder supports only this RL algorithm), '
                f"got {describe(value)}",
                _ALGO_HINT,
            )


def _some_weight(weights: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if all(weights.get(name) == 0.0 for name in ("env", "event", "outcome")):
        message = "all weights are zero; expected at least one of env, event, outcome > 0"
        problems.add(path, message, "e.g. `env = 1.0`")


def _some_track(options: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if not options.get("event") and not options.get("outcome"):
        problems.add(
            (*path, "event"),
            "event and outcome are both false; expected at least one verification track enabled",
            "set `event = true` or `outcome = true` under [verifier.options]",
        )


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "a number >= 0"


_WEIGHTS = section_of(
    "env float= 1.0; event float= 0.0; outcome float= 0.0",
    _some_weight,
    env=_non_negative,
    event=_non_negative,
    outcome=_non_negative,
)
_OPTIONS = section_of(
    'provider str! "openai"; model str! "gpt-5-nano"; rubric_id str; event bool=true; outcome bool=true; '
    "timeout_s float 30.0; metadata table={}; rubric_overrides table={}",
    _some_track,
    provider=lambda value: (
        None if re.fullmatch("openai|groq|gemini", value) else 'one of "openai", "groq", "gemini"'
    ),
    model=lambda value: None if value else "a non-empty model id",
    timeout_s=lambda value: None if value > 0 else "a number of seconds > 0",
)
#: The keys [verifier.options] may hold (the 0.5 era added some the typed schema lacks).
VERIFIER_OPTIONS_KEYS: frozenset[str] = frozenset(_OPTIONS.fields)
_RUBRIC_ENABLED = Section({"enabled": Field("bool", default=False, nullable=False, example="enabled = true")})
_REMOVED = "is no longer supported (removed in SDK 0.4.4)"


def _removed(
    table: Mapping[str, Any], names: tuple[str, ...], path: KeyPath, hint: str, problems: ProblemList
) -> None:
    for name in names:
        if name in table:
            problems.add((*path, name), _REMOVED, hint)


def _check_rubric(rubric: object, problems: ProblemList) -> tuple[bool, dict[str, Any] | None]:
    """(enabled, weights) for the cross-checks; weights is ``None`` if unusable."""
    if not truthy(rubric):
        return False, {"env": 1.0, "event": 0.0, "outcome": 0.0}
    table = _table(problems, ("rubric",), rubric, "write [rubric] as a table")
    if table is None:
        return False, None
    hint = "remove it; configure the judge model and criteria in [verifier.options] (model, rubric_overrides)"
    _removed(table, ("api_base", "api_key_env", "event", "model", "outcome"), ("rubric",), hint, problems)
    enabled = check_section(_RUBRIC_ENABLED, {"enabled": table.get("enabled", False)}, ("rubric",), problems)
    weights, valid = check_section(_WEIGHTS, table.get("weights", {}), ("rubric", "weights"), problems)
    return bool(enabled[0].get("enabled", False)), (weights if valid else None)


def _check_verifier(verifier: object, problems: ProblemList) -> dict[str, Any] | None:
    """The validated [verifier.options], or ``None`` when absent or broken."""
    table = _table(problems, ("verifier",), verifier, "write [verifier] as a table")
    if table is None:
        return None
    hint = "remove it (a timeout now goes in [verifier.options].timeout_s)"
    _removed(table, ("timeout_s", "type"), ("verifier",), hint, problems)
    missing = "a [verifier.options] table with provider and model"
    hint = 'add [verifier.options] with provider = "openai" and model = "gpt-5-nano"'
    if not truthy(table.get("options")):
        problems.add(("verifier", "options"), f"missing; expected {missing}", hint)
        return None
    options = _table(problems, ("verifier", "options"), table.get("options"), "write it as a table")
    if options is None:
        return None
    path = ("verifier", "options")
    _removed(options, ("max_concurrency", "tracks"), path, "remove it from [verifier.options]", problems)
    converted, valid = check_section(_OPTIONS, options, path, problems)
    return converted if valid else None


def check_reward_sections(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rule 13: validate [rubric] and [verifier] and how they depend on each other."""
    before = len(problems)
    enabled, weights = _check_rubric(config.get("rubric", {}), problems)
    verifier = config.get("verifier", {})
    options = _check_verifier(verifier, problems) if truthy(verifier) else None
    if not enabled:
        return
    if not truthy(verifier):
        problems.add(
            ("rubric", "enabled"),
            "is true but there is no [verifier] section; expected a [verifier] to score events/outcomes",
            "add [verifier.options] (provider, model) or set [rubric].enabled = false",
        )
        return
    if options is None or weights is None or len(problems) != before:
        return
    for track in ("event", "outcome"):
        if weights.get(track, 0.0) > 0 and not options.get(track):
            problems.add(
                ("rubric", "weights", track),
                f"is > 0 but [verifier.options].{track} is false; expected that track enabled",
                f"set `{track} = true` under [verifier.options] or `{track} = 0.0` here",
            )
