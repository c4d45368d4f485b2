"""Is this address on this machine? The plugin's one loopback rule."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pytest_synth_rl.errors import TaskAppError


def _loopback_address(host: str) -> str | None:
    if host.lower() == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return str(address) if address.is_loopback else None


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and any loopback IP (``127.0.0.0/8``, ``::1``, bracketed or not)."""
    return _loopback_address(host.strip("[]")) is not None


def is_loopback_url(url: str) -> bool:
    """True if *url*'s host is loopback; False for anything unparsable."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return is_loopback_host(host)


def normalise_loopback_host(host: str) -> str:
    """The literal loopback address to bind for *host*."""
    text = (host or "").strip()
    address = _loopback_address(text[1:-1] if text[:1] + text[-1:] == "[]" else text)
    if address is None:
        raise TaskAppError(
            f"host {host!r} is not a loopback address; task apps are only served on loopback",
            hint="use host='127.0.0.1' (the default), 'localhost' or '::1'",
        )
    return address


def url_host(host: str) -> str:
    """*host* as it appears in a URL (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host else host
