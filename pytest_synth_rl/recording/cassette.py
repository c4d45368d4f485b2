"""The cassette: recorded HTTP exchanges of one test, as reviewable JSON.

Format (version 1)::

    {
      "interactions": [
        {
          "request":  {"method": "POST", "url": "https://…/api/rl/jobs",
                       "headers": {"authorization": "Bearer <redacted>", …},
                       "body": {"job_type": "rl", …}},
          "response": {"status": 200, "headers": {"content-type": "application/json"},
                       "body": {"job_id": "job-1", "status": "queued"}}
        }
      ],
      "test_id": "tests/test_rl.py::test_train",
      "version": 1
    }

Bodies are stored as JSON values when the ``content-type`` says JSON (so a reviewer reads the
payload, not an escaped string), as text otherwise, and as base64 with ``"body_encoding":
"base64"`` when they are not UTF-8. A JSON-typed body that failed to parse (or is JSON ``null``)
is kept as text with ``"body_encoding": "text"``. An empty body is ``null``. Header names are
lower-case; a header sent several times is a list. Keys are sorted and the file is indented and
newline-terminated, so a re-recording shows up as a readable diff.

Transport details that differ between two recordings of the same exchange, or that would be
wrong on replay, are not stored: ``content-length`` (bodies are re-serialised), ``content-encoding``
(bodies are stored decoded), hop-by-hop headers and ``date``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording.redaction import Redactor, SecretLeakError, find_leaks
from pytest_synth_rl.reporting.files import (
    UnreadableDocument,
    atomic_write_text,
    parse_json_document,
    safe_file_stem,
)

__all__ = [
    "FORMAT_VERSION",
    "Cassette",
    "CassetteError",
    "Interaction",
    "RecordedRequest",
    "RecordedResponse",
    "cassette_path",
    "decode_body",
    "encode_body",
]

FORMAT_VERSION = 1

#: Headers never written to a cassette (see the module docstring for why).
DROPPED_HEADERS: frozenset[str] = frozenset(
    {
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "date",
    }
)

Headers = dict[str, str | list[str]]


class CassetteError(SynthError):
    """A cassette file could not be read or does not follow the format."""


def cassette_path(directory: str | os.PathLike[str], test_id: str) -> Path:
    """Where the cassette of *test_id* lives in *directory* (one file per test, stable name)."""
    return Path(directory) / f"{safe_file_stem(test_id)}.json"


def _is_json_type(headers: Mapping[str, Any]) -> bool:
    value = headers.get("content-type", "")
    if isinstance(value, list):
        value = value[0] if value else ""
    media = str(value).split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def encode_body(content: bytes, headers: Mapping[str, Any]) -> tuple[Any, str | None]:
    """``(body, body_encoding)`` for a cassette; ``body_encoding`` is None for the default form."""
    if not content:
        return None, None
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(content).decode("ascii"), "base64"
    if _is_json_type(headers):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text, "text"
        # A JSON ``null`` body would read back as "no body"; keep it as text instead.
        return (value, None) if value is not None else (text, "text")
    return text, None


def decode_body(body: Any, encoding: str | None, headers: Mapping[str, Any]) -> bytes:
    """The bytes to send for a stored body (inverse of :func:`encode_body`, modulo whitespace)."""
    if body is None:
        return b""
    if encoding == "base64":
        return base64.b64decode(str(body))
    if encoding == "text" or (encoding is None and not _is_json_type(headers)):
        return str(body).encode("utf-8")
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def header_value(headers: Mapping[str, str | list[str]], name: str) -> str | None:
    value = headers.get(name.lower())
    if isinstance(value, list):
        return value[0] if value else None
    return value


def header_items(headers: Mapping[str, str | list[str]]) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for name, value in headers.items():
        for single in value if isinstance(value, list) else [value]:
            items.append((name, single))
    return items


@dataclass(repr=False)
class RecordedRequest:
    method: str
    url: str
    headers: Headers = field(default_factory=dict)
    body: Any = None
    body_encoding: str | None = None

    def __repr__(self) -> str:
        # A record built by hand or read from an old file may hold a raw ``?api_key=...`` URL;
        # its repr goes into tracebacks and ``-l`` output, so it is always shown redacted.
        redactor = Redactor()
        return (
            f"RecordedRequest(method={self.method!r}, url={redactor.url(self.url)!r}, "
            f"headers={redactor.headers_of(header_items(self.headers))!r}, "
            f"body={redactor.json(self.body)!r}, body_encoding={self.body_encoding!r})"
        )

    def content(self) -> bytes:
        return decode_body(self.body, self.body_encoding, self.headers)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "method": self.method,
            "url": self.url,
            "headers": self.headers,
            "body": self.body,
        }
        if self.body_encoding:
            data["body_encoding"] = self.body_encoding
        return data


@dataclass
class RecordedResponse:
    status: int
    headers: Headers = field(default_factory=dict)
    body: Any = None
    body_encoding: str | None = None

    def content(self) -> bytes:
        return decode_body(self.body, self.body_encoding, self.headers)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "headers": self.headers, "body": self.body}
        if self.body_encoding:
            data["body_encoding"] = self.body_encoding
        return data


@dataclass
class Interaction:
    """One recorded exchange (already redacted)."""

    request: RecordedRequest
    response: RecordedResponse

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "response": self.response.to_json()}

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Interaction:
        if not isinstance(data, Mapping):
            raise CassetteError(f"{where}: expected an object with request and response")
        request = _section(data, "request", where)
        response = _section(data, "response", where)
        method = request.get("method")
        url = request.get("url")
        status = response.get("status")
        if not isinstance(method, str) or not method:
            raise CassetteError(f"{where}.request.method: expected an HTTP method string, got {method!r}")
        if not isinstance(url, str) or not url:
            raise CassetteError(f"{where}.request.url: expected a URL string, got {url!r}")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise CassetteError(f"{where}.response.status: expected an HTTP status 100-599, got {status!r}")
        interaction = cls(
            request=RecordedRequest(
                method=method.upper(),
                url=url,
                headers=_headers(request.get("headers"), f"{where}.request.headers"),
                body=request.get("body"),
                body_encoding=_encoding(request.get("body_encoding"), f"{where}.request"),
            ),
            response=RecordedResponse(
                status=status,
                headers=_headers(response.get("headers"), f"{where}.response.headers"),
                body=response.get("body"),
                body_encoding=_encoding(response.get("body_encoding"), f"{where}.response"),
            ),
        )
        _check_url(url, f"{where}.request.url")
        for side, part in (("request", request), ("response", response)):
            _check_body(part, f"{where}.{side}")
        return interaction


def _check_url(url: str, where: str) -> None:
    """A URL that cannot be matched or sent is reported now, not as a raw error on replay."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as error:
        raise CassetteError(f"{where}: {url!r} is not a valid URL ({error})") from None
    if not parts.scheme or not parts.netloc:
        raise CassetteError(f"{where}: {url!r} is not an absolute http(s) URL")


def _check_body(part: Mapping[str, Any], where: str) -> None:
    if part.get("body_encoding") != "base64" or part.get("body") is None:
        return
    body = part.get("body")
    try:
        base64.b64decode(body if isinstance(body, str) else "\0", validate=True)
    except (binascii.Error, ValueError) as error:
        raise CassetteError(
            f"{where}.body: body_encoding is base64 but the body is not valid base64 ({error})"
        ) from None


def _section(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise CassetteError(f"{where}.{key}: expected an object, got {value!r}")
    return value


def _headers(value: Any, where: str) -> Headers:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CassetteError(f"{where}: expected an object of header name -> value")
    out: Headers = {}
    for name, item in value.items():
        if isinstance(item, str):
            out[str(name).lower()] = item
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            out[str(name).lower()] = list(item)
        else:
            raise CassetteError(f"{where}.{name}: expected a string or a list of strings, got {item!r}")
    return out


def _encoding(value: Any, where: str) -> str | None:
    if value in (None, "base64", "text"):
        return value  # type: ignore[no-any-return]
    raise CassetteError(f'{where}.body_encoding: expected "base64" or "text", got {value!r}')


class Cassette:
    """The interactions of one test, in the order they happened.

    ``existed`` tells whether the cassette was loaded from a file that existed, which is what the
    ``once`` record mode decides on.
    """

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
        where = str(self.path) if self.path else "<memory>"
        return f"Cassette({where!r}, interactions={len(self.interactions)})"

    def __len__(self) -> int:
        return len(self.interactions)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(self.interactions)

    def append(self, interaction: Interaction) -> None:
        self.interactions.append(interaction)

    # -- serialisation ------------------------------------------------------------------------
    def to_json(self) -> str:
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "interactions": [i.to_json() for i in self.interactions],
        }
        if self.test_id:
            document["test_id"] = self.test_id
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, path: str | os.PathLike[str] | None = None) -> Cassette:
        where = str(path) if path is not None else "cassette"
        try:
            data = parse_json_document(text)
        except UnreadableDocument as error:
            raise CassetteError(
                f"{where} {error}",
                hint="fix the file, or delete it and re-record with --synth-record=rewrite",
            ) from None
        if not isinstance(data, Mapping) or not isinstance(data.get("interactions"), list):
            raise CassetteError(
                f'{where}: expected an object with an "interactions" list',
                hint="cassettes are written by pytest-synth-rl; re-record with --synth-record=rewrite",
            )
        if data.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise CassetteError(
                f"{where} has format version {data.get('version')!r}; this plugin reads "
                f"version {FORMAT_VERSION}",
                hint="re-record it with --synth-record=rewrite",
            )
        interactions = [
            Interaction.from_json(item, where=f"{where}: interactions[{index}]")
            for index, item in enumerate(data["interactions"])
        ]
        test_id = data.get("test_id")
        return cls(path, interactions, test_id=test_id if isinstance(test_id, str) else None, existed=True)

    # -- files --------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """Read a cassette file; :class:`CassetteError` if it is missing or malformed."""
        try:
            text = Path(path).read_bytes()
        except FileNotFoundError:
            raise CassetteError(
                f"cassette {path} does not exist", hint="record it with --synth-record=once"
            ) from None
        except OSError as error:
            raise CassetteError(f"cannot read cassette {path}: {error.strerror}") from None
        return cls.from_json(text, path=path)

    @classmethod
    def load_or_new(cls, path: str | os.PathLike[str], *, test_id: str | None = None) -> Cassette:
        """The cassette at *path*, or an empty one (``existed=False``) if there is no file.

        A cassette recorded for another test (a copied or renamed file) is refused: replaying
        someone else's exchanges would make this test pass or fail for the wrong reasons.
        """
        if Path(path).is_file():
            cassette = cls.load(path)
            if cassette.test_id and test_id and cassette.test_id != test_id:
                raise CassetteError(
                    f"cassette {path} was recorded for test {cassette.test_id!r}, not for {test_id!r}",
                    hint="delete it and re-record this test with --synth-record=rewrite, or move it "
                    "back to the test it belongs to",
                )
            cassette.test_id = cassette.test_id or test_id
            return cassette
        return cls(path, test_id=test_id, existed=False)

    def save(self, path: str | os.PathLike[str] | None = None, *, secrets: Iterable[str | None] = ()) -> Path:
        """Write the cassette atomically, refusing to write one that contains a secret.

        The serialised text goes to a temporary file which is re-read and scanned for every known
        secret (plus *secrets*); if one is found the temporary file is deleted, any previous
        cassette is left as it was, and :class:`SecretLeakError` is raised.
        """
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

        written = atomic_write_text(target, self.to_json(), check=scan)
        self.path = target
        self.existed = True
        return written
