"""Which TOML keys the RL config knows, and what a key that it does not know was meant to be.

The SDK forwards unknown keys untouched, so a typo (``[lroa]``, ``weight_sync_intervall``) costs
nothing at build time and a whole training run later. We keep the payload identical (SDK parity)
but say so where the mistake is made:

* :func:`warn_unknown_keys` issues a :class:`SynthConfigWarning` per unknown section or key, with
  a "did you mean" for near misses. Keys the official example TOMLs use although the schema does
  not (contract §2.1) and everything inside free-form tables (``[tags]``, ``[vllm]``,
  ``[reference]``, ``[topology]``, ``[lora]``, ``[rubric]``, ``rollout.env_config`` ...) are quiet.
* :func:`check_override_keys` refuses an override that would *add* a key neither the config nor
  the schema has (``{"training.batch_sise": 2}``), unless the caller opts in with
  ``allow_new_keys=True``.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_synth_rl.config.fields import Section
from pytest_synth_rl.config.problems import (
    KeyPath,
    ProblemList,
    capped_error,
    format_key,
    found_instead,
    key_text,
)
from pytest_synth_rl.config.schema import RL_CONFIG
from pytest_synth_rl.config.verifier import VERIFIER_OPTIONS_KEYS
from pytest_synth_rl.errors import ConfigProblem
from pytest_synth_rl.secrets.callers import outside_stacklevel

__all__ = [
    "COUNT_KEYS",
    "KNOWN_EXTRA_KEYS",
    "SynthConfigWarning",
    "check_override_keys",
    "config_warnings",
    "did_you_mean",
    "implausible_counts",
    "near_miss",
    "point_at_near_misses",
    "unknown_keys",
    "warn_about_config",
]


class SynthConfigWarning(UserWarning):
    """A config key or section the RL schema does not know, or a count no trainer can run (0, a
    negative number, a boolean): the SDK forwards both, but they are likely mistakes."""


#: Keys seen in official example TOMLs though absent from the schema (contract §2.1), per section
#: path; ``"*"`` marks a free-form table. They are forwarded like any extra and never warned about.
KNOWN_EXTRA_KEYS: Mapping[KeyPath, frozenset[str]] = {
    ("rollout",): frozenset({"ops", "task_app_origin_rewards_only", "rubric_rewards_only"}),
    ("policy",): frozenset({"model", "backend", "vllm_tensor_parallel_size", "max_model_len"}),
    (): frozenset({"data"}),
    ("verifier", "options"): VERIFIER_OPTIONS_KEYS,
}
#: Prefixes of extra keys that the examples use as a family (``[training].reward_*``).
_EXTRA_PREFIXES: Mapping[KeyPath, tuple[str, ...]] = {("training",): ("reward_",)}

_CUTOFF = 0.75


def near_miss(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate *name* was most likely meant to be, if one is close enough."""
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


def did_you_mean(name: str, candidates: Iterable[str], prefix: KeyPath = ()) -> str:
    """``"; did you mean 'training.batch_size'?"`` or ``""``."""
    guess = near_miss(name, candidates)
    return f"; did you mean {format_key((*prefix, guess))!r}?" if guess else ""


def _section_at(path: KeyPath) -> Section | None:
    """The schema section at *path*, or None when *path* is free-form or unknown."""
    section: Section | None = RL_CONFIG
    for part in path:
        if section is None:
            return None
        spec = section.fields.get(str(part))
        section = spec.section if spec is not None else None
    return section


def _is_extra(path: KeyPath, key: str) -> bool:
    if key in KNOWN_EXTRA_KEYS.get(path, frozenset()):
        return True
    return any(key.startswith(prefix) for prefix in _EXTRA_PREFIXES.get(path, ()))


def _one_level_down(section: Section, key: str) -> KeyPath | None:
    """``("options", "rubric_id")`` when *key* is a field of exactly one sub-table of *section*:
    a key written one table too high is meant for that table, whatever sibling it resembles."""
    homes = [
        (name, key)
        for name, spec in section.fields.items()
        if spec.section is not None and key in spec.section.fields
    ]
    return homes[0] if len(homes) == 1 else None


def unknown_keys(config: Mapping[str, Any]) -> list[tuple[KeyPath, KeyPath | None]]:
    """Every unknown key of *config* with the known key (its path below the unknown key's
    table) it was probably meant to be."""
    found: list[tuple[KeyPath, KeyPath | None]] = []

    def walk(table: Mapping[str, Any], path: KeyPath, section: Section) -> None:
        for key, value in table.items():
            if not isinstance(key, str):
                continue  # reported as a type error by the schema check
            spec = section.fields.get(key)
            if spec is None:
                if not _is_extra(path, key):
                    sibling = near_miss(key, section.fields)
                    guess = _one_level_down(section, key) or ((sibling,) if sibling else None)
                    found.append(((*path, key), guess))
                continue
            if spec.section is not None and isinstance(value, Mapping):
                walk(value, (*path, key), spec.section)

    walk(config, (), RL_CONFIG)
    return found


#: Counts the SDK types as plain ints, so it passes 0, negatives and booleans on, though no
#: trainer can run them: ``rollout.episodes_per_batch = 0`` is a mistake, not a setting.
COUNT_KEYS: tuple[tuple[str, str], ...] = (
    ("training", "num_epochs"),
    ("training", "iterations_per_epoch"),
    ("training", "batch_size"),
    ("training", "group_size"),
    ("training", "max_turns"),
    ("rollout", "max_turns"),
    ("rollout", "episodes_per_batch"),
    ("rollout", "max_concurrent_rollouts"),
)


def implausible_counts(config: Mapping[str, Any]) -> list[str]:
    """What is wrong with each count of :data:`COUNT_KEYS` that is 0, negative or a boolean."""
    found = []
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


def config_warnings(config: Mapping[str, Any]) -> list[str]:
    """Every warning *config* earns: unknown keys (see the module docstring) and implausible counts."""
    found = []
    for path, guess in unknown_keys(config):
        parent = path[:-1]
        kind = "section" if not parent else "key"
        spot = f"[{format_key(path)}]" if kind == "section" else f"{format_key(path)}"
        hint = f"; did you mean {format_key((*parent, *guess))!r}?" if guess else ""
        found.append(
            f"unknown {kind} {spot} is not part of the RL config schema; it is forwarded to the "
            f"backend unchanged{hint}"
        )
    return found + implausible_counts(config)


def warn_about_config(
    config: Mapping[str, Any], *, source: str | None = None, stacklevel: int | None = None
) -> None:
    """Warn about everything :func:`config_warnings` finds in *config*; changes nothing.

    By default the warning points at the first caller outside this package (the user's line)."""
    where = f"{source}: " if source else ""
    level = stacklevel + 1 if stacklevel is not None else outside_stacklevel()
    for message in config_warnings(config):
        warnings.warn(SynthConfigWarning(f"{where}{message}"), stacklevel=level)


def _known_path(config: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, KeyPath, list[str]]:
    """Whether *path* exists in *config* or the schema; if not, where it leaves both and the
    names that were possible there. Below a free-form table anything is known."""
    node: Any = config
    section: Section | None = RL_CONFIG
    for depth, part in enumerate(path):
        if section is None:
            return True, (), []
        here = path[:depth]
        in_config = isinstance(node, Mapping) and part in node
        if not (part in section.fields or in_config or _is_extra(here, part)):
            names = set(section.fields) | (set(map(key_text, node)) if isinstance(node, Mapping) else set())
            return False, here, sorted(names)
        spec = section.fields.get(part)
        section = spec.section if spec is not None else None
        node = node.get(part) if isinstance(node, Mapping) else None
    return True, (), []


def check_override_keys(
    config: Mapping[str, Any],
    edits: Iterable[tuple[tuple[str, ...], str]],
    *,
    source: str | None = None,
) -> None:
    """Refuse overrides that add a key neither *config* nor the schema has (``allow_new_keys``
    opts out); each problem names the override and the nearest known key."""
    problems = []
    for path, origin in edits:
        known, parent, names = _known_path(config, path)
        if known:
            continue
        missing = path[len(parent)]
        guess = near_miss(missing, names)
        suggestion = f"; did you mean {format_key((*parent, guess))!r}?" if guess else ""
        place = f"[{format_key(parent)}]" if parent else "the top level"
        problems.append(
            ConfigProblem(
                key=origin,
                message=f"override {origin!r} adds {missing!r}, which {place} does not have{suggestion}",
                hint="fix the key, or pass allow_new_keys=True to add keys the config does not know",
            )
        )
    if problems:
        raise capped_error(problems, source)


def point_at_near_misses(config: Mapping[str, Any], problems: ProblemList) -> None:
    """Append "found 'batch_sise'; did you mean 'batch_size'?" to every "missing" problem whose
    table holds an unknown key that looks like a misspelling of the missing one."""

    def change(path: KeyPath, problem: ConfigProblem) -> ConfigProblem:
        if not path or not problem.message.startswith("missing") or not isinstance(path[-1], str):
            return problem
        table: Any = config
        for part in path[:-1]:
            table = table.get(part) if isinstance(table, Mapping) else None
        if not isinstance(table, Mapping):
            return problem
        section = _section_at(path[:-1])
        known = set(section.fields) if section is not None else set()
        suffix = found_instead(path[-1], table, known | {path[-1]})
        return dataclasses.replace(problem, message=problem.message + suffix) if suffix else problem

    problems.revise(change)
