"""Scrubbing credentials out of recorded traffic, and proving they are gone.

Cassettes get committed, so a key in one is a leaked key. Redaction therefore happens when an
exchange is captured (nothing unredacted is ever held in a cassette), on requests *and* responses,
by three independent rules, any one of which suffices:

1. header values of known credential headers (``Authorization`` keeps its scheme:
   ``Bearer <redacted>``) and of any header whose name looks like a credential;
2. query parameters and JSON fields, at any depth, whose *name* looks like a credential
   (``api_key``, ``accessToken``, ``client-secret``, ``password`` ...), when their value is text;
3. any occurrence of a *known secret value* (``masking.known_secrets()``: registered keys, the
   secret environment variables, plus secrets passed explicitly), wherever it appears, also
   percent-encoded, JSON ``\\u``-escaped or base64'd (see :mod:`pytest_synth_rl.secrets.forms`).

Then, because rules can be wrong, :func:`find_leaks` scans the bytes actually written; a cassette
that still contains a known secret is refused with :class:`SecretLeakError`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.secrets.forms import contains, scrub
from pytest_synth_rl.secrets.masking import known_secrets, mask_secret

__all__ = [
    "REDACTED",
    "SENSITIVE_HEADERS",
    "Redactor",
    "SecretLeakError",
    "find_leaks",
    "is_sensitive_name",
]

#: What a redacted value is replaced by.
REDACTED = "<redacted>"

#: Headers whose values are always credentials (compared lower-case).
SENSITIVE_HEADERS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "x-api-keys",
        "idempotency-key",
        "cookie",
        "set-cookie",
    }
)

# A name is sensitive when one of its words (split on -, _, ., space and camelCase) is one of
# these. Word matching, not substring matching: "keyboard" and "monkey" are not keys, "apiKey" is.
_SENSITIVE_WORDS: frozenset[str] = frozenset(
    {
        "key",
        "keys",
        "apikey",
        "token",
        "tokens",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "ciphertext",  # a key sealed for the backend is still that key, to whoever holds the box
    }
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[-_.\s]+")
_SCHEME_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9._~+/-]*)\s+\S")


def is_sensitive_name(name: str) -> bool:
    """Whether a header, query parameter or JSON field called *name* holds a credential.

    A ``public_key`` does not: it is published to be used (the backend's sealing key, which a
    replayed key upload needs as recorded).
    """
    words = _SEPARATORS.split(_CAMEL.sub("_", name).lower())
    if words[0] == "public":
        return False
    return any(word in _SENSITIVE_WORDS for word in words)


class SecretLeakError(SynthError):
    """A cassette still contained a secret after redaction, so it was not written."""


class Redactor:
    """Applies the redaction rules to headers, URLs, JSON values and text.

    *secrets* adds values to scrub beyond those :func:`masking.known_secrets` knows; they are
    looked up on every call, so a key registered or exported after the redactor was created is
    still caught.
    """

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

    # -- text ----------------------------------------------------------------------------------
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

    # -- headers -------------------------------------------------------------------------------
    def credential(self, name: str, value: str) -> str:
        """The placeholder for a credential named *name*; auth values keep their scheme."""
        if name.lower() in ("authorization", "proxy-authorization"):
            match = _SCHEME_VALUE.match(value.strip())
            if match:
                return f"{match.group(1)} {self.placeholder}"
        return self.placeholder

    def header(self, name: str, value: str, secrets: list[str] | None = None) -> str:
        lowered = name.lower()
        if lowered in self.headers or is_sensitive_name(lowered):
            return self.credential(lowered, value)
        return self.text(value, secrets)

    def headers_of(self, items: Iterable[tuple[str, str]]) -> dict[str, str | list[str]]:
        """Redacted headers as a readable mapping: lower-case names, repeated names as lists."""
        secrets = self.secrets()
        out: dict[str, str | list[str]] = {}
        for name, value in items:
            key = name.lower()
            clean = self.header(key, value, secrets)
            existing = out.get(key)
            if existing is None:
                out[key] = clean
            elif isinstance(existing, list):
                existing.append(clean)
            else:
                out[key] = [existing, clean]
        return out

    # -- URLs and forms ----------------------------------------------------------------------
    def query(self, query: str, secrets: list[str] | None = None) -> str:
        """Redact an ``a=1&b=2`` string (a URL query or a form body).

        Pairs that need no redaction keep their original encoding, so the text stays as close to
        what was sent as possible.
        """
        secrets = self.secrets() if secrets is None else secrets
        out = []
        for pair in query.split("&") if query else []:
            raw_name, sep, raw_value = pair.partition("=")
            if sep and is_sensitive_name(unquote_plus(raw_name)):
                out.append(f"{self.text(raw_name, secrets)}={self.placeholder}")
                continue
            value = unquote_plus(raw_value)
            cleaned = self.text(value, secrets)
            if cleaned != value:
                raw_value = quote(cleaned, safe="<>")
            out.append(f"{self.text(raw_name, secrets)}{sep}{raw_value}")
        return "&".join(out)

    def url(self, url: str) -> str:
        """Redact credential query parameters, userinfo passwords and secret values in a URL."""
        secrets = self.secrets()
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            if ":" in userinfo:
                netloc = f"{userinfo.split(':', 1)[0]}:{self.placeholder}@{hostport}"
        return urlunsplit(
            (
                parts.scheme,
                self.text(netloc, secrets),
                self.text(parts.path, secrets),
                self.query(parts.query, secrets),
                self.text(parts.fragment, secrets),
            )
        )

    # -- JSON ----------------------------------------------------------------------------------
    def json(self, value: Any, secrets: list[str] | None = None) -> Any:
        """A redacted copy of a JSON value: credential-named text fields and secret values."""
        secrets = self.secrets() if secrets is None else secrets
        return self._json(value, secrets, name=None)

    def _json(self, value: Any, secrets: list[str], *, name: str | None) -> Any:
        if isinstance(value, str):
            if name is not None and is_sensitive_name(name):
                return self.credential(name, value)
            return self.text(value, secrets)
        if isinstance(value, Mapping):
            return {self.text(str(k), secrets): self._json(v, secrets, name=str(k)) for k, v in value.items()}
        if isinstance(value, list):
            # Text items of a credential-named list ("keys": ["a", "b"]) are credentials too.
            return [self._json(item, secrets, name=name) for item in value]
        return value


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:  # not base64 after all: the raw scan already covers the text
        return None


def _embedded_blobs(document: Any) -> Iterable[bytes]:
    """Decoded base64 bodies of a cassette document, so binary bodies are scanned too."""
    if isinstance(document, Mapping):
        if document.get("body_encoding") == "base64" and isinstance(document.get("body"), str):
            blob = _b64(document["body"])
            if blob is not None:
                yield blob
        for value in document.values():
            yield from _embedded_blobs(value)
    elif isinstance(document, list):
        for item in document:
            yield from _embedded_blobs(item)


def _texts(document: Any) -> Iterable[str]:
    """Every string of a JSON document, unescaped: a text body that itself holds escaped JSON
    is escaped twice in the file, and only its decoded form shows the single escaping."""
    if isinstance(document, str):
        yield document
    elif isinstance(document, Mapping):
        for key, value in document.items():
            yield str(key)
            yield from _texts(value)
    elif isinstance(document, list):
        for item in document:
            yield from _texts(item)


def find_leaks(data: bytes, secrets: Iterable[str | None] = ()) -> list[str]:
    """Masked forms of every known secret (plus *secrets*) present in *data*.

    Looks for each secret raw, JSON-escaped (also ``\\u``), percent-encoded and base64'd, in the
    file, in each of its decoded strings, and inside decoded base64 bodies.
    """
    blobs = [data.decode("utf-8", "surrogateescape")]
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        document = None  # not a cassette document: scanning the raw bytes is all we can do
    blobs.extend(blob.decode("utf-8", "surrogateescape") for blob in _embedded_blobs(document))
    blobs.extend(_texts(document))
    found = []
    for secret in known_secrets(secrets):
        if any(contains(blob, secret) for blob in blobs):
            found.append(mask_secret(secret))
    return found
