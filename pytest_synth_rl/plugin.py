"""pytest wiring for pytest-synth-rl: options, markers, fixtures, report header and summary.

Kept thin on purpose: every capability is a plain library (settings, session, fake, taskapp,
client, assertions, report, recording, baselines); this module only maps pytest's concepts onto
them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from .assertions import JobExpectation, expect_job
from .baselines import BaselineStore, check_baseline
from .clock import Clock
from .errors import ConfigError, ConfigProblem, SynthError
from .recording import cassette_path, use_cassette
from .report import JobRecord, RunReport
from .session import (
    ExternalTaskApp,
    OnlineBackend,
    RLConfigRef,
    ServedFake,
    SynthRun,
    TaskAppSpec,
    TestJobs,
    new_test_clock,
)
from .settings import OPTIONS, SynthSettings, resolve_settings
from .taskapp import InProcessTaskApp

_SETTINGS_KEY = pytest.StashKey[SynthSettings]()
_RUN_KEY = pytest.StashKey[SynthRun]()
_USER_PROPERTY = "synth_rl_job"

MARKERS = {
    "synth_rl": "(config=None, overrides=None, timeout=None, poll_interval=None): the RL TOML "
    "config of this test (path relative to the test file), dotted-key overrides, and per-test settings.",
    "synth_task_app": "(target_or_path, *, api_key=None, scope='session'): the task app "
    "to serve in-process ('pkg.module:attr' or a .py path); scope='test' starts a fresh one.",
    "synth_scenario": "(**scenario): the offline lifecycle for jobs of this test "
    "(outcome=, steps=, duration=, polls=, fail_at_step=, error=, reward_curve=...); ignored online.",
    "synth_online": ": needs a real backend (--synth-backend=URL); skipped offline.",
    "synth_offline": ": only meaningful against the offline fake; skipped online.",
}


# -- options -----------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("synth-rl", "RL jobs under test (pytest-synth-rl)")
    for spec in OPTIONS:
        if spec.flag:
            if spec.is_flag:
                group.addoption(
                    spec.flag, action="store_true", default=None, dest=f"synth_{spec.name}", help=spec.help
                )
            else:
                group.addoption(
                    spec.flag,
                    action="store",
                    default=None,
                    dest=f"synth_{spec.name}",
                    metavar=spec.metavar,
                    help=spec.help,
                )
        if spec.ini:
            parser.addini(spec.ini, spec.help, default=None)


def _settings_from_config(config: pytest.Config) -> SynthSettings:
    cli = {spec.name: config.getoption(f"synth_{spec.name}") for spec in OPTIONS if spec.flag}
    ini = {spec.name: config.getini(spec.ini) for spec in OPTIONS if spec.ini}
    return resolve_settings(cli=cli, env=os.environ, ini=ini)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}{description}")
    try:
        settings = _settings_from_config(config)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not settings.is_offline and settings.api_key is None:
        raise pytest.UsageError(
            f"--synth-backend={settings.backend_url} runs RL jobs against a real backend, which needs an "
            "API key: set SYNTH_API_KEY (or run offline with --synth-backend=mock)."
        )
    config.stash[_SETTINGS_KEY] = settings
    config.pluginmanager.register(SynthReporter(config, settings), "synth-rl-reporter")


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash.get(_SETTINGS_KEY, None)
    return settings.describe() if settings else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash[_SETTINGS_KEY]
    for item in items:
        if settings.is_offline and item.get_closest_marker("synth_online"):
            item.add_marker(
                pytest.mark.skip(reason="synth_online: needs --synth-backend=URL (running offline)")
            )
        if not settings.is_offline and item.get_closest_marker("synth_offline"):
            item.add_marker(
                pytest.mark.skip(
                    reason=f"synth_offline: scripted for the offline fake (running against "
                    f"{settings.backend_url})"
                )
            )


# -- markers -----------------------------------------------------------------------------------
def merged_marker(node: pytest.Item, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A marker's arguments merged module < class < function (closest positional args win)."""
    markers = list(node.iter_markers(name))  # closest first
    kwargs: dict[str, Any] = {}
    args: tuple[Any, ...] = ()
    for marker in reversed(markers):
        kwargs.update(marker.kwargs)
        if marker.args:
            args = marker.args
    return args, kwargs


def _resolve_path(request: pytest.FixtureRequest, raw: str | os.PathLike[str], what: str) -> Path:
    """A path from a marker or ini: relative to the test file, else to the rootdir."""
    path = Path(raw)
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path(request.node.path).parent / path, request.config.rootpath / path]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise ConfigError(
        [
            ConfigProblem(
                key=what,
                message=f"{raw!s} does not exist (looked in: {', '.join(str(c) for c in candidates)})",
                hint="give a path relative to the test file or the rootdir",
            )
        ]
    )


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def synth_settings(pytestconfig: pytest.Config) -> SynthSettings:
    """The resolved pytest-synth-rl settings (marker-free; see ``synth_rl`` for per-test ones)."""
    return pytestconfig.stash[_SETTINGS_KEY]


@pytest.fixture(scope="session")
def _synth_run(pytestconfig: pytest.Config, synth_settings: SynthSettings) -> Iterator[SynthRun]:
    run = SynthRun(synth_settings)
    pytestconfig.stash[_RUN_KEY] = run
    try:
        yield run
    finally:
        del pytestconfig.stash[_RUN_KEY]
        run.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Unmount the offline fake before a test that does not use it.

    ``synth_backend`` leaves the fake mounted after its test, so a run of fake-backed tests pays
    respx's patching once instead of per test; any other test gets httpx back untouched.
    """
    run = item.config.stash.get(_RUN_KEY, None)
    if run is not None and "synth_backend" not in getattr(item, "fixturenames", ()):
        run.park_fake()


@pytest.fixture
def _synth_test_settings(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> SynthSettings:
    _, kwargs = merged_marker(request.node, "synth_rl")
    overrides = {k: v for k, v in kwargs.items() if k in ("timeout", "poll_interval") and v is not None}
    return synth_settings.with_overrides(overrides) if overrides else synth_settings


@pytest.fixture
def synth_clock(synth_settings: SynthSettings) -> Clock:
    """This test's clock: a fresh ``VirtualClock`` offline (sleeps are instant), real time online."""
    return new_test_clock(synth_settings)


@pytest.fixture
def synth_backend(
    request: pytest.FixtureRequest, _synth_run: SynthRun, synth_clock: Clock, synth_settings: SynthSettings
) -> Iterator[Any]:
    """Offline: the ``FakeSynthBackend``, reset onto this test's clock and mounted on respx for the
    test (script it with ``.scenario(...)``, inspect ``.jobs`` / ``.requests``). Online: a handle
    with the real backend's ``url``."""
    if not synth_settings.is_offline:
        yield OnlineBackend(synth_settings.backend_url)
        return
    if "synth_cassette" in request.fixturenames and _cassette_file(request, synth_settings).is_file():
        # A recorded session stands in for the backend: the cassette's replayer answers.
        _synth_run.park_fake()
        yield request.getfixturevalue("synth_cassette")
        return
    fake = _synth_run.fake_backend()
    fake.reset(clock=synth_clock)
    _, scenario = merged_marker(request.node, "synth_scenario")
    if scenario:
        fake.scenario(**scenario)
    fake.start()  # stays mounted after the test: see pytest_runtest_setup; SynthRun closes it
    yield fake


@pytest.fixture
def synth_task_app(
    request: pytest.FixtureRequest, _synth_run: SynthRun, synth_settings: SynthSettings
) -> Iterator[Any]:
    """The task app under test, served in-process on a free loopback port.

    Chosen by ``@pytest.mark.synth_task_app("pkg.mod:app")`` (or a ``.py`` path), else the ini
    option ``synth_task_app``. Started once per session (per xdist worker) and shared; with
    ``scope="test"`` (marker) or ini ``synth_task_app_scope = test`` each test gets its own.
    With ``--synth-task-app-url`` no app is started: the handle points at that URL.
    """
    if synth_settings.task_app_url:
        key = synth_settings.task_app_api_key.value if synth_settings.task_app_api_key else None
        yield ExternalTaskApp(synth_settings.task_app_url, key)
        return
    args, kwargs = merged_marker(request.node, "synth_task_app")
    source = args[0] if args else kwargs.pop("target", None) or synth_settings.task_app
    if not source:
        raise ConfigError(
            [
                ConfigProblem(
                    key="synth_task_app",
                    message="no task app configured for this test",
                    hint="add @pytest.mark.synth_task_app('pkg.module:app') or a .py path, "
                    "set the ini option synth_task_app, or pass --synth-task-app-url",
                )
            ]
        )
    scope = kwargs.pop("scope", synth_settings.task_app_scope)
    source = str(source)
    if source.endswith(".py"):
        source = str(_resolve_path(request, source, "synth_task_app"))
    api_key = kwargs.pop("api_key", None) or (
        synth_settings.task_app_api_key.value if synth_settings.task_app_api_key else None
    )
    spec = TaskAppSpec(source=source, api_key=api_key, options=tuple(sorted(kwargs.items())))
    if scope == "test":
        app = spec.start()
        try:
            yield app
        finally:
            app.stop()
    else:
        yield _synth_run.task_app(spec)


@pytest.fixture
def synth_rl_config(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> Any:
    """The test's RL config (``RLConfigRef``: ``.path``, ``.overrides``, ``.load()``, ``.build()``),
    from ``@pytest.mark.synth_rl(config=..., overrides=...)`` or the ini option ``synth_rl_config``."""
    _, kwargs = merged_marker(request.node, "synth_rl")
    raw = kwargs.get("config") or synth_settings.config
    if not raw:
        return None
    return RLConfigRef(_resolve_path(request, raw, "synth_rl.config"), dict(kwargs.get("overrides") or {}))


@pytest.fixture
def synth_rl_job(
    request: pytest.FixtureRequest,
    _synth_test_settings: SynthSettings,
    _synth_run: SynthRun,
    synth_backend: Any,
    synth_clock: Clock,
    synth_rl_config: Any,
) -> Iterator[Any]:
    """A factory of ``RLJob`` objects bound to this test's backend, task app and clock.

    ``job = synth_rl_job()`` uses the test's config (``synth_rl`` marker / ini); pass ``config=``
    or ``overrides=`` to vary it. Every job is tracked: at teardown, jobs still running online are
    cancelled, and each job becomes a row in the run report.
    """
    settings = _synth_test_settings
    task_app = request.getfixturevalue("synth_task_app") if _wants_task_app(request, settings) else None
    api_key = settings.api_key.value if settings.api_key else None
    if settings.is_offline:  # the fake's key (a replayed cassette does not check keys)
        api_key = _synth_run.fake_api_key()
    known_healthy = isinstance(task_app, InProcessTaskApp) and _synth_run.task_app_known_healthy(task_app)
    jobs = TestJobs(
        test_id=request.node.nodeid,
        settings=settings,
        clock=synth_clock,
        config=synth_rl_config,
        task_app_url=task_app.url if task_app is not None else None,
        task_app_api_key=task_app.api_key if task_app is not None else None,
        api_key=api_key,
        skip_health_check=known_healthy,
        http_client=_synth_run.http_client(),
        prepare_submit=None if settings.is_offline else _synth_run.prepare_submit,
    )
    try:
        yield jobs
    finally:
        records = jobs.finish(cancel_running=not settings.is_offline)
        _attach_records(request, records)


def _wants_task_app(request: pytest.FixtureRequest, settings: SynthSettings) -> bool:
    return bool(
        settings.task_app_url
        or settings.task_app
        or request.node.get_closest_marker("synth_task_app")
        or "synth_task_app" in request.fixturenames
    )


def _attach_records(request: pytest.FixtureRequest, records: list[JobRecord]) -> None:
    """Put job rows on the test report: travels through xdist to the controller and into JUnit."""
    for record in records:
        request.node.user_properties.append((_USER_PROPERTY, json.dumps(record.to_json(), sort_keys=True)))
        request.node.user_properties.append(("synth_job_id", record.job_id or ""))
        request.node.user_properties.append(("synth_job_status", record.status or ""))
        if record.final_reward is not None:
            request.node.user_properties.append(("synth_final_reward", f"{record.final_reward:.6g}"))


@pytest.fixture
def synth_expect(_synth_test_settings: SynthSettings, synth_clock: Clock) -> Callable[[Any], JobExpectation]:
    """``synth_expect(job)``: :func:`~pytest_synth_rl.assertions.expect_job` with this run's
    ``--synth-timeout`` and ``--synth-poll-interval`` on the test's clock."""

    def expect(job: Any) -> JobExpectation:
        return expect_job(
            job,
            clock=synth_clock,
            interval=_synth_test_settings.poll_interval,
            timeout=_synth_test_settings.timeout,
        )

    return expect


@pytest.fixture(scope="session")
def synth_fake_server() -> Iterator[Any]:
    """A ``FakeSynthBackend`` served on a loopback port (for clients that are not httpx, or
    subprocesses). Yields a handle with ``.url``, ``.fake`` and ``.api_key``; like
    ``FakeSynthBackend.serve()``, jobs advance one stage each time a client looks at them, so any
    client finishes without waiting."""
    with ServedFake.start() as served:
        yield served


# -- regression features: cassettes and baselines ------------------------------------------------
def _cassette_file(request: pytest.FixtureRequest, settings: SynthSettings) -> Path:
    return cassette_path(request.config.rootpath / settings.cassette_dir, request.node.nodeid)


@pytest.fixture
def synth_cassette(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> Iterator[Any]:
    """Record or replay this test's backend traffic in ``<synth_cassette_dir>/<test id>.json``.

    Online with ``--synth-record=once|new|rewrite``: the exchanges with the real backend (or a
    served fake) are recorded, redacted. Offline, an existing cassette is replayed through respx in
    recorded order (no API key, no network) and stands in for the fake backend; without one the
    test runs against the fake as usual. Yields the ``Replayer`` (or ``None`` when not in use).
    """
    path = _cassette_file(request, synth_settings)
    node = request.node.nodeid
    if synth_settings.is_offline:
        if not path.is_file():
            yield None
            return
        mode = "none" if synth_settings.record in ("none", "once") else synth_settings.record
        if mode != "none":
            raise pytest.UsageError(
                f"--synth-record={synth_settings.record} needs a backend to record from: add "
                "--synth-backend=URL (a real backend or a served fake)"
            )
        with use_cassette(path, mode="none", test_id=node) as replayer:
            yield replayer
        return
    if synth_settings.record == "none":
        yield None
        return
    with use_cassette(
        path, mode=synth_settings.record, test_id=node, hosts=[synth_settings.backend_url]
    ) as replayer:
        yield replayer


@pytest.fixture
def synth_baseline(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> Callable[..., Any]:
    """``synth_baseline(result, {"reward.*": Tolerance(abs=0.1)}, final_reward=Tolerance(rel=0.05))``

    Compares a job's metrics with the stored
    baseline of this test (``<synth_baseline_dir>/<test id>.json``); fails with a table on drift.
    ``--synth-update-baselines`` writes or refreshes the baseline instead."""
    store = BaselineStore(request.config.rootpath / synth_settings.baseline_dir)

    def check(result_or_metrics: Any, tolerances: Mapping[str, Any] | None = None, **named: Any) -> Any:
        merged = {**(tolerances or {}), **named}
        return check_baseline(
            store,
            request.node.nodeid,
            result_or_metrics,
            tolerances=merged or None,
            update=synth_settings.update_baselines,
        )

    return check


# -- report ------------------------------------------------------------------------------------
class SynthReporter:
    """Collects job rows from test reports (so it works across xdist workers) and prints them."""

    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.config = config
        self.settings = settings
        self.report = RunReport(mode=settings.mode, backend=settings.backend_url)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == _USER_PROPERTY:
                self.report.add(JobRecord(**json.loads(str(value))))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        settings = self.settings
        if self.report.records:
            terminalreporter.write_sep("=", f"synth-rl jobs ({settings.mode}, {settings.backend_url})")
            terminalreporter.write_line(self.report.render_terminal())
        if settings.report:
            path = self.report.write_json(Path(self.config.rootpath) / settings.report)
            terminalreporter.write_line(f"synth-rl: JSON report written to {path}")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and self.report.records:
            self.report.append_github_summary(summary)


__all__ = ["MARKERS", "SynthError", "merged_marker"]
