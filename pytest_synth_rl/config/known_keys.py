"""Which TOML keys the RL config knows, and what an unknown one was meant to be.

The SDK forwards unknown keys, so a typo costs a training run: they and implausible counts get a
:class:`SynthConfigWarning` with a "did you mean", and an override adding a key nobody knows fails.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_synth_rl.config.problems import KeyPath, ProblemList, capped_error, format_key, key_text
from pytest_synth_rl.config.rules import VERIFIER_OPTIONS_KEYS
from pytest_synth_rl.config.schema import RL_CONFIG, Section
from pytest_synth_rl.errors import ConfigProblem, closest
from pytest_synth_rl.secrets.callers import outside_stacklevel

#: The near miss of a word among choices (kept under this name for the modules that import it).
near_miss = closest


class SynthConfigWarning(UserWarning):
    """A config key or section the RL schema does not know, or a count no trainer can run (0, a
    negative number, a boolean): the SDK forwards both, but they are likely mistakes."""


#: Keys the official example TOMLs use though the schema lacks them (contract §2.1), per section.
KNOWN_EXTRA_KEYS: Mapping[KeyPath, frozenset[str]] = {
    ("rollout",): frozenset({"ops", "task_app_origin_rewards_only", "rubric_rewards_only"}),
    ("policy",): frozenset({"model", "backend", "vllm_tensor_parallel_size", "max_model_len"}),
    (): frozenset({"data"}),
    ("verifier", "options"): VERIFIER_OPTIONS_KEYS,
}
#: Counts the SDK passes on unchecked although no trainer can run 0, a negative or a boolean.
COUNT_KEYS: tuple[tuple[str, str], ...] = tuple(
    (section, key)
    for section, keys in (
        ("training", "num_epochs iterations_per_epoch batch_size group_size max_turns"),
        ("rollout", "max_turns episodes_per_batch max_concurrent_rollouts"),
    )
    for key in keys.split()
)


def _is_extra(path: KeyPath, key: str) -> bool:
    return key in KNOWN_EXTRA_KEYS.get(path, ()) or (path == ("training",) and key.startswith("reward_"))


def _section_at(path: KeyPath) -> Section | None:
    """The schema section at *path*, or None when *path* is free-form or unknown."""
    section: Section | None = RL_CONFIG
    for part in path:
        spec = section.fields.get(str(part)) if section is not None else None
        section = spec.section if spec is not None else None
    return section


def _table_at(config: Mapping[str, Any], path: KeyPath) -> Mapping[str, Any] | None:
    table: Any = config
    for part in path:
        table = table.get(part) if isinstance(table, Mapping) else None
    return table if isinstance(table, Mapping) else None


def config_warnings(config: Mapping[str, Any]) -> list[str]:
    """Every warning *config* earns: unknown keys, each with the known key (below its table) it was
    meant to be (a field of exactly one sub-table wins over a look-alike sibling), and bad counts."""
    found: list[str] = []

    def walk(table: Mapping[str, Any], path: KeyPath, section: Section) -> None:
        for key, value in table.items():
            if not isinstance(key, str):
                continue  # a type error of the schema check
            spec = section.fields.get(key)
            if spec is None and not _is_extra(path, key):
                homes = [
                    (name, key) for name, s in section.fields.items() if s.section and key in s.section.fields
                ]
                sibling = closest(key, section.fields)
                guess = homes[0] if len(homes) == 1 else (sibling,) if sibling else None
                spot = f"key {format_key((*path, key))}" if path else f"section [{format_key((key,))}]"
                hint = f"; did you mean {format_key((*path, *guess))!r}?" if guess else ""
                found.append(
                    f"unknown {spot} is not part of the RL config schema; it is forwarded to the backend "
                    f"unchanged{hint}"
                )
            elif spec is not None and spec.section is not None and isinstance(value, Mapping):
                walk(value, (*path, key), spec.section)

    walk(config, (), RL_CONFIG)
    for path in COUNT_KEYS:
        section = config.get(path[0])
        value = section.get(path[1]) if isinstance(section, Mapping) else None
        if isinstance(value, bool):
            found.append(
                f"{format_key(path)} = {str(value).lower()} is a boolean where a count belongs "
                f"(the SDK sends it as {int(value)}); write a whole number >= 1"
            )
        elif isinstance(value, int) and value < 1:
            found.append(
                f"{format_key(path)} = {value} is not a count a trainer can run (the SDK sends it "
                "unchecked); write a whole number >= 1"
            )
    return found


def warn_about_config(config: Mapping[str, Any], *, source: str | None = None) -> None:
    """Warn about everything :func:`config_warnings` finds, at the user's line."""
    where = f"{source}: " if source else ""
    for message in config_warnings(config):
        warnings.warn(SynthConfigWarning(f"{where}{message}"), stacklevel=outside_stacklevel())


def check_override_keys(
    config: Mapping[str, Any], edits: Iterable[tuple[tuple[str, ...], str]], *, source: str | None = None
) -> None:
    """Refuse overrides that add a key neither *config* nor the schema has (anything goes below a
    free-form table), naming the nearest known key."""
    problems = []
    for path, origin in edits:
        for depth, part in enumerate(path):
            here, section, node = path[:depth], _section_at(path[:depth]), _table_at(config, path[:depth])
            if section is None or part in section.fields or part in (node or ()) or _is_extra(here, part):
                continue
            guess = closest(part, sorted(set(section.fields) | set(map(key_text, node or ()))))
            suggestion = f"; did you mean {format_key((*here, guess))!r}?" if guess else ""
            place = f"[{format_key(here)}]" if here else "the top level"
            message = f"override {origin!r} adds {part!r}, which {place} does not have{suggestion}"
            hint = "fix the key, or pass allow_new_keys=True to add keys the config does not know"
            problems.append(ConfigProblem(key=origin, message=message, hint=hint))
            break
    if problems:
        raise capped_error(problems, source)


def point_at_near_misses(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Append "; found 'batch_sise'; did you mean 'batch_size'?" to each "missing" problem whose
    table holds an unknown key that looks like a misspelling of the missing one."""

    def change(path: KeyPath, problem: ConfigProblem) -> ConfigProblem:
        if not path or not problem.message.startswith("missing") or not isinstance(path[-1], str):
            return problem
        table = _table_at(config, path[:-1])
        if table is None:
            return problem
        section = _section_at(path[:-1])
        known = {path[-1], *(section.fields if section is not None else ())}
        found = closest(path[-1], [key for key in table if isinstance(key, str) and key not in known])
        suffix = f"; found {found!r}; did you mean {path[-1]!r}?" if found else ""
        return dataclasses.replace(problem, message=problem.message + suffix) if suffix else problem

    problems.revise(change)
