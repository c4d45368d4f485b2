"""Finding in TOML text what the parser handles badly: very long dotted keys and huge integers.

The parser takes time quadratic in a dotted key's length (5,000 parts: 0.5 s, 20,000: 6 s; a
64 MiB file could hold millions), so keys of more than :data:`~.tree.MAX_DEPTH` parts are
refused before parsing. An integer literal longer than Python converts (4,300 digits) makes the
parser raise a bare ``ValueError`` with no position. A regular expression finds either one in
linear time and gives its line and column.
"""

from __future__ import annotations

import re
import sys

from pytest_synth_rl.config.tree import MAX_DEPTH
from pytest_synth_rl.errors import ConfigProblem

__all__ = ["long_integer_problem", "long_key_problem"]

_SEGMENT = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
# A key starts a line (after ``[`` or ``[[`` for a table header) or follows ``{`` or ``,`` in an
# inline table; MAX_DEPTH parts followed by yet another dot is one part too many.
_LONG_KEY = re.compile(
    rf"(?:^[ \t]*\[{{0,2}}|[{{,])[ \t]*(?P<key>(?:{_SEGMENT}[ \t]*\.[ \t]*){{{MAX_DEPTH}}})", re.MULTILINE
)
_INT_LIMIT = "an integer smaller than 2**63 in magnitude"
_INT_HINT = "use a smaller number, or quote it as a string if it is an identifier rather than a count"


def long_key_problem(text: str) -> ConfigProblem | None:
    """The first dotted key or table header with more than ``MAX_DEPTH`` parts, if any."""
    if text.count(".") < MAX_DEPTH:
        return None  # the usual case, decided without the regular expression
    found = _LONG_KEY.search(text)
    if found is None:
        return None
    line, column = _position(text, found.start("key"))
    shown = found.group("key")[:40]
    return ConfigProblem(
        key="",
        message=f"the dotted key {shown + '…'!r} has more than {MAX_DEPTH} parts; "
        f"expected at most {MAX_DEPTH} levels of tables",
        hint=f"flatten the key at line {line}: an RL config is a few levels deep",
        line=line,
        column=column,
    )


def long_integer_problem(text: str) -> ConfigProblem:
    """The problem for the parser's "too many digits" ``ValueError``, placed at the literal."""
    limit = _max_digits()
    literal = re.compile(rf"[=\[,{{][ \t\r\n]*(?P<number>[+-]?[0-9](?:_?[0-9]){{{max(limit, 1)},}})")
    found = literal.search(text)
    if found is None:
        return ConfigProblem(
            key="",
            message=f"invalid TOML: an integer literal has more than {limit:,} digits; expected {_INT_LIMIT}",
            hint=_INT_HINT,
        )
    digits = sum(char.isdigit() for char in found.group("number"))
    line, column = _position(text, found.start("number"))
    return ConfigProblem(
        key="",
        message=f"integer literal of {digits:,} digits; expected {_INT_LIMIT}",
        hint=_INT_HINT,
        line=line,
        column=column,
    )


def _max_digits() -> int:
    # sys.get_int_max_str_digits() exists from 3.11 (and late 3.10 patch releases).
    getter = getattr(sys, "get_int_max_str_digits", None)
    return int(getter()) if getter is not None else 4300


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1
