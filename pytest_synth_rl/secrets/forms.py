"""Finding a known secret in any disguise: percent-encoded, JSON-escaped, base64'd, hex, another
letter case, or in part (its first or last :data:`EDGE_FRAGMENT` characters, any :data:`FRAGMENT`)."""

from __future__ import annotations

import base64
import json
import re
from functools import lru_cache

EDGE_FRAGMENT = 12
FRAGMENT = 16
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_STANDARD_TOKEN, _URLSAFE_TOKEN = frozenset(_ALNUM + "+/"), frozenset(_ALNUM + "-_")


def _hex_class(value: int, width: int) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{value:0{width}x}")


def _char_pattern(char: str) -> str:
    options = [re.escape(char), "%" + "%".join(_hex_class(byte, 2) for byte in char.encode("utf-8"))]
    if ord(char) <= 0xFFFF:
        options.append(r"\\u" + _hex_class(ord(char), 4))
    escaped = json.dumps(char)[1:-1]
    if escaped != char:
        options.append(re.escape(escaped))
    options += {"/": [r"\\/"], " ": [r"\+"]}.get(char, [])
    return "(?:" + "|".join(options) + ")"


@lru_cache(maxsize=256)
def _pattern(secret: str) -> re.Pattern[str]:
    return re.compile("".join(_char_pattern(char) for char in secret))


@lru_cache(maxsize=256)
def base64_cores(secret: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """The base64 text any blob holding *secret* must contain (at each byte offset), with its alphabet."""
    raw = secret.encode("utf-8")
    cores: dict[str, frozenset[str]] = {}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        start = -(-8 * offset // 6)
        core = encoded[start : (8 * (offset + len(raw))) // 6]
        cores.setdefault(core, _STANDARD_TOKEN)
        cores.setdefault(core.replace("+", "-").replace("/", "_"), _URLSAFE_TOKEN)
    return tuple(cores.items())


def _base64_spans(text: str, secret: str) -> list[tuple[int, int]]:
    spans = []
    for core, alphabet in base64_cores(secret):
        start = text.find(core)
        while start != -1:
            left, right = start, start + len(core)
            while left > 0 and text[left - 1] in alphabet:
                left -= 1
            while right < len(text) and text[right] in alphabet:
                right += 1
            while right < len(text) and text[right] == "=":
                right += 1
            spans.append((left, right))
            start = text.find(core, right)
    return spans


def _run_spans(text: str, secret: str) -> list[tuple[int, int]]:
    if len(secret) <= EDGE_FRAGMENT:
        return []
    folded = text.lower()
    if len(folded) != len(text):
        folded = text
    key = secret.lower()
    spans = []
    for first in range(len(key) - EDGE_FRAGMENT + 1):
        window = key[first : first + EDGE_FRAGMENT]
        start = folded.find(window)
        while start != -1:
            right, last = start + EDGE_FRAGMENT, first + EDGE_FRAGMENT
            while right < len(folded) and last < len(key) and folded[right] == key[last]:
                right, last = right + 1, last + 1
            if first == 0 or last == len(key) or right - start >= FRAGMENT:
                spans.append((start, right))
            start = folded.find(window, start + 1)
    return spans


def _hex_spans(text: str, secret: str) -> list[tuple[int, int]]:
    spelled = secret.encode("utf-8").hex()
    return [(m.start(), m.end()) for m in re.finditer(re.escape(spelled), text, re.IGNORECASE)]


def _replace_spans(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    merged: list[list[int]] = []
    for left, right in sorted(spans):
        if merged and left <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], right)
        else:
            merged.append([left, right])
    for left, right in reversed(merged):
        text = text[:left] + replacement + text[right:]
    return text


def contains(text: str, secret: str) -> bool:
    found = _pattern(secret).search(text)
    return bool(found or _base64_spans(text, secret) or _run_spans(text, secret) or _hex_spans(text, secret))


def scrub_whole(text: str, secret: str, replacement: str) -> str:
    text = _replace_spans(text, _base64_spans(text, secret), replacement)
    return _pattern(secret).sub(replacement.replace("\\", "\\\\"), text)


def scrub_parts(text: str, secret: str, replacement: str) -> str:
    return _replace_spans(text, [*_run_spans(text, secret), *_hex_spans(text, secret)], replacement)


def scrub(text: str, secret: str, replacement: str) -> str:
    return scrub_parts(scrub_whole(text, secret, replacement), secret, replacement)
