"""Replaying a cassette through respx (and recording through it in the recording modes).

The replayer is one catch-all respx route whose side effect decides, per request:

1. **Scope.** Requests to the recorded backend are its business. By default that is every
   non-loopback host plus every origin that appears in the cassette; ``hosts=[...]`` narrows it to
   exactly those origins. Out-of-scope loopback requests pass through untouched, so an in-process
   task app keeps working; any other host fails with :class:`CassetteMismatchError`: replay never
   reaches the network beyond loopback.
2. **Replay** (modes ``none``, ``new``, ``once`` with an existing cassette). Requests match on
   method + path + query (+ body for POST/PUT/PATCH), see :mod:`.matching`. Identical requests
   are served in recorded order, so a replayed poller sees queued -> running -> succeeded; once
   the recording of a request runs out, its **last response repeats**, so a client that polls
   more often than the recording did still finishes instead of hanging.
3. **Record** (modes ``new`` for unknown requests, ``rewrite``, ``once`` without a cassette). The
   request is forwarded to the real host, the exchange is redacted into the cassette, and the
   live response goes back to the caller. Forwarding is synchronous, also for ``AsyncClient``
   callers (respx calls one side effect for both); it blocks the event loop for the duration of
   that request, which only happens while recording.
4. Otherwise: :class:`CassetteMismatchError` listing the recorded requests nearest to it.

The cassette is written when the replayer finishes (``with`` exit or :meth:`finish`), only in
the recording modes, only if something was recorded; ``rewrite`` removes a stale cassette when
the test made no request at all.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterable
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import respx

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording.cassette import Cassette, Interaction, RecordedResponse, header_items
from pytest_synth_rl.recording.matching import (
    DEFAULT_IGNORED_FIELDS,
    DEFAULT_IGNORED_PATHS,
    DEFAULT_MATCH_ON,
    MatchConfig,
    RequestKey,
    describe_difference,
    nearest,
    origin_of,
    request_key,
)
from pytest_synth_rl.recording.modes import RecordMode
from pytest_synth_rl.recording.recorder import Recorder, capture_request, rebuild_response
from pytest_synth_rl.recording.redaction import Redactor
from pytest_synth_rl.reporting.files import shell_quote
from pytest_synth_rl.taskapp.loopback import is_loopback_host

__all__ = ["CassetteMismatchError", "Replayer", "use_cassette"]

# Set while the replayer forwards a request for recording: the forwarded request re-enters the
# respx hook, and must then pass through to the real network instead of being handled again.
_FORWARDING: ContextVar[bool] = ContextVar("pytest_synth_rl_cassette_forwarding", default=False)


#: The task-app key routes (contract §10.5). While recording they always reach the backend: the
#: upload sets this run's key there, sealed to the backend's own public key, so a replayed one
#: would leave it the key of the run that recorded the cassette and its rollouts would be refused.
KEY_ROUTES = ("/v1/crypto/public-key", "/v1/env-keys", "/v1/env-keys/verify")


class CassetteMismatchError(SynthError):
    """A request could not be served from the cassette and the record mode forbids recording it."""

    def __init__(self, message: str, *, method: str, url: str, hint: str | None = None) -> None:
        self.method = method
        self.url = url
        super().__init__(message, hint=hint)


def _record_command(mode: str, test_id: str | None) -> str:
    target = f" {shell_quote(test_id)}" if test_id else ""
    return f"pytest --synth-record={mode}{target}"


def replay_response(recorded: RecordedResponse, request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        recorded.status,
        headers=header_items(recorded.headers),
        content=recorded.content(),
        request=request,
    )


class Replayer:
    """Serves a cassette to every httpx client while active (see the module docstring).

    ``with Replayer(cassette, mode="none"):`` starts its own respx router; or
    ``replayer.mount(router)`` adds the replay route to a router you already run (call
    :meth:`finish` at the end to write recordings).
    """

    def __init__(
        self,
        cassette: Cassette,
        *,
        mode: RecordMode | str = RecordMode.NONE,
        hosts: Iterable[str] | None = None,
        redactor: Redactor | None = None,
        ignore_fields: Collection[str] = DEFAULT_IGNORED_FIELDS,
        forward: httpx.BaseTransport | None = None,
        test_id: str | None = None,
        secrets: Iterable[str | None] = (),
        match_on: Iterable[str] = DEFAULT_MATCH_ON,
        ignore: Iterable[str] = DEFAULT_IGNORED_PATHS,
    ) -> None:
        self.cassette = cassette
        self.mode = RecordMode.parse(mode)
        self.test_id = test_id or cassette.test_id
        self._secrets = tuple(secrets)
        self.redactor = redactor or Redactor(self._secrets)
        self.ignore_fields = frozenset(ignore_fields)
        self.match = MatchConfig(
            match_on=tuple(match_on), ignore=tuple(ignore), ignore_fields=self.ignore_fields
        )
        self._hosts = {origin_of(h) for h in hosts} if hosts is not None else None
        existed = cassette.existed
        self.replays = self.mode in (RecordMode.NONE, RecordMode.NEW) or (
            self.mode is RecordMode.ONCE and existed
        )
        self.records = self.mode in (RecordMode.NEW, RecordMode.REWRITE) or (
            self.mode is RecordMode.ONCE and not existed
        )
        if self.mode is RecordMode.REWRITE:
            cassette.interactions = []
        self._lock = threading.Lock()
        self._queues: dict[RequestKey, list[Interaction]] = {}
        if self.replays:
            for interaction in cassette.interactions:
                key = request_key(interaction.request, match=self.match)
                self._queues.setdefault(key, []).append(interaction)
        self._cursor: dict[RequestKey, int] = {}
        self._origins = {origin_of(i.request.url) for i in cassette.interactions}
        self._recorder = Recorder(cassette, self.redactor)
        self._forward = forward
        self._owns_forward = forward is None
        self.recorded = 0
        self.replayed = 0
        self._router: respx.MockRouter | None = None
        self._finished = False

    def __repr__(self) -> str:
        return f"Replayer({self.cassette!r}, mode={self.mode.value!r})"

    # -- respx wiring -------------------------------------------------------------------------
    def mount(self, router: respx.Router) -> respx.Route:
        """Add the catch-all replay route to *router* and return it."""
        route = router.route()
        route.side_effect = self.handle
        return route

    def __enter__(self) -> Replayer:
        router = respx.MockRouter(assert_all_called=False)
        self.mount(router)
        router.__enter__()
        self._router = router
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._router is not None:
                self._router.__exit__(exc_type, exc, tb)
                self._router = None
        finally:
            self.finish()

    @property
    def router(self) -> respx.MockRouter | None:
        return self._router

    # -- decisions ----------------------------------------------------------------------------
    def in_scope(self, url: httpx.URL | str) -> bool:
        """Whether requests to *url* are served from (or recorded into) the cassette."""
        url = httpx.URL(str(url))
        origin = origin_of(str(url))
        if self._hosts is not None:
            return origin in self._hosts
        with self._lock:
            known = origin in self._origins
        return known or not is_loopback_host(url.host)

    def handle(self, request: httpx.Request) -> httpx.Response | httpx.Request:
        """The respx side effect: a response, or the request itself to let it pass through."""
        if _FORWARDING.get():
            return request
        if not self.in_scope(request.url):
            if is_loopback_host(request.url.host):
                return request
            raise self._blocked(request)
        request.read()
        live = capture_request(request, self.redactor)
        key = request_key(live, match=self.match)
        if self.replays and self.records and request.url.path.endswith(KEY_ROUTES):
            # Live, always; written down only if the cassette lacks it (an offline replay needs one).
            return self._forward_and_record(request, record=not self._knows(key))
        if self.replays:
            interaction = self._next(key)
            if interaction is not None:
                return replay_response(interaction.response, request)
        if self.records:
            return self._forward_and_record(request)
        raise self._mismatch(key, live.url, origin_of(str(request.url)))

    def _knows(self, key: RequestKey) -> bool:
        with self._lock:
            return bool(self._queues.get(key))

    def _next(self, key: RequestKey) -> Interaction | None:
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                return None
            index = self._cursor.get(key, 0)
            self._cursor[key] = index + 1
            self.replayed += 1
            return queue[min(index, len(queue) - 1)]

    def _forward_and_record(self, request: httpx.Request, *, record: bool = True) -> httpx.Response:
        with self._lock:
            if self._forward is None:
                self._forward = httpx.HTTPTransport()
            forward = self._forward
        fresh = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=request.content,
            extensions=dict(request.extensions),
        )
        token = _FORWARDING.set(True)
        try:
            response = forward.handle_request(fresh)
            try:
                content = response.read()
            finally:
                response.close()
        finally:
            _FORWARDING.reset(token)
        if record:
            self._recorder.record(request, response, content)
            with self._lock:
                self.recorded += 1
                self._origins.add(origin_of(str(request.url)))
        return rebuild_response(response, content)

    # -- diagnostics --------------------------------------------------------------------------
    def unplayed(self) -> list[Interaction]:
        """Recorded interactions never served (useful to assert a replay used the whole cassette)."""
        with self._lock:
            return [
                interaction
                for key, queue in self._queues.items()
                for interaction in queue[self._cursor.get(key, 0) :]
            ]

    def _where(self) -> str:
        return str(self.cassette.path) if self.cassette.path else "<in-memory cassette>"

    def _mismatch(self, key: RequestKey, url: str, origin: str) -> CassetteMismatchError:
        mode = self.mode.value
        if not self.cassette.existed and not self.cassette.interactions:
            message = (
                f"cannot replay {key.method} {url}: cassette {self._where()} does not exist "
                f"(record mode {mode!r} only replays)"
            )
            return CassetteMismatchError(
                message,
                method=key.method,
                url=url,
                hint=f"record it first: {_record_command('once', self.test_id)}",
            )
        with self._lock:
            recorded = list(self._queues)
            origins = sorted(self._origins)
        lines = [
            f"no recorded interaction matches {key.method} {url} "
            f"(record mode {mode!r}, cassette {self._where()}, {len(self.cassette)} interactions)",
            "matching uses method + path + query (+ body for POST/PUT/PATCH); host and headers are ignored",
        ]
        if origins and origin not in origins:
            lines.append(f"nothing was recorded from {origin} (recorded hosts: {', '.join(origins)})")
        closest = nearest(key, recorded)
        if closest:
            lines.append("nearest recorded requests:")
            lines.extend(
                f"  {i}. {k.render()}  [{describe_difference(k, key)}]" for i, k in enumerate(closest, 1)
            )
        else:
            lines.append("the cassette has no recorded requests")
        hint = (
            f"if the code changed on purpose, add the new request with "
            f"{_record_command('new', self.test_id)} or re-record everything with "
            f"{_record_command('rewrite', self.test_id)}"
        )
        return CassetteMismatchError("\n  ".join(lines), method=key.method, url=url, hint=hint)

    def _blocked(self, request: httpx.Request) -> CassetteMismatchError:
        url = self.redactor.url(str(request.url))
        if self._hosts is not None:
            scope = "the hosts " + ", ".join(sorted(self._hosts))
        else:
            scope = "non-loopback hosts and origins recorded in the cassette"
        return CassetteMismatchError(
            f"blocked {request.method} {url}: {origin_of(url)} is outside the cassette's scope "
            f"({scope}); while a cassette is active only loopback requests may reach the network",
            method=request.method,
            url=url,
            hint="add the host to hosts=[...] to record and replay it, or mock it in the test",
        )

    # -- the end ------------------------------------------------------------------------------
    def finish(self) -> Path | None:
        """Write what was recorded (recording modes only); returns the cassette path if written."""
        if self._finished:
            return None
        self._finished = True
        if self._owns_forward and self._forward is not None:
            self._forward.close()
        if not self.records:
            return None
        if self.recorded:
            return self.cassette.save(secrets=self._secrets)
        if self.mode is RecordMode.REWRITE and self.cassette.path is not None:
            # Same as pytest-recording's rewrite: the old recording does not survive a rewrite.
            with contextlib.suppress(FileNotFoundError):
                self.cassette.path.unlink()
        return None


def use_cassette(
    path: str | Path,
    *,
    mode: RecordMode | str = RecordMode.NONE,
    test_id: str | None = None,
    **options: Any,
) -> Replayer:
    """A :class:`Replayer` for the cassette file at *path*, ready to use as a context manager.

    In ``rewrite`` mode the old file is not even parsed (a broken cassette is what rewrite is for).
    Other options (``hosts``, ``redactor``, ``ignore_fields``, ``forward``, ``secrets``,
    ``match_on``, ``ignore``) go to :class:`Replayer`.
    """
    parsed = RecordMode.parse(mode)
    if parsed is RecordMode.REWRITE:
        cassette = Cassette(path, test_id=test_id, existed=Path(path).is_file())
    else:
        cassette = Cassette.load_or_new(path, test_id=test_id)
    return Replayer(cassette, mode=parsed, test_id=test_id, **options)
