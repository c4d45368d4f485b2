"""Every way of naming a task app loads the right app, and every way it can fail says why.

Each loaded app is really served and asked who it is over loopback, so a test passes only if the
app that answers is the one the source named.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hang_guard import finishes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.taskapp import FACTORY_NAMES, InProcessTaskApp, is_asgi_app, resolve_app

# A raw ASGI app that says which module built it, so tests can tell apps apart.
PLAIN_APP_SOURCE = """
import json

MARK = {mark!r}


async def _asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({{"type": "lifespan.startup.complete"}})
            else:
                await send({{"type": "lifespan.shutdown.complete"}})
                return
    body = json.dumps({{"app": MARK, "path": scope["path"]}}).encode()
    await send({{"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]}})
    await send({{"type": "http.response.body", "body": body}})
"""


def whoami(task_app: InProcessTaskApp) -> Any:
    """Ask the served app for its mark over loopback."""
    response = httpx.get(task_app.url + "/health", timeout=5.0)
    assert response.status_code == 200
    return response.json()["app"]


def write_module(directory: Path, name: str, mark: str, tail: str) -> Path:
    path = directory / f"{name}.py"
    path.write_text(PLAIN_APP_SOURCE.format(mark=mark) + "\n" + textwrap.dedent(tail))
    return path


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def assert_fast_task_app_error(build: Callable[[], object], *fragments: str) -> TaskAppError:
    """The call raises TaskAppError (without hanging) whose message contains every fragment."""
    with pytest.raises(TaskAppError) as info:
        finishes(build)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return info.value


# -- app objects ------------------------------------------------------------------------------
def test_fastapi_app_object_is_served() -> None:
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"app": "fastapi-object"}

    with InProcessTaskApp(app) as task_app:
        assert whoami(task_app) == "fastapi-object"


def test_starlette_app_object_is_served() -> None:
    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"app": "starlette-object"})

    app = Starlette(routes=[Route("/health", health)])
    with InProcessTaskApp(app) as task_app:
        assert whoami(task_app) == "starlette-object"


def test_plain_asgi_callable_is_served() -> None:
    namespace: dict[str, Any] = {}
    exec(PLAIN_APP_SOURCE.format(mark="plain-callable"), namespace)
    with InProcessTaskApp(namespace["_asgi"]) as task_app:
        assert whoami(task_app) == "plain-callable"


def test_factory_callable_is_called_once() -> None:
    calls: list[int] = []
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"app": "from-factory"}

    def build() -> FastAPI:
        calls.append(1)
        return app

    with InProcessTaskApp(factory=build) as task_app:
        assert whoami(task_app) == "from-factory"
    assert calls == [1]


# -- task_app_path ----------------------------------------------------------------------------
def test_task_app_path_with_app_attribute(tmp_path: Path) -> None:
    path = write_module(tmp_path, "with_app", "file-app", "app = _asgi\n")
    with InProcessTaskApp(task_app_path=path) as task_app:
        assert whoami(task_app) == "file-app"


@pytest.mark.parametrize("factory_name", FACTORY_NAMES)
def test_task_app_path_with_each_factory_name(tmp_path: Path, factory_name: str) -> None:
    mark = f"factory-{factory_name}"
    path = write_module(tmp_path, "factory_mod", mark, f"def {factory_name}():\n    return _asgi\n")
    with InProcessTaskApp(task_app_path=str(path)) as task_app:
        assert whoami(task_app) == mark


def test_app_attribute_wins_over_factories(tmp_path: Path) -> None:
    path = write_module(
        tmp_path,
        "both",
        "the-app",
        """
        app = _asgi

        def create_app():
            raise AssertionError("the factory must not be called when `app` exists")
        """,
    )
    with InProcessTaskApp(task_app_path=path) as task_app:
        assert whoami(task_app) == "the-app"


def test_task_app_file_can_import_its_siblings(tmp_path: Path) -> None:
    sibling = unique("sibling")
    (tmp_path / f"{sibling}.py").write_text("MARK = 'from-sibling'\n")
    path = tmp_path / "uses_sibling.py"
    path.write_text(
        PLAIN_APP_SOURCE.format(mark="x") + f"\nimport {sibling}\nMARK = {sibling}.MARK\napp = _asgi\n"
    )
    with InProcessTaskApp(task_app_path=path) as task_app:
        assert whoami(task_app) == "from-sibling"


# -- target -----------------------------------------------------------------------------------
def test_target_naming_an_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = unique("target_app")
    write_module(tmp_path, module, "target-app", "app = _asgi\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with InProcessTaskApp(target=f"{module}:app") as task_app:
        assert whoami(task_app) == "target-app"


def test_target_naming_a_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = unique("target_factory")
    write_module(tmp_path, module, "target-factory", "def make():\n    return _asgi\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with InProcessTaskApp(target=f"{module}:make") as task_app:
        assert whoami(task_app) == "target-factory"


def test_target_with_dotted_attribute_in_a_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = unique("pkg")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    write_module(
        tmp_path / package,
        "server",
        "dotted",
        "class Holder:\n    app = staticmethod(_asgi)\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with InProcessTaskApp(target=f"{package}.server:Holder.app") as task_app:
        assert whoami(task_app) == "dotted"


# -- source errors ----------------------------------------------------------------------------
def test_no_source_at_all_says_exactly_one() -> None:
    assert_fast_task_app_error(lambda: InProcessTaskApp(), "exactly one", "got none", "task_app_path=")


def test_two_sources_say_exactly_one(tmp_path: Path) -> None:
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(FastAPI(), target="x:app"), "exactly one", "app, target"
    )
    assert error.hint is not None
    assert "factory=" in error.hint


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=missing).start(), str(missing), "does not exist"
    )


def test_file_that_is_not_python(tmp_path: Path) -> None:
    path = tmp_path / "app.txt"
    path.write_text("app = 1\n")
    assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=path).start(), "not a Python file", ".py"
    )


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert_fast_task_app_error(lambda: InProcessTaskApp(task_app_path=tmp_path).start(), "is not a file")


def test_import_error_carries_the_user_traceback(tmp_path: Path) -> None:
    path = tmp_path / "broken_import.py"
    path.write_text("x = 1\n\ndef helper():\n    raise RuntimeError('database url missing')\n\nhelper()\n")
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=path).start(),
        str(path.resolve()),
        "RuntimeError",
        "database url missing",
        "line 4, in helper",
        "Traceback",
    )
    assert isinstance(error.__cause__, RuntimeError)
    assert "importlib" not in str(error), "loader frames should be trimmed from the traceback"


def test_syntax_error_in_task_app_file(tmp_path: Path) -> None:
    path = tmp_path / "syntax.py"
    path.write_text("def broken(:\n    pass\n")
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=path).start(), "SyntaxError", "syntax.py"
    )
    assert isinstance(error.__cause__, SyntaxError)


def test_failed_import_leaves_no_module_behind(tmp_path: Path) -> None:
    import sys

    path = tmp_path / "leaves_nothing.py"
    path.write_text("raise ValueError('boom')\n")
    before = {name for name in sys.modules if "leaves_nothing" in name}
    with pytest.raises(TaskAppError):
        resolve_app(task_app_path=path)
    assert {name for name in sys.modules if "leaves_nothing" in name} == before


def test_factory_exception_carries_traceback(tmp_path: Path) -> None:
    path = write_module(tmp_path, "bad_factory", "x", "def create_app():\n    raise KeyError('MODEL_NAME')\n")
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=path).start(), "create_app", "KeyError", "MODEL_NAME"
    )
    assert isinstance(error.__cause__, KeyError)


def test_factory_argument_exception() -> None:
    def build() -> FastAPI:
        raise ConnectionError("vector store unreachable")

    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(factory=build).start(),
        "ConnectionError",
        "vector store unreachable",
        "build",
    )
    assert isinstance(error.__cause__, ConnectionError)


def test_factory_returning_something_else() -> None:
    assert_fast_task_app_error(
        lambda: InProcessTaskApp(factory=lambda: {"not": "an app"}).start(), "not an ASGI app", "dict"
    )


def test_async_factory_is_rejected_clearly() -> None:
    async def build() -> FastAPI:
        return FastAPI()

    assert_fast_task_app_error(lambda: InProcessTaskApp(factory=build).start(), "awaitable", "synchronously")


def test_module_without_app_lists_what_was_looked_for(tmp_path: Path) -> None:
    path = tmp_path / "empty_mod.py"
    path.write_text("application = None\nconfig = {'x': 1}\n")
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(task_app_path=path).start(), "defines no usable app", "`app`"
    )
    for name in FACTORY_NAMES:
        assert f"`{name}`" in str(error)


def test_module_with_unusable_app_says_what_it_found(tmp_path: Path) -> None:
    path = tmp_path / "wrong_app.py"
    path.write_text("app = 42\n")
    assert_fast_task_app_error(lambda: InProcessTaskApp(task_app_path=path).start(), "`app` is a int object")


def test_target_without_colon() -> None:
    assert_fast_task_app_error(
        lambda: InProcessTaskApp(target="just_a_module").start(), "package.module:attribute"
    )


def test_target_module_missing() -> None:
    module = unique("no_such_module")
    assert_fast_task_app_error(
        lambda: InProcessTaskApp(target=f"{module}:app").start(), "cannot import module", module
    )


def test_a_misspelt_module_of_a_target_gets_a_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = unique("teampkg")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "extract_app.py").write_text("app = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(target=f"{package}.extract_ap:app").start(), "cannot import module"
    )
    assert f"did you mean '{package}.extract_app:app'?" in str(error)
    top = unique("server_mod")
    (tmp_path / f"{top}.py").write_text("app = None\n")
    error = assert_fast_task_app_error(lambda: InProcessTaskApp(target=f"{top[:-1]}:app").start())
    assert f"did you mean '{top}:app'?" in str(error)


def test_target_module_with_missing_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = unique("needs_dep")
    missing = unique("missing_dependency")
    (tmp_path / f"{module}.py").write_text(f"import {missing}\napp = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(target=f"{module}:app").start(), "ModuleNotFoundError", missing, "Traceback"
    )
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_target_attribute_missing_lists_module_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = unique("attr_missing")
    write_module(tmp_path, module, "x", "application = _asgi\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(target=f"{module}:app").start(), "has no attribute 'app'"
    )
    assert error.hint is not None
    assert "application" in error.hint


def test_target_import_error_carries_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = unique("raises_on_import")
    (tmp_path / f"{module}.py").write_text("raise OSError('cannot read weights.bin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = assert_fast_task_app_error(
        lambda: InProcessTaskApp(target=f"{module}:app").start(), "OSError", "cannot read weights.bin"
    )
    assert isinstance(error.__cause__, OSError)


def test_app_argument_that_is_not_an_app() -> None:
    assert_fast_task_app_error(lambda: InProcessTaskApp("not an app").start(), "not an ASGI app")


# -- classification ---------------------------------------------------------------------------
def test_is_asgi_app_tells_apps_from_factories() -> None:
    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        return None

    def factory() -> Any:
        return asgi

    assert is_asgi_app(asgi)
    assert is_asgi_app(FastAPI())
    assert not is_asgi_app(factory)
    assert not is_asgi_app(FastAPI)  # a class is a factory, not an app
    assert not is_asgi_app(42)
