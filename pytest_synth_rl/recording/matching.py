"""Deciding which recorded interaction answers a live request.

A request matches a recording on method + URL path + query (+ body for POST/PUT/PATCH). Left out
on purpose:

* the host, so a cassette recorded against one backend URL (say a served fake on a random
  loopback port) replays against another;
* headers, so replay needs no API key and volatile headers (``Idempotency-Key``, ``User-Agent``)
  do not break it;
* body fields named in ``ignore_fields`` (volatile ids), at any depth;
* the request's own origin where it appears inside its body: the job payload carries the backend
  URL (``metadata.backend_base_url``), which changes with the host just like the request URL;
* the port of loopback URLs inside bodies and queries: a payload carries the in-process task
  app's URL (``endpoint_base_url``), whose port is different on every run.

Both sides are compared in their redacted form, so a credential-named field matches whatever
value it had.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .cassette import RecordedRequest, decode_body

__all__ = [
    "BODY_METHODS",
    "DEFAULT_IGNORED_FIELDS",
    "RequestKey",
    "describe_difference",
    "nearest",
    "origin_of",
    "request_key",
]

#: Methods whose body takes part in matching.
BODY_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH"})

#: Body fields that differ on every run and say nothing about which request it is.
DEFAULT_IGNORED_FIELDS: frozenset[str] = frozenset({"idempotency_key", "request_id", "nonce"})

_LOOPBACK_URL = re.compile(r"(https?://)(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\])(?::\d+)?")
_LOOPBACK_TOKEN = r"\1<loopback>"


def origin_of(url: str) -> str:
    """``scheme://host:port`` with the default port filled in, for scope decisions."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = (parts.scheme or "http").lower()
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


_ORIGIN_TOKEN = "<origin>"


def _normalise_text(value: str, origin: str | None = None) -> str:
    if origin and origin in value:
        value = value.replace(origin, _ORIGIN_TOKEN)
    return _LOOPBACK_URL.sub(_LOOPBACK_TOKEN, value)


def _strip(value: Any, ignore: Collection[str], origin: str | None) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, ignore, origin) for k, v in value.items() if k not in ignore}
    if isinstance(value, list):
        return [_strip(v, ignore, origin) for v in value]
    if isinstance(value, str):
        return _normalise_text(value, origin)
    return value


@dataclass(frozen=True)
class RequestKey:
    """What identifies a request for replay (see the module docstring)."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    body: str | None

    def render(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"{self.method} {self.path}{'?' + query if query else ''}"


def _canonical_body(request: RecordedRequest, ignore: Collection[str]) -> str | None:
    if request.method not in BODY_METHODS or request.body is None:
        return None
    if request.body_encoding == "base64":
        return f"base64:{request.body}"
    parts = urlsplit(request.url)
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None
    content = request.body
    if request.body_encoding is None and not isinstance(content, str):
        return json.dumps(_strip(content, ignore, origin), sort_keys=True, separators=(",", ":"))
    # Text (or a JSON string value): try JSON anyway, a client may omit the content type.
    text = content if isinstance(content, str) else decode_body(content, None, request.headers).decode()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return _normalise_text(text, origin)
    return json.dumps(_strip(parsed, ignore, origin), sort_keys=True, separators=(",", ":"))


def request_key(
    request: RecordedRequest, ignore_fields: Collection[str] = DEFAULT_IGNORED_FIELDS
) -> RequestKey:
    """The match key of a (redacted) request."""
    parts = urlsplit(request.url)
    query = tuple(
        sorted(
            (name, _normalise_text(value))
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if name not in ignore_fields
        )
    )
    return RequestKey(
        method=request.method.upper(),
        path=parts.path or "/",
        query=query,
        body=_canonical_body(request, ignore_fields),
    )


def _first_difference(recorded: Any, live: Any, path: str = "$") -> str | None:
    if type(recorded) is not type(live):
        return f"{path}: recorded {_short(recorded)}, now {_short(live)}"
    if isinstance(recorded, dict):
        for key in sorted(set(recorded) | set(live)):
            if key not in live:
                return f"{path}.{key}: recorded {_short(recorded[key])}, now absent"
            if key not in recorded:
                return f"{path}.{key}: not recorded, now {_short(live[key])}"
            found = _first_difference(recorded[key], live[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list):
        if len(recorded) != len(live):
            return f"{path}: recorded {len(recorded)} items, now {len(live)}"
        for index, (a, b) in enumerate(zip(recorded, live, strict=True)):
            found = _first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    if recorded != live:
        return f"{path}: recorded {_short(recorded)}, now {_short(live)}"
    return None


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_difference(recorded: RequestKey, live: RequestKey) -> str:
    """What separates two keys, in a few words (for the "nearest recorded requests" list)."""
    if recorded.method != live.method:
        return f"method: recorded {recorded.method}, now {live.method}"
    if recorded.path != live.path:
        return f"path: recorded {recorded.path}"
    if recorded.query != live.query:
        return f"query: recorded {dict(recorded.query)}, now {dict(live.query)}"
    if recorded.body != live.body:
        try:
            a = json.loads(recorded.body) if recorded.body is not None else None
            b = json.loads(live.body) if live.body is not None else None
        except json.JSONDecodeError:
            return "body differs"
        return "body " + (_first_difference(a, b) or "differs")
    return "identical"


def _similarity(a: RequestKey, b: RequestKey) -> float:
    score = difflib.SequenceMatcher(None, a.render(), b.render()).ratio()
    if a.method == b.method:
        score += 1.0
    if a.path == b.path:
        score += 1.0
    if a.body is not None and b.body is not None:
        score += difflib.SequenceMatcher(None, a.body[:2000], b.body[:2000]).quick_ratio()
    return score


def nearest(live: RequestKey, recorded: Iterable[RequestKey], limit: int = 3) -> list[RequestKey]:
    """The recorded keys most similar to *live*, best first (distinct keys only)."""
    unique = list(dict.fromkeys(recorded))
    unique.sort(key=lambda key: _similarity(live, key), reverse=True)
    return unique[:limit]
