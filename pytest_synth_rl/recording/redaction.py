"""Scrubbing credentials out of recorded traffic, and proving they are gone: credential headers,
credential-named query parameters and JSON fields, and every known secret value (in any encoded
form) are replaced; :func:`find_leaks` then scans what is written."""

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

#: What a redacted value is replaced by.
REDACTED = "<redacted>"

#: Headers whose values are always credentials (compared lower-case).
SENSITIVE_HEADERS: frozenset[str] = CREDENTIAL_HEADERS | {"idempotency-key"}

# Whole words of a name (split on -, _, ., space and camelCase): "monkey" is not a key, "apiKey" is.
_SENSITIVE_WORDS: frozenset[str] = frozenset(
    {"key", "keys", "apikey", "token", "tokens", "secret", "secrets", "password", "passwd", "pwd"}
    | {"authorization", "auth", "credential", "credentials", "cookie", "ciphertext"}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[-_.\s]+")
_SCHEME_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9._~+/-]*)\s+\S")


def is_sensitive_name(name: str) -> bool:
    """Whether a header, query parameter or JSON field called *name* holds a credential."""
    words = _SEPARATORS.split(_CAMEL.sub("_", name).lower())
    return words[0] != "public" and any(word in _SENSITIVE_WORDS for word in words)


class SecretLeakError(SynthError):
    """A cassette still contained a secret after redaction, so it was not written."""


class Redactor:
    """Redacts headers, URLs, JSON values and text: *secrets* and ``masking.known_secrets()``
    (asked on every call), and credential-named fields."""

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
        """Every secret value to scrub, longest first."""
        return known_secrets(self._extra)

    def text(self, value: str, secrets: list[str] | None = None) -> str:
        """Replace every known secret in *value*, in every recognized encoded form."""
        for secret in self.secrets() if secrets is None else secrets:
            value = scrub(value, secret, self.placeholder)
        return value

    def raw_bytes(self, value: bytes) -> bytes:
        """Replace every known secret in a body that is not text (raw, or in an ASCII form)."""
        for secret in self.secrets():
            value = value.replace(secret.encode("utf-8"), self.placeholder.encode("ascii"))
            # latin-1 maps bytes to characters one to one, so ASCII forms are found in place.
            value = scrub(value.decode("latin-1"), secret, self.placeholder).encode("latin-1")
        return value

    def credential(self, name: str, value: str) -> str:
        """The placeholder for a credential named *name*; auth values keep their scheme."""
        match = _SCHEME_VALUE.match(value.strip())
        if match and name.lower() in ("authorization", "proxy-authorization"):
            return f"{match.group(1)} {self.placeholder}"
        return self.placeholder

    def header(self, name: str, value: str, secrets: list[str] | None = None) -> str:
        if name.lower() in self.headers or is_sensitive_name(name.lower()):
            return self.credential(name, value)
        return self.text(value, secrets)

    def headers_of(self, items: Iterable[tuple[str, str]]) -> dict[str, str | list[str]]:
        """Redacted headers as a mapping: lower-case names, repeated names as lists."""
        secrets = self.secrets()
        grouped: dict[str, list[str]] = {}
        for name, value in items:
            grouped.setdefault(name.lower(), []).append(self.header(name, value, secrets))
        return {name: values[0] if len(values) == 1 else values for name, values in grouped.items()}

    def query(self, query: str, secrets: list[str] | None = None) -> str:
        """Redact an ``a=1&b=2`` string (a URL query or a form body); clean pairs keep their encoding."""
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
        """Redact credential query parameters, userinfo passwords and secret values in a URL."""
        secrets = self.secrets()
        parts = urlsplit(url)
        netloc = parts.netloc
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{self.placeholder}@{hostport}"
        clean = [self.text(netloc, secrets), self.text(parts.path, secrets), self.query(parts.query, secrets)]
        return urlunsplit((parts.scheme, *clean, self.text(parts.fragment, secrets)))

    def json(self, value: Any, secrets: list[str] | None = None, *, name: str | None = None) -> Any:
        """A redacted copy of a JSON value (text items of a credential-named list included)."""
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
    """Every string of a JSON document, unescaped, and every base64 body decoded."""
    if isinstance(document, str):
        yield document
    elif isinstance(document, Mapping):
        body = document.get("body")
        if document.get("body_encoding") == "base64" and isinstance(body, str):
            with contextlib.suppress(ValueError):  # not base64: the raw scan covers the text
                yield base64.b64decode(body, validate=True).decode("utf-8", "surrogateescape")
        for key, value in document.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(document, list):
        for item in document:
            yield from _strings(item)


def find_leaks(data: bytes, secrets: Iterable[str | None] = ()) -> list[str]:
    """Masked forms of the known secrets and *secrets* in *data*, its decoded strings and base64 bodies."""
    blobs = [data.decode("utf-8", "surrogateescape")]
    with contextlib.suppress(UnreadableDocument):
        blobs.extend(_strings(parse_json_document(data)))
    return [mask_secret(s) for s in known_secrets(secrets) if any(contains(b, s) for b in blobs)]
