"""Scalar coercion with the same accept/convert decisions as the upstream SDK's config models.

The SDK validates RL configs with lax-mode typed models, so a TOML ``gpu_count = "2"`` is
accepted and *sent as the integer 2*, ``learning_rate = 1`` is sent as ``1.0`` and
``batches_per_step = 2.5`` is rejected. To accept exactly what the SDK accepts and to emit a
byte-identical payload we reproduce those conversions here, without depending on the SDK or its
validation library. The rules were pinned down value by value against the SDK's behaviour:

* integers accept ints, bools, integral finite floats below 2**63 in magnitude, and decimal
  strings (surrounding whitespace, single ``_`` between digits, an all-zero fraction like ``"1.0"``)
  that are below 2**63 in magnitude too: their digits are counted before converting, since
  Python refuses to convert more than 4,300. (Ints of any size pass here, as in the SDK; the
  validator refuses them anywhere in a config, see :mod:`.validate`.)
* floats accept ints (that fit a double), bools, floats, and numeric strings including
  ``inf``/``nan`` spellings and ``_`` separators (not leading, trailing or doubled, and then
  without surrounding whitespace);
* booleans accept bools, the ints/floats 0 and 1, and a fixed set of case-insensitive words;
* strings accept strings only (numbers are *not* turned into strings).

Every function raises :class:`CoercionError`, whose ``expected`` text is reused verbatim in the
problem messages so users see what kind of value was wanted.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "INT64_LIMIT",
    "CoercionError",
    "describe",
    "digit_count",
    "to_bool",
    "to_float",
    "to_int",
    "to_str",
]

# Characters with the Unicode White_Space property: what the SDK's number parser trims. This is
# narrower than ``str.isspace`` (which also treats the ASCII separators \x1c-\x1f as space).
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)

_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)",
    re.IGNORECASE,
)
_TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})
#: Integers must be smaller than this in magnitude (64-bit, like TOML integers).
INT64_LIMIT = 2**63
_INT_FROM_FLOAT_LIMIT = float(INT64_LIMIT)
_INT64_DIGITS = len(str(INT64_LIMIT))
_TOO_BIG = "an integer smaller than 2**63"
_LOG10_2 = math.log10(2)


class CoercionError(ValueError):
    """A value cannot be converted to the wanted type; ``expected`` names that type for humans."""

    def __init__(self, expected: str, value: object) -> None:
        self.expected = expected
        self.value = value
        super().__init__(f"expected {expected}, got {describe(value)}")


def describe(value: object, limit: int = 60) -> str:
    """A short human description of *value* and its TOML-ish type, for problem messages."""
    kind = _kind(value)
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a table" if value else "an empty table"
    if isinstance(value, (list, tuple)):
        return f"an array of {len(value)} item(s)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of {digit_count(value):,} digits"  # too long to show, maybe to convert
    text = _safe_repr(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{text} ({kind})"


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a user's object: a broken __repr__ must not replace the real problem
        return f"<{type(value).__name__} object that cannot be shown>"


def digit_count(number: int) -> int:
    """How many decimal digits *number* has, without writing it as text: Python refuses to
    convert integers of more than 4,300 digits to text (``sys.get_int_max_str_digits()``)."""
    magnitude = abs(number)
    estimate = max(1, int(magnitude.bit_length() * _LOG10_2))  # the count or one less
    return estimate + 1 if magnitude >= 10**estimate else estimate


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _trim(text: str) -> str:
    return text.strip(_WHITE_SPACE)


def to_str(value: Any) -> str:
    """Strings only; a number where a string is expected is a mistake worth reporting."""
    if isinstance(value, str):
        return value
    raise CoercionError("a string", value)


def to_int(value: Any) -> int:
    """An integer from an int, bool, integral float or decimal string (see module docstring)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value  # any size, as the SDK; the whole-config check refuses what JSON readers cannot hold
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise CoercionError("an integer", value)
        if abs(value) >= _INT_FROM_FLOAT_LIMIT:
            raise CoercionError(_TOO_BIG, value)
        return int(value)
    if isinstance(value, str):
        return _int_from_text(value)
    raise CoercionError("an integer", value)


def _int_from_text(value: str) -> int:
    """Digits are counted before converting: ``int()`` refuses more than 4,300 of them."""
    text = _trim(value)
    if not _INT_TEXT.fullmatch(text):
        raise CoercionError("an integer", value)
    whole = text.split(".", 1)[0].replace("_", "")
    if len(whole.lstrip("+-").lstrip("0")) > _INT64_DIGITS:
        raise CoercionError(_TOO_BIG, value)
    number = int(whole)
    if abs(number) >= INT64_LIMIT:
        raise CoercionError(_TOO_BIG, value)
    return number


def to_float(value: Any) -> float:
    """A float from a number, bool or numeric string (see module docstring)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            raise CoercionError("a number that fits a 64-bit float", value) from None
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        if "_" in value:
            # With digit separators the SDK's parser does not trim whitespace, and rejects
            # separators at either end or doubled.
            if value.startswith("_") or value.endswith("_") or "__" in value:
                raise CoercionError("a number", value)
            text = value.replace("_", "")
        else:
            text = _trim(value)
        if _FLOAT_TEXT.fullmatch(text):
            return float(text)
        raise CoercionError("a number", value)
    raise CoercionError("a number", value)


def to_bool(value: Any) -> bool:
    """A boolean from a bool, 0/1, or one of the accepted words (``true``, ``no``, ``on``…)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise CoercionError("a boolean (true or false)", value)
