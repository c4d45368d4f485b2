"""Finding a known secret in the disguises text gives it: encoded, escaped, or base64'd.

A key rarely leaks verbatim only. It travels percent-encoded in URLs and forms, ``\\u``-escaped in
JSON written with ``ensure_ascii``, and base64'd inside larger values such as a Basic auth
``user:secret`` pair. Scrubbing only the raw spelling would leave those behind, so both redaction
(:func:`pytest_synth_rl.secrets.masking.redact`, the cassette ``Redactor``) and the cassette leak scan go
through :func:`scrub` and :func:`contains` here.

Two kinds of form are recognized:

* character-level forms: each character of the secret may appear raw, as ``%XX`` (its UTF-8
  bytes, any hex case; ``+`` for a space) or JSON-escaped (``\\uXXXX``, ``\\"``, ``\\/``), in any mix;
* base64 forms: the secret at any of the three byte alignments inside a larger blob, in the
  standard and the URL-safe alphabet, padded or not. Only the characters that depend on the
  secret alone are searched for (see :func:`base64_cores`); a match replaces the whole base64
  token around it, because a half-replaced token would still decode to part of the key;
* parts and spellings: its first or last :data:`EDGE_FRAGMENT` characters or more (what task
  apps echo as ``allowed_first15``; a key without its ``sk_live_`` prefix), any run of at least
  :data:`FRAGMENT` characters from its middle, in any letter case, and the secret's bytes in hex.
  Middle runs must be longer because keys made of words share short runs with ordinary text.
"""

from __future__ import annotations

import base64
import json
import re
from functools import lru_cache

__all__ = ["EDGE_FRAGMENT", "FRAGMENT", "base64_cores", "contains", "scrub", "scrub_parts", "scrub_whole"]

#: The shortest start or end of a secret that counts as the secret (``allowed_first15`` echoes 15).
EDGE_FRAGMENT = 12
#: The shortest run from anywhere in a secret that counts as the secret.
FRAGMENT = 16

_STANDARD_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_URLSAFE_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _hex_class(value: int, width: int) -> str:
    """A regex matching *value* in hex with *width* digits, upper or lower case."""
    out = []
    for digit in f"{value:0{width}x}":
        out.append(f"[{digit}{digit.upper()}]" if digit.isalpha() else digit)
    return "".join(out)


def _char_pattern(char: str) -> str:
    options = [re.escape(char)]
    options.append("%" + "%".join(_hex_class(byte, 2) for byte in char.encode("utf-8")))
    if ord(char) <= 0xFFFF:
        options.append(r"\\u" + _hex_class(ord(char), 4))
    escaped = json.dumps(char)[1:-1]
    if escaped != char:
        options.append(re.escape(escaped))
    if char == "/":
        options.append(r"\\/")
    if char == " ":
        options.append(r"\+")
    return "(?:" + "|".join(options) + ")"


@lru_cache(maxsize=256)
def _pattern(secret: str) -> re.Pattern[str]:
    return re.compile("".join(_char_pattern(char) for char in secret))


@lru_cache(maxsize=256)
def base64_cores(secret: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """The base64 text that any blob containing *secret* must contain, with its alphabet.

    Base64 maps 3 bytes to 4 characters, so the secret's encoding depends on where it starts
    modulo 3. For each offset *k* the characters ``ceil(8k/6) .. floor(8(k+n)/6)`` of
    ``b64(k filler bytes + secret)`` carry bits of the secret only, so they are the same whatever
    surrounds it. Padding lies outside that core, which makes padded and unpadded forms match alike.
    """
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
    """Runs of *secret*'s characters in *text* that count as the secret, letter case ignored."""
    if len(secret) <= EDGE_FRAGMENT:
        return []  # only the whole secret, found by the other forms
    folded = text.lower()
    if len(folded) != len(text):  # a character whose lower case is longer: compare as written
        folded = text
    key = secret.lower()
    spans = []
    # Every run of EDGE_FRAGMENT or more starts with some window: extending each match to the
    # right measures the run from where it starts in the key.
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
    """Whether *secret* appears in *text* in any recognized form."""
    return (
        bool(_pattern(secret).search(text))
        or bool(_base64_spans(text, secret))
        or bool(_run_spans(text, secret))
        or bool(_hex_spans(text, secret))
    )


def scrub_whole(text: str, secret: str, replacement: str) -> str:
    """*text* with every whole form of *secret* (raw, escaped, base64'd) replaced."""
    text = _replace_spans(text, _base64_spans(text, secret), replacement)
    return _pattern(secret).sub(replacement.replace("\\", "\\\\"), text)


def scrub_parts(text: str, secret: str, replacement: str) -> str:
    """*text* with every part or respelling of *secret* (runs, other case, hex) replaced."""
    return _replace_spans(text, [*_run_spans(text, secret), *_hex_spans(text, secret)], replacement)


def scrub(text: str, secret: str, replacement: str) -> str:
    """*text* with every recognized form of *secret* replaced by *replacement*.

    Whole forms go first, so that a part found afterwards is never the visible half of an
    escaped whole. With several secrets, scrub all whole forms before any part (as
    :func:`pytest_synth_rl.secrets.masking.redact` does): one secret may contain another.
    """
    return scrub_parts(scrub_whole(text, secret, replacement), secret, replacement)
