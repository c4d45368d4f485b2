"""One ASGI app served by uvicorn on loopback in a background thread: a header deadline, crashes kept."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import errno
import json
import logging
import os
import re
import socket
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Literal, cast

import uvicorn

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.secrets.masking import get_logger, redact
from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send
from pytest_synth_rl.taskapp.loopback import normalise_loopback_host, url_host

Lifespan = Literal["auto", "on", "off"]
Protocol = Literal["auto", "h11", "httptools"]

log = get_logger(__name__)
_uvicorn_log = get_logger("uvicorn.error")


MAX_REQUEST_LINE = 16 * 1024

_ANSWER = (
    b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_connection: contextvars.ContextVar[_HeaderDeadline | None] = contextvars.ContextVar(
    "synth_connection", default=None
)


class _HeaderDeadline(asyncio.Protocol):
    inner_class: Callable[..., asyncio.Protocol]
    read_timeout: float

    def __init__(self, **kwargs: Any) -> None:
        self.inner = self.inner_class(**kwargs)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.received = 0  # bytes since the timer was armed
        self.line_ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.inner.connection_made(transport)
        self.arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            self.received += len(data)
            self.line_ended = self.line_ended or b"\n" in data
            if not self.line_ended and self.received > MAX_REQUEST_LINE:
                too_long = f"the request line is longer than {MAX_REQUEST_LINE} bytes: send a shorter "
                return self._refuse(414, b"URI Too Long", too_long + "target (path and query)")
        token = _connection.set(self)
        try:
            self.inner.data_received(data)
        finally:
            _connection.reset(token)

    def arm(self) -> None:
        self.disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.received, self.line_ended = 0, False
            self.timer = asyncio.get_running_loop().call_later(self.read_timeout, self._expire)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        if not self.received:
            return self.transport.close()
        late = f"the request headers did not arrive within {self.read_timeout:g}s"
        self._refuse(408, b"Request Timeout", late)

    def _refuse(self, status: int, reason: bytes, message: str) -> None:
        self.disarm()
        assert self.transport is not None
        body = message.encode()
        self.transport.write(_ANSWER % (status, reason, len(body), body))
        self.transport.close()


for _name in ("eof_received", "pause_writing", "resume_writing"):
    setattr(_HeaderDeadline, _name, lambda self, _name=_name: getattr(self.inner, _name)())


def header_deadline_app(app: Any) -> Any:
    """*app*, telling its connection when a request has reached it and when it was answered."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        connection = _connection.get()
        if connection is None or scope["type"] != "http":
            return await app(scope, receive, send)  # type: ignore[no-any-return]
        connection.disarm()

        async def send_then_rearm(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                connection.arm()

        await app(scope, receive, send_then_rearm)

    return wrapped


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


class _ThreadLogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.thread_id: int | None = None
        self.lines: collections.deque[str] = collections.deque(maxlen=500)
        self._last: logging.LogRecord | None = None
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if self.thread_id is None or record.thread != self.thread_id or record is self._last:
            return
        self._last = record
        try:
            self.lines.append(redact(self.format(record)))
        except Exception:  # pragma: no cover - a broken record must not break the server
            self.handleError(record)

    def trim(self, record: logging.LogRecord) -> bool:
        """Show only the app's own frames of the exception uvicorn logs."""
        if record.thread == self.thread_id and record.exc_info and record.exc_info[1]:
            record.exc_text = redact("".join(app_frames(record.exc_info[1]).format()).rstrip("\n"))
        return True


_TRACEBACK_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>[^\n]+)(?:\n(?P<source>[^\n]*))?'
)


def _users_innermost_line(traceback_text: str) -> str | None:
    from pytest_synth_rl.secrets.callers import is_users_file  # only when a startup was aborted

    found = None
    for match in _TRACEBACK_FRAME.finditer(traceback_text):
        if is_users_file(match["file"]):
            source = (match["source"] or "").strip()
            found = f"{os.path.basename(match['file'])}:{match['line']} in {match['name'].strip()}: {source}"
    return found


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: threading.Event, graceful: float) -> None:
        super().__init__(config)
        self.ready = ready
        self.graceful = graceful
        self.wake = asyncio.Event()

    async def main_loop(self) -> None:
        self.ready.set()  # uvicorn calls this once it accepts connections
        counter = 0
        while not await self.on_tick(counter):  # its ticks refresh the Date header
            counter = (counter + 1) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()

        async def drained() -> None:
            while (state.connections or state.tasks) and not self.force_exit:
                await asyncio.sleep(0.002)

        try:
            await asyncio.wait_for(drained(), self.graceful)
        except asyncio.TimeoutError:
            tasks = len(state.tasks)
            _uvicorn_log.error("Cancel %s running task(s), timeout graceful shutdown exceeded", tasks)
            await self.abort(state)
        if not self.force_exit:  # the app's own shutdown is bounded too
            try:
                await asyncio.wait_for(self.lifespan.shutdown(), self.graceful)
            except asyncio.TimeoutError:
                abandoned = "Application shutdown did not finish within %.2gs; abandoned"
                _uvicorn_log.error(abandoned, self.graceful)

    async def abort(self, state: Any) -> None:
        tasks = list(state.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=0.5)
        for connection in list(state.connections):
            if connection.transport is not None:
                connection.transport.abort()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 0.5  # connection_lost, which closes each socket, runs on the loop
        while state.connections and loop.time() < deadline:
            await asyncio.sleep(0.002)


def _bind(host: str, port: int, description: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            reason = "already in use" if exc.errno == errno.EADDRINUSE else "not available to this user"
            raise TaskAppError(
                f"cannot serve the {description} on {url_host(host)}:{port}: the port is {reason}",
                hint="pass port=0 (the default; --port 0 to the serve command) so the OS picks a free port",
            ) from exc
        raise TaskAppError(
            f"cannot bind {url_host(host)}:{port} for the {description}: {exc}",
            hint="check that the loopback interface supports this address (or try host='127.0.0.1')",
        ) from exc
    return sock


class ServerThread:
    """Serve *app* with uvicorn on a loopback socket from a daemon thread."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifespan: Lifespan = "auto",
        log_level: str | int | None = "warning",
        shutdown_timeout: float = 3.0,
        description: str = "task app",
        read_timeout: float | None = None,
        protocol: Protocol = "auto",
    ) -> None:
        self.app, self.description = app, description
        self.host, self.requested_port = normalise_loopback_host(host), port
        self.lifespan, self.log_level, self.shutdown_timeout = lifespan, log_level, shutdown_timeout
        self.read_timeout, self.protocol = read_timeout, protocol
        self.port: int | None = None
        self.error: BaseException | None = None
        self._exit: SystemExit | None = None
        self._ready = threading.Event()
        self._capture = _ThreadLogCapture()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._stopping = False

    @property
    def logs(self) -> list[str]:
        return list(self._capture.lines)

    @property
    def alive(self) -> bool:
        return self._server is not None and self._server.started and self.join(0) is False

    @property
    def died(self) -> bool:
        """The thread ended although nobody asked it to stop."""
        return self._server is not None and self._server.started and not self._stopping and self.join(0)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"the {self.description} has not been started, so it has no URL yet")
        return f"http://{url_host(self.host)}:{self.port}"

    def failure_text(self) -> str:
        parts = [f"{type(self.error).__name__}: {self.error}"] if self.error is not None else []
        if self.logs:
            parts.append("server log:\n" + "\n".join(f"    {line}" for line in self.logs[-40:]))
        return "\n  ".join(parts) if parts else "(the server logged nothing)"

    def start(self, timeout: float) -> int:
        """Bind, start the thread, wait for readiness; return the bound port."""
        if self._thread is not None:
            raise RuntimeError("a ServerThread can only be started once")
        self._sock = _bind(self.host, self.requested_port, self.description)
        self.port = int(self._sock.getsockname()[1])
        http = "h11" if self.read_timeout is not None and self.protocol == "auto" else self.protocol
        app = remembering_crashes(self.app) if self.protocol == "auto" else self.app
        config = uvicorn.Config(
            app if self.read_timeout is None else header_deadline_app(app),
            lifespan=self.lifespan,
            log_config=None,  # never reconfigure the process's logging
            log_level=self.log_level,
            http=http,
            proxy_headers=self.protocol == "auto",  # the plugin's own apps sit behind no proxy
        )
        try:
            config.load()
            if self.read_timeout is not None:  # uvicorn's protocol, with a header deadline
                attrs = {"inner_class": config.http_protocol_class, "read_timeout": float(self.read_timeout)}
                config.http_protocol_class = type("HeaderDeadlineProtocol", (_HeaderDeadline,), attrs)
        except Exception as exc:
            self._close_socket()
            raise TaskAppError(
                f"uvicorn could not load the {self.description}: {type(exc).__name__}: {exc}",
                hint="the app must be an ASGI 3 application",
            ) from exc
        self._server = _Server(config, self._ready, self.shutdown_timeout)
        name = f"synth-{self.description.replace(' ', '-')}-{self.port}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._hook_capture()
        self._thread.start()
        if not self._ready.wait(timeout):
            waiting_at = self._abort(self._server, self._thread)
            self.error = None  # the abort's own CancelledError
            at = f", waiting at {waiting_at}" if waiting_at else ""
            raise TaskAppError(
                f"the {self.description} did not start within {timeout:g}s: "
                f"its lifespan startup is still running{at}\n  " + self.failure_text(),
                url=self.url,
                hint="make the app's startup faster, or give it longer: "
                "@pytest.mark.synth_task_app(..., startup_timeout=...) in a test, "
                "InProcessTaskApp(startup_timeout=...) outside one",
            )
        if not self._server.started:
            self._thread.join(self.shutdown_timeout)
            self._stopping = True
            self._detach()
            what = "its lifespan startup failed" if self._exit is not None else "the server thread died"
            raise TaskAppError(
                f"the {self.description} failed to start: {what}\n  " + self.failure_text(),
                url=self.url,
                hint="fix the error in the app's startup (lifespan / on_startup handlers) shown above",
                details={"logs": self.logs},
            )
        return self.port

    def _run(self) -> None:
        self._capture.thread_id = threading.get_ident()
        try:
            asyncio.run(self._serve())
        except SystemExit as exc:  # uvicorn exits this way when the lifespan startup fails
            self._exit = exc
        except BaseException as exc:
            self.error = exc
            if not self._stopping:
                log.error("the %s server thread died: %s: %s", self.description, type(exc).__name__, exc)
        finally:
            self._ready.set()
            self._close_socket()

    async def _serve(self) -> None:
        assert self._server is not None
        assert self._sock is not None
        self._task = asyncio.current_task()
        try:
            await self._server.serve(sockets=[self._sock])
        finally:  # a forced stop, or an app that stopped the loop: close what is left open
            await self._server.abort(self._server.server_state)

    def _in_loop(self, callback: Callable[[], object] | None = None) -> None:
        """Run *callback* (by default: cancel the serving task) on the server's loop."""
        task = self._task
        if task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                task.get_loop().call_soon_threadsafe(callback or task.cancel)

    def stop(self) -> None:
        """Stop serving; idempotent and bounded by about ``2 * shutdown_timeout + 2`` seconds."""
        self._stopping = True
        server, thread = self._server, self._thread
        try:
            if server is None or thread is None or not thread.is_alive():
                return
            server.should_exit = True
            self._in_loop(server.wake.set)
            thread.join(2 * self.shutdown_timeout + 0.5)
            if thread.is_alive():
                server.force_exit = True
                thread.join(0.5)
            if thread.is_alive():
                self._in_loop()
                thread.join(1.0)
            if thread.is_alive():
                stuck = "the %s on port %s did not stop in time; leaving its daemon thread behind"
                log.warning(stuck, self.description, self.port)
        finally:
            self._detach()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the server thread to end; True if it has (or never started)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _abort(self, server: _Server, thread: threading.Thread) -> str | None:
        self._stopping = True
        waiting_at: str | None = None

        def noise(record: logging.LogRecord) -> bool:  # the traceback of the startup we cancelled
            nonlocal waiting_at
            if record.thread != self._capture.thread_id:
                return True
            waiting_at = waiting_at or _users_innermost_line(record.getMessage())
            return False

        _uvicorn_log.addFilter(noise)
        try:
            server.should_exit = server.force_exit = True
            self._in_loop()
            thread.join(1.0)
        finally:
            _uvicorn_log.removeFilter(noise)
            self._detach()
        return waiting_at

    def _hook_capture(self, attach: bool = True) -> None:
        for logger in (logging.getLogger(), logging.getLogger("uvicorn")):
            (logger.addHandler if attach else logger.removeHandler)(self._capture)
        (_uvicorn_log.addFilter if attach else _uvicorn_log.removeFilter)(self._capture.trim)

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def _detach(self) -> None:
        self._hook_capture(attach=False)
        self._close_socket()


@contextlib.contextmanager
def serve_asgi(
    app: Any, *, startup_timeout: float = 15.0, description: str = "ASGI app", **options: Any
) -> Iterator[ServerThread]:
    """Serve *app* for the ``with`` block (*options* as for :class:`ServerThread`)."""
    server = ServerThread(app, description=description, **options)
    server.start(startup_timeout)
    try:
        yield server
    finally:
        server.stop()
