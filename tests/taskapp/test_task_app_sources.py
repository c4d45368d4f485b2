"""The ways a test names its task app: a file, a file and an attribute, a module target."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.taskapp.loading import resolve_app, split_app_path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_split_app_path() -> None:
    assert split_app_path("app.py") == (Path("app.py"), None)
    assert split_app_path("dir/app.py:make_app") == (Path("dir/app.py"), "make_app")
    assert split_app_path("dir/app.py:api.app") == (Path("dir/app.py"), "api.app")
    assert split_app_path("pkg.mod:app") == (Path("pkg.mod:app"), None)


def test_a_file_and_attribute_names_the_app_and_a_near_miss_is_suggested(tmp_path: Path) -> None:
    source = tmp_path / "two_apps.py"
    source.write_text(
        "from starlette.applications import Starlette\n\napp = Starlette()\nother_app = Starlette()\n"
    )
    assert resolve_app(task_app_path=f"{source}:other_app") is not resolve_app(task_app_path=source)
    with pytest.raises(TaskAppError) as info:
        resolve_app(task_app_path=f"{source}:other_ap")
    assert f"task app file {str(source)!r} has no attribute 'other_ap'" in str(info.value)
    assert "did you mean 'other_app'?" in str(info.value)


@pytest.mark.parametrize(
    ("source", "name", "described"),
    [
        (
            "from starlette.applications import Starlette\nfrom starlette.routing import Router\n\n"
            "router = Router()\napi = Starlette()\n\ndef grade(a, b, c):\n    return 1\n",
            "api",
            "a Starlette object",
        ),
        (
            "def helper(x, y, z):\n    pass\n\nasync def application(scope, receive, send):\n    pass\n",
            "application",
            "the function application(scope, receive, send)",
        ),
    ],
)
def test_an_app_under_another_name_is_suggested_as_a_file_target(
    tmp_path: Path, source: str, name: str, described: str
) -> None:
    # Before: "defines no usable app" and nothing about the app that was there.
    path = tmp_path / "service.py"
    path.write_text(source)
    with pytest.raises(TaskAppError) as info:
        resolve_app(task_app_path=path)
    assert info.value.hint == (
        f"did you mean 'service.py:{name}'? `{name}` is {described}; a file target names an app that is "
        "not called `app` after a colon"
    )
    assert resolve_app(task_app_path=f"{path}:{name}") is not None


def test_a_module_without_any_app_keeps_the_plain_hint(tmp_path: Path) -> None:
    path = tmp_path / "nothing.py"
    path.write_text("def grade(a, b, c):\n    return 1\n")
    with pytest.raises(TaskAppError) as info:
        resolve_app(task_app_path=path)
    assert (info.value.hint or "").startswith("define a module-level `app = FastAPI(...)`")


def test_a_missing_attribute_names_the_modules_apps_not_its_imports(tmp_path: Path) -> None:
    # Before: "it defines: APIRouter, APP_ID, Annotated, ..." with the app itself cut off.
    source = tmp_path / "service.py"
    imports = "".join(f"from typing import {name}\n" for name in ("Annotated", "Any", "Callable", "Optional"))
    source.write_text(
        imports + "from starlette.applications import Starlette\n\nAPP_ID = 1\napp = Starlette()\n"
    )
    with pytest.raises(TaskAppError) as info:
        resolve_app(task_app_path=f"{source}:application")
    assert info.value.hint == "did you mean 'app'? its apps: app"


SUITE = """
import pytest

pytestmark = pytest.mark.synth_rl(config="arithmetic.toml")


@pytest.mark.synth_task_app("arithmetic_task_app.py:app")
def test_file_and_attribute(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)


@pytest.mark.synth_task_app("arithmetic_task_app")
def test_module_name_of_a_file(synth_rl_job):
    pass
"""


def test_task_app_marker_sources(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_sources=SUITE)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*MarkerError: @pytest.mark.synth_task_app on test_sources.py::test_module_name_of_a_file: "
            "'arithmetic_task_app' is not a 'package.module:attribute' target, and arithmetic_task_app.py "
            "is a file",
            "  hint: did you mean 'arithmetic_task_app.py'? A .py path loads that file",
        ]
    )
