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
from typing import Generic, TypeVar

__all__ = ["MAX_DEPTH", "MAX_VALUES", "MemoInfo", "PassedChecks", "exact_key"]

V = TypeVar("V")

#: Deeper trees are not remembered (real configs are a few levels deep; keys stay cheap).
MAX_DEPTH = 32
#: Nor are trees of more values than this: a real config has a few dozen, and a key (kept with
#: its entry) costs about 100 bytes per value, so one huge data table would pin hundreds of MB.
MAX_VALUES = 10_000
_PLAIN = (str, int, bool, type(None))


class _Unkeyable(Exception):
    """A value with no exact key: not a plain dict/list/str/number/bool/None, too deep or too big."""


def _shape(value: object, depth: int, budget: list[int]) -> Hashable:
    if depth > MAX_DEPTH or budget[0] <= 0:
        raise _Unkeyable
    budget[0] -= 1
    kind = type(value)
    if isinstance(value, dict) and kind is dict:
        return (
            "dict",
            *((_shape(k, depth + 1, budget), _shape(v, depth + 1, budget)) for k, v in value.items()),
        )
    if isinstance(value, list) and kind is list:
        return ("list", *(_shape(v, depth + 1, budget) for v in value))
    if kind is float:
        return ("float", repr(value))  # -0.0 is not 0.0 here, and nan equals its own repr
    if kind in _PLAIN:
        return (kind.__name__, value)
    raise _Unkeyable


def exact_key(tree: object) -> Hashable | None:
    """A hashable key equal only for trees of the same values, types and order; None if there is none."""
    try:
        return _shape(tree, 0, [MAX_VALUES])
    except _Unkeyable:
        return None


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
