"""The shared SSL context verifies like httpx's default, but loads CAs only for real TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from pytest_synth_rl.taskapp import InProcessTaskApp
from pytest_synth_rl.taskapp.tls import CertsOnFirstUse


def test_it_verifies_like_httpxs_default_context() -> None:
    context = CertsOnFirstUse()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.protocol == ssl.PROTOCOL_TLS_CLIENT


def test_plain_http_clients_never_load_the_ca_bundle(example_task_app: InProcessTaskApp) -> None:
    context = CertsOnFirstUse()
    with httpx.Client(verify=context) as client:
        key = example_task_app.api_key
        answer = client.get(f"{example_task_app.url}/health", headers={"X-API-Key": str(key and key.value)})
        assert answer.status_code == 200
    assert context.certs_loaded is False
    assert context.get_ca_certs() == []


@pytest.mark.parametrize("wrap", ["bio", "socket"])
def test_the_first_tls_wrap_loads_the_bundle(wrap: str) -> None:
    context = CertsOnFirstUse()
    if wrap == "bio":
        context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.test")
    else:
        import socket

        with socket.socket() as raw, context.wrap_socket(raw, server_hostname="example.test"):
            pass
    assert context.certs_loaded is True
    assert len(context.get_ca_certs()) > 10


def test_ssl_cert_file_is_honoured_as_httpx_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    context = CertsOnFirstUse()
    with pytest.raises(FileNotFoundError):
        context.load_certs()
    assert context.certs_loaded is False
