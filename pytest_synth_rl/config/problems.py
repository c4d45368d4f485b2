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

from ..errors import ConfigProblem

__all__ = ["KeyPath", "ProblemList", "format_key", "found_instead"]

#: A location in the config: table keys (str) and array indexes (int).
KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(path: Sequence[object]) -> str:
    """Render a key path the way TOML would spell it: ``rollout.env_config."a.b"``, ``seeds[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        text = part if isinstance(part, str) else repr(part)
        if not _BARE_KEY.fullmatch(text):
            text = json.dumps(text, ensure_ascii=False)
        out = f"{out}.{text}" if out else text
    return out


def found_instead(name: str, present: Iterable[object], known: Collection[str]) -> str:
    """For a missing key *name*: ``"; found 'batch_sise'; did you mean 'batch_size'?"`` when one
    of the *present* keys that is not *known* looks like a misspelling of it, else ``""``."""
    strangers = [key for key in present if isinstance(key, str) and key not in known]
    close = difflib.get_close_matches(name, strangers, n=1, cutoff=0.75)
    return f"; found {close[0]!r}; did you mean {name!r}?" if close else ""


class ProblemList:
    """An ordered set of :class:`ConfigProblem`, one per key, none below an already broken key."""

    def __init__(self) -> None:
        self._problems: list[ConfigProblem] = []
        self._paths: list[tuple[object, ...]] = []

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
        self._paths.append(key)
        self._problems.append(
            ConfigProblem(key=format_key(key), message=message, hint=hint, line=line, column=column)
        )

    def covers(self, path: Sequence[object]) -> bool:
        """True if a problem is already recorded at *path* or at one of its parents."""
        key = tuple(path)
        return any(key[: len(seen)] == seen for seen in self._paths)

    def has_under(self, path: Sequence[object]) -> bool:
        """True if any problem is recorded at *path*, above it, or anywhere inside it."""
        key = tuple(path)
        return any(key[: len(seen)] == seen or seen[: len(key)] == key for seen in self._paths)

    def extend(self, other: ProblemList, prefix: Sequence[object] = ()) -> None:
        """Add *other*'s problems, with their keys moved under *prefix* (e.g. ``data.config``)."""
        for path, problem in other.located():
            self.add(
                (*prefix, *path), problem.message, problem.hint, line=problem.line, column=problem.column
            )

    def located(self) -> list[tuple[tuple[object, ...], ConfigProblem]]:
        """Each problem with the key path it was recorded at, in order."""
        return list(zip(self._paths, self._problems, strict=True))

    def revise(self, change: Callable[[KeyPath, ConfigProblem], ConfigProblem]) -> None:
        """Replace every problem by ``change(path, problem)`` (to add context found later)."""
        self._problems = [
            change(path, problem)  # type: ignore[arg-type]
            for path, problem in zip(self._paths, self._problems, strict=True)
        ]

    def __bool__(self) -> bool:
        return bool(self._problems)

    def __len__(self) -> int:
        return len(self._problems)

    def __iter__(self) -> Iterator[ConfigProblem]:
        return iter(self._problems)

    def as_list(self) -> list[ConfigProblem]:
        return list(self._problems)
