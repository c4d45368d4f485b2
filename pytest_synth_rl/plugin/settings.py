"""One place that decides every setting: marker > command line > environment > ini > default.

A single table (:data:`OPTIONS`) describes each setting once, its command-line flag, its
environment variables, its ini key and its default. The plugin registers flags and ini keys from
that table and the resolver reads it, so the precedence rule cannot drift between settings. Every
resolved value remembers where it came from, which the report header shows.

Usable without pytest: ``resolve_settings(cli={}, env=os.environ, ini={})``.
"""

from __future__ import annotations

import difflib
import math
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.secrets.masking import Secret, key_problem

__all__ = [
    "DEFAULT_BACKEND_URL",
    "OPTIONS",
    "RECORD_MODES",
    "WORKER_TASK_APP_KEY",
    "OptionSpec",
    "SynthSettings",
    "new_task_app_key",
    "resolve_settings",
    "with_run_task_app_key",
]

#: The hosted backend; offline, the fake is mounted on this host so URLs look the same.
DEFAULT_BACKEND_URL = "https://api.usesynth.ai"
RECORD_MODES = ("none", "once", "new", "rewrite")
PROGRESS_MODES = ("auto", "line", "heartbeat", "off")
_MOCK_WORDS = {"", "mock", "fake", "offline"}


def _positive_float(name: str) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0 seconds, got {raw!r}")
        return value

    return parse


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"", "0", "false", "no", "off"}:
        return False
    near = difflib.get_close_matches(text, ["true", "false", "yes", "no", "on", "off"], n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ValueError(f"expected a boolean (true/false/1/0), got {raw!r}{hint}")


def _choice(what: str, choices: Sequence[str], raw: Any, aliases: Mapping[str, str] | None = None) -> str:
    """*raw* as one of *choices* (case-insensitive), else an error listing them, with a near miss."""
    text = str(raw).strip().lower()
    text = (aliases or {}).get(text, text)
    if text not in choices:
        near = difflib.get_close_matches(text, choices, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {raw!r}{hint}")
    return text


def _record_mode(raw: Any) -> str:
    return _choice("record mode", RECORD_MODES, raw, {"new_episodes": "new", "all": "rewrite"})


def _progress_mode(raw: Any) -> str:
    return _choice("progress", PROGRESS_MODES, raw)


def _backend(raw: Any) -> str:
    """``mock`` (or a word for it), else an http(s) URL: anything else is a typo, caught here."""
    text = str(raw).strip()
    if text.lower() in _MOCK_WORDS:
        return text
    from pytest_synth_rl.config.http_urls import http_url_problem  # only for a backend that is not the fake

    problem = http_url_problem(text, "https://api.usesynth.ai")
    if problem is None:
        return text
    near = difflib.get_close_matches(text.lower(), sorted(_MOCK_WORDS - {""}), n=1)
    if near:  # a misspelt word for the fake, not a URL
        problem = problem.split(" (did you mean")[0] + f" (did you mean {near[0]!r}?)"
    raise ValueError(f"expected 'mock' or {problem.removeprefix('expected ')}")


def _http_url(raw: Any) -> str | None:
    """An http(s) URL with a host (a task app others reach), or nothing."""
    text = _text(raw)
    if text is None:
        return None
    from pytest_synth_rl.config.http_urls import http_url_problem  # only when a task app URL is given

    problem = http_url_problem(text, "http://127.0.0.1:8001")
    if problem is not None:
        raise ValueError(problem)
    return text


def _text(raw: Any) -> str | None:
    text = str(raw).strip() if raw is not None else ""
    return text or None


@dataclass(frozen=True)
class OptionSpec:
    """One setting: where it may be given, and how its raw text becomes a value."""

    name: str
    help: str
    flag: str | None = None
    env: tuple[str, ...] = ()
    ini: str | None = None
    default: Any = None
    parse: Callable[[Any], Any] = _text
    is_flag: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "backend",
        "Backend to run RL jobs against: 'mock' (default: the offline fake on a virtual clock) or "
        "the URL of a real Synth backend.",
        flag="--synth-backend",
        env=("SYNTH_BACKEND_URL", "BACKEND_BASE_URL"),
        ini="synth_backend",
        default="mock",
        parse=_backend,
        metavar="URL|mock",
    ),
    OptionSpec(
        "task_app_url",
        "Use an already-running task app at this URL instead of serving one in-process.",
        flag="--synth-task-app-url",
        env=("TASK_APP_URL", "SYNTH_TASK_APP_URL"),
        ini="synth_task_app_url",
        parse=_http_url,
        metavar="URL",
    ),
    OptionSpec(
        "task_app",
        "Default task app to serve in-process: a 'pkg.module:attr' target or a path to a .py file.",
        ini="synth_task_app",
    ),
    OptionSpec(
        "task_app_scope",
        "Lifetime of the in-process task app: 'session' (default, once per xdist worker) or 'test'.",
        ini="synth_task_app_scope",
        default="session",
        choices=("session", "test"),
    ),
    OptionSpec(
        "config",
        "Default RL TOML config for synth_rl_config / synth_rl_job (relative to the rootdir).",
        ini="synth_rl_config",
    ),
    OptionSpec(
        "timeout",
        "Seconds a job may take before polling gives up (virtual seconds offline). Default 7200.",
        flag="--synth-timeout",
        env=("SYNTH_TIMEOUT",),
        ini="synth_timeout",
        default=7200.0,
        parse=_positive_float("synth timeout"),
        metavar="SECONDS",
    ),
    OptionSpec(
        "poll_interval",
        "Seconds between status polls (virtual seconds offline). Default 10.",
        flag="--synth-poll-interval",
        env=("SYNTH_POLL_INTERVAL",),
        ini="synth_poll_interval",
        default=10.0,
        parse=_positive_float("synth poll interval"),
        metavar="SECONDS",
    ),
    OptionSpec(
        "verify_task_app",
        "Online, have the backend verify the task app (POST /api/rl/verify_task_app) before a run's "
        "first submit to it, as the synth-ai CLI does.",
        flag="--synth-verify-task-app",
        env=("SYNTH_VERIFY_TASK_APP",),
        ini="synth_verify_task_app",
        default=False,
        parse=_flag,
        is_flag=True,
    ),
    OptionSpec(
        "report",
        "Write a JSON report of every RL job in the run to this path.",
        flag="--synth-report",
        env=("SYNTH_REPORT",),
        ini="synth_report",
        metavar="PATH",
    ),
    OptionSpec(
        "record",
        "Record/replay backend traffic in per-test cassettes: none (default), once, new, rewrite.",
        flag="--synth-record",
        env=("SYNTH_RECORD",),
        ini="synth_record",
        default="none",
        parse=_record_mode,
        metavar="MODE",
    ),
    OptionSpec(
        "cassette_dir",
        "Directory of record/replay cassettes (default tests/cassettes).",
        ini="synth_cassette_dir",
        default="tests/cassettes",
    ),
    OptionSpec(
        "update_baselines",
        "Write or refresh the metric baselines compared by synth_baseline instead of failing.",
        flag="--synth-update-baselines",
        ini="synth_update_baselines",
        default=False,
        parse=_flag,
        is_flag=True,
    ),
    OptionSpec(
        "baseline_dir",
        "Directory of metric baselines (default tests/baselines).",
        ini="synth_baseline_dir",
        default="tests/baselines",
    ),
    OptionSpec(
        "progress",
        "Progress of jobs waited on in real time: auto (default: a live line on a terminal, else "
        "heartbeats), line, heartbeat or off. Never printed on the offline virtual clock.",
        flag="--synth-progress",
        env=("SYNTH_PROGRESS",),
        ini="synth_progress",
        default="auto",
        parse=_progress_mode,
        metavar="auto|line|heartbeat|off",
    ),
    OptionSpec(
        "heartbeat_interval",
        "Seconds between heartbeat lines of a job waited on (CI logs, -q, xdist). Default 60.",
        flag="--synth-heartbeat-interval",
        env=("SYNTH_HEARTBEAT_INTERVAL",),
        ini="synth_heartbeat_interval",
        default=60.0,
        parse=_positive_float("synth heartbeat interval"),
        metavar="SECONDS",
    ),
)

_BY_NAME = {spec.name: spec for spec in OPTIONS}


@dataclass(frozen=True)
class SynthSettings:
    """Resolved settings for one run (or one test, after :meth:`with_overrides`)."""

    backend: str = "mock"
    task_app_url: str | None = None
    task_app: str | None = None
    task_app_scope: str = "session"
    config: str | None = None
    timeout: float = 7200.0
    poll_interval: float = 10.0
    verify_task_app: bool = False
    report: str | None = None
    record: str = "none"
    cassette_dir: str = "tests/cassettes"
    update_baselines: bool = False
    baseline_dir: str = "tests/baselines"
    progress: str = "auto"
    heartbeat_interval: float = 60.0
    api_key: Secret | None = None
    task_app_api_key: Secret | None = None
    #: Where each value came from: "marker", "cli", "env:NAME", "ini", "default".
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def mode(self) -> Literal["offline", "online"]:
        return "offline" if self.backend.strip().lower() in _MOCK_WORDS else "online"

    @property
    def is_offline(self) -> bool:
        return self.mode == "offline"

    @property
    def backend_url(self) -> str:
        """The URL clients talk to: the real backend online, the fake's host offline."""
        return DEFAULT_BACKEND_URL if self.is_offline else self.backend.rstrip("/")

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "marker") -> SynthSettings:
        """A copy with *overrides* applied on top (marker level), parsed like any other layer."""
        changes: dict[str, Any] = {}
        sources = dict(self.sources)
        for name, raw in overrides.items():
            spec = _BY_NAME.get(name)
            if spec is None:
                raise SynthUsageError(
                    [
                        ConfigProblem(
                            key=name,
                            message="is not a pytest-synth-rl setting",
                            hint=f"known settings: {', '.join(sorted(_BY_NAME))}",
                        )
                    ]
                )
            changes[name] = _parse(spec, raw, source)
            sources[name] = source
        return replace(self, sources=sources, **changes)

    def report_file(self, rootdir: str | os.PathLike[str]) -> str | None:
        """Where ``--synth-report`` writes (``None``: no report), relative paths taken from *rootdir*.

        From the environment or an ini file a leading ``~`` is the home directory, as a shell makes
        it on the command line; ``$VARS`` stay as written. A trailing slash is kept, so that the
        check before the run can refuse a path that names a directory."""
        if not self.report:
            return None
        given = self.report
        source = self.sources.get("report", "")
        if source == "ini" or source.startswith("env:"):
            given = os.path.expanduser(given)
        return os.path.join(os.fspath(rootdir), given)

    def origin(self, name: str) -> str:
        """How the user gave setting *name*, in their own words: ``--synth-backend=URL``,
        ``SYNTH_BACKEND_URL=URL``, ``ini synth_backend = URL`` (for messages about its value)."""
        spec = next(spec for spec in OPTIONS if spec.name == name)
        value = getattr(self, name)
        source = self.sources.get(name, "default")
        if source.startswith("env:"):
            return f"{source[4:]}={value}"
        if source == "ini" and spec.ini:
            return f"ini {spec.ini} = {value}"
        if source == "marker":
            return f"marker {name}={value}"
        return f"{spec.flag}={value}" if spec.flag else f"{name}={value}"

    def describe(self) -> list[str]:
        """Lines for the pytest report header; keys masked."""
        where = f"a fake standing in for {self.backend_url}" if self.is_offline else self.backend_url
        lines = [f"synth-rl: mode={self.mode} backend={where} ({self.sources.get('backend')})"]
        if self.task_app_url:
            task_app = f"url {self.task_app_url} ({self.sources.get('task_app_url')})"
        elif self.task_app:
            task_app = f"in-process {self.task_app} ({self.sources.get('task_app')})"
        else:
            task_app = "in-process (from synth_task_app markers)"
        lines.append(
            f"synth-rl: task app={task_app}; timeout={self.timeout:g}s poll={self.poll_interval:g}s"
            f" record={self.record}"
        )
        keys = []
        keys.append(f"SYNTH_API_KEY={self.api_key.masked if self.api_key else '<unset>'}")
        keys.append(
            "ENVIRONMENT_API_KEY="
            + (self.task_app_api_key.masked if self.task_app_api_key else "<unset: generated per run>")
        )
        lines.append("synth-rl: " + " ".join(keys))
        return lines


def _parse(spec: OptionSpec, raw: Any, source: str) -> Any:
    env = source.removeprefix("env:")
    where = {
        "cli": spec.flag,
        "ini": f"ini option {spec.ini}",
        "marker": f"marker argument {spec.name}",
    }.get(source, f"environment variable {env}")
    try:
        value = spec.parse(raw)
        if spec.choices:
            value = _choice(f"{spec.name}", spec.choices, value)
    except ValueError as exc:
        raise SynthUsageError(
            [ConfigProblem(key=spec.name, message=f"{where}: {exc}", hint=_example(spec, source))]
        ) from None
    return value


def _example(spec: OptionSpec, source: str) -> str:
    """A good value of *spec*, written where *source* says it was given: the fix to show."""
    value = spec.default if spec.default not in (None, False) else spec.metavar or "..."
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if source == "ini":
        written = f"{spec.ini} = {value}"
    elif source == "marker":
        written = f"{spec.name}={value!r}"
    elif source.startswith("env:"):
        written = f"{source[4:]}={value}"
    else:
        written = f"{spec.flag}={value}"
    return f"e.g. {written}"


def resolve_settings(
    *,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    ini: Mapping[str, Any] | None = None,
) -> SynthSettings:
    """Resolve every setting from its layers: CLI > env > ini > default.

    *cli* and *ini* are keyed by setting name (``"backend"``, ``"timeout"``…); a value of
    ``None`` (or ``False`` for a flag) means "not given at that layer". Markers are applied later,
    per test, with :meth:`SynthSettings.with_overrides`.
    """
    cli = cli or {}
    env = os.environ if env is None else env
    ini = ini or {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    for spec in OPTIONS:
        layers: list[tuple[str, Any]] = []
        cli_value = cli.get(spec.name)
        if isinstance(cli_value, str) and not cli_value.strip():
            # ``--synth-backend=$URL`` with the variable unset: never quietly the default.
            hint = "give a value, or leave the option out for the default (an unset shell variable?)"
            problems.append(ConfigProblem(spec.name, f"{spec.flag}= is empty", hint))
            continue
        if cli_value is not None and not (spec.is_flag and cli_value is False):
            layers.append(("cli", cli_value))
        for var in spec.env:
            if env.get(var, "").strip():
                layers.append((f"env:{var}", env[var]))
                break
        ini_value = ini.get(spec.name)
        if isinstance(ini_value, (list, tuple)) and ini_value:
            # pyproject.toml: synth_backend = ["mock"]; every setting takes one value.
            message = f"ini option {spec.ini}: is a list {list(ini_value)!r}; it takes one value"
            problems.append(ConfigProblem(spec.name, message, f'write it as {spec.ini} = "{ini_value[0]}"'))
            continue
        if ini_value not in (None, "", []):
            layers.append(("ini", ini_value))
        if layers:
            source, raw = layers[0]
            try:
                values[spec.name] = _parse(spec, raw, source)
            except SynthUsageError as exc:
                problems.extend(exc.problems)
                continue
        else:
            source, values[spec.name] = "default", spec.default
        sources[spec.name] = source
    api_key = env.get("SYNTH_API_KEY", "").strip()
    task_key = env.get("ENVIRONMENT_API_KEY", "").strip()
    for name, key in (("SYNTH_API_KEY", api_key), ("ENVIRONMENT_API_KEY", task_key)):
        problem = key_problem(key)
        if problem is not None:
            problems.append(ConfigProblem(f"env:{name}", problem, f"set {name} to the key itself"))
    if problems:
        raise SynthUsageError(problems, subject="pytest-synth-rl settings")  # each names its own fix
    return SynthSettings(
        **values,
        api_key=Secret(api_key) if api_key else None,
        task_app_api_key=Secret(task_key) if task_key else None,
        sources=sources,
    )


#: Where an xdist controller hands the run's task-app key to its workers (``workerinput``).
WORKER_TASK_APP_KEY = "synth_task_app_key"


def new_task_app_key() -> str:
    """A fresh task-app key for a run that was given none (``ENVIRONMENT_API_KEY`` unset)."""
    return secrets.token_hex(32)


def with_run_task_app_key(settings: SynthSettings, key: str | None) -> SynthSettings:
    """*settings* using the run's shared task-app *key* when the environment gave none.

    Every process of one run (the xdist workers) must serve its task app with the same key,
    because the backend holds one environment key and sends it on every rollout."""
    if not key or settings.task_app_api_key is not None:
        return settings
    return replace(settings, task_app_api_key=Secret(key))
