"""Which traceback frames a user sees when one of our errors or expectations fails their test.

A ``ConfigError`` for a typo in the team's TOML, or ``to_succeed`` failing on a failed job, is
about the user's code and data: the frames inside this package between their test line and the
``raise`` only push the message off the screen (and ``--showlocals`` would print their locals).
pytest asks each frame's ``__tracebackhide__`` (its locals, then its module's globals); our
modules answer with :func:`hidden_from_users`: hide for our own errors and assertions, never for
anything else passing through (a bug here, the user's own code failing). Where no frame of the
user's is left (raised by our hook or fixture), the report is the message alone. ``--full-trace``
shows every frame, as always.
"""

from __future__ import annotations

import inspect
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from .errors import SynthError

__all__ = [
    "PACKAGE",
    "hidden_from_users",
    "is_users_frame",
    "mark_package_modules",
    "message_only",
    "outside_caller",
    "outside_stacklevel",
]

PACKAGE = __name__.rpartition(".")[0]
_MACHINERY = frozenset({"_pytest", "pytest", "pluggy"})


def _ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def outside_stacklevel() -> int:
    """The ``stacklevel`` that points a warning, warned by the caller, at the first frame outside
    this package (the user's line), however deep in the package the warning is raised."""
    return _outside(inspect.currentframe())[1]


def outside_caller() -> str:
    """``file.py:line`` of the first frame outside this package that led to the caller."""
    frame = _outside(inspect.currentframe())[0]
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}" if frame is not None else "<unknown>"


def _outside(here: FrameType | None) -> tuple[FrameType | None, int]:
    """From *here* (a helper above's frame): the first frame outside the package that led to the
    helper's caller, and its ``stacklevel`` as seen from that caller."""
    frame = here.f_back if here is not None else None
    if frame is None:  # an interpreter without frame support: the caller itself
        return None, 1
    level = 1
    while frame.f_back is not None and _ours(str(frame.f_globals.get("__name__", ""))):
        frame = frame.f_back
        level += 1
    return frame, level


@dataclass(frozen=True)
class _Frame:
    module: str
    filename: str

    @property
    def ours(self) -> bool:
        return _ours(self.module)

    @property
    def users(self) -> bool:
        """The test, a conftest, the user's task app: not ours, not pytest's, not installed."""
        if self.ours or self.module.partition(".")[0] in _MACHINERY:
            return False
        return not Path(self.filename).is_relative_to(_INSTALLED) and not any(
            part in _INSTALLED_DIRS for part in Path(self.filename).parts
        )


_INSTALLED = Path(sysconfig.get_paths()["stdlib"])


def is_users_frame(frame: FrameType) -> bool:
    """Whether *frame* runs the user's code (a test, a conftest, their policy or task app)."""
    name = frame.f_globals.get("__name__", "")
    return _Frame(name if isinstance(name, str) else "", frame.f_code.co_filename).users


_INSTALLED_DIRS = frozenset({"site-packages", "dist-packages"})


def _frames(excinfo: Any) -> list[_Frame]:
    frames, tb = [], excinfo.tb
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        frames.append(_Frame(name if isinstance(name, str) else "", tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    return frames


def hidden_from_users(excinfo: Any) -> bool:
    """pytest's question to a frame of ours: hide it from the report of *excinfo*?"""
    if excinfo is None or not excinfo.errisinstance((SynthError, AssertionError)):
        return False
    frames = _frames(excinfo)
    if not frames:
        return False
    if excinfo.errisinstance(AssertionError) and not frames[-1].ours:
        return False  # the user's own assert, maybe called through us (a policy, a callback)
    # An error raised from a hook or fixture of ours has no user frame: see message_only().
    return any(frame.users for frame in frames)


def message_only(excinfo: Any) -> str | None:
    """The whole report of one of our errors raised where the user has no frame (a marker
    checked by our hook, a fixture of ours), else ``None``.

    Such a traceback is only pytest's machinery and ours; its message already names the
    marker, test or option and the fix, so the message alone is what the user reads.
    """
    if excinfo is None or not excinfo.errisinstance(SynthError):
        return None
    if any(frame.users for frame in _frames(excinfo)):
        return None
    error = excinfo.value
    text = f"{type(error).__module__}.{type(error).__qualname__}: {error}"
    cause = error.__cause__
    if cause is not None and not isinstance(cause, SynthError) and str(cause) not in text:
        text += f"\n  caused by {type(cause).__name__}: {cause}"  # what our message wraps, kept
    return text


def mark_package_modules() -> None:
    """Give every loaded module of this package the module-level ``__tracebackhide__``.

    Done when a report is about to be made rather than in each module's source, so a module
    added later is covered too; a function's own ``__tracebackhide__`` still takes precedence.
    """
    for name, module in list(sys.modules.items()):
        if module is not None and _ours(name) and "__tracebackhide__" not in vars(module):
            module.__tracebackhide__ = hidden_from_users  # type: ignore[attr-defined]
