"""Deciding which recorded interaction answers a live request.

A request matches a recording on method + URL path + query (+ body for POST/PUT/PATCH). Left out
on purpose:

* the host, so a cassette recorded against one backend URL (say a served fake on a random
  loopback port) replays against another;
* headers, so replay needs no API key and volatile headers (``Idempotency-Key``, ``User-Agent``)
  do not break it;
* body fields named in ``ignore_fields`` (volatile ids), at any depth;
* body values at the JSON paths in ``ignore`` (default :data:`DEFAULT_IGNORED_PATHS`: the per-run
  ``tags.run``, ``tags.worker`` and ``tags.test`` a job carries), so a cassette recorded serially
  replays under xdist and the other way round;
* the request's own origin where it appears inside its body: the job payload carries the backend
  URL (``metadata.backend_base_url``), which changes with the host just like the request URL;
* the port of loopback URLs inside bodies and queries: a payload carries the in-process task
  app's URL (``endpoint_base_url``), whose port is different on every run.

Both sides are compared in their redacted form, so a credential-named field matches whatever
value it had.

What takes part is configurable in the spirit of vcrpy's ``match_on``: :class:`MatchConfig`
(``match_on=("method", "path", "body")``, ``ignore=("tags.run", "data.config.seed")``), passed
to :class:`~pytest_synth_rl.recording.replayer.Replayer` / ``use_cassette`` as ``match=``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.recording.cassette import RecordedRequest, decode_body

__all__ = [
    "BODY_METHODS",
    "DEFAULT_IGNORED_FIELDS",
    "DEFAULT_IGNORED_PATHS",
    "DEFAULT_MATCH_ON",
    "MATCH_PARTS",
    "MatchConfig",
    "RequestKey",
    "describe_difference",
    "nearest",
    "origin_of",
    "request_key",
]

#: Methods whose body takes part in matching.
BODY_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH"})

#: Body fields that differ on every run and say nothing about which request it is.
DEFAULT_IGNORED_FIELDS: frozenset[str] = frozenset(
    {"idempotency_key", "request_id", "nonce", "ciphertext_b64"}  # a sealed box differs every time
)

#: Body values that differ per run, worker or test-id spelling: the job tags of ``session.job_tags``.
DEFAULT_IGNORED_PATHS: tuple[str, ...] = ("tags.run", "tags.worker", "tags.test")

#: The parts of a request that can take part in matching, and the default selection.
MATCH_PARTS: tuple[str, ...] = ("method", "host", "path", "query", "body")
DEFAULT_MATCH_ON: tuple[str, ...] = ("method", "path", "query", "body")


def _split_path(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split(".") if part)


def _list_problem(name: str, value: object) -> ConfigProblem | None:
    """A value that is not a list of strings; a lone string would be read letter by letter."""
    if not isinstance(value, str) and isinstance(value, (list, tuple, set, frozenset)):
        return None
    hint = f"did you mean [{value!r}]?" if isinstance(value, str) else "e.g. ['tags.run']"
    return ConfigProblem(key=name, message=f"is {value!r:.80}; expected a list of strings", hint=hint)


@dataclass(frozen=True)
class MatchConfig:
    """Which parts of a request identify it for replay, and which body values to leave out.

    *match_on* names parts from :data:`MATCH_PARTS` (``"host"`` is off by default so a cassette
    replays against any backend URL); *ignore* lists dotted JSON paths into the body (``*``
    matches any key or list item); *ignore_fields* are field names ignored at any depth.
    """

    match_on: tuple[str, ...] = DEFAULT_MATCH_ON
    ignore: tuple[str, ...] = DEFAULT_IGNORED_PATHS
    ignore_fields: frozenset[str] = DEFAULT_IGNORED_FIELDS

    def __post_init__(self) -> None:
        problems = [
            p for p in (_list_problem("match_on", self.match_on), _list_problem("ignore", self.ignore)) if p
        ]
        if problems:
            raise SynthUsageError(problems)
        object.__setattr__(self, "match_on", tuple(self.match_on))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        object.__setattr__(self, "ignore_fields", frozenset(self.ignore_fields))
        for part in self.match_on:
            if part not in MATCH_PARTS:
                close = difflib.get_close_matches(str(part), MATCH_PARTS, n=1)
                guess = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(
                    ConfigProblem(
                        key="match_on",
                        message=f"unknown request part {part!r}{guess}",
                        hint=f"choose from {', '.join(MATCH_PARTS)}",
                    )
                )
        for path in self.ignore:
            if not isinstance(path, str) or not _split_path(path):
                problems.append(
                    ConfigProblem(
                        key="ignore",
                        message=f"expected a dotted JSON path like 'tags.run', got {path!r}",
                        hint="name body values by their keys from the top, e.g. 'data.config.seed'",
                    )
                )
        if problems:
            raise SynthUsageError(problems)

    @property
    def ignored_paths(self) -> tuple[tuple[str, ...], ...]:
        return tuple(_split_path(path) for path in self.ignore)


def _drop_paths(value: Any, paths: Collection[tuple[str, ...]]) -> Any:
    """A copy of *value* without the values at *paths*."""
    if not paths:
        return value
    ends = {path[0] for path in paths if len(path) == 1}
    deeper = [path for path in paths if len(path) > 1]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ends or "*" in ends:
                continue
            below = [path[1:] for path in deeper if path[0] in (key, "*")]
            out[key] = _drop_paths(item, below)
        return out
    if isinstance(value, list):
        if "*" in ends:
            return []
        below = [path[1:] for path in deeper if path[0] == "*"]
        return [_drop_paths(item, below) for item in value]
    return value


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
    host: str = ""

    def render(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"{self.method} {self.host}{self.path}{'?' + query if query else ''}"


def _canonical_body(
    request: RecordedRequest, ignore: Collection[str], paths: Collection[tuple[str, ...]] = ()
) -> str | None:
    if request.method not in BODY_METHODS or request.body is None:
        return None
    if request.body_encoding == "base64":
        return f"base64:{request.body}"
    parts = urlsplit(request.url)
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None
    content = request.body
    if request.body_encoding is None and not isinstance(content, str):
        kept = _drop_paths(content, paths)
        return json.dumps(_strip(kept, ignore, origin), sort_keys=True, separators=(",", ":"))
    # Text (or a JSON string value): try JSON anyway, a client may omit the content type.
    text = content if isinstance(content, str) else decode_body(content, None, request.headers).decode()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return _normalise_text(text, origin)
    parsed = _drop_paths(parsed, paths)
    return json.dumps(_strip(parsed, ignore, origin), sort_keys=True, separators=(",", ":"))


def request_key(
    request: RecordedRequest,
    ignore_fields: Collection[str] | None = None,
    match: MatchConfig | None = None,
) -> RequestKey:
    """The match key of a (redacted) request; parts *match* leaves out are blank."""
    match = match or MatchConfig()
    ignore = match.ignore_fields if ignore_fields is None else frozenset(ignore_fields)
    parts = urlsplit(request.url)
    query = tuple(
        sorted(
            (name, _normalise_text(value))
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if name not in ignore
        )
    )
    on = match.match_on
    return RequestKey(
        method=request.method.upper() if "method" in on else "*",
        path=(parts.path or "/") if "path" in on else "",
        query=query if "query" in on else (),
        body=_canonical_body(request, ignore, match.ignored_paths) if "body" in on else None,
        host=origin_of(request.url) if "host" in on else "",
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
