"""The package's layout rules that a program can see: size, entries, prose, one name per thing."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_synth_rl"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
NOT_ENTRIES = {"__init__.py", "__main__.py", "py.typed", "__pycache__"}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.xfail(strict=True, reason="the 17,000-line budget is not met yet; remove this mark once it is")
def test_the_package_keeps_to_its_budget() -> None:
    total = sum(_lines(p) for p in SOURCES)
    assert total <= 17_000, f"pytest_synth_rl/ has {total} lines; the budget is 17,000"


def test_at_most_twelve_top_level_entries() -> None:
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name not in NOT_ENTRIES)
    assert len(entries) <= 12, entries


def test_no_module_over_600_lines() -> None:
    big = {_rel(p): n for p in SOURCES if (n := _lines(p)) > 600}
    assert not big


def _docstring_lines(path: Path) -> int:
    tree = _tree(path)
    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def test_module_docstrings_are_short() -> None:
    lengths = {_rel(p): _docstring_lines(p) for p in SOURCES}
    assert not {name: n for name, n in lengths.items() if n > 15}
    average = sum(lengths.values()) / len(lengths)
    assert average <= 5, f"module docstrings average {average:.1f} lines"


def test_no_public_name_is_defined_twice() -> None:
    homes: dict[str, list[str]] = collections.defaultdict(list)
    for path in SOURCES:
        for node in _tree(path).body:
            is_definition = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            if is_definition and not node.name.startswith("_"):
                homes[node.name].append(_rel(path))
    assert not {name: where for name, where in homes.items() if len(where) > 1}


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_one_module_suggests_near_misses() -> None:
    users = [_rel(p) for p in SOURCES if "difflib" in _imported_modules(p)]
    assert users == ["pytest_synth_rl/errors.py"]


#: HTTP is spoken by libraries: no module parses it or reaches into a library's protocol objects.
PROTOCOL_MODULES = ("h11", "httptools", "uvicorn.protocols")
LIBRARY_INTERNALS = re.compile(r"server_state|__self__|asyncio\.Protocol|\.recv\(|\.sendall\(")
#: The measured exceptions, each explained in docs/design.md ("Serving on loopback").
ALLOWED = {
    # a public-API-only stop costs 200 ms; uvicorn has no header deadline
    "pytest_synth_rl/taskapp/serving.py": {"server_state", "asyncio.Protocol"},
}


def test_no_hand_written_http_and_no_library_internals() -> None:
    found = []
    for path in SOURCES:
        for module in _imported_modules(path):
            if module.startswith(PROTOCOL_MODULES):
                found.append(f"{_rel(path)}: imports {module}")
        for match in LIBRARY_INTERNALS.finditer(path.read_text(encoding="utf-8")):
            if match.group(0) not in ALLOWED.get(_rel(path), set()):
                found.append(f"{_rel(path)}: {match.group(0)}")
    assert not found
