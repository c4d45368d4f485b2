"""Small helpers for walking and copying parsed-TOML / JSON trees without trusting their shape.

Validation code reads user data of unknown shape (a TOML file, an override, a JSON payload sent to
the fake backend); these helpers never raise on a surprising type, so every rule can ask "is this
a table?" instead of catching ``AttributeError``.

Copying is also where a tree's shape is bounded: every config passes through :func:`plain_copy`
before any rule recurses into it, so a tree nested deeper than :data:`MAX_DEPTH` or holding itself
is refused there, with the key where it happens, instead of exhausting the interpreter's stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["MAX_DEPTH", "MAX_VALUES", "TreeShapeError", "copy_tree", "is_table", "plain_copy"]

#: The longest key path a config may have (``a.b.c`` is 3; ``seeds[0]`` is 2). Real RL configs
#: are 2-4 levels deep; 100 leaves free-form tables room while every recursive rule stays far
#: inside Python's recursion limit (1,000 frames), wherever the caller's own stack stands.
MAX_DEPTH = 100

#: The most values one copy may hold, counting a table or array shared in several places once
#: per place: a real config holds dozens, while a few dozen tables that each hold the one below
#: twice would otherwise copy into billions.
MAX_VALUES = 100_000

#: Types copied as they are without a closer look (most values of a big array are one of them).
_PLAIN = frozenset({str, int, float, bool, type(None)})


class TreeShapeError(ValueError):
    """A tree that cannot be copied: nested deeper than :data:`MAX_DEPTH`, containing itself,
    holding a mapping whose items cannot be read, or over :data:`MAX_VALUES` values.

    ``path`` is where it happens (at most ``MAX_DEPTH + 1`` parts); ``message`` and ``hint`` are
    ready for a :class:`~pytest_synth_rl.errors.ConfigProblem`.
    """

    def __init__(
        self,
        kind: Literal["deep", "cycle", "unreadable", "big"],
        path: tuple[object, ...],
        message: str,
        hint: str,
    ) -> None:
        self.kind = kind
        self.path = path
        self.message = message
        self.hint = hint
        super().__init__(message)


def _too_deep(path: tuple[object, ...]) -> TreeShapeError:
    return TreeShapeError(
        "deep",
        path,
        f"is nested more than {MAX_DEPTH} levels deep; "
        f"expected at most {MAX_DEPTH} levels of tables and arrays",
        "flatten it: an RL config is a few levels deep (keep deep data in a JSON string)",
    )


def _cycle(path: tuple[object, ...]) -> TreeShapeError:
    return TreeShapeError(
        "cycle",
        path,
        "contains itself (a table or array that holds a reference to itself)",
        "pass plain nested values: no table or array may contain itself",
    )


def _too_big(path: tuple[object, ...]) -> TreeShapeError:
    return TreeShapeError(
        "big",
        path,
        f"holds more than {MAX_VALUES:,} values (a table or array shared in several places counts "
        "once per place)",
        "pass plain nested values: an RL config holds dozens (keep bulk data in a file the task app reads)",
    )


def _unreadable(path: tuple[object, ...], error: Exception) -> TreeShapeError:
    return TreeShapeError(
        "unreadable",
        path,
        f"is a mapping whose items cannot be read ({type(error).__name__} while listing them)",
        "pass a plain dict",
    )


def is_table(value: object) -> bool:
    """A TOML table / JSON object: any mapping."""
    return isinstance(value, Mapping)


def plain_copy(value: Any, path: tuple[object, ...] = ()) -> Any:
    """A deep copy made of plain ``dict``/``list`` containers (tuples become lists).

    The payload must not share containers with the caller's config or overrides: the caller may
    reuse them for the next job, and the fake backend stores what it is sent. *path* is where
    *value* sits (it counts toward :data:`MAX_DEPTH`); raises :class:`TreeShapeError`.
    """
    return _copy(value, path, _Walk())


class _Walk:
    """One copy's state: the ids of the containers being copied around the current one (a
    container among them contains itself), and how many values were copied so far."""

    __slots__ = ("above", "values")

    def __init__(self) -> None:
        self.above: set[int] = set()
        self.values = 0

    def count(self, values: int, path: tuple[object, ...]) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            raise _too_big(path)


def _copy(value: Any, path: tuple[object, ...], walk: _Walk) -> Any:
    """Copy one container, inside the containers of *walk*."""
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    if id(value) in walk.above:
        raise _cycle(path)
    walk.above.add(id(value))
    try:
        if isinstance(value, Mapping):
            return _copy_table(value, path, walk)
        if value and len(path) >= MAX_DEPTH:
            raise _too_deep((*path, 0))
        walk.count(len(value), path)
        return [
            item if type(item) in _PLAIN else _copy(item, (*path, index), walk)
            for index, item in enumerate(value)
        ]
    finally:
        walk.above.discard(id(value))


def _copy_table(value: Mapping[Any, Any], path: tuple[object, ...], walk: _Walk) -> dict[Any, Any]:
    try:
        items = list(value.items())
    except Exception as error:  # a user's Mapping subclass: whatever it raises is its own
        raise _unreadable(path, error) from None
    if items and len(path) >= MAX_DEPTH:
        raise _too_deep((*path, items[0][0]))
    walk.count(len(items), path)
    return {key: item if type(item) in _PLAIN else _copy(item, (*path, key), walk) for key, item in items}


def copy_tree(value: Any) -> Any:
    """A deep copy of a tree that :func:`plain_copy` made: only ``dict`` and ``list`` containers,
    bounded and without cycles, so none of plain_copy's checks are needed again.

    Handing out a remembered tree (a parsed file, a built payload) this way costs about a third
    of copying it afresh. Leaves are shared, as plain_copy shares them."""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _PLAIN else copy_tree(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _PLAIN else copy_tree(item) for item in value]
    return value
