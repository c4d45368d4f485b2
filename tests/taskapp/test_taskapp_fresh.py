"""A task app loaded ``fresh`` (a per-test app) shares no app object or module with another server.

Task apps keep state on the app: a lifespan puts a client on ``app.state`` at startup and closes
it at shutdown. Two servers of one app object therefore break each other: the second's startup
replaces the first's client and its shutdown closes the one both now use. Every app here is such
an app (a resource on ``app.state`` instead of a client, so a test can ask whether it is open),
served for real over loopback.
"""

from __future__ import annotations

import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.taskapp import InProcessTaskApp
from pytest_synth_rl.taskapp.loading import (
    load_module_from_path,
    resolve_app,
    resolve_fresh_app,
    unload_module,
)

# A FastAPI task app whose lifespan owns a resource on app.state, with a pydantic body model
# under postponed annotations (resolved through sys.modules, so the module must be registered).
LIFESPAN_APP = """
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel

{imports}

EXECUTIONS = []
EXECUTIONS.append(1)


class Resource:
    def __init__(self) -> None:
        self.closed = False


class Echo(BaseModel):
    inner: Inner


class Inner(BaseModel):
    text: str


@asynccontextmanager
async def lifespan(app):
    resource = Resource()
    app.state.resource = resource
    yield
    resource.closed = True


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health():
    return {{"open": not app.state.resource.closed, "app": id(app), "module": __name__}}


@app.post("/echo")
async def echo(body: Echo):
    return {{"text": body.inner.text, "helper": {helper}}}
"""


def lifespan_app(imports: str = "", helper: str = "None") -> str:
    return LIFESPAN_APP.format(imports=imports, helper=helper)


def health(task_app: InProcessTaskApp) -> Any:
    response = httpx.get(task_app.url + "/health", timeout=5.0)
    assert response.status_code == 200, response.text
    return response.json()


def echo(task_app: InProcessTaskApp) -> Any:
    response = httpx.post(task_app.url + "/echo", json={"inner": {"text": "hi"}}, timeout=5.0)
    assert response.status_code == 200, response.text
    return response.json()


def served(**source: Any) -> InProcessTaskApp:
    return InProcessTaskApp(**source, api_key="fresh-load-key-0123456789", export_api_key=False)


def private_modules(prefix: str = "") -> list[str]:
    """Names of the loader's modules in sys.modules (those under *prefix* if given)."""
    return [name for name in sys.modules if "_synth_task_app_" in name and name.startswith(prefix)]


def unique(stem: str) -> str:
    return f"{stem}_{uuid.uuid4().hex[:8]}"


# -- a .py path ---------------------------------------------------------------------------------
def test_a_fresh_app_leaves_a_running_shared_app_of_the_same_file_working(tmp_path: Path) -> None:
    path = tmp_path / "lifespan_app.py"
    path.write_text(lifespan_app())
    with served(task_app_path=path) as shared:
        before = health(shared)
        for _ in range(2):  # two per-test apps in a row, each started and stopped meanwhile
            with served(task_app_path=path, fresh=True) as private:
                mine = health(private)
                assert mine["open"]
                assert mine["app"] != before["app"]
                assert mine["module"] != before["module"]
                assert echo(private)["text"] == "hi"
        after = health(shared)
    assert after == before  # same app, resource still open: the private app's shutdown was its own


def test_a_shared_app_started_after_a_fresh_one_is_not_disturbed_by_its_stop(tmp_path: Path) -> None:
    path = tmp_path / "lifespan_app_reverse.py"
    path.write_text(lifespan_app())
    private = served(task_app_path=path, fresh=True).start()
    try:
        with served(task_app_path=path) as shared:
            assert health(private)["app"] != health(shared)["app"]
            private.stop()
            assert health(shared)["open"]
    finally:
        private.stop()


def test_fresh_loads_leave_the_file_executed_once_for_shared_apps(tmp_path: Path) -> None:
    path = tmp_path / "counted_app.py"
    path.write_text(lifespan_app())
    shared_module = load_module_from_path(path)
    app, module = resolve_fresh_app(task_app_path=path)
    assert module is not None
    assert module is not shared_module
    assert app is module.app
    assert app is not shared_module.app
    assert sys.modules[module.__name__] is module  # registered while in use
    assert load_module_from_path(path) is shared_module  # the shared one is still remembered
    assert resolve_app(task_app_path=path) is shared_module.app
    assert shared_module.EXECUTIONS == [1]
    unload_module(module)
    assert module.__name__ not in sys.modules
    unload_module(module)  # a second time is a no-op


def test_a_stopped_fresh_app_leaves_no_module_behind_and_restarts_anew(tmp_path: Path) -> None:
    path = tmp_path / "restarted_app.py"
    path.write_text(lifespan_app())
    task_app = served(task_app_path=path, fresh=True)
    first = health(task_app.start())
    task_app.stop()
    assert first["module"] not in sys.modules
    second = health(task_app.start())
    task_app.stop()
    assert second["module"] != first["module"]
    assert second["module"] not in sys.modules


def test_a_fresh_file_target_with_an_attribute(tmp_path: Path) -> None:
    path = tmp_path / "named_app.py"
    path.write_text(lifespan_app() + "\nserver = app\n")
    with (
        served(task_app_path=f"{path}:server") as shared,
        served(task_app_path=f"{path}:server", fresh=True) as private,
    ):
        assert health(private)["app"] != health(shared)["app"]


def test_a_fresh_file_that_fails_to_import_leaves_no_module(tmp_path: Path) -> None:
    path = tmp_path / "broken_fresh_app.py"
    path.write_text("raise RuntimeError('no model weights')\n")
    with pytest.raises(TaskAppError, match="no model weights"):
        served(task_app_path=path, fresh=True).start()
    assert not [name for name in private_modules() if "broken_fresh_app" in name]


def test_a_fresh_file_without_an_app_leaves_no_module(tmp_path: Path) -> None:
    path = tmp_path / "appless_fresh_app.py"
    path.write_text("VALUE = 1\n")
    with pytest.raises(TaskAppError, match="defines no usable app"):
        resolve_fresh_app(task_app_path=path)
    assert not [name for name in private_modules() if "appless_fresh_app" in name]


# -- a package.module:attr target -------------------------------------------------------------
@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Makes a package with a helper module, on sys.path; its modules are dropped afterwards."""
    made: list[str] = []

    def make(init: str = "") -> str:
        package = unique("fresh_pkg")
        folder = tmp_path / package
        folder.mkdir()
        (folder / "__init__.py").write_text(init)
        (folder / "helpers.py").write_text("def greeting():\n    return 'from helpers'\n")
        made.append(package)
        return package

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in list(sys.modules):
        if name.partition(".")[0] in made:
            del sys.modules[name]


def test_a_fresh_target_is_a_copy_and_the_imported_module_is_untouched(
    tmp_path: Path, make_package: Callable[..., str]
) -> None:
    package = make_package()
    source = lifespan_app(imports="from .helpers import greeting", helper="greeting()")
    (tmp_path / package / "server.py").write_text(source)
    target = f"{package}.server:app"
    with served(target=target) as shared:
        original = sys.modules[f"{package}.server"]
        before = health(shared)
        with served(target=target, fresh=True) as private:
            mine = health(private)
            assert mine["app"] != before["app"]
            assert mine["module"].startswith(f"{package}._synth_task_app_server_")
            assert echo(private) == {"text": "hi", "helper": "from helpers"}  # relative import
            assert sys.modules[f"{package}.server"] is original
        assert health(shared) == before
        assert original.EXECUTIONS == [1]
        assert private_modules(package) == []
        assert echo(shared) == {"text": "hi", "helper": "from helpers"}


def test_a_fresh_target_first_does_not_import_the_module_itself(
    tmp_path: Path, make_package: Callable[..., str]
) -> None:
    package = make_package()
    (tmp_path / package / "server.py").write_text(lifespan_app())
    with served(target=f"{package}.server:app", fresh=True) as private:
        assert health(private)["open"]
        assert f"{package}.server" not in sys.modules
        assert getattr(sys.modules[package], "server", None) is None  # not bound on the package


def test_a_fresh_target_naming_a_package_keeps_its_relative_imports(
    make_package: Callable[..., str],
) -> None:
    package = make_package(lifespan_app(imports="from .helpers import greeting", helper="greeting()"))
    with served(target=f"{package}:app") as shared, served(target=f"{package}:app", fresh=True) as private:
        assert health(private)["app"] != health(shared)["app"]
        assert echo(private) == {"text": "hi", "helper": "from helpers"}
        copy = sys.modules[health(private)["module"]]
        assert copy.__package__ == package
        assert copy.__path__ == list(sys.modules[package].__path__)
        assert [name for name in sys.modules if name.startswith(copy.__name__ + ".")] == []
        assert private_modules(package) == [copy.__name__]
    assert private_modules(package) == []


def test_a_fresh_target_factory_is_called_on_the_copy(
    tmp_path: Path, make_package: Callable[..., str]
) -> None:
    package = make_package()
    (tmp_path / package / "server.py").write_text(lifespan_app() + "\ndef make():\n    return app\n")
    with served(target=f"{package}.server:make") as shared:
        with served(target=f"{package}.server:make", fresh=True) as private:
            assert health(private)["app"] != health(shared)["app"]
        assert health(shared)["open"]


def test_fresh_target_errors_read_as_for_an_imported_one(
    tmp_path: Path, make_package: Callable[..., str]
) -> None:
    package = make_package()
    (tmp_path / package / "broken.py").write_text("import json\nraise OSError('cannot read weights.bin')\n")
    (tmp_path / package / "appless.py").write_text("VALUE = 1\n")
    with pytest.raises(TaskAppError, match="cannot import module") as missing:
        resolve_fresh_app(target=f"{package}.nowhere:app")
    assert f"{package}.nowhere" in str(missing.value)
    with pytest.raises(TaskAppError, match="cannot import module"):
        resolve_fresh_app(target=f"{unique('no_such_package')}.server:app")
    with pytest.raises(TaskAppError, match=r"raised OSError:[\s\S]*cannot read weights\.bin"):
        resolve_fresh_app(target=f"{package}.broken:app")
    with pytest.raises(TaskAppError, match="has no attribute 'app'"):
        resolve_fresh_app(target=f"{package}.appless:app")
    assert private_modules(package) == []


def test_a_module_without_source_cannot_be_loaded_fresh() -> None:
    with pytest.raises(TaskAppError, match="not loaded from a Python source file") as info:
        resolve_fresh_app(target="math:pi")
    assert "scope='session'" in (info.value.hint or "")


# -- sources with nothing to reload -----------------------------------------------------------
def test_an_app_object_is_served_as_given_and_a_factory_called_per_start(tmp_path: Path) -> None:
    path = tmp_path / "object_app.py"
    path.write_text(lifespan_app())
    module = load_module_from_path(path)
    assert resolve_fresh_app(module.app) == (module.app, None)
    built: list[object] = []

    def factory() -> Any:
        built.append(object())
        return module.app

    assert resolve_fresh_app(factory=factory) == (module.app, None)
    assert len(built) == 1


def test_a_fresh_load_yielding_an_app_another_server_serves_warns(tmp_path: Path) -> None:
    core = unique("core_app")
    (tmp_path / f"{core}.py").write_text(lifespan_app())
    thin = tmp_path / "thin_app.py"
    thin.write_text(f"from {core} import app\n")  # re-executing this file cannot give a new app
    try:
        with served(task_app_path=thin) as shared:
            with pytest.warns(UserWarning, match="its app object is the one another in-process server"):
                private = served(task_app_path=thin, fresh=True).start()
            private.stop()
            assert health(shared)["open"] is False  # what the warning is about
    finally:
        sys.modules.pop(core, None)


def test_no_warning_when_the_fresh_app_is_its_own(tmp_path: Path) -> None:
    path = tmp_path / "quiet_app.py"
    path.write_text(lifespan_app())
    with served(task_app_path=path), warnings.catch_warnings():
        warnings.simplefilter("error")
        with served(task_app_path=path, fresh=True) as private:
            assert health(private)["open"]
