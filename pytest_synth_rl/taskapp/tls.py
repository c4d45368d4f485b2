"""One verifying SSL context per process, its CAs loaded on first TLS use."""

from __future__ import annotations

import functools
import os
import ssl
import sys
import threading
from typing import Any


class CertsOnFirstUse(ssl.SSLContext):
    """httpx's default verifying context, loading its CAs (as httpx finds them) when first used."""

    def __new__(cls) -> CertsOnFirstUse:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)  # hostname check and CERT_REQUIRED
        if sys.version_info >= (3, 13):  # what ssl.create_default_context adds there
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
        return context

    def __init__(self) -> None:
        super().__init__()
        self._load_lock = threading.Lock()
        self.certs_loaded = False

    def load_certs(self) -> None:
        with self._load_lock:
            if self.certs_loaded:
                return
            cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
            if not cafile and not capath:
                import certifi

                cafile = certifi.where()
            self.load_verify_locations(cafile=cafile or None, capath=None if cafile else capath)
            self.certs_loaded = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.load_certs()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.load_certs()
        return super().wrap_bio(*args, **kwargs)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    return CertsOnFirstUse()
