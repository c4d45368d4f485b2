"""Telling an http(s) URL from a typo of one, for every setting and config value that takes a URL."""

from __future__ import annotations

import difflib
import re

__all__ = ["http_url_problem"]

_SCHEMES = ("http", "https")
#: ``http:/host``, ``https:host``: the scheme is right, its slashes are not.
_SHORT_SLASHES = re.compile(r"(https?):/{0,1}([^/].*)", re.IGNORECASE)


def http_url_problem(text: str, example: str) -> str | None:
    """Why *text* is not an http(s) URL with a host, or None if it is one; a misspelt scheme
    (``htps://``, ``http:/host``) gets a "did you mean"."""
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() in _SCHEMES and rest.strip("/"):
        return None
    guess: str | None = None
    short = _SHORT_SLASHES.fullmatch(text.strip())
    if short is not None:
        guess = f"{short.group(1).lower()}://{short.group(2)}"
    elif sep and rest.strip("/"):
        near = difflib.get_close_matches(scheme.lower(), _SCHEMES, n=1, cutoff=0.6)
        guess = f"{near[0]}://{rest}" if near else None
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return f"expected an http(s) URL such as {example}, got {text!r}{hint}"
