"""Collecting every config problem once, keyed by where it is.

The upstream SDK stops at the first broken rule, so fixing a config is a loop of edit, rerun,
next error. We run every rule and collect; several rules can trip over the same mistake (the
pre-validator and the typed schema both notice a missing ``rollout.env_name``), so the collector
keeps the first problem per key and drops problems *inside* a key that is already broken (an
``[rollout]`` that is not a table needs no further complaints about its keys).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.errors import ConfigError, ConfigProblem

__all__ = [
    "PER_TABLE_LIMIT",
    "TOTAL_LIMIT",
    "Entry",
    "KeyPath",
    "ProblemList",
    "capped_error",
    "format_key",
    "found_instead",
    "key_text",
    "short_key",
]

#: A location in the config: table keys (str) and array indexes (int).
KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(path: Sequence[object]) -> str:
    """Render a key path the way TOML would spell it: ``rollout.env_config."a.b"``, ``seeds[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool) and part.bit_length() <= 64:
            out += f"[{part}]"
            continue
        text = part if isinstance(part, str) else _shown(part)
        if not _BARE_KEY.fullmatch(text):
            text = json.dumps(text, ensure_ascii=False)
        out = f"{out}.{text}" if out else text
    return out


def _shown(part: object) -> str:
    try:
        return repr(part)
    except Exception:  # an integer too long to write out, or a user's broken __repr__
        return describe(part)


def key_text(key: object) -> str:
    """``str(key)`` for a table key of any type, never raising: Python will not write out an
    integer of more than 4,300 digits, and a user's object may have a broken ``__str__``."""
    if isinstance(key, str):
        return key
    try:
        return str(key)
    except Exception:
        return describe(key)


def found_instead(name: str, present: Iterable[object], known: Collection[str]) -> str:
    """For a missing key *name*: ``"; found 'batch_sise'; did you mean 'batch_size'?"`` when one
    of the *present* keys that is not *known* looks like a misspelling of it, else ``""``."""
    strangers = [key for key in present if isinstance(key, str) and key not in known]
    close = difflib.get_close_matches(name, strangers, n=1, cutoff=0.75)
    return f"; found {close[0]!r}; did you mean {name!r}?" if close else ""


def short_key(path: Sequence[object], parts: int = 8) -> str:
    """:func:`format_key` of the first *parts* parts, with ``…`` when the path goes on: a key
    nested 5,000 levels deep is named without repeating it 5,000 times."""
    shown = format_key(path[:parts])
    return f"{shown}…" if len(path) > parts else shown


#: At most this many problems are listed for the items of one table or array ...
PER_TABLE_LIMIT = 20
#: ... and at most this many lines (problems and "... and N more" lines) in all.
TOTAL_LIMIT = 100


class _Node:
    """One key of the trie of recorded problem paths: is a problem recorded here, how many of
    its items' problems are listed, and the line counting the ones that are not."""

    __slots__ = ("broken", "children", "listed", "unlisted")

    def __init__(self) -> None:
        self.children: dict[object, _Node] | None = None
        self.broken = False
        self.listed = 0
        self.unlisted: _Unlisted | None = None

    def child(self, part: object) -> _Node:
        if self.children is None:
            self.children = {}
        found = self.children.get(part)
        if found is None:
            found = self.children[part] = _Node()
        return found


class _Unlisted:
    """How many problems inside the table or array at ``path`` are counted but not listed."""

    __slots__ = ("count", "path")

    def __init__(self, path: tuple[object, ...], count: int) -> None:
        self.path = path
        self.count = count


#: A listed problem with its key path, or a count of problems not listed under a path.
Entry = tuple[tuple[object, ...], ConfigProblem | int]


class ProblemList:
    """An ordered set of :class:`ConfigProblem`, one per key, none below an already broken key.

    Recorded paths live in a trie, so adding a problem costs the length of its path, not the
    number of problems so far. Every problem is counted (``len()``), but only the first
    :data:`PER_TABLE_LIMIT` inside one table or array and :data:`TOTAL_LIMIT` lines in all are
    listed; the rest become "... and N more problems" lines, so 100,000 bad array items give a
    short message.
    """

    def __init__(self) -> None:
        self._root = _Node()
        self._lines: list[tuple[tuple[object, ...], ConfigProblem] | _Unlisted] = []
        self._count = 0
        self._elsewhere = 0  # problems with no room left for them or for a line counting them

    def add(
        self,
        path: Sequence[object],
        message: str,
        hint: str | None = None,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        """Record a problem at *path* unless that spot, or a table above it, is already broken."""
        key = tuple(path)
        if self.covers(key):
            return
        node, parent = self._root, self._root
        for part in key:
            parent, node = node, node.child(part)
        node.broken = True
        self._count += 1
        if parent.listed < PER_TABLE_LIMIT and len(self._lines) < TOTAL_LIMIT:
            parent.listed += 1
            problem = ConfigProblem(key=format_key(key), message=message, hint=hint, line=line, column=column)
            self._lines.append((key, problem))
        else:
            self._count_unlisted(parent, key[:-1], 1)

    def add_unlisted(self, path: Sequence[object], count: int) -> None:
        """Count *count* problems inside *path* without listing them (see :meth:`entries`)."""
        key = tuple(path)
        if count <= 0 or self.covers(key):
            return
        node = self._root
        for part in key:
            node = node.child(part)
        self._count += count
        self._count_unlisted(node, key, count)

    def _count_unlisted(self, node: _Node, path: tuple[object, ...], count: int) -> None:
        if node.unlisted is None and len(self._lines) < TOTAL_LIMIT:
            node.unlisted = _Unlisted(path, 0)
            self._lines.append(node.unlisted)
        if node.unlisted is None:
            self._elsewhere += count
        else:
            node.unlisted.count += count

    def covers(self, path: Sequence[object]) -> bool:
        """True if a problem is already recorded at *path* or at one of its parents."""
        node: _Node | None = self._root
        for part in path:
            if node is None or node.broken:
                break
            node = node.children.get(part) if node.children is not None else None
        return node is not None and node.broken

    def has_under(self, path: Sequence[object]) -> bool:
        """True if any problem is recorded at *path*, above it, or anywhere inside it."""
        node = self._root
        for part in path:
            if node.broken:
                return True
            found = node.children.get(part) if node.children is not None else None
            if found is None:
                return False
            node = found
        return node is not self._root or self._count > 0

    def extend(self, other: ProblemList, prefix: Sequence[object] = ()) -> None:
        """Add *other*'s problems, with their keys moved under *prefix* (e.g. ``data.config``)."""
        for path, item in other.entries():
            where = (*prefix, *path)
            if isinstance(item, ConfigProblem):
                self.add(where, item.message, item.hint, line=item.line, column=item.column)
            else:
                self.add_unlisted(where, item)

    def entries(self) -> list[Entry]:
        """In order: each listed problem with its key path, and for problems not listed the path
        they are inside with their number (``()`` for those counted only in the total)."""
        out: list[Entry] = [
            (line.path, line.count) if isinstance(line, _Unlisted) else line for line in self._lines
        ]
        if self._elsewhere:
            out.append(((), self._elsewhere))
        return out

    def located(self) -> list[tuple[tuple[object, ...], ConfigProblem]]:
        """Each listed problem with the key path it was recorded at, in order."""
        return [line for line in self._lines if not isinstance(line, _Unlisted)]

    def revise(self, change: Callable[[KeyPath, ConfigProblem], ConfigProblem]) -> None:
        """Replace every listed problem by ``change(path, problem)`` (to add context found later)."""
        self._lines = [
            line if isinstance(line, _Unlisted) else (line[0], change(line[0], line[1]))  # type: ignore[arg-type]
            for line in self._lines
        ]

    def __bool__(self) -> bool:
        return self._count > 0

    def __len__(self) -> int:
        """Every problem recorded, listed or not (rules compare it before and after a check)."""
        return self._count

    def __iter__(self) -> Iterator[ConfigProblem]:
        return iter(self.as_list())

    def as_list(self) -> list[ConfigProblem]:
        """The listed problems, with a "... and N more problems" line where some were not listed."""
        return [
            _unlisted_problem(path, item) if isinstance(item, int) else item for path, item in self.entries()
        ]

    def as_error(self, path: str | None) -> ConfigError:
        """The :class:`ConfigError` for these problems; says how many there are when not all are listed."""
        listed = len(self.located())
        return ConfigError(
            self.as_list(), path=path, hint=_total_hint(listed, self._count), total=self._count
        )


def capped_error(problems: Sequence[ConfigProblem], path: str | None) -> ConfigError:
    """A :class:`ConfigError` listing the first :data:`TOTAL_LIMIT` of *problems* (for checks that
    collect a plain list, one problem per override key), with a line counting the rest."""
    listed = list(problems[:TOTAL_LIMIT])
    if len(problems) > TOTAL_LIMIT:
        listed.append(_unlisted_problem((), len(problems) - TOTAL_LIMIT))
    hint = _total_hint(min(len(problems), TOTAL_LIMIT), len(problems))
    return ConfigError(listed, path=path, hint=hint, total=len(problems))


def _total_hint(listed: int, total: int) -> str | None:
    if listed == total:
        return None
    return f"{listed:,} of the {total:,} problems are listed; fix those and run again for the rest"


_LIMITS = (
    f"the first {PER_TABLE_LIMIT} problems inside one table or array and {TOTAL_LIMIT} lines in all "
    "are listed"
)


def _more(count: int) -> str:
    return f"{count:,} more problem{'' if count == 1 else 's'}"


def _unlisted_problem(path: tuple[object, ...], count: int) -> ConfigProblem:
    if not path:
        return ConfigProblem(
            key="",
            message=f"... and {_more(count)}",
            hint=_LIMITS,
        )
    return ConfigProblem(
        key=format_key(path),
        message=f"... and {_more(count)} in {format_key(path)}",
        hint=_LIMITS,
    )
