"""Every Python and TOML snippet of the docs and the README runs, so the docs cannot drift.

Sybil finds the snippets of each page; a page's snippets run in order in one namespace and one
project folder (a fresh ``pytester`` directory holding a copy of ``examples/``), so a page can
build up a project as its reader does:

* a Python block whose first line is a file name comment (``# tests/test_first.py``) is written
  to that file; every test module (``test_*.py``) a page writes is run by pytest, and must pass:
  by a hidden block that runs it without options, or else in one run when the page ends;
* any other Python block is executed;
* a TOML block is parsed; with a file name comment it is written too; an RL config (one with an
  ``[algorithm]`` table) is validated by the plugin's own payload builder, warnings included, and
  a ``[tool.pytest.ini_options]`` fragment may only name ini options the plugin registers;
* ``<!-- invisible-code-block: python -->`` blocks do what the reader does in the shell (copy a
  file, run pytest with options), and ``<!-- skip: next "reason" -->`` skips the next snippet.

Hidden blocks may use ``project`` (the folder), ``monkeypatch`` and ``run_pytest(*args,
expect=None)`` (``expect={"failed": 1}`` for a page that shows a failure).
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import SkipTest

import fastapi  # noqa: F401  # imported once here, not again by every run of a page's task app
import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

import pytest_synth_rl
import pytest_synth_rl.fake.model
import pytest_synth_rl.plugin.fixtures
from pytest_synth_rl.config import SynthConfigWarning, build_rl_payload, parse_toml
from pytest_synth_rl.plugin.settings import OPTIONS

# pytester's in-process runs drop the modules first imported inside them, while the package keeps
# the names it loaded lazily: every public name is loaded here first, so a snippet's
# ``Tolerance`` is the class the plugin checks against in every run.
for _name in pytest_synth_rl.__all__:
    getattr(pytest_synth_rl, _name)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
#: ``# path/to/file.ext`` as a snippet's first line: the snippet is that file's content.
FILE_HEADER = re.compile(r"\A# (?P<path>[\w./-]+\.(?:py|toml|json|jsonl|txt))\n")
INI_NAMES = {spec.ini for spec in OPTIONS if spec.ini}


def _file_of(source: str) -> tuple[Path | None, str]:
    match = FILE_HEADER.match(source)
    return (Path(match["path"]), source) if match else (None, source)


def _write(project: Path, relative: Path, text: str) -> Path:
    assert not relative.is_absolute(), relative
    assert ".." not in relative.parts, relative
    path = project / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _python(example: Example) -> None:
    namespace = example.namespace
    relative, source = _file_of(str(example.parsed))
    if relative is None:
        code = compile(source, f"{example.path}, line {example.line}", "exec")
        exec(code, namespace)
        return
    _write(namespace["project"], relative, source)
    if relative.name.startswith("test_") and relative.suffix == ".py":
        namespace["unrun"].add(relative.as_posix())


def _toml(example: Example) -> None:
    relative, source = _file_of(str(example.parsed))
    tree = parse_toml(source, source=f"{example.path}, line {example.line}")
    project: Path = example.namespace["project"]
    if relative is not None:
        _write(project, relative, source)
    if "algorithm" in tree:
        path = _write(project, relative or Path("snippet_config.toml"), source)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SynthConfigWarning)
            build_rl_payload(path, task_url="http://127.0.0.1:8000")
    ini = tree.get("tool", {}).get("pytest", {}).get("ini_options", {})
    unknown = sorted(key for key in ini if key.startswith("synth_") and key not in INI_NAMES)
    assert not unknown, f"{example.path}, line {example.line}: not ini options of the plugin: {unknown}"


SYBIL = Sybil(
    parsers=[
        CodeBlockParser(language="python", evaluator=_python),
        CodeBlockParser(language="toml", evaluator=_toml),
        SkipParser(),
    ],
    path=str(ROOT),
)


def _runner(pytester: pytest.Pytester, unrun: set[str]) -> Callable[..., pytest.RunResult]:
    def run_pytest(*args: str, expect: dict[str, int] | None = None) -> pytest.RunResult:
        """Run pytest in the page's project; with no *expect*, every test must pass. A run with
        options (``--synth-update-baselines``...) prepares the page's tests, and does not count as
        their run."""
        if not any(arg.startswith("-") for arg in args):
            files = {arg.split("::")[0] for arg in args}
            unrun.difference_update(files or set(unrun))
        result = pytester.runpytest_inprocess(
            *args, "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"
        )
        outcomes = result.parseoutcomes()
        if expect is None:
            bad = {key: outcomes[key] for key in ("failed", "errors", "error") if outcomes.get(key)}
            assert outcomes.get("passed"), result.stdout.str()
            assert not bad, result.stdout.str()
        else:
            assert {key: outcomes.get(key, 0) for key in expect} == expect, result.stdout.str()
        return result

    return run_pytest


def _evaluate(
    page: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[str]]:
    """Run *page*'s snippets in order: (how many ran, where the skipped ones are)."""
    shutil.copytree(
        ROOT / "examples",
        pytester.path / "examples",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    document = SYBIL.parse(page)
    namespace: dict[str, Any] = document.namespace
    unrun: set[str] = set()
    run_pytest = _runner(pytester, unrun)
    namespace.update(project=pytester.path, run_pytest=run_pytest, monkeypatch=monkeypatch, unrun=unrun)
    ran, skipped = 0, []
    for example in document:
        try:
            example.evaluate()
        except SkipTest:
            skipped.append(f"{page.name}, line {example.line}")
            continue
        ran += example.region.evaluator in (_python, _toml)
    remaining = sorted(path for path in unrun if (pytester.path / path).is_file())
    if remaining:
        run_pytest(*remaining)
    return ran, skipped


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_page_s_snippets_run(
    page: Path,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Callable[[str, object], None],
) -> None:
    ran, skipped = _evaluate(page, pytester, monkeypatch)
    record_property("snippets_run", ran)
    record_property("snippets_skipped", skipped)


def test_the_harness_runs_python_and_toml_snippets_and_fails_a_broken_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = pytester.path / "page.md"
    fence = "```"
    page.write_text(
        f"{fence}toml\n# rl.toml\n[algorithm]\ntype = 'online'\n{fence}\n\n"
        f"{fence}python\nseen = 1 + 1\n{fence}\n\n"
        f'<!-- skip: next "not yet" -->\n\n{fence}python\nraise RuntimeError\n{fence}\n',
        encoding="utf-8",
    )
    with pytest.raises(Exception, match=r"RL config .*rl\.toml has \d+ problems"):
        _evaluate(page, pytester, monkeypatch)
    page.write_text(page.read_text(encoding="utf-8").replace("# rl.toml\n[algorithm]", "[tool]"), "utf-8")
    ran, skipped = _evaluate(page, pytester, monkeypatch)
    assert (ran, len(skipped)) == (2, 1)
