"""Reward-model sections: ``[verifier]`` and the deprecated ``[rubric]`` (contract §7.1 rule 13).

Since SDK 0.4.4 these sections are strict: fields that used to be ignored with a warning
(``[verifier].type``, ``[verifier].timeout_s``, ``options.max_concurrency``, ``options.tracks``,
and several ``[rubric]`` keys) are errors, ``[verifier.options]`` needs a known ``provider`` and a
``model``, and enabling ``[rubric]`` needs a ``[verifier]`` that produces the weighted scores.
These checks only validate; what is sent is produced by :mod:`.schema`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.fields import Field, Section, check_section
from pytest_synth_rl.config.problems import KeyPath, ProblemList
from pytest_synth_rl.config.rules import truthy

__all__ = ["VERIFIER_OPTIONS_KEYS", "check_reward_sections"]

_PROVIDERS = re.compile(r"openai|groq|gemini")
_RUBRIC_REMOVED = ("api_base", "api_key_env", "event", "model", "outcome")
_VERIFIER_REMOVED = ("timeout_s", "type")
_OPTIONS_REMOVED = ("max_concurrency", "tracks")


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "a number >= 0"


def _positive(value: float) -> str | None:
    return None if value > 0 else "a number of seconds > 0"


def _provider(value: str) -> str | None:
    return None if _PROVIDERS.fullmatch(value) else 'one of "openai", "groq", "gemini"'


def _non_empty(value: str) -> str | None:
    return None if value else "a non-empty model id"


def _some_weight(weights: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if all(weights.get(name) == 0.0 for name in ("env", "event", "outcome")):
        problems.add(
            path, "all weights are zero; expected at least one of env, event, outcome > 0", "e.g. `env = 1.0`"
        )


def _some_track(options: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
    if not options.get("event") and not options.get("outcome"):
        problems.add(
            (*path, "event"),
            "event and outcome are both false; expected at least one verification track enabled",
            "set `event = true` or `outcome = true` under [verifier.options]",
        )


_WEIGHTS = Section(
    {
        "env": Field("float", default=1.0, nullable=False, constraint=_non_negative, example="env = 1.0"),
        "event": Field("float", default=0.0, nullable=False, constraint=_non_negative, example="event = 0.0"),
        "outcome": Field(
            "float", default=0.0, nullable=False, constraint=_non_negative, example="outcome = 0.0"
        ),
    },
    after=_some_weight,
)

_OPTIONS = Section(
    {
        "provider": Field(
            "str", required=True, nullable=False, constraint=_provider, example='provider = "openai"'
        ),
        "model": Field(
            "str", required=True, nullable=False, constraint=_non_empty, example='model = "gpt-5-nano"'
        ),
        "rubric_id": Field("str"),
        "event": Field("bool", default=True, nullable=False),
        "outcome": Field("bool", default=True, nullable=False),
        "timeout_s": Field("float", constraint=_positive, example="timeout_s = 30.0"),
        "metadata": Field("table", default={}, nullable=False),
        "rubric_overrides": Field("table", default={}, nullable=False),
    },
    after=_some_track,
)

#: The keys [verifier.options] may hold (the 0.5 era added some the typed schema lacks).
VERIFIER_OPTIONS_KEYS: frozenset[str] = frozenset(_OPTIONS.fields)

_RUBRIC_ENABLED = Section({"enabled": Field("bool", default=False, nullable=False, example="enabled = true")})


def _removed(
    table: Mapping[str, Any], names: tuple[str, ...], path: KeyPath, hint: str, problems: ProblemList
) -> None:
    for name in names:
        if name in table:
            problems.add((*path, name), "is no longer supported (removed in SDK 0.4.4)", hint)


def _check_rubric(rubric: object, problems: ProblemList) -> tuple[bool, dict[str, Any] | None]:
    """Returns (enabled, weights) for the cross-checks; weights is ``None`` if unusable."""
    if not truthy(rubric):
        return False, {"env": 1.0, "event": 0.0, "outcome": 0.0}
    if not isinstance(rubric, Mapping):
        problems.add(("rubric",), f"expected a table, got {describe(rubric)}", "write [rubric] as a table")
        return False, None
    _removed(
        rubric,
        _RUBRIC_REMOVED,
        ("rubric",),
        "remove it; configure the judge model and criteria in [verifier.options] (model, rubric_overrides)",
        problems,
    )
    enabled = check_section(_RUBRIC_ENABLED, {"enabled": rubric.get("enabled", False)}, ("rubric",), problems)
    weights_raw = rubric.get("weights", {})
    before = len(problems)
    weights = check_section(_WEIGHTS, weights_raw, ("rubric", "weights"), problems)
    usable = len(problems) == before
    return bool(enabled.get("enabled", False)), (weights if usable else None)


def _check_verifier(verifier: object, problems: ProblemList) -> dict[str, Any] | None:
    """Returns the validated [verifier.options] or ``None`` when absent or broken."""
    if not isinstance(verifier, Mapping):
        problems.add(
            ("verifier",), f"expected a table, got {describe(verifier)}", "write [verifier] as a table"
        )
        return None
    _removed(
        verifier,
        _VERIFIER_REMOVED,
        ("verifier",),
        "remove it (a timeout now goes in [verifier.options].timeout_s)",
        problems,
    )
    options = verifier.get("options")
    if not truthy(options):
        problems.add(
            ("verifier", "options"),
            "missing; expected a [verifier.options] table with provider and model",
            'add [verifier.options] with provider = "openai" and model = "gpt-5-nano"',
        )
        return None
    if not isinstance(options, Mapping):
        problems.add(
            ("verifier", "options"), f"expected a table, got {describe(options)}", "write it as a table"
        )
        return None
    _removed(
        options, _OPTIONS_REMOVED, ("verifier", "options"), "remove it from [verifier.options]", problems
    )
    before = len(problems)
    converted = check_section(_OPTIONS, options, ("verifier", "options"), problems)
    return converted if len(problems) == before else None


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
