"""Which traceback frames a user sees when one of our errors or expectations fails their test.

A ``ConfigError`` for a typo in the team's TOML, or ``to_succeed`` failing on a failed job, is
about the user's code and data: the frames inside this package between their test line and the
``raise`` only push the message off the screen (and ``--showlocals`` would print their locals).
pytest asks each frame's ``__tracebackhide__`` (its locals, then its module's globals); our
modules answer with :func:`hidden_from_users`: hide for our own errors and assertions, never for
anything else passing through (a bug here, the user's own code failing), and never when no frame
of the user's would be left. ``--full-trace`` shows every frame, as always.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import SynthError

__all__ = ["PACKAGE", "hidden_from_users", "mark_package_modules"]

PACKAGE = __name__.rpartition(".")[0]
_MACHINERY = frozenset({"_pytest", "pytest", "pluggy"})


def _ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _frame_modules(excinfo: Any) -> list[str]:
    names, tb = [], excinfo.tb
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        names.append(name if isinstance(name, str) else "")
        tb = tb.tb_next
    return names


def hidden_from_users(excinfo: Any) -> bool:
    """pytest's question to a frame of ours: hide it from the report of *excinfo*?"""
    if excinfo is None or not excinfo.errisinstance((SynthError, AssertionError)):
        return False
    modules = _frame_modules(excinfo)
    if not modules:
        return False
    if excinfo.errisinstance(AssertionError) and not _ours(modules[-1]):
        return False  # the user's own assert, maybe called through us (a policy, a callback)
    # An error raised from a hook of ours has no user frame: then pytest's view stays whole.
    return any(not _ours(m) and m.partition(".")[0] not in _MACHINERY for m in modules)


def mark_package_modules() -> None:
    """Give every loaded module of this package the module-level ``__tracebackhide__``.

    Done when a report is about to be made rather than in each module's source, so a module
    added later is covered too; a function's own ``__tracebackhide__`` still takes precedence.
    """
    for name, module in list(sys.modules.items()):
        if module is not None and _ours(name) and "__tracebackhide__" not in vars(module):
            module.__tracebackhide__ = hidden_from_users  # type: ignore[attr-defined]
