"""Scrubbing credentials (credential headers, credential-named fields, every known secret in any
form) out of recorded traffic; :func:`find_leaks` then scans what is written."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.reporting.files import UnreadableDocument, parse_json_document
from pytest_synth_rl.secrets.forms import contains, scrub
from pytest_synth_rl.secrets.masking import CREDENTIAL_HEADERS, known_secrets, mask_secret

REDACTED = "<redacted>"

SENSITIVE_HEADERS: frozenset[str] = CREDENTIAL_HEADERS | {"idempotency-key"}

_SENSITIVE_WORDS: frozenset[str] = frozenset(
    {"key", "keys", "apikey", "token", "tokens", "secret", "secrets", "password", "passwd", "pwd"}
    | {"authorization", "auth", "credential", "credentials", "cookie", "ciphertext"}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[-_.\s]+")
_SCHEME_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9._~+/-]*)\s+\S")


def is_sensitive_name(name: str) -> bool:
    words = _SEPARATORS.split(_CAMEL.sub("_", name).lower())
    return words[0] != "public" and any(word in _SENSITIVE_WORDS for word in words)


class SecretLeakError(SynthError):
    pass


class Redactor:
    """Redacts headers, URLs, JSON values and text: *secrets*, ``known_secrets()`` and credential names."""

    def __init__(
        self,
        secrets: Iterable[str | None] = (),
        *,
        headers: Iterable[str] = SENSITIVE_HEADERS,
        placeholder: str = REDACTED,
    ) -> None:
        self._extra = tuple(s for s in secrets if s)
        self.headers = frozenset(h.lower() for h in headers)
        self.placeholder = placeholder

    def secrets(self) -> list[str]:
        return known_secrets(self._extra)

    def text(self, value: str, secrets: list[str] | None = None) -> str:
        for secret in self.secrets() if secrets is None else secrets:
            value = scrub(value, secret, self.placeholder)
        return value

    def raw_bytes(self, value: bytes) -> bytes:
        for secret in self.secrets():
            value = value.replace(secret.encode("utf-8"), self.placeholder.encode("ascii"))
            value = scrub(value.decode("latin-1"), secret, self.placeholder).encode("latin-1")
        return value

    def credential(self, name: str, value: str) -> str:
        match = _SCHEME_VALUE.match(value.strip())
        if match and name.lower() in ("authorization", "proxy-authorization"):
            return f"{match.group(1)} {self.placeholder}"
        return self.placeholder

    def header(self, name: str, value: str, secrets: list[str] | None = None) -> str:
        if name.lower() in self.headers or is_sensitive_name(name.lower()):
            return self.credential(name, value)
        return self.text(value, secrets)

    def headers_of(self, items: Iterable[tuple[str, str]]) -> dict[str, str | list[str]]:
        secrets = self.secrets()
        grouped: dict[str, list[str]] = {}
        for name, value in items:
            grouped.setdefault(name.lower(), []).append(self.header(name, value, secrets))
        return {name: values[0] if len(values) == 1 else values for name, values in grouped.items()}

    def query(self, query: str, secrets: list[str] | None = None) -> str:
        secrets = self.secrets() if secrets is None else secrets
        out = []
        for pair in query.split("&") if query else []:
            raw_name, sep, raw_value = pair.partition("=")
            name = self.text(raw_name, secrets)
            if sep and is_sensitive_name(unquote_plus(raw_name)):
                out.append(f"{name}={self.placeholder}")
                continue
            value = unquote_plus(raw_value)
            cleaned = self.text(value, secrets)
            out.append(f"{name}{sep}{quote(cleaned, safe='<>') if cleaned != value else raw_value}")
        return "&".join(out)

    def url(self, url: str) -> str:
        secrets = self.secrets()
        parts = urlsplit(url)
        netloc = parts.netloc
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{self.placeholder}@{hostport}"
        clean = [self.text(netloc, secrets), self.text(parts.path, secrets), self.query(parts.query, secrets)]
        return urlunsplit((parts.scheme, *clean, self.text(parts.fragment, secrets)))

    def json(self, value: Any, secrets: list[str] | None = None, *, name: str | None = None) -> Any:
        secrets = self.secrets() if secrets is None else secrets
        if isinstance(value, str):
            if name is not None and is_sensitive_name(name):
                return self.credential(name, value)
            return self.text(value, secrets)
        if isinstance(value, Mapping):
            return {self.text(str(k), secrets): self.json(v, secrets, name=str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(item, secrets, name=name) for item in value]
        return value


def _strings(document: Any) -> Iterator[str]:
    if isinstance(document, str):
        yield document
    elif isinstance(document, Mapping):
        body = document.get("body")
        if document.get("body_encoding") == "base64" and isinstance(body, str):
            with contextlib.suppress(ValueError):
                yield base64.b64decode(body, validate=True).decode("utf-8", "surrogateescape")
        for key, value in document.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(document, list):
        for item in document:
            yield from _strings(item)


def find_leaks(data: bytes, secrets: Iterable[str | None] = ()) -> list[str]:
    blobs = [data.decode("utf-8", "surrogateescape")]
    with contextlib.suppress(UnreadableDocument):
        blobs.extend(_strings(parse_json_document(data)))
    return [mask_secret(s) for s in known_secrets(secrets) if any(contains(b, s) for b in blobs)]
