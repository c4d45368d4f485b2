"""Every setting decided in one place: marker > command line > environment > ini > default.

:data:`OPTIONS` says where each setting may be given and how it is parsed; the defaults are the
fields of :class:`SynthSettings`. Usable without pytest: ``resolve_settings(cli={}, env=os.environ, ini={})``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, did_you_mean, seconds_problem
from pytest_synth_rl.secrets.masking import Secret, key_problem

DEFAULT_BACKEND_URL = "https://api.usesynth.ai"
RECORD_MODES = ("none", "once", "new", "rewrite")
PROGRESS_MODES = ("auto", "line", "heartbeat", "off")
_MOCK_WORDS = {"", "mock", "fake", "offline"}
WORKER_TASK_APP_KEY = "synth_task_app_key"


def _near(text: str, choices: Iterable[str]) -> str:
    guess = did_you_mean(text, choices)
    return f" ({guess})" if guess else ""


def _seconds(raw: Any) -> float:
    with contextlib.suppress(TypeError, ValueError):
        if seconds_problem(value := float(raw)) is None:
            return value
    raise ValueError(f"must be a finite number of seconds > 0, got {raw!r}")


def _poll_interval(raw: Any) -> float:
    from pytest_synth_rl.client.polling import interval_problem

    if (problem := interval_problem(value := _seconds(raw))) is not None:
        raise ValueError(problem)
    return value


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"", "0", "false", "no", "off"}:
        return False
    near = _near(text, ["true", "false", "yes", "no", "on", "off"])
    raise ValueError(f"expected a boolean (true/false/1/0), got {raw!r}{near}")


def _choice(what: str, choices: Sequence[str], raw: Any, aliases: Mapping[str, str] | None = None) -> str:
    text = str(raw).strip().lower()
    text = (aliases or {}).get(text, text)
    if text not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {raw!r}{_near(text, choices)}")
    return text


def _backend(raw: Any) -> str:
    text = str(raw).strip()
    if text.lower() in _MOCK_WORDS:
        return text
    from pytest_synth_rl.config.urls import http_url_problem

    problem = http_url_problem(text, DEFAULT_BACKEND_URL)
    if problem is None:
        return text
    near = _near(text.lower(), sorted(_MOCK_WORDS - {""}))
    if near:  # a misspelt word for the fake, not a URL
        problem = problem.split(" (did you mean")[0] + near
    raise ValueError(f"expected 'mock' or {problem.removeprefix('expected ')}")


def _text(raw: Any) -> str | None:
    text = str(raw).strip() if raw is not None else ""
    return text or None


def _http_url(raw: Any) -> str | None:
    text = _text(raw)
    if text is None:
        return None
    from pytest_synth_rl.config.urls import http_url_problem

    problem = http_url_problem(text, "http://127.0.0.1:8001")
    if problem is not None:
        raise ValueError(problem)
    return text


@dataclass(frozen=True)
class OptionSpec:
    name: str
    help: str
    flag: str | None = None
    env: tuple[str, ...] = ()
    ini: str | None = None
    parse: Callable[[Any], Any] = _text
    is_flag: bool = False
    choices: tuple[str, ...] | None = None
    aliases: Mapping[str, str] | None = None
    metavar: str | None = None

    @property
    def default(self) -> Any:
        return getattr(SynthSettings, self.name)  # a field's default is its class attribute

    @property
    def shown_default(self) -> Any:
        default = self.default
        return int(default) if isinstance(default, float) and default.is_integer() else default


_SECONDS = "SECONDS"
# fmt: off
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("backend", "Backend to run RL jobs against: 'mock' (the offline fake on a virtual clock) or "
               "the URL of a real Synth backend.",
               "--synth-backend", ("SYNTH_BACKEND_URL", "BACKEND_BASE_URL"), "synth_backend", _backend,
               metavar="URL|mock"),
    OptionSpec("task_app_url", "Use an already-running task app at this URL instead of serving one "
               "in-process.", "--synth-task-app-url", ("TASK_APP_URL", "SYNTH_TASK_APP_URL"),
               "synth_task_app_url", _http_url, metavar="URL"),
    OptionSpec("task_app", "Default task app to serve in-process: a 'pkg.module:attr' target or a path to a "
               ".py file.", ini="synth_task_app"),
    OptionSpec("task_app_scope", "Lifetime of the in-process task app: 'session' (once per xdist worker) or "
               "'test'.", ini="synth_task_app_scope", choices=("session", "test")),
    OptionSpec("config", "Default RL TOML config for synth_rl_config / synth_rl_job (relative to the "
               "rootdir).", ini="synth_rl_config"),
    OptionSpec("timeout", "Seconds a job may take before polling gives up (virtual seconds offline).",
               "--synth-timeout", ("SYNTH_TIMEOUT",), "synth_timeout", _seconds, metavar=_SECONDS),
    OptionSpec("poll_interval", "Seconds between status polls (virtual seconds offline).",
               "--synth-poll-interval", ("SYNTH_POLL_INTERVAL",), "synth_poll_interval",
               _poll_interval, metavar=_SECONDS),
    OptionSpec("verify_task_app", "Online, have the backend verify the task app (POST "
               "/api/rl/verify_task_app) before a run's first submit to it, as the synth-ai CLI does.",
               "--synth-verify-task-app", ("SYNTH_VERIFY_TASK_APP",), "synth_verify_task_app", _flag,
               is_flag=True),
    OptionSpec("report", "Write a JSON report of every RL job in the run to this path.",
               "--synth-report", ("SYNTH_REPORT",), "synth_report", metavar="PATH"),
    OptionSpec("record", "Record/replay backend traffic in per-test cassettes: none, once, new, rewrite.",
               "--synth-record", ("SYNTH_RECORD",), "synth_record", choices=RECORD_MODES,
               aliases={"new_episodes": "new", "all": "rewrite"}, metavar="MODE"),
    OptionSpec("cassette_dir", "Directory of record/replay cassettes.", ini="synth_cassette_dir"),
    OptionSpec("update_baselines", "Write or refresh the metric baselines compared by synth_baseline "
               "instead of failing.", "--synth-update-baselines", ini="synth_update_baselines", parse=_flag,
               is_flag=True),
    OptionSpec("baseline_dir", "Directory of metric baselines.", ini="synth_baseline_dir"),
    OptionSpec("progress", "Progress of jobs waited on in real time: auto (a live line on a terminal, else "
               "heartbeats), line, heartbeat or off. Never printed on the offline virtual clock.",
               "--synth-progress", ("SYNTH_PROGRESS",), "synth_progress", choices=PROGRESS_MODES,
               metavar="auto|line|heartbeat|off"),
    OptionSpec("heartbeat_interval", "Seconds between heartbeat lines of a job waited on (CI logs, -q, "
               "xdist).", "--synth-heartbeat-interval", ("SYNTH_HEARTBEAT_INTERVAL",),
               "synth_heartbeat_interval", _seconds, metavar=_SECONDS),
)
# fmt: on
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
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def mode(self) -> Literal["offline", "online"]:
        return "offline" if self.backend.strip().lower() in _MOCK_WORDS else "online"

    @property
    def is_offline(self) -> bool:
        return self.mode == "offline"

    @property
    def backend_url(self) -> str:
        return DEFAULT_BACKEND_URL if self.is_offline else self.backend.rstrip("/")

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "marker") -> SynthSettings:
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            if name not in _BY_NAME:
                known = f"known settings: {', '.join(sorted(_BY_NAME))}"
                hint = f"{did_you_mean(name, _BY_NAME)} {known}".lstrip()
                raise SynthUsageError([ConfigProblem(name, "is not a pytest-synth-rl setting", hint)])
            changes[name] = _parse(_BY_NAME[name], raw, source)
        return replace(self, sources={**self.sources, **dict.fromkeys(changes, source)}, **changes)

    def report_file(self, rootdir: str | os.PathLike[str]) -> str | None:
        """Where ``--synth-report`` writes, relative to *rootdir* (``~`` expanded from env or ini)."""
        if not self.report:
            return None
        source = self.sources.get("report", "")
        expand = source == "ini" or source.startswith("env:")
        return os.path.join(os.fspath(rootdir), os.path.expanduser(self.report) if expand else self.report)

    def origin(self, name: str) -> str:
        spec, value = _BY_NAME[name], getattr(self, name)
        source = self.sources.get(name, "default")
        if source == "default" and not spec.flag:
            return f"{name}={value}"
        written = _written(spec, source, value)
        return f"{source} {written}" if source in ("ini", "marker") else written

    def describe(self) -> list[str]:
        where = f"a fake standing in for {self.backend_url}" if self.is_offline else self.backend_url
        if self.task_app_url:
            task_app = f"url {self.task_app_url} ({self.sources.get('task_app_url')})"
        elif self.task_app:
            task_app = f"in-process {self.task_app} ({self.sources.get('task_app')})"
        else:
            task_app = "in-process (from synth_task_app markers)"
        task_key = "<unset: generated per run>"
        if self.task_app_api_key:
            task_key = self.task_app_api_key.masked
        elif self.task_app_url:
            task_key = (
                f"<unset: no task-app key is sent to {self.task_app_url}; set it to the key the app expects>"
            )
        return [
            f"synth-rl: mode={self.mode} backend={where} ({self.sources.get('backend')})",
            f"synth-rl: task app={task_app}; timeout={self.timeout:g}s poll={self.poll_interval:g}s"
            f" record={self.record}",
            f"synth-rl: SYNTH_API_KEY={self.api_key.masked if self.api_key else '<unset>'} "
            f"ENVIRONMENT_API_KEY={task_key}",
        ]


def _written(spec: OptionSpec, source: str, value: object) -> str:
    if source == "ini":
        return f"{spec.ini} = {value}"
    if source == "marker":
        return f"{spec.name}={value!r}"
    return f"{source[4:]}={value}" if source.startswith("env:") else f"{spec.flag}={value}"


def _parse(spec: OptionSpec, raw: Any, source: str) -> Any:
    where = {"cli": spec.flag, "ini": f"ini option {spec.ini}", "marker": f"marker argument {spec.name}"}
    try:
        return _choice(spec.name, spec.choices, raw, spec.aliases) if spec.choices else spec.parse(raw)
    except ValueError as exc:
        example = spec.shown_default if spec.default not in (None, False) else spec.metavar or "..."
        given = where.get(source) or f"environment variable {source.removeprefix('env:')}"
        message = f"{given}: {exc}"
        hint = f"e.g. {_written(spec, source, example)}"
        raise SynthUsageError([ConfigProblem(key=spec.name, message=message, hint=hint)]) from None


def resolve_settings(
    *,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    ini: Mapping[str, Any] | None = None,
) -> SynthSettings:
    """Every setting from its layers, CLI > env > ini > default; ``None`` (a flag's ``False``): unset."""
    cli, ini = cli or {}, ini or {}
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    for spec in OPTIONS:
        layers: list[tuple[str, Any]] = []
        cli_value = cli.get(spec.name)
        if isinstance(cli_value, str) and not cli_value.strip():
            hint = "give a value, or leave the option out for the default (an unset shell variable?)"
            problems.append(ConfigProblem(spec.name, f"{spec.flag}= is empty", hint))
            continue
        if cli_value is not None and not (spec.is_flag and cli_value is False):
            layers.append(("cli", cli_value))
        layers += [(f"env:{var}", env[var]) for var in spec.env if env.get(var, "").strip()][:1]
        ini_value = ini.get(spec.name)
        if isinstance(ini_value, (list, tuple)) and ini_value:  # pyproject.toml: synth_backend = ["mock"]
            message = f"ini option {spec.ini}: is a list {list(ini_value)!r}; it takes one value"
            problems.append(ConfigProblem(spec.name, message, f'write it as {spec.ini} = "{ini_value[0]}"'))
            continue
        if ini_value not in (None, "", []):
            layers.append(("ini", ini_value))
        sources[spec.name], raw = layers[0] if layers else ("default", None)
        try:
            values[spec.name] = _parse(spec, raw, layers[0][0]) if layers else spec.default
        except SynthUsageError as exc:
            problems.extend(exc.problems)
    keys = {name: env.get(name, "").strip() for name in ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")}
    for name, key in keys.items():
        problem = key_problem(key)
        if problem is not None:
            problems.append(ConfigProblem(f"env:{name}", problem, f"set {name} to the key itself"))
    if problems:
        raise SynthUsageError(problems, subject="pytest-synth-rl settings")
    return SynthSettings(
        **values,
        api_key=Secret(keys["SYNTH_API_KEY"]) if keys["SYNTH_API_KEY"] else None,
        task_app_api_key=Secret(keys["ENVIRONMENT_API_KEY"]) if keys["ENVIRONMENT_API_KEY"] else None,
        sources=sources,
    )


def unknown_ini_key(given: Iterable[object]) -> str | None:
    known = sorted(spec.ini for spec in OPTIONS if spec.ini)
    for key in given:
        if isinstance(key, str) and key.startswith("synth") and key not in known:
            guess = f"{did_you_mean(key, known, '{}')} the settings are {', '.join(known)}".lstrip()
            return f"ini option {key} is not a pytest-synth-rl setting: {guess}"
    return None


def new_task_app_key() -> str:
    return secrets.token_hex(32)


def with_run_task_app_key(settings: SynthSettings, key: str | None) -> SynthSettings:
    if not key or settings.task_app_api_key is not None:
        return settings
    return replace(settings, task_app_api_key=Secret(key))
