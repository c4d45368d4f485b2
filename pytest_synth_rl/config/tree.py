"""Small helpers for walking and copying parsed-TOML / JSON trees without trusting their shape.

Validation code reads user data of unknown shape (a TOML file, an override, a JSON payload sent to
the fake backend); these helpers never raise on a surprising type, so every rule can ask "is this
a table?" instead of catching ``AttributeError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["is_table", "plain_copy"]


def is_table(value: object) -> bool:
    """A TOML table / JSON object: any mapping."""
    return isinstance(value, Mapping)


def plain_copy(value: Any) -> Any:
    """A deep copy made of plain ``dict``/``list`` containers (tuples become lists).

    The payload must not share containers with the caller's config or overrides: the caller may
    reuse them for the next job, and the fake backend stores what it is sent.
    """
    if isinstance(value, Mapping):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(item) for item in value]
    return value
