"""Remembering checks of configs that passed, keyed by their exact content.

A suite builds the same config for every job test, and the fake backend checks the same payload
again on submit; each check walks every rule. A check depends only on the config tree, the
options and the environment's model settings, so a passing answer can be reused. Keys tell apart
everything validation could treat differently (``1``, ``1.0``, ``True`` and ``"1"``; ``0.0`` and
``-0.0``; lists and tuples); a tree holding anything else is simply not remembered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["MAX_DEPTH", "MAX_VALUES", "MemoInfo", "PassedChecks", "exact_key"]

V = TypeVar("V")

#: Deeper trees are not remembered (real configs are a few levels deep; keys stay cheap).
MAX_DEPTH = 32
#: Nor are trees of more values than this: a real config has a few dozen, and a key (kept with
#: its entry) costs tens of bytes per value, so one huge data table would pin a lot of memory.
MAX_VALUES = 10_000
_NONE = type(None)


class _Unkeyable(Exception):
    """A value with no exact key: not a plain dict/list/str/number/bool/None, too deep or too big."""


def exact_key(tree: object) -> Hashable | None:
    """A hashable key equal only for trees of the same values, types and order; None if there is none.

    The key is flat: each plain value as its type and value (a float as its ``repr``: ``-0.0`` is
    not ``0.0`` here, and ``nan`` equals its own ``repr``), each dict or list as its type and
    length followed by its items (a dict's keys and values in turn). Read from the front, such a
    sequence spells out one tree only. Items are handled in their container's loop, without a
    call each: the fake backend keys every payload it checks.
    """
    out: list[object] = []
    append = out.append
    count = 1  # values seen so far, the root included

    def walk(container: Any, depth: int) -> None:  # a dict or a list
        nonlocal count
        items: list[Any]
        if type(container) is dict:
            items = [part for pair in container.items() for part in pair]
            append(dict)
        else:
            items = container
            append(list)
        append(len(container))
        count += len(items)
        if count > MAX_VALUES or (items and depth >= MAX_DEPTH):
            raise _Unkeyable
        depth += 1
        for item in items:
            kind = type(item)
            if kind is str or kind is int or kind is bool or kind is _NONE:
                append(kind)
                append(item)
            elif kind is float:
                append(float)
                append(repr(item))
            elif kind is dict or kind is list:
                walk(item, depth)
            else:
                raise _Unkeyable

    kind = type(tree)
    if kind is float:
        return (float, repr(tree))
    if kind is str or kind is int or kind is bool or kind is _NONE:
        return (kind, tree)
    if not (kind is dict or kind is list):
        return None
    try:
        walk(tree, 0)
    except _Unkeyable:
        return None
    return tuple(out)


@dataclass(frozen=True)
class MemoInfo:
    """What the memo did so far: answers reused, checks run, and entries held (at most ``maxsize``)."""

    hits: int
    misses: int
    size: int
    maxsize: int


class PassedChecks(Generic[V]):
    """A bounded, thread-safe memo: least recently used entries go first."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self._misses += 1
                return None
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
