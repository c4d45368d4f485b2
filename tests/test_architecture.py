"""Two structural rules of the package, checked on its source with :mod:`ast`.

**No module reads another object's private attribute.** A private name is one that starts with
``_`` and is not a dunder (``__name__``, ``__dict__`` ... are Python's protocol, not privacy).
Flagged, in every ``pytest_synth_rl`` module:

* ``expr._name`` (read, write, call or delete) where ``expr`` is anything but the bare names
  ``self`` or ``cls``, a ``super()`` call, or, inside a method, a local name bound to ``cls(...)``
  there (``job = cls(...)`` or ``with cls(...) as job``: an alternative constructor finishing the
  object it is making). Everything else, even another instance of the same class, is flagged;
* ``from module import _name`` and ``import module._name``: a module's private global is the
  module's private attribute.

**No import cycle** among ``pytest_synth_rl`` modules. Every import statement counts, wherever
it is: module level, inside ``if TYPE_CHECKING:``, inside a function. ``from pkg import name``
depends on ``pkg.name`` when ``name`` is a submodule, and on ``pkg`` itself unless ``name`` is a
submodule and the importer sits inside ``pkg`` (whose ``__init__`` is then already running).
Importing ``a.b.c`` also runs the ``__init__`` of every package on the way (``a``, ``a.b``) that
the importer is not itself inside, so those count too.

Failures list every ``file:line: expression`` and every cycle (with the line of each import in
it), so the fix starts from the message.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "pytest_synth_rl"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner_is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT.parent).as_posix()}:{getattr(node, 'lineno', 0)}"


def _made_by_cls(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Local names a method binds to ``cls(...)``: the object an alternative constructor makes."""
    names: set[str] = set()

    def is_cls_call(value: ast.expr | None) -> bool:
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "cls"

    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and is_cls_call(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if is_cls_call(item.context_expr) and isinstance(item.optional_vars, ast.Name):
                    names.add(item.optional_vars.id)
    return names


def private_reads(path: Path) -> Iterator[str]:
    """``file:line: expression`` for each private-attribute read in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own: dict[int, set[str]] = {}  # id(attribute node) -> names that are the class's own there
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            made = _made_by_cls(function)
            if made:
                for node in ast.walk(function):
                    own.setdefault(id(node), set()).update(made)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            value = node.value
            if _owner_is_self(value) or (isinstance(value, ast.Name) and value.id in own.get(id(node), ())):
                continue
            yield f"{_where(path, node)}: {ast.unparse(node)}"
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _is_private(alias.name):
                    module = "." * node.level + (node.module or "")
                    yield f"{_where(path, node)}: from {module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(_is_private(part) for part in alias.name.split(".")[1:]):
                    yield f"{_where(path, node)}: import {alias.name}"


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _with_parents(target: str, importer: str) -> set[str]:
    """*target* and the packages whose ``__init__`` importing it runs (not the importer's own)."""
    found: set[str] = set()
    parts = target.split(".")
    for end in range(1, len(parts) + 1):
        name = ".".join(parts[:end])
        inside = importer == name or importer.startswith(name + ".")
        if name in MODULES and (end == len(parts) or not inside):
            found.add(name)
    return found


def imports_of(module: str, path: Path) -> dict[str, int]:
    """Package modules *module* imports (anywhere in the file) -> line of the first import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(module, path)
    edges: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        for name in _with_parents(target, module):
            if name != module:
                edges.setdefault(name, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            inside = module.startswith(source + ".")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    add(submodule, node.lineno)
                if submodule not in MODULES or not inside:
                    add(source, node.lineno)
    return edges


def import_cycles() -> dict[str, str]:
    """``import cycle: a, b, ...`` (its modules) -> one concrete cycle through them, with lines."""
    graph = {module: imports_of(module, path) for module, path in MODULES.items()}
    # Strongly connected components (Tarjan); a component with more than one module has a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: dict[str, str] = {}

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                component.sort()
                cycles[f"import cycle: {', '.join(component)}"] = _describe_cycle(component, graph)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def _describe_cycle(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """The shortest cycle through the component's first module, each step with its import line."""
    members = set(component)
    start = component[0]
    routes: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                route = [*routes[node], start]
                steps = [
                    f"{a} ({MODULES[a].relative_to(ROOT.parent).as_posix()}:{graph[a][b]})"
                    for a, b in itertools.pairwise(route)
                ]
                return " -> ".join([*steps, start])
            if target in members and target not in routes:
                routes[target] = [*routes[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - Tarjan found one


def _all_private_reads() -> list[str]:
    return [entry for path in MODULES.values() for entry in private_reads(path)]


def test_no_module_reads_another_objects_private_attribute() -> None:
    found = _all_private_reads()
    assert not found, "private attributes read from outside their object:\n  " + "\n  ".join(found)


def test_no_import_cycle() -> None:
    found = [f"{key}\n    {cycle}" for key, cycle in import_cycles().items()]
    assert not found, "import cycles (every import counts, TYPE_CHECKING ones too):\n  " + "\n  ".join(found)
