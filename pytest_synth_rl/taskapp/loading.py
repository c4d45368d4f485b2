"""Turning "the task app" as a user names it into one ASGI application.

Users point us at their task app in one of four ways: the app object itself, a ``.py`` file, an
import target ``"pkg.module:attr"``, or a factory callable. Each way can fail in its own way
(missing file, import error, a module that defines no app, a factory that raises), and each
failure must become a :class:`~pytest_synth_rl.errors.TaskAppError` that names what we looked at
and carries the user's own traceback, because a bare ``ImportError`` from deep inside importlib
says nothing about *which* of their files broke.

The loader never starts anything; serving is :mod:`.server`'s job.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import itertools
import re
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_synth_rl.errors import TaskAppError

__all__ = [
    "APP_ATTRIBUTE",
    "FACTORY_NAMES",
    "ASGIApp",
    "is_asgi_app",
    "load_module_from_path",
    "resolve_app",
    "resolve_fresh_app",
    "split_app_path",
    "unload_module",
]

#: Any ASGI 3 application: ``await app(scope, receive, send)``.
ASGIApp = Callable[..., Any]

#: The module attribute holding a ready app, looked up first in a task app file.
APP_ATTRIBUTE = "app"

#: Zero-argument factories looked up (in this order) when a file has no usable ``app``.
FACTORY_NAMES: tuple[str, ...] = (
    "create_app",
    "build_app",
    "fastapi_app",
    "get_app",
    "app_factory",
    "configure_app",
)

_SOURCES_HINT = (
    "pass exactly one of: app=<ASGI app>, task_app_path='path/to/task_app.py', "
    "target='package.module:attribute', factory=<zero-argument callable returning an ASGI app>"
)

# Distinct module names, so two loads of files with the same stem never share sys.modules slots.
_module_counter = itertools.count(1)

# One loaded module per task app file, keyed by its resolved path; reused while the file is
# unchanged (same mtime and size), exactly as an import target is reused through sys.modules.
# Executing the file again for every start would leave a module (and the app it built) behind
# each time: about 1 MB per start/stop cycle.
_loaded: dict[Path, tuple[tuple[int, int], types.ModuleType]] = {}
_loaded_lock = threading.Lock()


def _positional_arity(obj: Any) -> tuple[int, int, bool] | None:
    """(required positional params, total positional params, has *args) or None if unknowable."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    required = total = 0
    var_positional = False
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            var_positional = True
        elif param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            total += 1
            if param.default is inspect.Parameter.empty:
                required += 1
        elif param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is inspect.Parameter.empty:
            # A required keyword-only parameter: callable neither as an app nor as a factory.
            return (-1, total, var_positional)
    return (required, total, var_positional)


def is_asgi_app(obj: Any) -> bool:
    """Whether *obj* can be called as ``app(scope, receive, send)``.

    Classes are excluded: an ASGI 2 class (instantiated per connection) is not supported, and a
    class used as a zero-argument factory is far more common.
    """
    if not callable(obj) or inspect.isclass(obj):
        return False
    arity = _positional_arity(obj)
    if arity is None:
        return True  # a C-level callable: nothing to inspect, trust the caller
    required, total, var_positional = arity
    if required < 0:
        return False
    return required <= 3 and (total >= 3 or var_positional)


def _is_factory(obj: Any) -> bool:
    """Whether *obj* can be called with no arguments (and is not itself an app)."""
    if not callable(obj):
        return False
    arity = _positional_arity(obj)
    if arity is None:
        return False
    return arity[0] == 0


def _describe(obj: Any) -> str:
    if inspect.isclass(obj):
        return f"the class {obj.__qualname__}"
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return f"the function {obj.__qualname__}{_signature_text(obj)}"
    return f"a {type(obj).__qualname__} object"


def _signature_text(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _user_traceback(exc: BaseException) -> str:
    """The traceback of *exc* without the leading importlib/loader frames that precede user code."""
    tb = exc.__traceback__
    this_file = __file__
    while tb is not None and tb.tb_next is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename == this_file or filename.startswith("<frozen importlib"):
            tb = tb.tb_next
            continue
        break
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _call_factory(factory: Callable[[], Any], what: str) -> ASGIApp:
    """Call a zero-argument factory and check that it produced an ASGI app."""
    try:
        result = factory()
    except Exception as exc:
        raise TaskAppError(
            f"{what} raised {type(exc).__name__} while building the task app:\n{_user_traceback(exc)}",
            hint="fix the error above in the factory; it must return an ASGI app",
        ) from exc
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # do not leave a never-awaited coroutine behind
        raise TaskAppError(
            f"{what} returned an awaitable, not an ASGI app",
            hint="async factories are not supported: build the app synchronously and return it",
        )
    if not is_asgi_app(result):
        raise TaskAppError(
            f"{what} returned {_describe(result)}, which is not an ASGI app",
            hint="the factory must return an ASGI application (FastAPI(), Starlette(), or "
            "an async callable taking (scope, receive, send))",
        )
    return result  # type: ignore[no-any-return]


def _app_or_factory(obj: Any, what: str) -> ASGIApp:
    """*obj* is either the app itself or a zero-argument factory for it."""
    if is_asgi_app(obj):
        return obj  # type: ignore[no-any-return]
    if _is_factory(obj):
        return _call_factory(obj, what)
    raise TaskAppError(
        f"{what} is {_describe(obj)}: neither an ASGI app nor a zero-argument factory",
        hint="point at an ASGI app (callable as app(scope, receive, send)) or at a function "
        "that takes no arguments and returns one",
    )


def load_module_from_path(path: str | Path, *, fresh: bool = False) -> types.ModuleType:
    """The ``.py`` file at *path* as a uniquely named module, executed once per file version.

    Loading the same unchanged file again returns the module already loaded (like ``import``),
    so starting and stopping a task app many times keeps memory and ``sys.modules`` flat; a file
    that changed on disk (mtime or size) is executed afresh and replaces the old module. The
    file's directory is on ``sys.path`` while it executes, so the task app can import its
    sibling modules the way it would when run as a script. Any exception raised by the module
    becomes a :class:`TaskAppError` carrying the original traceback (and is not remembered).

    ``fresh=True`` executes the file again into a private module that is neither remembered nor
    returned to anyone else (the shared module, if loaded, is left alone): for a server that
    must not share the app or its module state with another. The caller hands it to
    :func:`unload_module` when done with it.
    """
    file = _task_app_file(path)
    with _loaded_lock:  # also serialises the sys.path edits of _execute
        if fresh:
            return _execute(file)
        stat = file.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        known = _loaded.get(file)
        if known is not None and known[0] == version and sys.modules.get(known[1].__name__) is known[1]:
            return known[1]
        module = _execute(file)
        if known is not None:
            sys.modules.pop(known[1].__name__, None)
        _loaded[file] = (version, module)
        return module


def unload_module(module: types.ModuleType) -> None:
    """Drop a private module (from ``fresh`` loading) from ``sys.modules`` once its app is no
    longer served, so that per-test loads do not pile up; a no-op for a module not registered."""
    if sys.modules.get(module.__name__) is module:
        del sys.modules[module.__name__]


def _task_app_file(path: str | Path) -> Path:
    """*path* resolved, or a :class:`TaskAppError` saying why it cannot be a task app file."""
    file = Path(path)
    if not file.exists():
        raise TaskAppError(
            f"task app file {str(file)!r} does not exist",
            hint=f"check the path (relative paths are resolved from the current directory: {Path.cwd()})",
        )
    if not file.is_file():
        raise TaskAppError(
            f"task app path {str(file)!r} is not a file",
            hint="task_app_path must name a .py file that defines the app",
        )
    if file.suffix != ".py":
        raise TaskAppError(
            f"task app path {str(file)!r} is not a Python file (expected a .py suffix)",
            hint="task_app_path must name a .py file; to import a module use target='pkg.module:app'",
        )
    return file.resolve()


def _unique_name(stem: str, parent: str = "") -> str:
    """A module name no other load uses (under *parent*, so relative imports resolve as there)."""
    safe = "".join(ch if ch.isalnum() else "_" for ch in stem)
    name = f"_synth_task_app_{safe}_{next(_module_counter)}"
    return f"{parent}.{name}" if parent else name


def _exec_as(name: str, file: Path, *, package_path: list[str] | None = None) -> types.ModuleType:
    """Execute the source *file* as a new module *name*; exceptions propagate unchanged.

    With *package_path* the module is a copy of a package's ``__init__``: a plain module of
    that package (so relative imports resolve to the package's own modules) that keeps the
    package's ``__path__`` for code reading it.
    """
    if package_path is None:
        spec = importlib.util.spec_from_file_location(name, file)
    else:
        spec = importlib.util.spec_from_file_location(name, file, submodule_search_locations=None)
    if spec is None or spec.loader is None:  # pragma: no cover - only for exotic loaders
        raise TaskAppError(f"cannot create an import spec for {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    if package_path is not None:
        module.__path__ = package_path
    # Registered before executing: dataclasses and pydantic resolve annotations via sys.modules.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _execute(file: Path) -> types.ModuleType:
    directory = str(file.parent)
    added_to_path = directory not in sys.path
    if added_to_path:
        sys.path.insert(0, directory)
    try:
        return _exec_as(_unique_name(file.stem), file)
    except Exception as exc:
        raise TaskAppError(
            f"importing task app file {str(file)!r} raised {type(exc).__name__}:\n{_user_traceback(exc)}",
            hint="fix the error above in the task app module (it happens at import time)",
        ) from exc
    finally:
        if added_to_path:
            with contextlib.suppress(ValueError):
                sys.path.remove(directory)


def _app_from_module(module: types.ModuleType, where: str) -> ASGIApp:
    """Find the app in a loaded task app module: ``app`` first, then the known factories."""
    found: list[str] = []
    for attribute in (APP_ATTRIBUTE, *FACTORY_NAMES):
        if not hasattr(module, attribute):
            continue
        obj = getattr(module, attribute)
        what = f"{where}:{attribute}"
        if attribute == APP_ATTRIBUTE and is_asgi_app(obj):
            return obj  # type: ignore[no-any-return]
        if _is_factory(obj) and not is_asgi_app(obj):
            return _call_factory(obj, what)
        found.append(f"`{attribute}` is {_describe(obj)}")
    looked_for = ", ".join(f"`{n}`" for n in (APP_ATTRIBUTE, *FACTORY_NAMES))
    message = f"task app module {where} defines no usable app: looked for {looked_for}"
    if found:
        message += "; found " + "; ".join(found)
    hint = (
        "define a module-level `app = FastAPI(...)` (any ASGI app), or a zero-argument "
        "factory such as `def create_app(): return app`"
    )
    others = _module_apps(module)
    if others:
        file = Path(str(getattr(module, "__file__", "") or "app.py")).name
        name, obj = others[0]
        hint = (
            f"did you mean '{file}:{name}'? `{name}` is {_describe(obj)}; a file target names an app "
            "that is not called `app` after a colon"
        )
    raise TaskAppError(message, hint=hint)


def _module_apps(module: types.ModuleType, *, include_app: bool = False) -> list[tuple[str, Any]]:
    """The module's ASGI apps (``app`` itself only with *include_app*): app objects (a
    ``FastAPI()``) and functions written as ``(scope, receive, send)``, never a helper that
    happens to take three arguments, nor a router."""
    found = []
    for name, obj in vars(module).items():
        if name.startswith("_") or (name == APP_ATTRIBUTE and not include_app):
            continue
        if inspect.isclass(obj) or not is_asgi_app(obj):
            continue
        if inspect.isfunction(obj):
            params = list(_signature_parameters(obj))
            if params[:3] != ["scope", "receive", "send"]:
                continue
        elif not (hasattr(obj, "router") or (hasattr(obj, "app") and not hasattr(obj, "routes"))):
            continue  # an app object (FastAPI, Starlette) or a middleware around one; not a router
        found.append((name, obj))
    return found


def _signature_parameters(obj: Any) -> list[str]:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


def _app_from_target(target: str, *, fresh: bool = False) -> tuple[ASGIApp, types.ModuleType | None]:
    """Import ``"pkg.module:attr"`` (``attr`` may be dotted) and return the app it names, with the
    private copy of the module it came from when *fresh* (else None: the module is shared)."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name.strip() or not attr_path.strip():
        raise TaskAppError(
            f"target {target!r} is not of the form 'package.module:attribute'",
            hint="e.g. target='my_tasks.server:app' or target='my_tasks.server:create_app'",
        )
    module_name, attr_path = module_name.strip(), attr_path.strip()
    try:
        module = _module_copy(module_name) if fresh else importlib.import_module(module_name)
    except _NotFromSource as exc:
        raise TaskAppError(
            f"cannot load a fresh copy of module {module_name!r} for target {target!r}: it is not "
            f"loaded from a Python source file (origin: {exc.origin!r})",
            hint="a per-test task app is loaded anew from source: give a .py module, or serve "
            "this one once per session (scope='session')",
        ) from None
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (missing == module_name or module_name.startswith(missing + ".")):
            near = _near_module(missing)
            guess = f"did you mean {near + module_name[len(missing) :] + ':' + attr_path!r}? " if near else ""
            raise TaskAppError(
                f"cannot import module {module_name!r} for target {target!r}: {exc}",
                hint=f"{guess}make sure the module is importable from the test run (installed, or "
                "its directory on sys.path / pytest's pythonpath)",
            ) from exc
        raise TaskAppError(
            f"importing module {module_name!r} for target {target!r} raised "
            f"{type(exc).__name__}:\n{_user_traceback(exc)}",
            hint="a module imported by the task app is missing; install it or fix the import",
        ) from exc
    except Exception as exc:
        raise TaskAppError(
            f"importing module {module_name!r} for target {target!r} raised "
            f"{type(exc).__name__}:\n{_user_traceback(exc)}",
            hint="fix the error above in the task app module (it happens at import time)",
        ) from exc
    try:
        app = _app_or_factory(
            _attribute(module, attr_path, f"module {module_name!r}", target), f"target {target!r}"
        )
    except BaseException:
        if fresh:
            unload_module(module)
        raise
    return app, module if fresh else None


def _near_module(name: str) -> str | None:
    """The importable module *name* was most likely meant to be: a sibling in its package (or a
    top-level module on ``sys.path``) with a close name."""
    import difflib
    import pkgutil

    parent, _, leaf = name.rpartition(".")
    try:
        where = importlib.import_module(parent).__path__ if parent else None
    except (ImportError, AttributeError):  # the parent is missing too, or not a package
        return None
    names = [info.name for info in pkgutil.iter_modules(where)]
    found = difflib.get_close_matches(leaf, names, n=1, cutoff=0.8)
    return f"{parent + '.' if parent else ''}{found[0]}" if found else None


class _NotFromSource(Exception):
    """The module to copy has no Python source file (an extension, a zip, a namespace package)."""

    def __init__(self, origin: str | None) -> None:
        super().__init__(origin)
        self.origin = origin


def _module_copy(module_name: str) -> types.ModuleType:
    """A private copy of *module_name*, executed anew from its source file.

    The module registered under *module_name* (if imported) is neither replaced nor touched, so
    whoever serves its app keeps it. The copy is a sibling of the original in its package (a
    package's ``__init__`` becomes a module of the package itself): its relative imports resolve
    to the same modules as the original's, which are shared like any import.
    """
    spec = importlib.util.find_spec(module_name)  # imports the parent packages, not the module
    if spec is None:
        raise ModuleNotFoundError(f"No module named {module_name!r}", name=module_name)
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    if origin is None or origin.suffix != ".py" or not origin.is_file():
        raise _NotFromSource(spec.origin)
    locations = spec.submodule_search_locations
    parent = module_name if locations is not None else module_name.rpartition(".")[0]
    name = _unique_name(module_name.rpartition(".")[2], parent)
    return _exec_as(name, origin, package_path=None if locations is None else list(locations))


def _attribute(module: types.ModuleType, attr_path: str, what: str, source: str) -> Any:
    """``module.<attr_path>`` (dotted), or a :class:`TaskAppError` listing what the module has."""
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            apps = [name for name, _ in _module_apps(module, include_app=True)]
            close = difflib.get_close_matches(attr_path, public, n=1) or apps[:1]
            guess = f"did you mean {close[0]!r}? " if close else ""
            if apps:  # what the user is after, not every import of the module
                listed = f"its apps: {', '.join(apps)}"
            else:
                listed = "it defines: " + (
                    ", ".join(public[:20]) + (" …" if len(public) > 20 else "") or "nothing public"
                )
            raise TaskAppError(f"{what} has no attribute {attr_path!r} ({source!r})", hint=guess + listed)
        obj = getattr(obj, part)
    return obj


_PATH_WITH_ATTRIBUTE = re.compile(r"^(?P<path>.+\.py):(?P<attr>[A-Za-z_][\w.]*)$")


def split_app_path(source: str | Path) -> tuple[Path, str | None]:
    """``"app.py:attr"`` -> ``(Path("app.py"), "attr")``; a plain path -> ``(path, None)``.

    The ``file.py:attribute`` form names the app in a file the way ``module:attribute`` names it
    in an importable module (as uvicorn writes it).
    """
    text = str(source)
    match = _PATH_WITH_ATTRIBUTE.match(text)
    if match is None or Path(text).exists():
        return Path(text), None
    return Path(match["path"]), match["attr"]


def resolve_app(
    app: Any = None,
    *,
    task_app_path: str | Path | None = None,
    target: str | None = None,
    factory: Callable[[], Any] | None = None,
) -> ASGIApp:
    """Return the ASGI app described by exactly one of the four sources.

    Raises :class:`TaskAppError` when zero or several sources are given, and for every way a
    source can fail to produce an app. A ``.py`` file is executed once per version of the file
    and a target imported once, so every caller gets the same app from the same module.
    """
    return _resolve(app, task_app_path, target, factory, fresh=False)[0]


def resolve_fresh_app(
    app: Any = None,
    *,
    task_app_path: str | Path | None = None,
    target: str | None = None,
    factory: Callable[[], Any] | None = None,
) -> tuple[ASGIApp, types.ModuleType | None]:
    """Like :func:`resolve_app`, but a source is loaded anew, for one server alone.

    A task app keeps state on its app object and module (a lifespan puts a client on
    ``app.state`` and closes it at shutdown), so two servers of one app object break each other.
    Here a ``.py`` file is executed again and a target's module copied afresh from its source
    (the shared module in ``sys.modules`` is left alone): the app comes from a private module,
    returned with it for :func:`unload_module` once the app is no longer served. Modules that
    module imports are shared as usual. ``app=`` and ``factory=`` have nothing to reload: the
    object is returned as given, the factory called as by :func:`resolve_app`, and the module
    is None.
    """
    return _resolve(app, task_app_path, target, factory, fresh=True)


def _resolve(
    app: Any,
    task_app_path: str | Path | None,
    target: str | None,
    factory: Callable[[], Any] | None,
    *,
    fresh: bool,
) -> tuple[ASGIApp, types.ModuleType | None]:
    """The app of the single source given, and its private module when *fresh* loaded one."""
    given = {
        "app": app is not None,
        "task_app_path": task_app_path is not None,
        "target": target is not None,
        "factory": factory is not None,
    }
    chosen = [name for name, present in given.items() if present]
    if len(chosen) != 1:
        got = "none" if not chosen else ", ".join(chosen)
        raise TaskAppError(
            f"InProcessTaskApp needs exactly one task app source; got {got}",
            hint=_SOURCES_HINT,
        )
    if app is not None:
        if not is_asgi_app(app):
            raise TaskAppError(
                f"app= is {_describe(app)}, which is not an ASGI app",
                hint="pass the application object itself (e.g. FastAPI()); to build it lazily "
                "pass factory=<callable> instead",
            )
        return app, None
    if task_app_path is not None:
        path, attribute = split_app_path(task_app_path)
        module = load_module_from_path(path, fresh=fresh)
        try:
            if attribute is not None:
                obj = _attribute(module, attribute, f"task app file {str(path)!r}", str(task_app_path))
                return _app_or_factory(obj, repr(str(task_app_path))), module if fresh else None
            return _app_from_module(module, repr(str(path))), module if fresh else None
        except BaseException:
            if fresh:
                unload_module(module)
            raise
    if target is not None:
        return _app_from_target(target, fresh=fresh)
    assert factory is not None
    if not callable(factory):
        raise TaskAppError(
            f"factory= is {_describe(factory)}, which is not callable",
            hint="pass a zero-argument function that returns the ASGI app",
        )
    return _call_factory(factory, f"factory {getattr(factory, '__qualname__', repr(factory))}"), None
