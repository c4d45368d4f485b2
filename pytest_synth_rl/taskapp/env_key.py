"""Lending ``ENVIRONMENT_API_KEY`` to in-process task apps while they run, and giving it back.

With several apps running, the latest key is ``ENVIRONMENT_API_KEY`` and the others go into
``ENVIRONMENT_API_KEY_ALIASES`` (after the caller's own). When the last app stops, both return
to what they were, unless someone else changed them meanwhile.
"""

from __future__ import annotations

import itertools
import os
import threading

from pytest_synth_rl.secrets.masking import register_secret

__all__ = ["ALIASES_VAR", "KEY_VAR", "acquire_env_key", "release_env_key"]

KEY_VAR = "ENVIRONMENT_API_KEY"
ALIASES_VAR = "ENVIRONMENT_API_KEY_ALIASES"

_lock = threading.Lock()
_tokens = itertools.count(1)
_active: dict[int, str] = {}  # token -> key, in start order
_saved: dict[str, str | None] = {}  # the caller's values when the first app started
_written: dict[str, str | None] = {}  # what we last wrote, to notice changes by others
_user_aliases: str | None = None  # the caller's aliases, kept in front of ours


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    _written[name] = value


def _apply() -> None:
    global _user_aliases
    current_aliases = os.environ.get(ALIASES_VAR)
    if current_aliases != _written.get(ALIASES_VAR):
        _user_aliases = current_aliases  # changed by someone else while apps ran: adopt it
    keys = list(_active.values())
    primary = keys[-1]
    _set(KEY_VAR, primary)
    aliases: list[str] = []
    for key in [*(a.strip() for a in (_user_aliases or "").split(",")), *keys[:-1]]:
        if key and key != primary and key not in aliases:
            aliases.append(key)
    _set(ALIASES_VAR, ",".join(aliases) if aliases else _user_aliases)


def acquire_env_key(key: str) -> int:
    """Make *key* accepted by task apps in this process; returns a token for :func:`release_env_key`."""
    global _user_aliases
    register_secret(key)
    with _lock:
        if not _active:
            _saved.clear()
            _saved.update({name: os.environ.get(name) for name in (KEY_VAR, ALIASES_VAR)})
            _written.clear()
            _written.update(_saved)
            _user_aliases = _saved[ALIASES_VAR]
        token = next(_tokens)
        _active[token] = key
        _apply()
        return token


def release_env_key(token: int) -> None:
    """Withdraw the key lent under *token*; after the last one, restore the caller's values."""
    with _lock:
        if _active.pop(token, None) is None:
            return
        if _active:
            _apply()
            return
        for name, value in _saved.items():
            if os.environ.get(name) == _written.get(name):
                _set(name, value)
