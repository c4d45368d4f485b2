"""Keeping API keys out of every string we produce: known secrets are registered once, :func:`redact`
scrubs them from any text, :func:`mask_test_report` from every test report."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import warnings
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any, TypeVar, cast

from pytest_synth_rl.secrets.forms import scrub_parts, scrub_whole

#: Environment variables whose values are treated as secrets wherever they appear.
SECRET_ENV_VARS: tuple[str, ...] = (
    "SYNTH_API_KEY",
    "ENVIRONMENT_API_KEY",
    "DEV_ENVIRONMENT_API_KEY",
    "ENVIRONMENT_API_KEY_ALIASES",
    "OPENAI_API_KEY",
    "GROQ_API_KEY",
)

_MIN_REDACT_LEN = 6
T = TypeVar("T")

_lock = threading.Lock()
_registered: set[str] = set()
_warned_short: set[str] = set()
_MEMO_TEXT = 1024


def mask_secret(value: str | None) -> str:
    """``sk_l…23``; short: ``…``."""
    if not value:
        return "<none>"
    return "…" if len(value) < 10 else f"{value[:4]}…{value[-2:]}"


class SynthSecretWarning(UserWarning):
    """A key too short to be masked in output (fewer than 6 characters)."""


def short_key_warning(value: str | None, subject: str = "a key") -> SynthSecretWarning | None:
    if not value or len(value) >= _MIN_REDACT_LEN:
        return None
    with _lock:
        if value in _warned_short:
            return None
        _warned_short.add(value)
    return SynthSecretWarning(
        f"{subject} of {len(value)} character(s) cannot be masked in output: text shorter than "
        f"{_MIN_REDACT_LEN} characters is too common to remove safely, so this key may show in "
        f"reports and logs; use a key of {_MIN_REDACT_LEN} or more characters"
    )


def register_secret(value: str | None) -> None:
    if value and len(value) >= _MIN_REDACT_LEN:
        with _lock:
            _registered.add(value)
        return
    if (warning := short_key_warning(value)) is not None:
        from pytest_synth_rl.secrets.callers import outside_stacklevel

        warnings.warn(warning, stacklevel=outside_stacklevel())


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_registered)


def restore_registered_secrets(snapshot: Iterable[str]) -> None:
    with _lock:
        _registered.clear()
        _registered.update(snapshot)


def known_secrets(extra: Iterable[str | None] = ()) -> list[str]:
    with _lock:
        found = set(_registered)
    for raw in filter(None, map(os.environ.get, SECRET_ENV_VARS)):
        found.update([raw, *(part.strip() for part in raw.split(",") if "," in raw)])
    found.update(v for v in extra if v)
    return sorted((s for s in found if len(s) >= _MIN_REDACT_LEN), key=len, reverse=True)


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    if not text or not (secrets := tuple(known_secrets(extra))):
        return text
    return (_scrub if len(text) > _MEMO_TEXT else _scrub_memo)(text, secrets)


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:  # whole forms first: one secret may be part of another
        text = scrub_whole(text, secret, mask_secret(secret))
    for secret in secrets:
        text = scrub_parts(text, secret, mask_secret(secret))
    return text


#: Short texts already redacted, by the secrets known then.
_scrub_memo = functools.lru_cache(maxsize=512)(_scrub)


def redact_value(value: T, depth: int = 8) -> T:
    """*value* redacted: a string, a path, or strings in plain lists, tuples and dicts."""
    found: Any = value
    masked: Any = value
    if isinstance(found, str):
        masked = redact(found)
    elif isinstance(found, PurePath):
        masked = type(found)(redact(str(found)))
    elif depth and type(found) in (list, tuple):
        masked = type(found)(redact_value(item, depth - 1) for item in found)
    elif depth and type(found) is dict:
        masked = {redact_value(k, depth - 1): redact_value(v, depth - 1) for k, v in found.items()}
    return value if masked == value else cast(T, masked)


class Secret:
    """A string that must not be shown: its repr and str are masked; ``.value`` is the key."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        register_secret(value)

    @property
    def value(self) -> str:
        return self._value

    @property
    def masked(self) -> str:
        return mask_secret(self._value)

    def __repr__(self) -> str:
        return f"Secret({self.masked!r})"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Secret):
            return self._value == other.value
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)


def key_problem(key: str) -> str | None:
    for index, char in enumerate(key):
        if not " " <= char <= "~":
            where = f"character {index + 1} of {len(key)}"
            if char in "\r\n":
                return f"contains a line break ({where}); an HTTP header cannot carry it"
            return (
                f"contains {char!r} ({where}); keys travel in HTTP headers, which take printable ASCII only"
            )
    return None


def secret_or_none(value: str | Secret | None) -> Secret | None:
    if isinstance(value, Secret):
        return value or None
    return Secret(value) if value else None


CREDENTIAL_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "x-api-keys", "cookie", "set-cookie"}
)


class SecretHeaders(dict[str, str]):
    """A ``dict`` of request headers whose repr masks credentials (``Bearer sk_l…23``)."""

    def __repr__(self) -> str:
        shown = {name: masked_header(name, value) for name, value in self.items()}
        return f"SecretHeaders({shown!r})"

    __str__ = __repr__


def masked_header(name: str, value: str) -> str:
    """A header value as it may be shown: a credential's key masked (each of a comma list), a
    scheme such as ``Bearer`` kept; any other header with known secrets redacted."""
    if name.lower() not in CREDENTIAL_HEADERS:
        return redact(value)
    scheme, _, token = value.partition(" ")
    if token and scheme.isalpha():
        return f"{scheme} {mask_secret(token.strip())}"
    return ", ".join(mask_secret(part.strip()) for part in value.split(","))


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def mask_handler(handler: logging.Handler | logging.Logger) -> None:
    if not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())


def get_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    mask_handler(logger)
    return logger


def _masked(value: Any, seen: set[int]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_masked(item, seen) for item in value]
    if isinstance(value, tuple):
        return tuple(_masked(item, seen) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and id(value) not in seen:
        seen.add(id(value))
        for f in dataclasses.fields(value):
            object.__setattr__(value, f.name, _masked(getattr(value, f.name), seen))
    return value


def mask_test_report(report: Any) -> None:
    """Replace any known secret in *report*'s failure text and captured sections, in place."""
    if report.longrepr is not None and redact(text := str(report.longrepr)) != text:
        report.longrepr = _masked(report.longrepr, set())
        if redact(text := str(report.longrepr)) != text:  # a form we cannot walk
            report.longrepr = redact(text)
    if report.sections:
        report.sections = [(title, redact(content)) for title, content in report.sections]
