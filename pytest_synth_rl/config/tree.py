"""Bounded copies and exact keys of parsed-TOML / JSON trees, and the memo of passed checks."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

MAX_DEPTH = 100
MAX_VALUES = 100_000
KEY_MAX_DEPTH = 32
KEY_MAX_VALUES = 10_000
_PLAIN = frozenset({str, int, float, bool, type(None)})
_PLAIN_HINT = "pass plain nested values: "
V = TypeVar("V")
_Path = tuple[object, ...]


class TreeShapeError(ValueError):
    """A tree too deep, holding itself, unreadable or too big, at ``path``; message and hint are ready."""

    def __init__(self, path: _Path, message: str, hint: str, *, deep: bool = False) -> None:
        super().__init__(message)
        self.path, self.message, self.hint, self.deep = path, message, hint, deep


def plain_copy(value: Any, path: _Path = ()) -> Any:
    """A bounded deep copy of plain dicts and lists (tuples become lists) at *path*, or a TreeShapeError."""
    above: set[int] = set()
    values = 0

    def copy(value: Any, path: _Path) -> Any:
        nonlocal values
        if not isinstance(value, (Mapping, list, tuple)):
            return value
        if id(value) in above:
            message = "contains itself (a table or array that holds a reference to itself)"
            raise TreeShapeError(path, message, _PLAIN_HINT + "no table or array may contain itself")
        if isinstance(value, Mapping):
            try:
                items = list(value.items())
            except Exception as error:  # a user's Mapping subclass
                message = f"is a mapping whose items cannot be read ({type(error).__name__})"
                raise TreeShapeError(path, message, "pass a plain dict") from None
        else:
            items = list(enumerate(value))
        if items and len(path) >= MAX_DEPTH:
            message = f"is nested more than {MAX_DEPTH} levels deep; expected at most {MAX_DEPTH} levels"
            hint = "flatten it: an RL config is a few levels deep (keep deep data in a JSON string)"
            raise TreeShapeError((*path, items[0][0]), f"{message} of tables and arrays", hint, deep=True)
        values += len(items)
        if values > MAX_VALUES:
            message = f"holds more than {MAX_VALUES:,} values (a table or array shared in several places "
            hint = _PLAIN_HINT + "an RL config holds dozens (keep bulk data in a file the task app reads)"
            raise TreeShapeError(path, message + "counts once per place)", hint)
        above.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {
                    key: item if type(item) in _PLAIN else copy(item, (*path, key)) for key, item in items
                }
            return [item if type(item) in _PLAIN else copy(item, (*path, index)) for index, item in items]
        finally:
            above.discard(id(value))

    return copy(value, path)


def copy_tree(value: Any) -> Any:
    """A deep copy of a tree :func:`plain_copy` made, without its checks (about a third the cost)."""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _PLAIN else copy_tree(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _PLAIN else copy_tree(item) for item in value]
    return value


def exact_key(tree: object) -> Hashable | None:
    """A key equal only for trees of the same values, types and order (``-0.0`` is not ``0.0``), or None."""
    count = 0

    def walk(container: Any, depth: int) -> None:
        nonlocal count
        items = [*container, *container.values()] if type(container) is dict else container
        count += len(items)
        if count > KEY_MAX_VALUES or (items and depth >= KEY_MAX_DEPTH):
            raise ValueError
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                walk(item, depth + 1)
            elif kind not in _PLAIN:
                raise ValueError

    try:
        walk([tree], -1)  # the root as the item of a list above it
        return repr(tree)  # exact for plain values: every str is quoted, every number spelt by its type
    except ValueError:  # not plain, too big or deep, or an integer too long to write out
        return None


class MemoInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    maxsize: int


class PassedChecks(Generic[V]):
    """A bounded, thread-safe memo: least recently used entries go first."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize, self._lock = maxsize, threading.Lock()
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._hits = self._misses = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            if (value := self._entries.get(key)) is None:
                self._misses += 1
            else:
                self._hits += 1
                self._entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def info(self) -> MemoInfo:
        with self._lock:
            return MemoInfo(self._hits, self._misses, len(self._entries), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = 0
