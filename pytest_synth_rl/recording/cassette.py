"""The cassette: one test's recorded HTTP exchanges as JSON (format version 1), redacted when
captured, checked when loaded; a file that still holds a secret is never written."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording.redaction import Redactor, SecretLeakError, find_leaks
from pytest_synth_rl.reporting import files
from pytest_synth_rl.secrets.masking import redact

_VERSION = 1
_BODY_DEPTH = files.MAX_JSON_DEPTH - 4

DROPPED_HEADERS: frozenset[str] = frozenset(
    ["content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date"]
)

Headers = dict[str, str | list[str]]


class CassetteError(SynthError):
    pass


def cassette_path(directory: str | os.PathLike[str], test_id: str) -> Path:
    return Path(directory) / f"{files.safe_file_stem(test_id)}.json"


def header_items(headers: Mapping[str, str | list[str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, value in headers.items() for v in (value if isinstance(value, list) else [value])]


def _media_type(headers: Mapping[str, Any]) -> str:
    value = headers.get("content-type") or ""
    return str(value[0] if isinstance(value, list) else value).split(";", 1)[0].strip().lower()


def _is_json_type(headers: Mapping[str, Any]) -> bool:
    media = _media_type(headers)
    return media == "application/json" or media.endswith("+json")


def encode_body(content: bytes, headers: Mapping[str, Any]) -> tuple[Any, str | None]:
    if not content:
        return None, None
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(content).decode("ascii"), "base64"
    if not _is_json_type(headers):
        return text, None
    try:
        value = files.parse_json_document(text, max_depth=_BODY_DEPTH)
    except files.UnreadableDocument:
        return text, "text"
    return (value, None) if value is not None else (text, "text")  # a null body would read as none


def decode_body(body: Any, encoding: str | None, headers: Mapping[str, Any]) -> bytes:
    if body is None:
        return b""
    if encoding == "base64":
        return base64.b64decode(str(body))
    if encoding == "text" or (encoding is None and not _is_json_type(headers)):
        return str(body).encode("utf-8")
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


class _Message:
    headers: Headers
    body: Any
    body_encoding: str | None

    def content(self) -> bytes:
        return decode_body(self.body, self.body_encoding, self.headers)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "body_encoding" or v}


@dataclass(repr=False)
class RecordedRequest(_Message):
    method: str
    url: str
    headers: Headers = field(default_factory=dict)
    body: Any = None
    body_encoding: str | None = None

    def __repr__(self) -> str:
        redactor = Redactor()
        return (
            f"RecordedRequest(method={self.method!r}, url={redactor.url(self.url)!r}, "
            f"headers={redactor.headers_of(header_items(self.headers))!r}, "
            f"body={redactor.json(self.body)!r}, body_encoding={self.body_encoding!r})"
        )


@dataclass
class RecordedResponse(_Message):
    status: int
    headers: Headers = field(default_factory=dict)
    body: Any = None
    body_encoding: str | None = None

    def to_httpx(self, request: httpx.Request) -> httpx.Response:
        headers = header_items(self.headers)
        return httpx.Response(self.status, headers=headers, content=self.content(), request=request)


def _captured(headers: httpx.Headers, content: bytes, redactor: Redactor) -> tuple[Headers, Any, str | None]:
    kept = redactor.headers_of((k, v) for k, v in headers.multi_items() if k.lower() not in DROPPED_HEADERS)
    body, encoding = encode_body(content, kept)
    if encoding == "base64":
        return (kept, *encode_body(redactor.raw_bytes(content), kept))
    if not isinstance(body, str):
        return kept, redactor.json(body), encoding
    form = _media_type(kept) == "application/x-www-form-urlencoded"
    return kept, (redactor.query(body) if form else redactor.text(body)), encoding


def capture_request(request: httpx.Request, redactor: Redactor) -> RecordedRequest:
    method, url = request.method.upper(), redactor.url(str(request.url))
    return RecordedRequest(method, url, *_captured(request.headers, request.content, redactor))


def _message_parts(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    raw = part.get("headers")
    if raw is not None and not isinstance(raw, Mapping):
        raise CassetteError(f"{where}.headers: expected an object of header name -> value")
    headers: Headers = {}
    for name, item in (raw or {}).items():
        if not (isinstance(item, str) or (isinstance(item, list) and all(isinstance(v, str) for v in item))):
            problem = f"expected a string or a list of strings, got {item!r}"
            raise CassetteError(f"{where}.headers.{name}: {problem}")
        headers[str(name).lower()] = item if isinstance(item, str) else list(item)
    encoding, body = part.get("body_encoding"), part.get("body")
    if encoding not in (None, "base64", "text"):
        raise CassetteError(f'{where}.body_encoding: expected "base64" or "text", got {encoding!r}')
    if encoding == "base64" and body is not None:
        try:
            base64.b64decode(body if isinstance(body, str) else "\0", validate=True)
        except ValueError as error:
            problem = f"body_encoding is base64 but the body is not valid base64 ({error})"
            raise CassetteError(f"{where}.body: {problem}") from None
    return {"headers": headers, "body": body, "body_encoding": encoding}


@dataclass
class Interaction:
    request: RecordedRequest
    response: RecordedResponse

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "response": self.response.to_json()}

    @classmethod
    def capture(
        cls, request: httpx.Request, response: httpx.Response, content: bytes, redactor: Redactor
    ) -> Interaction:
        recorded = RecordedResponse(response.status_code, *_captured(response.headers, content, redactor))
        return cls(capture_request(request, redactor), recorded)

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Interaction:
        if not isinstance(data, Mapping):
            raise CassetteError(f"{where}: expected an object with request and response")
        for key in ("request", "response"):
            if not isinstance(data.get(key), Mapping):
                raise CassetteError(f"{where}.{key}: expected an object, got {data.get(key)!r}")
        request, response = data["request"], data["response"]
        method, url, status = request.get("method"), request.get("url"), response.get("status")
        if not isinstance(method, str) or not method:
            raise CassetteError(f"{where}.request.method: expected an HTTP method string, got {method!r}")
        if not isinstance(url, str) or not url:
            raise CassetteError(f"{where}.request.url: expected a URL string, got {url!r}")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise CassetteError(f"{where}.response.status: expected an HTTP status 100-599, got {status!r}")
        recorded_request = RecordedRequest(method.upper(), url, **_message_parts(request, f"{where}.request"))
        recorded_response = RecordedResponse(status, **_message_parts(response, f"{where}.response"))
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError as error:
            raise CassetteError(f"{where}.request.url: {url!r} is not a valid URL ({error})") from None
        if not parts.scheme or not parts.netloc:
            raise CassetteError(f"{where}.request.url: {url!r} is not an absolute http(s) URL")
        return cls(recorded_request, recorded_response)


class Cassette:
    """The interactions of one test, in order; ``existed``: loaded from a file (what ``once`` asks)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        interactions: Iterable[Interaction] = (),
        *,
        test_id: str | None = None,
        existed: bool = False,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.interactions: list[Interaction] = list(interactions)
        self.test_id = test_id
        self.existed = existed

    def __repr__(self) -> str:
        return f"Cassette({str(self.path) if self.path else '<memory>'!r}, interactions={len(self)})"

    def __len__(self) -> int:
        return len(self.interactions)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(self.interactions)

    def append(self, interaction: Interaction) -> None:
        self.interactions.append(interaction)

    def to_json(self) -> str:
        document: dict[str, Any] = {"version": _VERSION, "interactions": [i.to_json() for i in self]}
        if self.test_id:
            document["test_id"] = redact(self.test_id)
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, path: str | os.PathLike[str] | None = None) -> Cassette:
        where = str(path) if path is not None else "cassette"
        try:
            data = files.parse_json_document(text)
        except files.UnreadableDocument as error:
            hint = "fix the file, or delete it and re-record with --synth-record=rewrite"
            raise CassetteError(f"{where} {error}", hint=hint) from None
        if not isinstance(data, Mapping) or not isinstance(data.get("interactions"), list):
            hint = "cassettes are written by pytest-synth-rl; re-record with --synth-record=rewrite"
            raise CassetteError(f'{where}: expected an object with an "interactions" list', hint=hint)
        version = data.get("version", _VERSION)
        if version != _VERSION:
            message = f"{where} has format version {version!r}; this plugin reads version {_VERSION}"
            raise CassetteError(message, hint="re-record it with --synth-record=rewrite")
        items = enumerate(data["interactions"])
        interactions = [Interaction.from_json(item, where=f"{where}: interactions[{i}]") for i, item in items]
        test_id = data.get("test_id")
        return cls(path, interactions, test_id=test_id if isinstance(test_id, str) else None, existed=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        try:
            return cls.from_json(Path(path).read_bytes(), path=path)
        except FileNotFoundError:
            hint = "record it with --synth-record=once"
            raise CassetteError(f"cassette {path} does not exist", hint=hint) from None
        except OSError as error:
            raise CassetteError(f"cannot read cassette {path}: {error.strerror}") from None

    @classmethod
    def load_or_new(cls, path: str | os.PathLike[str], *, test_id: str | None = None) -> Cassette:
        if not Path(path).is_file():
            return cls(path, test_id=test_id, existed=False)
        cassette = cls.load(path)
        if cassette.test_id and test_id and cassette.test_id != redact(test_id):  # written masked
            raise CassetteError(
                f"cassette {path} was recorded for test {cassette.test_id!r}, not for {test_id!r}",
                hint="delete it and re-record this test with --synth-record=rewrite, or move it "
                "back to the test it belongs to",
            )
        cassette.test_id = cassette.test_id or test_id
        return cassette

    def save(self, path: str | os.PathLike[str] | None = None, *, secrets: Iterable[str | None] = ()) -> Path:
        """Write atomically; :class:`SecretLeakError`, old file kept, if it holds a secret."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise CassetteError("this cassette has no path; pass save(path=...)")
        extra = tuple(secrets)

        def scan(temp: Path) -> None:
            leaks = find_leaks(temp.read_bytes(), extra)
            if leaks:
                raise SecretLeakError(
                    f"refusing to write cassette {target}: it still contains "
                    f"{len(leaks)} secret(s) after redaction ({', '.join(leaks)})",
                    hint="the value sits where the redaction rules do not look; pass it in "
                    "Redactor(secrets=[...]) or register it with masking.register_secret()",
                )

        written = files.atomic_write_text(target, self.to_json(), check=scan)
        self.path, self.existed = target, True
        return written
