"""The SDK's rules beyond the types (contract §7.1 rules 1-13, §7.2's algorithm triple), loose where the SDK
is; unknown keys and implausible counts warn with a "did you mean", and an override adding one fails."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from pytest_synth_rl.config.problems import KeyPath, ProblemList, capped_error, describe, format_key, key_text
from pytest_synth_rl.config.schema import RL_CONFIG, Section, check_section, section_of
from pytest_synth_rl.errors import ConfigProblem, closest
from pytest_synth_rl.secrets.callers import outside_stacklevel

RL_ALGORITHM = ("online", "policy_gradient", "gspo")
_ALGO = 'RL jobs need type = "online", method = "policy_gradient", variety = "gspo" under [algorithm]'
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
    problems: ProblemList, path: KeyPath, value: object, hint: str, missing: str | None = None
) -> Mapping[str, Any] | None:
    """*value* if it is a non-empty table; else a problem (when *missing* says how to word one) and None."""
    if not truthy(value):
        if missing is not None:
            problems.add(path, f"missing or empty; expected {missing}", hint)
    elif not isinstance(value, Mapping):
        problems.add(path, f"expected a table, got {describe(value)}", hint)
    else:
        return value
    return None


_TRUTHY_KEYS = {  # rules 3-9: keys that must be truthy once their table is there, and what is wrong if not
    "gpu_type": 'empty; expected a GPU type like "H100"',
    "gpu_count": "zero; expected a non-zero GPU count",
    "env_name": "empty; expected a string naming an environment the task app serves",
    "policy_name": "empty; expected a string naming a policy name",
    "trainer_mode": 'empty; expected "lora", "qlora" or "full"',
    "label": "empty; expected a label for the trained model",
}
_REQUIRED_TABLES = {
    "compute": ("with gpu_type and gpu_count", "gpu_type gpu_count"),
    "rollout": ("with env_name, policy_name and episode settings", "env_name policy_name"),
}
_METHODS = ("policy_gradient", "ppo", "gspo")  # what the pre-validator lets through
_ALGORITHM_RULES = (  # key, whether its value passes, what is wrong when not
    ("type", lambda v: v in (None, "online"), 'expected "online" (RL is online)'),
    ("method", lambda v: not truthy(v) or v in _METHODS, 'expected "policy_gradient"'),
    ("variety", truthy, 'missing or empty; expected "gspo"'),
)


def _truthy_keys(problems: ProblemList, table: Mapping[str, Any], section: str, keys: str) -> None:
    schema = RL_CONFIG.fields[section].section
    for key in keys.split():
        if not truthy(table.get(key)) and schema is not None:
            message = f"missing or {_TRUTHY_KEYS[key]}, got {describe(table.get(key))}"
            problems.add((section, key), message, f"add `{schema.fields[key].example}` under [{section}]")


def precheck(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rules 1-11: required sections and keys, algorithm names, model/compute/rollout basics."""
    algorithm = _table(problems, ("algorithm",), config.get("algorithm"), _ALGO, "an [algorithm] table")
    for key, passes, wrong in _ALGORITHM_RULES:
        if algorithm is not None and not passes(value := algorithm.get(key)):
            problems.add(("algorithm", key), f"{wrong}, got {describe(value)}", _ALGO)
    if "policy" not in config and "model" not in config:
        message = "missing; expected a [model] table (base or source, trainer_mode, label)"
        hint = 'add [model] with base = "Qwen/Qwen3-0.6B", trainer_mode = "lora", label = "my-rl-model"'
        problems.add(("model",), message, hint)
    policy = truthy(config.get("policy", {}))  # rule 6: a non-empty [policy] is checked instead of [model]
    section, ids = ("policy", ("model_name", "source")) if policy else ("model", ("base", "source"))
    table = _table(problems, (section,), config.get(section, {}), f"write [{section}] as a table")
    if table is not None:
        if not any(truthy(table.get(name)) for name in ids):
            message = f'missing; expected {ids[0]} (a base model id such as "Qwen/Qwen3-0.6B") or {ids[1]} '
            hint = f'add `{ids[0]} = "Qwen/Qwen3-0.6B"` under [{section}]'
            problems.add((section, ids[0]), message + "(a fine-tuned model id)", hint)
        _truthy_keys(problems, table, section, "trainer_mode label")
    for name, (what, keys) in _REQUIRED_TABLES.items():
        wanted = f"a [{name}] table {what}"
        if (table := _table(problems, (name,), config.get(name, {}), f"add {wanted}", wanted)) is not None:
            _truthy_keys(problems, table, name, keys)
    compute = config.get("compute")
    nested = isinstance(compute, Mapping) and truthy(compute.get("topology", {}))
    if not truthy(config.get("topology")) and not nested:
        message = "missing or empty; expected a non-empty [topology] or [compute.topology] table"
        hint = 'add [compute.topology] with type = "single_node_split", gpus_for_vllm = 1, '
        problems.add(("topology",), message, hint + "gpus_for_training = 1")
    for name in ("training", "evaluation"):  # rules 10-11: once present, a section needs all its keys
        table = _table(problems, (name,), config.get(name, {}), f"write [{name}] as a table") or {}
        schema = RL_CONFIG.fields[name].section
        for key, spec in schema.fields.items() if table and schema is not None else ():
            if spec.required and key not in table:
                message = f"missing; expected {_REQUIRED_KEYS[key]} (required whenever [{name}] is present)"
                problems.add((name, key), message, f"add `{spec.example}` under [{name}]")


def inject_defaults(config: MutableMapping[str, Any], problems: ProblemList) -> None:
    """Rule 12: a placeholder ``services.task_url`` and ``compute.topology.reference_placement``."""
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
            message = f'expected "{wanted}" (the payload builder supports only this RL algorithm), got '
            problems.add((*path, key), message + describe(value), _ALGO)


def _some_weight(weights: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if all(weights.get(name) == 0.0 for name in ("env", "event", "outcome")):
        message = "all weights are zero; expected at least one of env, event, outcome > 0"
        problems.add(path, message, "e.g. `env = 1.0`")


def _some_track(options: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if not options.get("event") and not options.get("outcome"):
        message = "event and outcome are both false; expected at least one verification track enabled"
        hint = "set `event = true` or `outcome = true` under [verifier.options]"
        problems.add((*path, "event"), message, hint)


_WEIGHTS = section_of(
    "env float= 1.0; event float= 0.0; outcome float= 0.0",
    _some_weight,
    **dict.fromkeys(("env", "event", "outcome"), lambda value: None if value >= 0 else "a number >= 0"),
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
_OPTIONS_HINT = 'add [verifier.options] with provider = "openai" and model = "gpt-5-nano"'
_RUBRIC_ENABLED = section_of("enabled bool! true")
_REMOVED_KEYS: dict[KeyPath, tuple[str, str]] = {
    ("rubric",): (
        "api_base api_key_env event model outcome",
        "remove it; configure the judge model and criteria in [verifier.options] (model, rubric_overrides)",
    ),
    ("verifier",): ("timeout_s type", "remove it (a timeout now goes in [verifier.options].timeout_s)"),
    ("verifier", "options"): ("max_concurrency tracks", "remove it from [verifier.options]"),
}


def _reward_table(
    value: object, path: KeyPath, problems: ProblemList, missing: str | None = None
) -> Mapping[str, Any] | None:
    written = f"write [{format_key(path)}] as a table"
    table = _table(problems, path, value, _OPTIONS_HINT if missing else written, missing)
    names, hint = _REMOVED_KEYS[path]
    for name in names.split():
        if table is not None and name in table:
            problems.add((*path, name), "is no longer supported (removed in SDK 0.4.4)", hint)
    return table


def check_reward_sections(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Rule 13: validate [rubric] and [verifier] and how they depend on each other."""
    before = len(problems)
    enabled, weights, options = False, None, None
    if (table := _reward_table(config.get("rubric", {}), ("rubric",), problems)) is not None:  # none: off
        values = {"enabled": table.get("enabled", False)}
        enabled = bool(check_section(_RUBRIC_ENABLED, values, ("rubric",), problems)[0].get("enabled"))
        converted, valid = check_section(_WEIGHTS, table.get("weights", {}), ("rubric", "weights"), problems)
        weights = converted if valid else None
    verifier = config.get("verifier", {})
    if (table := _reward_table(verifier, ("verifier",), problems)) is not None:
        path = ("verifier", "options")
        missing = "a [verifier.options] table with provider and model"
        if (found := _reward_table(table.get("options"), path, problems, missing)) is not None:
            converted, valid = check_section(_OPTIONS, found, path, problems)
            options = converted if valid else None
    if not enabled:
        return
    if not truthy(verifier):
        message = "is true but there is no [verifier] section; expected a [verifier] to score events/outcomes"
        hint = "add [verifier.options] (provider, model) or set [rubric].enabled = false"
        problems.add(("rubric", "enabled"), message, hint)
        return
    if options is None or weights is None or len(problems) != before:
        return
    for track in ("event", "outcome"):
        if weights.get(track, 0.0) > 0 and not options.get(track):
            message = f"is > 0 but [verifier.options].{track} is false; expected that track enabled"
            hint = f"set `{track} = true` under [verifier.options] or `{track} = 0.0` here"
            problems.add(("rubric", "weights", track), message, hint)


class SynthConfigWarning(UserWarning):
    """An unknown config key or section, or a count no trainer can run: forwarded, but likely a mistake."""


KNOWN_EXTRA_KEYS: Mapping[KeyPath, frozenset[str]] = {
    ("rollout",): frozenset({"ops", "task_app_origin_rewards_only", "rubric_rewards_only"}),
    ("policy",): frozenset({"model", "backend", "vllm_tensor_parallel_size", "max_model_len"}),
    (): frozenset({"data"}),
    ("verifier", "options"): frozenset(_OPTIONS.fields),  # the 0.5 era added some
}
_COUNTS = {
    "training": "num_epochs iterations_per_epoch batch_size group_size max_turns",
    "rollout": "max_turns episodes_per_batch max_concurrent_rollouts",
}
COUNT_KEYS = [f"{name}.{key}" for name, keys in _COUNTS.items() for key in keys.split()]


def _is_extra(path: KeyPath, key: str) -> bool:
    return key in KNOWN_EXTRA_KEYS.get(path, ()) or (path == ("training",) and key.startswith("reward_"))


def _known_at(config: Mapping[str, Any], path: KeyPath) -> tuple[Section | None, Mapping[str, Any]]:
    """The schema section and the config table at *path*: None and an empty table where there is none."""
    section: Section | None = RL_CONFIG
    table: Any = config
    for part in path:
        spec = section.fields.get(str(part)) if section is not None else None
        section = spec.section if spec is not None else None
        table = table.get(part) if isinstance(table, Mapping) else None
    return section, table if isinstance(table, Mapping) else {}


def config_warnings(config: Mapping[str, Any]) -> list[str]:
    """Unknown keys with the known key meant (a field of one sub-table beats a sibling), bad counts."""
    found: list[str] = []

    def walk(table: Mapping[str, Any], path: KeyPath, section: Section) -> None:
        for key, value in table.items():
            if not isinstance(key, str):
                continue  # a type error of the schema check
            spec = section.fields.get(key)
            if spec is None and not _is_extra(path, key):
                homes = [name for name, s in section.fields.items() if s.section and key in s.section.fields]
                sibling = closest(key, section.fields)
                guess = (homes[0], key) if len(homes) == 1 else (sibling,) if sibling else None
                spot = f"key {format_key((*path, key))}" if path else f"section [{format_key((key,))}]"
                hint = f"; did you mean {format_key((*path, *guess))!r}?" if guess else ""
                message = (
                    f"unknown {spot} is not part of the RL config schema; it is forwarded to the backend "
                )
                found.append(f"{message}unchanged{hint}")
            elif spec is not None and spec.section is not None and isinstance(value, Mapping):
                walk(value, (*path, key), spec.section)

    walk(config, (), RL_CONFIG)
    for path in COUNT_KEYS:
        name, key = path.split(".")
        value = _known_at(config, (name,))[1].get(key)
        if isinstance(value, bool):
            what = f"{str(value).lower()} is a boolean where a count belongs (the SDK sends it as {value:d})"
        elif isinstance(value, int) and value < 1:
            what = f"{value} is not a count a trainer can run (the SDK sends it unchecked)"
        else:
            continue
        found.append(f"{path} = {what}; write a whole number >= 1")
    return found


def warn_about_config(config: Mapping[str, Any], *, source: str | None = None) -> None:
    where = f"{source}: " if source else ""
    for message in config_warnings(config):
        warnings.warn(SynthConfigWarning(f"{where}{message}"), stacklevel=outside_stacklevel())


def check_override_keys(
    config: Mapping[str, Any], edits: Iterable[tuple[tuple[str, ...], str]], *, source: str | None = None
) -> None:
    """Refuse overrides adding a key neither *config* nor the schema has, naming the nearest known one."""
    problems = []
    for path, origin in edits:
        for depth, part in enumerate(path):
            here, (section, node) = path[:depth], _known_at(config, path[:depth])
            if section is None or part in section.fields or part in node or _is_extra(here, part):
                continue
            guess = closest(part, sorted(set(section.fields) | set(map(key_text, node))))
            suggestion = f"; did you mean {format_key((*here, guess))!r}?" if guess else ""
            place = f"[{format_key(here)}]" if here else "the top level"
            message = f"override {origin!r} adds {part!r}, which {place} does not have{suggestion}"
            hint = "fix the key, or pass allow_new_keys=True to add keys the config does not know"
            problems.append(ConfigProblem(key=origin, message=message, hint=hint))
            break
    if problems:
        raise capped_error(problems, source)


def point_at_near_misses(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Add "; found 'batch_sise'; did you mean 'batch_size'?" to a "missing" problem with a near miss."""

    def change(path: KeyPath, problem: ConfigProblem) -> ConfigProblem:
        if not path or not problem.message.startswith("missing") or not isinstance(path[-1], str):
            return problem
        section, table = _known_at(config, path[:-1])
        known = {path[-1], *(section.fields if section is not None else ())}
        found = closest(path[-1], [key for key in table if isinstance(key, str) and key not in known])
        suffix = f"; found {found!r}; did you mean {path[-1]!r}?" if found else ""
        return dataclasses.replace(problem, message=problem.message + suffix) if suffix else problem

    problems.revise(change)
