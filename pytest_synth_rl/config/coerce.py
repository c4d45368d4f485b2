"""Scalar conversions with the upstream SDK's lax-mode accept/convert decisions.

``gpu_count = "2"`` is sent as ``2``, ``learning_rate = 1`` as ``1.0``, ``batches_per_step = 2.5``
is refused; strings accept strings only. A :class:`CoercionError`'s ``expected`` goes into messages.
"""

from __future__ import annotations

import math
import re
from typing import Any

# The Unicode White_Space characters the SDK's number parser trims (narrower than str.isspace).
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)", re.IGNORECASE
)
_BOOL_WORDS = {"1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}
_BOOL_WORDS |= {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False}
#: Integers must be smaller than this in magnitude (64-bit, like TOML integers).
INT64_LIMIT = 2**63
_INT64_DIGITS = len(str(INT64_LIMIT))
_TOO_BIG = "an integer smaller than 2**63"
_BOOL = "a boolean (true or false)"


class CoercionError(ValueError):
    """A value cannot be converted to the wanted type; ``expected`` names that type for humans."""

    def __init__(self, expected: str, value: object) -> None:
        self.expected = expected
        self.value = value
        super().__init__(f"expected {expected}, got {describe(value)}")


def describe(value: object) -> str:
    """A short human description of *value* and its TOML-ish type, for problem messages."""
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
    kinds = ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"))
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{text} ({kind})"


def digit_count(number: int) -> int:
    """How many decimal digits *number* has, without writing it out (Python refuses > 4,300)."""
    magnitude = abs(number)
    estimate = max(1, int(magnitude.bit_length() * math.log10(2)))  # the count or one less
    return estimate + 1 if magnitude >= 10**estimate else estimate


def to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise CoercionError("a string", value)


def to_int(value: Any) -> int:
    """Ints of any size (as the SDK), bools, integral floats and decimal strings below 2**63."""
    if isinstance(value, int):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise CoercionError("an integer", value)
        if abs(value) >= float(INT64_LIMIT):
            raise CoercionError(_TOO_BIG, value)
        return int(value)
    if not isinstance(value, str) or not _INT_TEXT.fullmatch(text := value.strip(_WHITE_SPACE)):
        raise CoercionError("an integer", value)
    whole = text.split(".", 1)[0].replace("_", "")
    if len(whole.lstrip("+-").lstrip("0")) > _INT64_DIGITS or abs(int(whole)) >= INT64_LIMIT:
        raise CoercionError(_TOO_BIG, value)
    return int(whole)


def to_float(value: Any) -> float:
    """Numbers, bools and numeric strings (``inf``/``nan`` spellings, single ``_`` separators)."""
    if isinstance(value, (bool, float)):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            raise CoercionError("a number that fits a 64-bit float", value) from None
    if isinstance(value, str):
        if "_" in value:  # then the SDK does not trim, and refuses separators at an end or doubled
            ok = not (value.startswith("_") or value.endswith("_") or "__" in value)
            text = value.replace("_", "") if ok else ""
        else:
            text = value.strip(_WHITE_SPACE)
        if _FLOAT_TEXT.fullmatch(text):
            return float(text)
    raise CoercionError("a number", value)


def to_bool(value: Any) -> bool:
    """Bools, the numbers 0 and 1, and case-insensitive words (``true``, ``no``, ``on`` ...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.lower()]
    raise CoercionError(_BOOL, value)
