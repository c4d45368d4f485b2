"""Run a task app inside the test process, served over loopback, its key lent via ``ENVIRONMENT_API_KEY``."""

from __future__ import annotations

import collections
import http.client
import itertools
import os
import secrets
import threading
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from pytest_synth_rl.errors import (
    ConfigProblem,
    SynthUsageError,
    TaskAppError,
    keywords_checked,
    seconds_problem,
)
from pytest_synth_rl.secrets.masking import Secret, key_problem, register_secret, secret_or_none
from pytest_synth_rl.taskapp.health import HealthReport, check_task_app_health, task_app_auth_headers
from pytest_synth_rl.taskapp.loading import resolve_app, resolve_fresh_app, unload_module
from pytest_synth_rl.taskapp.loopback import normalise_loopback_host, url_host
from pytest_synth_rl.taskapp.serving import Lifespan, ServerThread

T = TypeVar("T")

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
    if os.environ.get(ALIASES_VAR) != _written[ALIASES_VAR]:
        _user_aliases = os.environ.get(ALIASES_VAR)  # changed by someone else while apps ran: adopt it
    *others, primary = _active.values()
    _set(KEY_VAR, primary)
    given = [*(a.strip() for a in (_user_aliases or "").split(",")), *others]
    aliases = [key for key in dict.fromkeys(given) if key and key != primary]
    _set(ALIASES_VAR, ",".join(aliases) if aliases else _user_aliases)


def acquire_env_key(key: str) -> int:
    """Lend *key* to the task apps of this process; the token is for :func:`release_env_key`."""
    global _user_aliases
    register_secret(key)
    with _lock:
        if not _active:
            _saved.update({name: os.environ.get(name) for name in (KEY_VAR, ALIASES_VAR)})
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
        else:
            for name, value in _saved.items():
                if os.environ.get(name) == _written.get(name):
                    _set(name, value)


CONTRACT_ENDPOINTS: tuple[str, ...] = ("/health", "/task_info", "/info", "/rollout")

_served: collections.Counter[int] = collections.Counter()
_served_lock = threading.Lock()


class InProcessTaskApp:
    """Serve a task app with uvicorn on loopback in a background thread, for the test's duration.

    Give exactly one of ``app``, ``task_app_path`` (``file.py`` or ``file.py:attr``), ``target``
    (``"pkg.module:attr"``) or ``factory``. The key is ``api_key``, else ``$ENVIRONMENT_API_KEY``,
    else a random one. ``health_path=None`` serves an ASGI app that is not a task app;
    ``fresh=True`` loads a file or target anew at each start, sharing no app or module state.
    Use with ``with``/``async with`` or :meth:`start`/:meth:`stop`; failures are ``TaskAppError``.
    """

    @keywords_checked
    def __init__(
        self,
        app: Any = None,
        *,
        task_app_path: str | Path | None = None,
        target: str | None = None,
        factory: Callable[[], Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | Secret | None = None,
        startup_timeout: float = 10.0,
        log_level: str | int | None = "warning",
        lifespan: Lifespan = "auto",
        shutdown_timeout: float = 3.0,
        health_path: str | None = "/health",
        export_api_key: bool = True,
        fresh: bool = False,
    ) -> None:
        self._source: dict[str, Any] = {"task_app_path": task_app_path, "target": target, "factory": factory}
        if sum(v is not None for v in (app, task_app_path, target, factory)) != 1:
            resolve_app(app, **self._source)  # the loader's error, at construction
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            wrong = f"port must be an integer between 0 and 65535, got {port!r}"
            raise TaskAppError(wrong, hint="use port=0 (the default) to let the OS pick a free port")
        if lifespan not in ("auto", "on", "off"):
            wrong = f"lifespan must be 'auto', 'on' or 'off', got {lifespan!r}"
            hint = "'auto' runs the app's startup/shutdown if it has any; 'on' requires it"
            raise TaskAppError(wrong, hint=hint)
        for name, seconds in (("startup_timeout", startup_timeout), ("shutdown_timeout", shutdown_timeout)):
            problem = seconds_problem(seconds)
            if problem is not None:
                hint = f"e.g. InProcessTaskApp(..., {name}=10)"
                raise SynthUsageError([ConfigProblem(f"InProcessTaskApp.{name}", problem, hint)])
        self._app, self.fresh = app, fresh
        self.host, self.requested_port = normalise_loopback_host(host), port
        self.startup_timeout, self.shutdown_timeout = float(startup_timeout), float(shutdown_timeout)
        self.log_level, self.lifespan = log_level, lifespan
        self.health_path, self.export_api_key = health_path, export_api_key
        problem = key_problem(api_key.value if isinstance(api_key, Secret) else api_key or "")
        if problem is not None:
            raise TaskAppError(
                f"api_key {problem}", hint="give the key the app enforces as printable ASCII text"
            )
        given, lent = secret_or_none(api_key), os.environ.get(KEY_VAR)
        self.api_key_source = "argument" if given else "environment" if lent else "generated"
        self._api_key = given or Secret(lent or secrets.token_hex(32))
        self._server: ServerThread | None = None
        self._served_app: Any = None
        self._module: types.ModuleType | None = None
        self._env_token: int | None = None
        self._url: str | None = None
        self._port: int | None = None
        self._last_logs: list[str] = []

    @property
    def api_key(self) -> Secret:
        """The key the app enforces, masked in every repr (a failing test prints its arguments)."""
        return self._api_key

    @property
    def is_running(self) -> bool:
        return self._server is not None and self._server.alive

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; raises :class:`TaskAppError` if never started or died."""
        self.ensure_running()
        return self._started("URL", self._url)

    @property
    def port(self) -> int:
        return self._started("port", self._port)

    def _started(self, what: str, value: T | None) -> T:
        if value is None:
            raise TaskAppError(
                f"the in-process task app has not been started, so it has no {what} yet",
                hint="use `with InProcessTaskApp(...) as app:` or call app.start() first",
            )
        return value

    @property
    def logs(self) -> list[str]:
        """Log lines emitted from the server thread (uvicorn's and the app's), redacted."""
        return self._server.logs if self._server is not None else list(self._last_logs)

    def ensure_running(self) -> None:
        """Raise :class:`TaskAppError` if the server thread died while it should be serving."""
        server = self._server
        if server is not None and server.died:
            raise TaskAppError(
                f"the in-process task app at {self._url} stopped unexpectedly: its server thread died\n  "
                + server.failure_text(),
                url=self._url,
                hint="see the server log above; the app (or something it called) stopped the server",
            )

    def wait_until_stopped(self, timeout: float | None = None) -> bool:
        """Block until the server thread ends (the app stopped it, or it died); True if it did."""
        return self._server is None or self._server.join(timeout)

    def health(self, *, timeout: float = 10.0) -> HealthReport:
        return check_task_app_health(self.url, self._api_key, timeout=timeout)

    def start(self) -> InProcessTaskApp:
        """Load the app, serve it, and wait until it answers; no-op if already running."""
        __tracebackhide__ = True
        if self._server is not None:
            self.ensure_running()
            return self
        if self.export_api_key:
            self._env_token = acquire_env_key(self._api_key.value)
        server: ServerThread | None = None
        try:
            server = ServerThread(
                self._load(),
                host=self.host,
                port=self.requested_port,
                lifespan=self.lifespan,
                log_level=self.log_level,
                shutdown_timeout=self.shutdown_timeout,
            )
            self._port, self._url = server.start(self.startup_timeout), server.url
            self._server = server
            self._probe_health()
        except BaseException:
            if server is not None:
                self._last_logs = server.logs
            self.stop()  # stops the server only once it started; gives the key back either way
            raise
        return self

    def stop(self) -> None:
        """Stop serving and restore the environment; idempotent and bounded in time."""
        server, self._server = self._server, None
        try:
            if server is not None:
                server.stop()
                self._last_logs = server.logs
        finally:
            self._release()

    def _load(self) -> Any:
        app, self._module = resolve_fresh_app(self._app, fresh=self.fresh, **self._source)
        with _served_lock:
            shared = self._module is not None and _served[id(app)] > 0
            _served[id(app)] += 1
            self._served_app = app
        if shared:
            where = self._source["task_app_path"] or self._source["target"]
            warnings.warn(
                f"task app {str(where)!r} was loaded afresh, but its app object is the one another "
                "in-process server is serving, so both share its state and lifespan; build the app in "
                "the module loaded, or return a new one from a factory such as create_app()",
                UserWarning,
                stacklevel=3,
            )
        return app

    def _release(self) -> None:
        served, self._served_app = self._served_app, None
        if served is not None:
            with _served_lock:
                _served[id(served)] -= 1
                if _served[id(served)] <= 0:
                    del _served[id(served)]
        module, self._module = self._module, None
        if module is not None:
            unload_module(module)
        token, self._env_token = self._env_token, None
        if token is not None:
            release_env_key(token)

    def _probe_health(self) -> None:
        if self.health_path is None:
            return
        conn = http.client.HTTPConnection(self.host, self._port, timeout=self.startup_timeout)
        try:
            conn.request("GET", self.health_path, headers=task_app_auth_headers(self._api_key))
            status = conn.getresponse().status
        except OSError as exc:
            failed = f"the task app at {self._url} started but GET {self.health_path} failed: {exc}"
            raise TaskAppError(failed, url=self._url) from exc
        finally:
            conn.close()
        if status == 404:
            endpoints = ", ".join(CONTRACT_ENDPOINTS)
            raise TaskAppError(
                f"the task app at {self._url} has no {self.health_path} route (GET returned 404); "
                f"a Synth task app must serve {endpoints}",
                url=self._url,
                hint="add the missing routes, or pass health_path=None to serve a non-task app",
                details={"status_code": status},
            )

    def __enter__(self) -> InProcessTaskApp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> InProcessTaskApp:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await anyio.to_thread.run_sync(self.stop)

    def __repr__(self) -> str:
        where = self._url or f"{url_host(self.host)}:{self.requested_port}"
        state = "running" if self.is_running else "stopped"
        return f"InProcessTaskApp({where!r}, api_key={self._api_key.masked!r}, {state})"
