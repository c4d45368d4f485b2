"""Traceback hiding: when our error or expectation fails a user's test, they see their own frames;
raised with no user frame, the report is the message alone. ``--full-trace`` shows everything.
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from types import TracebackType
from typing import Any

from _pytest._code.code import ExceptionChainRepr, ReprEntry, ReprTraceback

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.secrets.callers import Frame, is_ours


def _frames_of(tb: TracebackType | None) -> list[Frame]:
    names = [(f.f_globals.get("__name__"), f.f_code.co_filename) for f, _ in traceback.walk_tb(tb)]
    return [Frame(name if isinstance(name, str) else "", file) for name, file in names]


def hidden_from_users(excinfo: Any) -> bool:
    if excinfo is None or not excinfo.errisinstance((SynthError, AssertionError)):
        return False
    frames = _frames_of(excinfo.tb)
    if frames and excinfo.errisinstance(AssertionError) and not frames[-1].ours:
        return False
    return any(frame.users for frame in frames)


def message_only(excinfo: Any) -> str | None:
    """The whole report of our error raised where the user has no frame, else None."""
    if excinfo is None or not excinfo.errisinstance(SynthError):
        return None
    if any(frame.users for frame in _frames_of(excinfo.tb)):
        return None
    error = excinfo.value
    text = f"{type(error).__module__}.{type(error).__qualname__}: {error}"
    notes = [f"  {line}" for note in _unsaid(_chain(error)) for line in note.splitlines()]
    return "\n".join([text, *notes])


_LINKS = {"cause": "caused by", "context": "while handling"}


def _chain(error: BaseException) -> list[tuple[BaseException, str]]:
    """*error*, then each exception pytest prints above it with its link."""
    chain, seen = [(error, "")], {id(error)}
    while not any(cls.__name__ == "BaseExceptionGroup" for cls in type(error).__mro__):
        if error.__cause__ is not None:
            error, link = error.__cause__, "cause"
        elif error.__context__ is not None and not error.__suppress_context__:
            error, link = error.__context__, "context"
        else:
            break
        if id(error) in seen:
            break
        seen.add(id(error))
        chain.append((error, link))
    return chain


def _unsaid(chain: list[tuple[BaseException, str]]) -> list[str]:
    """A note for each exception under ours whose message ours does not carry."""
    said, notes = str(chain[0][0]), []
    for error, link in chain[1:]:
        text = str(error)
        key = text.splitlines()[0] if isinstance(error, SynthError) and text else text
        if (key or type(error).__name__) in said:
            continue
        notes.append(f"{_LINKS[link]} {type(error).__name__}" + (f": {text}" if text else ""))
        said += "\n" + text
    return notes


def without_internal_causes(excinfo: Any, longrepr: Any) -> Any:
    """*longrepr* of our error without chained exceptions that ran no user code (their news noted)."""
    if not isinstance(longrepr, ExceptionChainRepr) or not hidden_from_users(excinfo):
        return longrepr
    chain = _chain(excinfo.value)
    if len(chain) < 2 or len(chain) != len(longrepr.chain):
        return longrepr
    if any(frame.users for error, _ in chain[1:] for frame in _frames_of(error.__traceback__)):
        return longrepr
    reprtraceback, reprcrash, _ = longrepr.chain[-1]
    notes = _unsaid(chain)
    noted = _with_notes(reprtraceback, notes) if notes else reprtraceback
    if noted is None:
        return longrepr
    trimmed = ExceptionChainRepr([(noted, reprcrash, None)])
    for section in longrepr.sections:
        trimmed.addsection(*section)
    return trimmed


def _with_notes(reprtraceback: ReprTraceback, notes: list[str]) -> ReprTraceback | None:
    """*reprtraceback* with *notes* as more ``E`` lines, or ``None`` if it shows no message."""
    entries = list(reprtraceback.reprentries)
    if type(reprtraceback) is not ReprTraceback or not entries or not isinstance(entries[-1], ReprEntry):
        return None
    lines = list(entries[-1].lines)
    marked = [n for n, line in enumerate(lines) if line.startswith("E")]
    if not marked:
        return None
    first = lines[marked[0]][1:]
    indent = "E" + " " * (len(first) - len(first.lstrip())) + "  "
    extra = [indent + line for note in notes for line in note.splitlines()]
    lines[marked[-1] + 1 : marked[-1] + 1] = extra
    entries[-1] = dataclasses.replace(entries[-1], lines=lines)
    return dataclasses.replace(reprtraceback, reprentries=entries)


def mark_package_modules() -> None:
    for name, module in list(sys.modules.items()):
        if module is not None and is_ours(name) and "__tracebackhide__" not in vars(module):
            module.__tracebackhide__ = hidden_from_users  # type: ignore[attr-defined]
