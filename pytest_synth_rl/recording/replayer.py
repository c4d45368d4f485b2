"""Record modes, recording transports, and the replayer: one catch-all respx route that serves a
cassette in recorded order, records what the mode allows, passes loopback through, blocks the rest."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterable
from contextvars import ContextVar
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import respx

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording import matching
from pytest_synth_rl.recording.cassette import Cassette, Interaction, capture_request
from pytest_synth_rl.recording.redaction import Redactor
from pytest_synth_rl.reporting.files import shell_quote
from pytest_synth_rl.taskapp.loopback import is_loopback_host

_FORWARDING: ContextVar[bool] = ContextVar("pytest_synth_rl_cassette_forwarding", default=False)

#: Task-app key routes: while recording they always reach the backend.
KEY_ROUTES = ("/v1/crypto/public-key", "/v1/env-keys", "/v1/env-keys/verify")


class RecordModeError(SynthError):
    pass


class RecordMode(str, Enum):
    """``none`` replays; ``once`` records a missing cassette; ``new`` adds; ``rewrite`` records anew."""

    NONE = "none"
    ONCE = "once"
    NEW = "new"
    REWRITE = "rewrite"

    @classmethod
    def parse(cls, value: str | RecordMode) -> RecordMode:
        text = str(value).strip().lower()
        try:
            return cls({"new_episodes": "new", "all": "rewrite"}.get(text, text))
        except ValueError:
            raise RecordModeError(
                f"unknown record mode {value!r}: expected one of none, once, new, rewrite",
                hint="e.g. --synth-record=once to record missing cassettes and replay existing ones",
            ) from None

    def __str__(self) -> str:
        return self.value


def rebuild_response(response: httpx.Response, content: bytes) -> httpx.Response:
    wire = ("content-encoding", "content-length", "transfer-encoding")
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in wire]
    extensions = {k: v for k, v in response.extensions.items() if k in ("http_version", "reason_phrase")}
    return httpx.Response(response.status_code, headers=headers, content=content, extensions=extensions)


def _read_through(transport: httpx.BaseTransport, request: httpx.Request) -> httpx.Response:
    with contextlib.closing(transport.handle_request(request)) as response:
        return rebuild_response(response, response.read())


class Recorder:
    """Appends redacted interactions to a cassette; safe to share between threads."""

    def __init__(self, cassette: Cassette | None = None, redactor: Redactor | None = None) -> None:
        self.cassette = cassette if cassette is not None else Cassette()
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()

    def record(self, request: httpx.Request, response: httpx.Response, content: bytes) -> Interaction:
        interaction = Interaction.capture(request, response, content, self.redactor)
        with self._lock:
            self.cassette.append(interaction)
        return interaction

    def save(self, path: str | Path | None = None, *, secrets: Iterable[str | None] = ()) -> Path:
        return self.cassette.save(path, secrets=secrets)


class RecordingTransport(Recorder, httpx.BaseTransport):
    """Forwards every request to *inner* (by default a real transport) and records it."""

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        cassette: Cassette | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(cassette, redactor)
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        response = _read_through(self.inner, request)
        self.record(request, response, response.content)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(Recorder, httpx.AsyncBaseTransport):
    """The ``httpx.AsyncClient`` counterpart of :class:`RecordingTransport`."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        cassette: Cassette | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(cassette, redactor)
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        async with contextlib.aclosing(await self.inner.handle_async_request(request)) as response:
            content = await response.aread()
        self.record(request, response, content)
        return rebuild_response(response, content)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CassetteMismatchError(SynthError):
    def __init__(self, message: str, *, method: str, url: str, hint: str | None = None) -> None:
        self.method, self.url = method, url
        super().__init__(message, hint=hint)


def _matching_rule(match_on: tuple[str, ...]) -> str:
    used = " + ".join(part + (" (for POST/PUT/PATCH)" if part == "body" else "") for part in match_on)
    ignored = [part for part in matching.MATCH_PARTS if part not in match_on] + ["headers"]
    return f"matching uses {used}; {', '.join(ignored)} are ignored"


class Replayer:
    """Serves a cassette to httpx clients (every non-loopback host and recorded origin, or exactly
    *hosts*) and records as *mode* allows: ``with`` it, or :meth:`mount` it and :meth:`finish`."""

    def __init__(
        self,
        cassette: Cassette,
        *,
        mode: RecordMode | str = RecordMode.NONE,
        hosts: Iterable[str] | None = None,
        redactor: Redactor | None = None,
        ignore_fields: Collection[str] = matching.DEFAULT_IGNORED_FIELDS,
        forward: httpx.BaseTransport | None = None,
        test_id: str | None = None,
        secrets: Iterable[str | None] = (),
        match_on: Iterable[str] = matching.DEFAULT_MATCH_ON,
        ignore: Iterable[str] = matching.DEFAULT_IGNORED_PATHS,
    ) -> None:
        self.cassette = cassette
        self.mode = mode = RecordMode.parse(mode)
        self.test_id = test_id or cassette.test_id
        self._secrets = tuple(secrets)
        self.redactor = redactor or Redactor(self._secrets)
        self.ignore_fields = frozenset(ignore_fields)
        self.match = matching.MatchConfig(tuple(match_on), tuple(ignore), self.ignore_fields)
        self._hosts = {matching.origin_of(h) for h in hosts} if hosts is not None else None
        once = mode is RecordMode.ONCE
        self.replays = mode in (RecordMode.NONE, RecordMode.NEW) or (once and cassette.existed)
        self.records = mode in (RecordMode.NEW, RecordMode.REWRITE) or (once and not cassette.existed)
        if mode is RecordMode.REWRITE:
            cassette.interactions = []
        self._lock = threading.Lock()
        self._queues: dict[matching.RequestKey, list[Interaction]] = {}
        for interaction in cassette.interactions if self.replays else ():
            key = matching.request_key(interaction.request, match=self.match)
            self._queues.setdefault(key, []).append(interaction)
        self._cursor: dict[matching.RequestKey, int] = {}
        self._origins = {matching.origin_of(i.request.url) for i in cassette.interactions}
        self._recorder = Recorder(cassette, self.redactor)
        self._forward = forward
        self._owns_forward = forward is None
        self.recorded = self.replayed = 0
        self.router: respx.MockRouter | None = None
        self._finished = False

    def __repr__(self) -> str:
        return f"Replayer({self.cassette!r}, mode={self.mode.value!r})"

    def mount(self, router: respx.Router) -> respx.Route:
        return router.route().mock(side_effect=self.handle)

    def __enter__(self) -> Replayer:
        self.router = respx.MockRouter(assert_all_called=False)
        self.mount(self.router)
        self.router.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.router is not None:
                self.router.__exit__(exc_type, exc, tb)
                self.router = None
        finally:
            self.finish()

    def in_scope(self, url: httpx.URL | str) -> bool:
        origin = matching.origin_of(str(url))
        if self._hosts is not None:
            return origin in self._hosts
        return origin in self._origins or not is_loopback_host(httpx.URL(str(url)).host)

    def handle(self, request: httpx.Request) -> httpx.Response | httpx.Request:
        if _FORWARDING.get():
            return request
        if not self.in_scope(request.url):
            if is_loopback_host(request.url.host):
                return request
            raise self._blocked(request)
        request.read()
        live = capture_request(request, self.redactor)
        key = matching.request_key(live, match=self.match)
        if self.replays and self.records and request.url.path.endswith(KEY_ROUTES):
            with self._lock:
                known = bool(self._queues.get(key))
            return self._forward_and_record(request, record=not known)
        if (answer := self._replay(key, request) if self.replays else None) is not None:
            return answer
        if self.records:
            return self._forward_and_record(request)
        raise self._mismatch(key, live.url, matching.origin_of(str(request.url)))

    def _replay(self, key: matching.RequestKey, request: httpx.Request) -> httpx.Response | None:
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                return None
            index = self._cursor[key] = self._cursor.get(key, 0) + 1
            self.replayed += 1
        return queue[min(index, len(queue)) - 1].response.to_httpx(request)

    def _forward_and_record(self, request: httpx.Request, *, record: bool = True) -> httpx.Response:
        with self._lock:
            forward = self._forward = self._forward or httpx.HTTPTransport()
        fresh = httpx.Request(request.method, request.url, headers=request.headers, content=request.content)
        fresh.extensions = dict(request.extensions)
        token = _FORWARDING.set(True)
        try:
            response = _read_through(forward, fresh)
        finally:
            _FORWARDING.reset(token)
        if record:
            self._recorder.record(request, response, response.content)
            with self._lock:
                self.recorded += 1
                self._origins.add(matching.origin_of(str(request.url)))
        return response

    def unplayed(self) -> list[Interaction]:
        with self._lock:
            return [i for key, queue in self._queues.items() for i in queue[self._cursor.get(key, 0) :]]

    def _mismatch(self, key: matching.RequestKey, url: str, origin: str) -> CassetteMismatchError:
        mode, method = self.mode.value, key.method
        where = str(self.cassette.path) if self.cassette.path else "<in-memory cassette>"
        if not self.cassette.existed and not self.cassette.interactions:
            message = f"cassette {where} does not exist (record mode {mode!r} only replays)"
            hint = f"record it first: {self._record_command('once')}"
            return CassetteMismatchError(
                f"cannot replay {method} {url}: {message}", method=method, url=url, hint=hint
            )
        with self._lock:
            recorded = list(self._queues)
            origins = sorted(self._origins)
        lines = [
            f"no recorded interaction matches {key.method} {url} "
            f"(record mode {mode!r}, cassette {where}, {len(self.cassette)} interactions)",
            _matching_rule(self.match.match_on),
        ]
        if origins and origin not in origins:
            lines.append(f"nothing was recorded from {origin} (recorded hosts: {', '.join(origins)})")
        near = matching.nearest(key, recorded)
        lines.append("nearest recorded requests:" if near else "the cassette has no recorded requests")
        for i, k in enumerate(near, 1):
            lines.append(f"  {i}. {k.render()}  [{matching.describe_difference(k, key)}]")
        replay_only = "offline, a cassette only replays (--synth-record applies online)"
        if self.mode is RecordMode.ONCE:
            replay_only = "--synth-record=once only replays a cassette that exists"
        hint = (
            f"{replay_only}: if the request changed by mistake, make it match the recording; if on "
            f"purpose, add it with {self._record_command('new')} or re-record everything with "
            f"{self._record_command('rewrite')}"
        )
        return CassetteMismatchError("\n  ".join(lines), method=method, url=url, hint=hint)

    def _record_command(self, mode: str) -> str:
        backend = "--synth-backend=URL " if self.mode is RecordMode.NONE else ""
        test = f" {shell_quote(self.test_id)}" if self.test_id else ""
        return f"pytest {backend}--synth-record={mode}{test}"

    def _blocked(self, request: httpx.Request) -> CassetteMismatchError:
        url = self.redactor.url(str(request.url))
        scope = "non-loopback hosts and origins recorded in the cassette"
        scope = "the hosts " + ", ".join(sorted(self._hosts)) if self._hosts is not None else scope
        message = (
            f"blocked {request.method} {url}: {matching.origin_of(url)} is outside the cassette's scope "
            f"({scope}); while a cassette is active only loopback requests may reach the network"
        )
        hint = "add the host to hosts=[...] to record and replay it, or mock it in the test"
        return CassetteMismatchError(message, method=request.method, url=url, hint=hint)

    def finish(self) -> Path | None:
        if self._finished:
            return None
        self._finished = True
        if self._owns_forward and self._forward is not None:
            self._forward.close()
        if self.records and self.recorded:
            return self.cassette.save(secrets=self._secrets)
        if self.records and self.mode is RecordMode.REWRITE and self.cassette.path is not None:
            self.cassette.path.unlink(missing_ok=True)
        return None


def use_cassette(
    path: str | Path, *, mode: RecordMode | str = RecordMode.NONE, test_id: str | None = None, **options: Any
) -> Replayer:
    """A :class:`Replayer` of the cassette file at *path*; ``rewrite`` never parses the old file."""
    parsed = RecordMode.parse(mode)
    if parsed is RecordMode.REWRITE:
        cassette = Cassette(path, test_id=test_id, existed=Path(path).is_file())
    else:
        cassette = Cassette.load_or_new(path, test_id=test_id)
    return Replayer(cassette, mode=parsed, test_id=test_id, **options)
