"""Where a call into the package came from: the first frame outside it (the user's line)."""

from __future__ import annotations

import contextlib
import inspect
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

PACKAGE = __name__.split(".")[0]
_MACHINERY = frozenset({"_pytest", "pytest", "pluggy"})
_INSTALLED = Path(sysconfig.get_paths()["stdlib"])
_PACKAGE = Path(__file__).resolve().parents[1]


def is_ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _outside(here: FrameType | None) -> tuple[FrameType | None, int]:
    frame = here.f_back if here is not None else None
    if frame is None:
        return None, 1
    level = 1
    while frame.f_back is not None and is_ours(str(frame.f_globals.get("__name__", ""))):
        frame, level = frame.f_back, level + 1
    return frame, level


def outside_stacklevel() -> int:
    """The ``stacklevel`` that points the caller's warning at the first frame outside this package."""
    return _outside(inspect.currentframe())[1]


def outside_caller() -> str:
    """``file.py:line`` of the first frame outside this package that led to the caller."""
    frame = _outside(inspect.currentframe())[0]
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}" if frame is not None else "<unknown>"


def _installed(path: Path) -> bool:
    return path.is_relative_to(_INSTALLED) or any(p in ("site-packages", "dist-packages") for p in path.parts)


@dataclass(frozen=True)
class Frame:
    module: str
    filename: str

    @property
    def ours(self) -> bool:
        return is_ours(self.module)

    @property
    def users(self) -> bool:
        ours = self.ours or self.module.partition(".")[0] in _MACHINERY
        return not ours and not _installed(Path(self.filename))


def is_users_frame(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__", "")
    return Frame(name if isinstance(name, str) else "", frame.f_code.co_filename).users


def is_users_file(filename: str) -> bool:
    path = Path(filename)
    if _installed(path):
        return False
    with contextlib.suppress(OSError):
        path = path.resolve()
    return not path.is_relative_to(_PACKAGE) and not filename.startswith("<")
