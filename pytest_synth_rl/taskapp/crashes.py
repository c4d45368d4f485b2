"""What a served app raised while failing a request, by the rollout's correlation id."""

from __future__ import annotations

import collections
import json
import os
import threading
import traceback
from typing import Any

from pytest_synth_rl.secrets.masking import redact

_MAX_SEEN_BODY = 64 * 1024


def app_frames(exc: BaseException) -> traceback.TracebackException:
    """*exc*'s traceback with only the app's own frames (else the innermost one)."""
    from pytest_synth_rl.secrets.callers import is_users_file

    shown = traceback.TracebackException.from_exception(exc)
    part: traceback.TracebackException | None = shown
    seen: set[int] = set()
    while part is not None and id(part) not in seen:
        seen.add(id(part))
        own = [frame for frame in part.stack if is_users_file(frame.filename)] or list(part.stack)[-1:]
        part.stack = traceback.StackSummary.from_list(own)
        part = part.__cause__ or part.__context__
    return shown


def crash_line(exc: BaseException) -> str:
    """``KeyError: 'x' at app.py:52 in rollout: game = GAMES[run_id]`` (callers after ``<-``)."""
    frames = app_frames(exc).stack
    where = " <- ".join(
        f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" + (f": {f.line}" if f.line else "")
        for f in reversed(frames[-3:])
    )
    return f"{type(exc).__name__}: {exc}" + (f" at {where}" if where else "")


_PENDING = "<pending>"


_seen: collections.OrderedDict[str, str | None] = collections.OrderedDict()
_seen_changed = threading.Condition()


def _mark(key: str | None, value: str | None = _PENDING) -> None:
    if key is None:
        return
    with _seen_changed:
        if value is _PENDING or key in _seen:
            _seen[key] = value
            while len(_seen) > 256:
                _seen.popitem(last=False)
        _seen_changed.notify_all()


def crash_of(correlation_id: str, timeout: float = 2.0) -> str | None:
    """The :func:`crash_line` of the 5xx answering *correlation_id*, waiting up to *timeout*."""
    with _seen_changed:
        _seen_changed.wait_for(lambda: _seen.get(correlation_id) is not _PENDING, timeout)
        found = _seen.get(correlation_id)
    return None if found is _PENDING else found


def _rollout_key(body: bytes) -> str | None:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    key = (parsed.get("trace_correlation_id") or parsed.get("run_id")) if isinstance(parsed, dict) else None
    return key if isinstance(key, str) else None


def remembering_crashes(app: Any) -> Any:
    """*app*, remembering what each POST answered with a 5xx raised (see :func:`crash_of`)."""

    async def remembering(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)  # type: ignore[no-any-return]
        body, key = bytearray(), None

        async def teed() -> Any:
            message = await receive()
            if message.get("type") == "http.request" and len(body) < _MAX_SEEN_BODY:
                body.extend(message.get("body", b""))
            return message

        async def watched(message: Any) -> None:
            nonlocal key
            if message["type"] == "http.response.start" and message.get("status", 200) >= 500:
                _mark(key := _rollout_key(bytes(body)))
            await send(message)

        try:
            await app(scope, teed, watched)
        except Exception as exc:
            if key is None:  # nothing answered yet: the server answers 500 after this
                _mark(key := _rollout_key(bytes(body)))
            _mark(key, redact(crash_line(exc)))
            raise
        _mark(key, None)

    return remembering
