"""Is the online backend there at all? One cheap probe per run instead of retries per test.

Any HTTP answer to a GET of the URL's root, even a 404, counts as reachable. The probe speaks
``http.client`` on purpose, so no mock or cassette recorder active in the test sees it.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from pytest_synth_rl.taskapp.tls import shared_ssl_context

#: Delays between attempts: a backend that is still starting gets about a second to answer.
RETRY_DELAYS: tuple[float, ...] = (0.25, 0.75)


def probe_backend(
    url: str,
    *,
    timeout: float = 5.0,
    delays: tuple[float, ...] = RETRY_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """``None`` when something answers HTTP at *url*, else why not (the last attempt's error)"""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"it is not an http(s) URL with a host (scheme {parts.scheme or 'missing'!r})"
    try:
        port = parts.port
    except ValueError as exc:
        return f"its port is not a number ({exc})"
    host = parts.hostname
    for delay in (*delays, None):
        conn = (
            http.client.HTTPSConnection(host, port, timeout=timeout, context=shared_ssl_context())
            if parts.scheme == "https"
            else http.client.HTTPConnection(host, port, timeout=timeout)
        )
        try:
            conn.request("GET", "/")
            conn.getresponse().read(1024)
            return None
        except (OSError, http.client.HTTPException) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        if delay is not None:
            sleep(delay)
    return f"{failure} ({len(delays) + 1} attempts)"
