"""Which recorded interaction answers a live request: method + path + query (+ body for
POST/PUT/PATCH), redacted, without volatile fields, per-run tags and loopback ports."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, closest
from pytest_synth_rl.recording.cassette import RecordedRequest
from pytest_synth_rl.reporting.files import UnreadableDocument, parse_json_document

BODY_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH"})

DEFAULT_IGNORED_FIELDS = frozenset({"idempotency_key", "request_id", "nonce", "ciphertext_b64"})

DEFAULT_IGNORED_PATHS: tuple[str, ...] = ("tags.run", "tags.worker", "tags.test")

MATCH_PARTS: tuple[str, ...] = ("method", "host", "path", "query", "body")
DEFAULT_MATCH_ON: tuple[str, ...] = ("method", "path", "query", "body")

_LOOPBACK_URL = re.compile(r"(https?://)(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\])(?::\d+)?")


def _split_path(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split(".") if part)


def _list_problem(name: str, value: object) -> ConfigProblem | None:
    if not isinstance(value, str) and isinstance(value, (list, tuple, set, frozenset)):
        return None
    hint = f"did you mean [{value!r}]?" if isinstance(value, str) else "e.g. ['tags.run']"
    return ConfigProblem(key=name, message=f"is {value!r:.80}; expected a list of strings", hint=hint)


@dataclass(frozen=True)
class MatchConfig:
    """What identifies a request for replay: *match_on* parts of :data:`MATCH_PARTS`, without the
    body values at the dotted paths *ignore* (``*``: any key or item) and the *ignore_fields*."""

    match_on: tuple[str, ...] = DEFAULT_MATCH_ON
    ignore: tuple[str, ...] = DEFAULT_IGNORED_PATHS
    ignore_fields: frozenset[str] = DEFAULT_IGNORED_FIELDS

    def __post_init__(self) -> None:
        problems = [p for p in map(_list_problem, ("match_on", "ignore"), (self.match_on, self.ignore)) if p]
        if problems:
            raise SynthUsageError(problems)
        for name, kind in (("match_on", tuple), ("ignore", tuple), ("ignore_fields", frozenset)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        for part in self.match_on:
            if part not in MATCH_PARTS:
                near = closest(str(part), MATCH_PARTS)
                guess = f"; did you mean {near!r}?" if near else ""
                hint = f"choose from {', '.join(MATCH_PARTS)}"
                problems.append(ConfigProblem("match_on", f"unknown request part {part!r}{guess}", hint))
        hint = "name body values by their keys from the top, e.g. 'data.config.seed'"
        for path in self.ignore:
            if not isinstance(path, str) or not _split_path(path):
                message = f"expected a dotted JSON path like 'tags.run', got {path!r}"
                problems.append(ConfigProblem("ignore", message, hint))
        if problems:
            raise SynthUsageError(problems)

    @property
    def ignored_paths(self) -> tuple[tuple[str, ...], ...]:
        return tuple(_split_path(path) for path in self.ignore)


def origin_of(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = (parts.scheme or "http").lower()
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _normalise_text(value: str, origin: str | None = None) -> str:
    if origin:
        value = value.replace(origin, "<origin>")
    return _LOOPBACK_URL.sub(r"\1<loopback>", value)


def _canonical(
    value: Any, paths: Collection[tuple[str, ...]], ignore: Collection[str], origin: str | None
) -> Any:
    ends = {path[0] for path in paths if len(path) == 1}
    if isinstance(value, dict):
        return {
            k: _canonical(v, [p[1:] for p in paths if len(p) > 1 and p[0] in (k, "*")], ignore, origin)
            for k, v in value.items()
            if k not in ignore and k not in ends and "*" not in ends
        }
    if isinstance(value, list):
        below = [p[1:] for p in paths if len(p) > 1 and p[0] == "*"]
        return [] if "*" in ends else [_canonical(v, below, ignore, origin) for v in value]
    return _normalise_text(value, origin) if isinstance(value, str) else value


@dataclass(frozen=True)
class RequestKey:
    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    body: str | None
    host: str = ""

    def render(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"{self.method} {self.host}{self.path}{'?' + query if query else ''}"


def _canonical_body(
    request: RecordedRequest, ignore: Collection[str], paths: Collection[tuple[str, ...]]
) -> str | None:
    if request.method not in BODY_METHODS or request.body is None:
        return None
    if request.body_encoding == "base64":
        return f"base64:{request.body}"
    parts = urlsplit(request.url)
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None
    value = request.body
    if request.body_encoding is not None or isinstance(value, str):
        text = value if isinstance(value, str) else request.content().decode()
        try:
            value = parse_json_document(text)
        except UnreadableDocument:
            return _normalise_text(text, origin)
    return json.dumps(_canonical(value, paths, ignore, origin), sort_keys=True, separators=(",", ":"))


def request_key(
    request: RecordedRequest, ignore_fields: Collection[str] | None = None, match: MatchConfig | None = None
) -> RequestKey:
    match = match or MatchConfig()
    ignore = match.ignore_fields if ignore_fields is None else frozenset(ignore_fields)
    parts = urlsplit(request.url)
    query = tuple(sorted((k, _normalise_text(v)) for k, v in parse_qsl(parts.query, True) if k not in ignore))
    on = match.match_on
    return RequestKey(
        method=request.method.upper() if "method" in on else "*",
        path=(parts.path or "/") if "path" in on else "",
        query=query if "query" in on else (),
        body=_canonical_body(request, ignore, match.ignored_paths) if "body" in on else None,
        host=origin_of(request.url) if "host" in on else "",
    )


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ABSENT = object()


def _first_difference(recorded: Any, live: Any, path: str = "$") -> str | None:
    both = type(recorded) is type(live)
    if both and isinstance(recorded, dict):
        keys = sorted(set(recorded) | set(live))
        pairs = [(f"{path}.{k}", recorded.get(k, _ABSENT), live.get(k, _ABSENT)) for k in keys]
    elif both and isinstance(recorded, list) and len(recorded) != len(live):
        return f"{path}: recorded {len(recorded)} items, now {len(live)}"
    elif both and isinstance(recorded, list):
        pairs = [(f"{path}[{i}]", a, b) for i, (a, b) in enumerate(zip(recorded, live, strict=True))]
    elif live is _ABSENT:
        return f"{path}: recorded {_short(recorded)}, now absent"
    elif recorded is _ABSENT:
        return f"{path}: not recorded, now {_short(live)}"
    else:
        changed = f"{path}: recorded {_short(recorded)}, now {_short(live)}"
        return None if both and recorded == live else changed
    return next(filter(None, (_first_difference(a, b, where) for where, a, b in pairs)), None)


def describe_difference(recorded: RequestKey, live: RequestKey) -> str:
    if recorded.method != live.method:
        return f"method: recorded {recorded.method}, now {live.method}"
    if recorded.path != live.path:
        return f"path: recorded {recorded.path}"
    if recorded.query != live.query:
        return f"query: recorded {dict(recorded.query)}, now {dict(live.query)}"
    if recorded.body == live.body:
        return "identical"
    try:
        a, b = (None if body is None else parse_json_document(body) for body in (recorded.body, live.body))
    except UnreadableDocument:
        return "body differs"
    return "body " + (_first_difference(a, b) or "differs")


def _shared_start(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def nearest(live: RequestKey, recorded: Iterable[RequestKey], limit: int = 3) -> list[RequestKey]:

    def likeness(key: RequestKey) -> tuple[bool, bool, int, int]:
        line = _shared_start(key.render(), live.render())
        body = _shared_start(key.body or "", live.body or "")
        return key.method == live.method, key.path == live.path, line, body

    return sorted(dict.fromkeys(recorded), key=likeness, reverse=True)[:limit]
