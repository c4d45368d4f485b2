"""The one loopback test every part of the plugin uses."""

from __future__ import annotations

import pytest

from pytest_synth_rl.taskapp.loopback import is_loopback_host, is_loopback_url


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "localhost", "LOCALHOST", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "192.168.1.1", "api.usesynth.ai", "0.0.0.0", "", "::2"])
def test_other_hosts(host: str) -> None:
    assert not is_loopback_host(host)


def test_urls() -> None:
    assert is_loopback_url("http://127.0.0.1:8114/rollout")
    assert is_loopback_url("http://[::1]:80")
    assert not is_loopback_url("https://api.usesynth.ai/api")
    assert not is_loopback_url("placeholder")
    assert not is_loopback_url("http://[bad")
