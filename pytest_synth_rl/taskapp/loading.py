"""A task app as a user names it (app, ``file.py[:attr]``, ``pkg.module:attr``, factory) as one ASGI app."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import itertools
import pkgutil
import re
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_synth_rl.errors import TaskAppError, closest

ASGIApp = Callable[..., Any]
APP_ATTRIBUTE = "app"
FACTORY_NAMES = ("create_app", "build_app", "fastapi_app", "get_app", "app_factory", "configure_app")
_IMPORT_HINT = "fix the error above in the {} module (it happens at import time)"

_module_counter = itertools.count(1)
_loaded: dict[Path, tuple[tuple[int, int], types.ModuleType]] = {}
_loaded_lock = threading.Lock()
_PATH_WITH_ATTRIBUTE = re.compile(r"^(?P<path>.+\.py):(?P<attr>[A-Za-z_][\w.]*)$")


def _arity(obj: Any) -> tuple[int, int, bool] | None:
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return None
    kind = inspect.Parameter
    positional = [p for p in parameters if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is kind.KEYWORD_ONLY and p.default is kind.empty for p in parameters):
        return (-1, len(positional), False)
    required = sum(p.default is kind.empty for p in positional)
    return (required, len(positional), any(p.kind is kind.VAR_POSITIONAL for p in parameters))


def is_asgi_app(obj: Any) -> bool:
    """Whether *obj* can be called as ``app(scope, receive, send)`` (a class: taken as a factory)."""
    if not callable(obj) or inspect.isclass(obj):
        return False
    arity = _arity(obj)
    if arity is None:
        return True  # a C-level callable: trust the caller
    required, total, var_positional = arity
    return 0 <= required <= 3 and (total >= 3 or var_positional)


def is_factory(obj: Any) -> bool:
    """Whether *obj* can be called without arguments (a class too)."""
    arity = _arity(obj) if callable(obj) else None
    return arity is not None and arity[0] == 0


def _describe(obj: Any) -> str:
    if inspect.isclass(obj):
        return f"the class {obj.__qualname__}"
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            signature = "(...)"
        return f"the function {obj.__qualname__}{signature}"
    return f"a {type(obj).__qualname__} object"


def _user_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename != __file__ and not filename.startswith("<frozen importlib"):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _raised(what: str, exc: BaseException, hint: str, doing: str = "") -> TaskAppError:
    return TaskAppError(f"{what} raised {type(exc).__name__}{doing}:\n{_user_traceback(exc)}", hint=hint)


def _call_factory(factory: Callable[[], Any], what: str) -> ASGIApp:
    try:
        result = factory()
    except Exception as exc:
        hint = "fix the error above in the factory; it must return an ASGI app"
        raise _raised(what, exc, hint, " while building the task app") from exc
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # no never-awaited coroutine left behind
        raise TaskAppError(
            f"{what} returned an awaitable, not an ASGI app",
            hint="async factories are not supported: build the app synchronously and return it",
        )
    if not is_asgi_app(result):
        raise TaskAppError(
            f"{what} returned {_describe(result)}, which is not an ASGI app",
            hint="the factory must return an ASGI app (FastAPI(), or async (scope, receive, send))",
        )
    return result  # type: ignore[no-any-return]


def _app_or_factory(obj: Any, what: str) -> ASGIApp:
    if is_asgi_app(obj):
        return obj  # type: ignore[no-any-return]
    if is_factory(obj):
        return _call_factory(obj, what)
    raise TaskAppError(
        f"{what} is {_describe(obj)}: neither an ASGI app nor a zero-argument factory",
        hint="point at an ASGI app (app(scope, receive, send)) or a function of no arguments returning one",
    )


def load_module_from_path(
    path: str | Path, *, fresh: bool = False, kind: str = "task app"
) -> types.ModuleType:
    """The ``.py`` file at *path* as a module, executed once per file version (or anew with *fresh*)."""
    file = _source_file(path, kind)
    with _loaded_lock:  # also serialises the sys.path edits
        stat = file.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        known = None if fresh else _loaded.get(file)
        if known is not None and known[0] == version and sys.modules.get(known[1].__name__) is known[1]:
            return known[1]
        directory = str(file.parent)
        added_to_path = directory not in sys.path  # while it runs, so that siblings import
        if added_to_path:
            sys.path.insert(0, directory)
        try:
            module = _exec_as(file.stem, file)
        except Exception as exc:
            raise _raised(f"importing {kind} file {str(file)!r}", exc, _IMPORT_HINT.format(kind)) from exc
        finally:
            if added_to_path:
                with contextlib.suppress(ValueError):
                    sys.path.remove(directory)
        if known is not None:
            sys.modules.pop(known[1].__name__, None)
        if not fresh:
            _loaded[file] = (version, module)
        return module


def unload_module(module: types.ModuleType) -> None:
    if sys.modules.get(module.__name__) is module:
        del sys.modules[module.__name__]


def _source_file(path: str | Path, kind: str) -> Path:
    file = Path(path)
    shown = repr(str(file))
    if not file.exists():
        hint = f"check the path (relative paths are resolved from the current directory: {Path.cwd()})"
        raise TaskAppError(f"{kind} file {shown} does not exist", hint=hint)
    if not file.is_file() or file.suffix != ".py":
        problem = "is not a file" if not file.is_file() else "is not a Python file (expected a .py suffix)"
        hint = (
            f"name a .py file that defines the {kind}; to import a module, name it as 'pkg.module:attribute'"
        )
        raise TaskAppError(f"{kind} path {shown} {problem}", hint=hint)
    return file.resolve()


def _exec_as(
    stem: str, file: Path, parent: str = "", package_path: list[str] | None = None
) -> types.ModuleType:
    safe = "".join(ch if ch.isalnum() else "_" for ch in stem)
    name = f"_synth_task_app_{safe}_{next(_module_counter)}"
    name = f"{parent}.{name}" if parent else name
    spec = importlib.util.spec_from_file_location(name, file, submodule_search_locations=None)
    if spec is None or spec.loader is None:  # pragma: no cover - only for exotic loaders
        raise TaskAppError(f"cannot create an import spec for {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    if package_path is not None:
        module.__path__ = package_path
    sys.modules[name] = module  # before executing: dataclasses and pydantic look it up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _app_from_module(module: types.ModuleType, where: str) -> ASGIApp:
    found: list[str] = []
    for attribute in (APP_ATTRIBUTE, *FACTORY_NAMES):
        if not hasattr(module, attribute):
            continue
        obj = getattr(module, attribute)
        if attribute == APP_ATTRIBUTE and is_asgi_app(obj):
            return obj  # type: ignore[no-any-return]
        if is_factory(obj) and not is_asgi_app(obj):
            return _call_factory(obj, f"{where}:{attribute}")
        found.append(f"`{attribute}` is {_describe(obj)}")
    looked_for = ", ".join(f"`{n}`" for n in (APP_ATTRIBUTE, *FACTORY_NAMES))
    message = f"task app module {where} defines no usable app: looked for {looked_for}"
    message += "; found " + "; ".join(found) if found else ""
    hint = (
        "define a module-level `app = FastAPI(...)` (any ASGI app), or a zero-argument "
        "factory such as `def create_app(): return app`"
    )
    for name, obj in _module_apps(module)[:1]:
        file = Path(str(getattr(module, "__file__", "") or "app.py")).name
        hint = (
            f"did you mean '{file}:{name}'? `{name}` is {_describe(obj)}; a file target names an app "
            "that is not called `app` after a colon"
        )
    raise TaskAppError(message, hint=hint)


def _module_apps(
    module: types.ModuleType, *, include_app: bool = False, fits: Callable[[Any], bool] | None = None
) -> list[tuple[str, Any]]:
    names = [n for n in vars(module) if not n.startswith("_") and (include_app or n != APP_ATTRIBUTE)]
    return [(name, obj) for name in names if (fits or _looks_like_app)(obj := vars(module)[name])]


def _looks_like_app(obj: Any) -> bool:
    if not is_asgi_app(obj):
        return False
    if inspect.isfunction(obj):
        return list(inspect.signature(obj).parameters)[:3] == ["scope", "receive", "send"]
    return hasattr(obj, "router") or (hasattr(obj, "app") and not hasattr(obj, "routes"))


def _target_module(target: str, *, fresh: bool, kind: str = "task app") -> tuple[types.ModuleType, str, str]:
    module_name, sep, attr_path = target.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not sep or not module_name or not attr_path:
        raise TaskAppError(
            f"target {target!r} is not of the form 'package.module:attribute'",
            hint="e.g. target='my_tasks.server:app' or target='my_tasks.server:create_app'",
        )
    importing = f"importing module {module_name!r} for target {target!r}"
    try:
        module = _module_copy(module_name, target) if fresh else importlib.import_module(module_name)
        return module, module_name, attr_path
    except TaskAppError:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (missing == module_name or module_name.startswith(missing + ".")):
            near = _near_module(missing)
            guess = f"did you mean {near + module_name[len(missing) :] + ':' + attr_path!r}? " if near else ""
            raise TaskAppError(
                f"cannot import module {module_name!r} for target {target!r}: {exc}",
                hint=f"{guess}make the module importable: install it, or add its directory to pythonpath",
            ) from exc
        hint = f"a module imported by the {kind} is missing; install it or fix the import"
        raise _raised(importing, exc, hint) from exc
    except Exception as exc:
        raise _raised(importing, exc, _IMPORT_HINT.format(kind)) from exc


def _near_module(name: str) -> str | None:
    parent, _, leaf = name.rpartition(".")
    try:
        where = importlib.import_module(parent).__path__ if parent else None
    except (ImportError, AttributeError):  # the parent is missing too, or not a package
        return None
    found = closest(leaf, [info.name for info in pkgutil.iter_modules(where)])
    return f"{parent + '.' if parent else ''}{found}" if found else None


def _module_copy(module_name: str, target: str) -> types.ModuleType:
    spec = importlib.util.find_spec(module_name)  # imports the parent packages, not the module
    if spec is None:
        raise ModuleNotFoundError(f"No module named {module_name!r}", name=module_name)
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    if origin is None or origin.suffix != ".py" or not origin.is_file():  # an extension, a zip...
        raise TaskAppError(
            f"cannot load a fresh copy of module {module_name!r} for target {target!r}: it is not "
            f"loaded from a Python source file (origin: {spec.origin!r})",
            hint="a per-test task app is loaded anew from source: give a .py module, or use scope='session'",
        )
    locations = spec.submodule_search_locations
    parent = module_name if locations is not None else module_name.rpartition(".")[0]
    package_path = None if locations is None else list(locations)
    return _exec_as(module_name.rpartition(".")[2], origin, parent, package_path)


def _attribute(
    module: types.ModuleType,
    attr_path: str,
    what: str,
    source: str,
    fits: Callable[[Any], bool] | None = None,
    found: str = "apps",
) -> Any:
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            apps = [name for name, _ in _module_apps(module, include_app=True, fits=fits)]
            close = closest(attr_path, public) or (apps[0] if apps else None)
            guess = f"did you mean {close!r}? " if close else ""
            defined = ", ".join(public[:20]) + (" …" if len(public) > 20 else "") or "nothing public"
            listed = f"its {found}: {', '.join(apps)}" if apps else f"it defines: {defined}"
            raise TaskAppError(f"{what} has no attribute {attr_path!r} ({source!r})", hint=guess + listed)
        obj = getattr(obj, part)
    return obj


def load_attribute(spec: str, *, kind: str, fits: Callable[[Any], bool], found: str) -> Any:
    """The object ``"file.py:NAME"`` or ``"package.module:NAME"`` names, with a did-you-mean."""
    path, attribute = split_app_path(spec)
    if attribute is not None:
        module, what = load_module_from_path(path, kind=kind), f"{kind} file {str(path)!r}"
    else:
        name, _, attribute = (part.strip() for part in spec.partition(":"))
        if not name or not attribute or path.suffix == ".py":
            raise TaskAppError(
                f"{kind} {spec!r} is not of the form 'path/to/file.py:NAME' or 'package.module:NAME'",
                hint=f"name the {kind} after a colon, e.g. 'my_{kind.replace(' ', '_')}.py:NAME'",
            )
        module, name, attribute = _target_module(spec, fresh=False, kind=kind)
        what = f"module {name!r}"
    return _attribute(module, attribute, what, spec, fits, found)


def split_app_path(source: str | Path) -> tuple[Path, str | None]:
    """``"app.py:attr"`` -> ``(Path("app.py"), "attr")``, as uvicorn writes it."""
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
    """The ASGI app of exactly one of the four sources, the same one for every caller."""
    return resolve_fresh_app(app, task_app_path=task_app_path, target=target, factory=factory, fresh=False)[0]


def resolve_fresh_app(
    app: Any = None,
    *,
    task_app_path: str | Path | None = None,
    target: str | None = None,
    factory: Callable[[], Any] | None = None,
    fresh: bool = True,
) -> tuple[ASGIApp, types.ModuleType | None]:
    """Like :func:`resolve_app`; with *fresh* also the private module, for :func:`unload_module`."""
    given = {"app": app, "task_app_path": task_app_path, "target": target, "factory": factory}
    chosen = [name for name, value in given.items() if value is not None]
    if len(chosen) != 1:
        raise TaskAppError(
            f"InProcessTaskApp needs exactly one task app source; got {', '.join(chosen) or 'none'}",
            hint="pass one of: app=<ASGI app>, task_app_path='a.py', target='pkg.a:app', factory=<function>",
        )
    if app is not None:
        if not is_asgi_app(app):
            raise TaskAppError(
                f"app= is {_describe(app)}, which is not an ASGI app",
                hint="pass the application object itself (e.g. FastAPI()), or factory=<callable> to build it",
            )
        return app, None
    if factory is not None:
        if not callable(factory):
            raise TaskAppError(
                f"factory= is {_describe(factory)}, which is not callable",
                hint="pass a zero-argument function that returns the ASGI app",
            )
        return _call_factory(factory, f"factory {getattr(factory, '__qualname__', repr(factory))}"), None
    attribute: str | None
    if target is not None:
        module, name, attribute = _target_module(target, fresh=fresh)
        what, source, where = f"module {name!r}", target, f"target {target!r}"
    else:
        path, attribute = split_app_path(str(task_app_path))
        module = load_module_from_path(path, fresh=fresh)
        what, source = f"task app file {str(path)!r}", str(task_app_path)
        where = repr(source if attribute else str(path))
    try:
        if attribute is None:
            found = _app_from_module(module, where)
        else:
            found = _app_or_factory(_attribute(module, attribute, what, source), where)
    except BaseException:
        if fresh:
            unload_module(module)
        raise
    return found, module if fresh else None
