"""Is this address on this machine? One answer for everyone who asks.

The plugin's network rule is "loopback only": the fake backend runs real rollouts only against
loopback task apps, its respx mount lets loopback traffic pass through, cassette replay never
intercepts loopback, and the contract check treats a loopback task app as local. They all ask here.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback_host", "is_loopback_url"]

# The common spellings, answered without parsing (this sits on the respx mount's hot path).
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and any loopback IP (``127.0.0.0/8``, ``::1``, bracketed or not)."""
    if host in _LOOPBACK_NAMES:
        return True
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    """True if *url*'s host is loopback; False for anything unparsable."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return is_loopback_host(host)
