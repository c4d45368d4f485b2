"""Mutation testing for one module against the test files that cover it.

Line coverage says a line ran; a mutation run says whether the tests would notice if it were
wrong. Each mutant changes one thing in the module (a comparison, an operator, a constant, a
boolean, a call statement), then the given test files run against it in a forked child that
imports the mutated module in place of the real one. A mutant the tests still pass on
"survived": the behavior it changes is not pinned down.

    python tools/mutate.py pytest_synth_rl/secrets/masking.py tests/secrets/test_masking.py
    python tools/mutate.py pytest_synth_rl/baselines.py tests/test_baselines_contract.py \
        --only Tolerance,compare

Runs one mutant at a time (shared machines), stops each child at its first failing test, and
prints the score and every surviving mutant with its line. ``--only`` restricts mutation to
the named top-level functions and classes. Pytester subprocess tests import the unmutated
package, so list in-process tests.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import importlib.abc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType

import pytest  # imported once here so each forked child starts warm

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.Pow: ast.Mult,
}
_BOOLOP_SWAPS: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Mutant:
    index: int
    line: int
    description: str
    statement_line: int = 0

    def runs_in(self, covered: set[int]) -> bool:
        return self.line in covered or self.statement_line in covered


class _Mutator(ast.NodeTransformer):
    """Walks the tree in a fixed order; applies mutation number *target* (or none, to count)."""

    def __init__(self, only: frozenset[str], target: int = -1) -> None:
        self.only = only
        self.target = target
        self.found: list[Mutant] = []
        self._scope: list[str] = []
        self._statement_line = 0

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.stmt):
            outer, self._statement_line = self._statement_line, node.lineno
            try:
                return super().visit(node)  # type: ignore[no-any-return]
            finally:
                self._statement_line = outer
        return super().visit(node)  # type: ignore[no-any-return]

    # -- bookkeeping -------------------------------------------------------------------------
    def _in_scope(self) -> bool:
        return not self.only or bool(self._scope and self._scope[0] in self.only)

    def _site(self, node: ast.AST, description: str) -> bool:
        """Register a mutation site; True when it is the one to apply."""
        if not self._in_scope():
            return False
        index = len(self.found)
        self.found.append(Mutant(index, getattr(node, "lineno", 0), description, self._statement_line))
        return index == self.target

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ast.AST:
        self._scope.append(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            docstring, rest = body[:1], body[1:]
        else:
            docstring, rest = [], body
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        if not isinstance(node, ast.ClassDef):
            node.args = self._visit_args(node.args)
        node.body = docstring + self._visit_body(rest)
        self._scope.pop()
        return node

    def _visit_args(self, args: ast.arguments) -> ast.arguments:
        args.defaults = [self.visit(d) for d in args.defaults]
        args.kw_defaults = [self.visit(d) if d is not None else None for d in args.kw_defaults]
        return args

    def _visit_body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            new = self.visit(stmt)
            out.append(new if isinstance(new, ast.stmt) else ast.Pass())
        return out

    # -- scopes and things never mutated -----------------------------------------------------
    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def visit_Module(self, node: ast.Module) -> ast.AST:
        body = node.body
        start = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0
        node.body = body[:start] + self._visit_body(body[start:])
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return node
        return self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return node
        node.test = self.visit(node.test)
        node.body = self._visit_body(node.body)
        node.orelse = self._visit_body(node.orelse)
        return node

    # -- mutations ---------------------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        value = node.value.value if isinstance(node.value, ast.Await) else node.value
        if isinstance(value, ast.Call) and self._site(node, "call statement removed"):
            return ast.Pass()
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swap = _COMPARE_SWAPS.get(type(op))
            if swap and self._site(node, f"{type(op).__name__} -> {swap.__name__}"):
                node.ops[i] = swap()
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap and self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap and self._site(node, f"{type(node.op).__name__}= -> {swap.__name__}="):
            node.op = swap()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        swap = _BOOLOP_SWAPS[type(node.op)]
        if self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "`not` removed"):
            return node.operand
        if isinstance(node.op, ast.USub) and self._site(node, "unary minus removed"):
            return node.operand
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        for i, part in enumerate(node.values):
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.strip():
                if self._site(part, f"f-string text {part.value!r} altered"):
                    node.values[i] = ast.Constant("XX" + part.value + "XX")
            elif isinstance(part, ast.FormattedValue):
                node.values[i] = self.visit(part)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        replacement: object
        if isinstance(value, bool):
            description, replacement = f"{value} -> {not value}", not value
        elif isinstance(value, (int, float)):
            description, replacement = f"{value!r} -> {value + 1!r}", value + 1
        elif isinstance(value, str):
            description, replacement = f"string {value!r} altered", "XX" + value + "XX"
        else:
            return node
        if self._site(node, description):
            return ast.Constant(replacement)
        return node


def _mutants(tree: ast.Module, only: frozenset[str]) -> list[Mutant]:
    mutator = _Mutator(only)
    mutator.visit(copy.deepcopy(tree))
    return mutator.found


def _mutated(tree: ast.Module, only: frozenset[str], index: int) -> ast.Module:
    mutated = _Mutator(only, target=index).visit(copy.deepcopy(tree))
    return ast.fix_missing_locations(mutated)


class _MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the mutated code when the target module is imported."""

    def __init__(self, name: str, path: Path, code: object) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname: str, path: object = None, target: object = None):  # type: ignore[no-untyped-def]
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.code, module.__dict__)


def _module_name(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _warm_up(package: str) -> None:
    """Import, once, every third-party module the package and the pytest plugins pull in, so
    each forked child only imports the package itself and the tests."""
    probe = (
        "import importlib, importlib.metadata, pkgutil, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "for ep in importlib.metadata.entry_points(group='pytest11'):\n"
        "    try: ep.load()\n"
        "    except Exception: pass\n"
        "print('\\n'.join(sys.modules))\n"
    )
    listed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    for module in listed.stdout.split():
        if module == package or module.startswith(package + ".") or module == "__main__":
            continue
        try:
            importlib.import_module(module)
        except Exception:
            continue
    if package in sys.modules:
        raise SystemExit(f"warming up imported {package} itself; cannot mutate it in the children")


def _trace_lines(path: Path, out: Path) -> None:
    """In the child: record which lines of *path* run, and write them to *out* at exit."""
    target = str(path.resolve())
    lines: set[int] = set()

    def local(frame: FrameType, event: str, arg: object) -> object:
        if event == "line":
            lines.add(frame.f_lineno)
        return local

    def global_(frame: FrameType, event: str, arg: object) -> object:
        if frame.f_code.co_filename == target:
            lines.add(frame.f_lineno)
            return local
        return None

    sys.settrace(global_)
    threading.settrace(global_)
    atexit_hooks.append(lambda: out.write_text(json.dumps(sorted(lines))))


atexit_hooks: list[Callable[[], object]] = []


def _run_child(
    code: object | None,
    name: str,
    path: Path,
    tests: Sequence[str],
    timeout: float,
    trace: Path | None = None,
) -> int:
    """Fork, run the tests against *code* (None: the real module); return the pytest exit code."""
    pid = os.fork()
    if pid == 0:  # child
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        if code is not None:
            sys.meta_path.insert(0, _MutantFinder(name, path, code))
        if trace is not None:
            _trace_lines(path, trace)
        # Plain asserts: pytest's rewriting import hook would otherwise load the plugin's own
        # modules from disk ahead of the mutant.
        args = [
            *tests,
            "-x",
            "-q",
            "--assert=plain",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
        ]
        status = int(pytest.main(args))
        for hook in atexit_hooks:
            hook()
        os._exit(status)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -1
        time.sleep(0.05)


def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "module", type=Path, help="source file to mutate, e.g. pytest_synth_rl/secrets/masking.py"
    )
    parser.add_argument("tests", nargs="+", help="test files (or node ids) that cover the module")
    parser.add_argument("--only", default="", help="comma-separated top-level functions/classes to mutate")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a mutant counts as hung")
    parser.add_argument("--list", action="store_true", help="list the mutants without running them")
    args = parser.parse_args(argv)

    path: Path = args.module
    only = frozenset(filter(None, args.only.split(",")))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    mutants = _mutants(tree, only)
    lines = path.read_text(encoding="utf-8").splitlines()
    if args.list:
        for m in mutants:
            print(f"#{m.index} {path}:{m.line}: {m.description}")
        return 0
    name = _module_name(path)

    _warm_up(name.split(".")[0])
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "lines.json"
        baseline = _run_child(None, name, path, args.tests, args.timeout, trace=trace)
        covered = set(json.loads(trace.read_text())) if trace.exists() else set()
    if baseline != 0:
        print(f"the tests fail on the unmutated module (pytest exit code {baseline}); fix them first")
        return 2
    survivors: list[Mutant] = []
    for m in mutants:
        if not m.runs_in(covered):  # no test runs this line: nothing can notice the change
            survivors.append(m)
            print(
                f"survived #{m.index} {path}:{m.line}: {m.description} (not run)"
                f"    | {lines[m.line - 1].strip()}"
            )
            continue
        code = compile(_mutated(tree, only, m.index), str(path), "exec")
        if _run_child(code, name, path, args.tests, args.timeout) == 0:
            survivors.append(m)
            print(f"survived #{m.index} {path}:{m.line}: {m.description}    | {lines[m.line - 1].strip()}")
        sys.stdout.flush()
    killed = len(mutants) - len(survivors)
    score = 100.0 * killed / len(mutants) if mutants else 100.0
    print(f"{path}: {killed}/{len(mutants)} mutants killed, score {score:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
