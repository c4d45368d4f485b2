"""Every config problem once: the first per key, none inside a broken key, long lists capped and counted;
and the words messages use for values."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence

from pytest_synth_rl.errors import ConfigError, ConfigProblem

KeyPath = tuple[str | int, ...]
PER_TABLE_LIMIT = 20
TOTAL_LIMIT = 100
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_LIMITS = (
    f"the first {PER_TABLE_LIMIT} problems inside one table or array and {TOTAL_LIMIT} lines in all "
    "are listed"
)
_KINDS = ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"))


def describe(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a table" if value else "an empty table"
    if isinstance(value, (list, tuple)):
        return f"an array of {len(value)} item(s)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 240:
        return f"an integer of {digit_count(value):,} digits"
    try:
        text = repr(value)
    except Exception:  # a user's broken __repr__ must not replace the real problem
        text = f"<{type(value).__name__} object that cannot be shown>"
    if len(text) > 60:
        text = text[:59] + "…"
    kind = next((name for cls, name in _KINDS if isinstance(value, cls)), type(value).__name__)
    return f"{text} ({kind})"


def digit_count(number: int) -> int:
    """How many decimal digits *number* has, without writing it out (Python refuses > 4,300)."""
    magnitude = abs(number)
    estimate = max(1, int(magnitude.bit_length() * math.log10(2)))  # the count or one less
    return estimate + 1 if magnitude >= 10**estimate else estimate


def config_error(message: str, hint: str | None, *, key: str = "", path: str | None = None) -> ConfigError:
    """A :class:`ConfigError` of one problem: the one way this package refuses a config or argument."""
    return ConfigError([ConfigProblem(key=key, message=message, hint=hint)], path=path)


def key_text(key: object) -> str:
    """``str(key)`` for a table key of any type, never raising (huge ints, broken ``__str__``)."""
    if isinstance(key, str):
        return key
    try:
        return str(key)
    except Exception:
        return describe(key)


def format_key(path: Sequence[object]) -> str:
    """A key path as TOML spells it: ``rollout.env_config."a.b"``, ``seeds[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool) and part.bit_length() <= 64:
            out += f"[{part}]"
            continue
        if not _BARE_KEY.fullmatch(text := key_text(part)):
            text = json.dumps(text, ensure_ascii=False)
        out = f"{out}.{text}" if out else text
    return out


def short_key(path: Sequence[object]) -> str:
    return format_key(path[:8]) + ("…" if len(path) > 8 else "")


class _Node:
    __slots__ = ("broken", "children", "listed", "path", "unlisted")

    def __init__(self) -> None:
        self.children: dict[object, _Node] = {}
        self.broken, self.listed, self.unlisted = False, 0, 0
        self.path: tuple[object, ...] | None = None


class ProblemList:
    """:class:`ConfigProblem` in order, one per key, none below a broken key, listed up to the limits."""

    def __init__(self) -> None:
        self._root = _Node()
        self._lines: list[tuple[tuple[object, ...], ConfigProblem] | _Node] = []
        self._count = self._elsewhere = 0  # _elsewhere: no room left even for a line counting them

    def _node(self, path: tuple[object, ...]) -> tuple[_Node, _Node]:
        node = parent = self._root
        for part in path:
            parent, node = node, node.children.setdefault(part, _Node())
        return parent, node

    def add(self, path: Sequence[object], message: str, hint: str | None = None) -> None:
        """Record a problem at *path* unless that spot, or a table above it, is already broken."""
        key = tuple(path)
        if self.covers(key):
            return
        parent, node = self._node(key)
        node.broken = True
        self._count += 1
        if parent.listed < PER_TABLE_LIMIT and len(self._lines) < TOTAL_LIMIT:
            parent.listed += 1
            self._lines.append((key, ConfigProblem(key=format_key(key), message=message, hint=hint)))
        else:
            self._count_unlisted(parent, key[:-1], 1)

    def _count_unlisted(self, node: _Node, path: tuple[object, ...], count: int) -> None:
        if node.path is None and len(self._lines) < TOTAL_LIMIT:
            node.path = path
            self._lines.append(node)
        if node.path is None:
            self._elsewhere += count
        else:
            node.unlisted += count

    def _reach(self, path: Sequence[object]) -> _Node | None:
        node: _Node | None = self._root
        for part in path:
            if node is None or node.broken:
                break
            node = node.children.get(part)
        return node

    def covers(self, path: Sequence[object]) -> bool:
        """True if a problem is already recorded at *path* or at one of its parents."""
        return (node := self._reach(path)) is not None and node.broken

    def has_under(self, path: Sequence[object]) -> bool:
        """True if any problem is recorded at *path*, above it, or anywhere inside it."""
        node = self._reach(path)
        return node is not None and (node is not self._root or self._count > 0)

    def extend(self, other: ProblemList, prefix: Sequence[object] = ()) -> None:
        """Add *other*'s problems, with their keys moved under *prefix* (e.g. ``data.config``)."""
        for path, item in other.entries():
            key = (*prefix, *path)
            if isinstance(item, ConfigProblem):
                self.add(key, item.message, item.hint)
            elif not self.covers(key):  # a count of unlisted problems
                self._count += item
                self._count_unlisted(self._node(key)[1], key, item)

    def entries(self) -> list[tuple[tuple[object, ...], ConfigProblem | int]]:
        out: list[tuple[tuple[object, ...], ConfigProblem | int]] = [
            (line.path or (), line.unlisted) if isinstance(line, _Node) else line for line in self._lines
        ]
        if self._elsewhere:
            out.append(((), self._elsewhere))
        return out

    def revise(self, change: Callable[[KeyPath, ConfigProblem], ConfigProblem]) -> None:
        self._lines = [
            (line[0], change(line[0], line[1])) if isinstance(line, tuple) else line  # type: ignore[arg-type]
            for line in self._lines
        ]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[ConfigProblem]:
        return iter(self.as_list())

    def as_list(self) -> list[ConfigProblem]:
        """The listed problems, with a "... and N more problems" line where some were not listed."""
        return [
            item if isinstance(item, ConfigProblem) else _unlisted(path, item)
            for path, item in self.entries()
        ]

    def as_error(self, path: str | None) -> ConfigError:
        hint = _total_hint(sum(isinstance(line, tuple) for line in self._lines), self._count)
        return ConfigError(self.as_list(), path=path, hint=hint, total=self._count)


def capped_error(problems: Sequence[ConfigProblem], path: str | None) -> ConfigError:
    """A :class:`ConfigError` listing the first :data:`TOTAL_LIMIT` of *problems*, counting the rest."""
    listed = list(problems[:TOTAL_LIMIT])
    if len(problems) > TOTAL_LIMIT:
        listed.append(_unlisted((), len(problems) - TOTAL_LIMIT))
    hint = _total_hint(min(len(problems), TOTAL_LIMIT), len(problems))
    return ConfigError(listed, path=path, hint=hint, total=len(problems))


def _total_hint(listed: int, total: int) -> str | None:
    if listed == total:
        return None
    return f"{listed:,} of the {total:,} problems are listed; fix those and run again for the rest"


def _unlisted(path: tuple[object, ...], count: int) -> ConfigProblem:
    more = f"... and {count:,} more problem{'' if count == 1 else 's'}"
    where = format_key(path)
    return ConfigProblem(key=where, message=f"{more} in {where}" if path else more, hint=_LIMITS)
