"""One verifying SSL context per process, for every short-lived HTTP client the plugin creates.

httpx builds (and loads the CA bundle into) a fresh context for each client, about 20 ms; a
probe before every submission and a client per job would pay that each time. A context is safe
to share between clients and threads.
"""

from __future__ import annotations

import ssl
import threading

import httpx

__all__ = ["shared_ssl_context"]

_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """The process's verifying SSL context, created on first use."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context
