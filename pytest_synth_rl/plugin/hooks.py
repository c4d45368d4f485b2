"""pytest wiring for pytest-synth-rl: options, markers, fixtures, report header and summary.

Kept thin on purpose: every capability is a plain library (settings, markers, session, fake,
taskapp, recording); this module only maps pytest's concepts onto them. It imports only what
option parsing and markers need; the rest loads when a synth fixture first runs, so a pytest run
that never touches the plugin does not pay for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_synth_rl.errors import ConfigProblem, MarkerError, SynthError, SynthUsageError
from pytest_synth_rl.plugin.interrupts import TerminationAsInterrupt
from pytest_synth_rl.plugin.markers import MARKERS, SynthTestSpec, marker_guess, parse_test_spec
from pytest_synth_rl.plugin.settings import (
    OPTIONS,
    WORKER_TASK_APP_KEY,
    SynthSettings,
    new_task_app_key,
    resolve_settings,
    with_run_task_app_key,
)
from pytest_synth_rl.plugin.views import register_views
from pytest_synth_rl.reporting.summary import WORKER_ROW_SPOOL, RunSummary, job_properties
from pytest_synth_rl.secrets.masking import short_key_warning

if TYPE_CHECKING:
    import httpx

    from pytest_synth_rl.clock import Clock
    from pytest_synth_rl.fake import FakeSynthBackend
    from pytest_synth_rl.fake.model import Policy
    from pytest_synth_rl.plugin.session import (
        BaselineCheck,
        ExpectJob,
        RLConfigRef,
        ServedFake,
        SynthBackend,
        SynthJobFactory,
        SynthRun,
        TaskAppHandle,
    )
    from pytest_synth_rl.recording import Replayer

_SETTINGS_KEY = pytest.StashKey[SynthSettings]()
_SPEC_KEY = pytest.StashKey[SynthTestSpec]()
#: Whether the test's own body passed (its expectations' teardown check needs to know).
_CALL_PASSED = pytest.StashKey[bool]()


# -- options and configuration -------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("synth-rl", "RL jobs under test (pytest-synth-rl)")
    for spec in OPTIONS:
        if spec.flag:
            action = "store_true" if spec.is_flag else "store"
            extra = {} if spec.is_flag else {"metavar": spec.metavar}
            group.addoption(
                spec.flag, action=action, default=None, dest=f"synth_{spec.name}", help=spec.help, **extra
            )
        if spec.ini:
            parser.addini(spec.ini, spec.help, default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}{description}")
    for name in ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY"):  # warned once, here, by name
        warning = short_key_warning(os.environ.get(name, "").strip(), name)
        if warning is not None:
            config.issue_config_time_warning(warning, stacklevel=2)
    cli = {spec.name: config.getoption(f"synth_{spec.name}") for spec in OPTIONS if spec.flag}
    ini = {spec.name: config.getini(spec.ini) for spec in OPTIONS if spec.ini}
    try:
        settings = resolve_settings(cli=cli, env=os.environ, ini=ini)
    except SynthUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_ini_keys(config)
    if not settings.is_offline and settings.api_key is None:
        raise pytest.UsageError(
            f"{settings.origin('backend')} runs RL jobs against a real backend, which needs an "
            "API key: set SYNTH_API_KEY (or run offline with --synth-backend=mock)."
        )
    report_file = settings.report_file(config.rootpath)
    if report_file is not None:
        _check_report_path(settings, str(settings.report), report_file)
    if settings.is_offline and settings.record in ("new", "rewrite"):
        raise pytest.UsageError(
            f"{settings.origin('record')} needs a backend to record from: add "
            "--synth-backend=URL (a real backend or a served fake), or record none offline"
        )
    handed = getattr(config, "workerinput", {}).get(WORKER_TASK_APP_KEY)
    settings = with_run_task_app_key(settings, handed)
    config.stash[_SETTINGS_KEY] = settings
    config.pluginmanager.register(RunSummary(config, settings), "synth-rl-summary")
    register_views(config, settings)


def _check_ini_keys(config: pytest.Config) -> None:
    """A misspelled ``synth_*`` ini key is an error with a "did you mean", not pytest's warning."""
    import difflib
    import warnings

    known = sorted(spec.ini for spec in OPTIONS if spec.ini)
    # pytest lists the ini file's keys only through ``inicfg`` (deprecated in pytest 9); where it
    # is gone, pytest's own "Unknown config option" warning is what is left.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given = list(getattr(config, "inicfg", None) or ())
    for key in given:
        if isinstance(key, str) and key.startswith("synth") and key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            guess = f"did you mean {near[0]}? " if near else ""
            raise pytest.UsageError(
                f"ini option {key} is not a pytest-synth-rl setting: {guess}"
                f"the settings are {', '.join(known)}"
            )


_RUN_TASK_KEY = pytest.StashKey[str]()


def _check_report_path(settings: SynthSettings, given: str, path: str) -> None:
    """Refuse a ``--synth-report`` path that cannot be a file before any test runs, rather than
    lose the report after a long run (permissions are left to the write). *path* is the string
    itself, not a :class:`~pathlib.Path`, which would drop a trailing slash."""
    if os.path.isdir(path):
        raise pytest.UsageError(
            f"{settings.origin('report')} is a directory; the run report is one JSON file: "
            f"give a file path such as {os.path.join(given, 'synth-report.json')}"
        )
    from pytest_synth_rl.reporting.files import file_path_problem

    problem = file_path_problem(path)
    if problem is not None:
        raise pytest.UsageError(
            f"{settings.origin('report')}: cannot write the run report to {path}: {problem}. "
            "Point it at a JSON file path (missing directories are created), such as "
            "--synth-report=synth-report.json"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: every worker serves its task app with one key generated for the run.

    The backend keeps a single environment key (contract §10.5): workers that each generated
    and uploaded their own would replace each other's, and the other workers' rollouts would be
    rejected. With ``ENVIRONMENT_API_KEY`` set, that key is shared already. Workers also learn
    where to spool their job rows (see :mod:`~pytest_synth_rl.reporting.summary`)."""
    settings = node.config.stash[_SETTINGS_KEY]
    if settings.task_app_api_key is None:
        node.workerinput[WORKER_TASK_APP_KEY] = node.config.stash.setdefault(
            _RUN_TASK_KEY, new_task_app_key()
        )
    summary = node.config.pluginmanager.get_plugin("synth-rl-summary")
    if isinstance(summary, RunSummary):
        node.workerinput[WORKER_ROW_SPOOL] = summary.spool_for_workers()


_TERM_KEY = pytest.StashKey[TerminationAsInterrupt]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Online, or with a JSON report to write, SIGTERM ends the run like Ctrl-C (see
    :mod:`~pytest_synth_rl.plugin.interrupts`): jobs are cancelled and reported, not left running.
    Live logs and the log file are masked like test reports are."""
    from pytest_synth_rl.secrets.masking import mask_handler

    logging_plugin = session.config.pluginmanager.get_plugin("logging-plugin")
    for name in ("log_cli_handler", "log_file_handler"):
        handler = getattr(logging_plugin, name, None)
        if isinstance(handler, logging.Handler):
            mask_handler(handler)
    settings = session.config.stash.get(_SETTINGS_KEY, None)
    if settings is not None and (not settings.is_offline or settings.report):
        handler = TerminationAsInterrupt()
        if handler.install():
            session.config.stash[_TERM_KEY] = handler


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    handler = session.config.stash.get(_TERM_KEY, None)
    if handler is not None:
        handler.restore()
        del session.config.stash[_TERM_KEY]


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
def _spec(item: pytest.Item) -> SynthTestSpec:
    """The test's parsed markers (parsed once, on first use)."""
    __tracebackhide__ = True
    spec = item.stash.get(_SPEC_KEY, None)
    if spec is None:
        spec = item.stash[_SPEC_KEY] = parse_test_spec(item)
    return spec


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate a test's ``synth_*`` markers before its fixtures run, even if it uses none."""
    __tracebackhide__ = True
    if any(marker.name in MARKERS or marker_guess(marker.name) is not None for marker in item.iter_markers()):
        _spec(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Our errors and expectations point at the user's line, not at our frames; and no report
    leaves with a key in it."""
    if call.excinfo is not None:
        from pytest_synth_rl.plugin.frames import mark_package_modules

        mark_package_modules()
    report: pytest.TestReport = yield
    if call.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    if call.excinfo is not None and report.failed and not item.config.getoption("fulltrace", False):
        from pytest_synth_rl.plugin.frames import message_only, without_internal_causes

        report.longrepr = message_only(call.excinfo) or without_internal_causes(call.excinfo, report.longrepr)
    if report.longrepr is not None or report.sections:
        from pytest_synth_rl.secrets.report_masking import mask_test_report

        mask_test_report(report)
    return report


def _resolve_path(node: pytest.Item, raw: str | os.PathLike[str], marker: str | None, ini_key: str) -> Path:
    """A path from a marker (relative to the test file) or the ini option *ini_key* (relative to
    the rootdir)."""
    from pytest_synth_rl.reporting.files import find_file  # not at pytest start

    __tracebackhide__ = True
    found = find_file(Path(raw), [node.path.parent, node.config.rootpath])
    if isinstance(found, Path):
        return found
    fix = "give" if marker is not None else f"set {ini_key} to"
    hint = f"{fix} a path relative to the test file or the rootdir"
    if found.near is not None:
        hint = f"did you mean {found.near!r}? {hint}"
    _where_given_error(node, marker, ini_key, found.problem, hint)


def _where_given_error(
    node: pytest.Item, marker: str | None, ini_key: str, problem: str, hint: str
) -> NoReturn:
    """A bad value from the test's *marker* (a :class:`MarkerError`), else from the ini option
    *ini_key* (a :class:`SynthUsageError`), named where the user wrote it."""
    __tracebackhide__ = True
    if marker is not None:
        raise MarkerError(marker, node.nodeid, problem, hint=hint)
    raise SynthUsageError([ConfigProblem(key=ini_key, message=problem, hint=hint)], subject="ini option")


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def synth_settings(pytestconfig: pytest.Config) -> SynthSettings:
    """The resolved pytest-synth-rl settings (marker-free; see ``synth_rl`` for per-test ones)."""
    return pytestconfig.stash[_SETTINGS_KEY]


@pytest.fixture(scope="session")
def _synth_run(synth_settings: SynthSettings) -> Iterator[SynthRun]:
    from pytest_synth_rl.plugin.session import SynthRun

    run = SynthRun(synth_settings)
    try:
        yield run
    finally:
        run.close()


@dataclass(frozen=True)
class _TestContext:
    """One test's item, parsed markers and settings (the run's, with its markers' overrides).

    One fixture instead of three: each fixture asking for ``request`` costs pytest a fixture
    definition of its own, and a job test's fixtures would otherwise ask five times."""

    node: pytest.Item
    spec: SynthTestSpec
    settings: SynthSettings


@pytest.fixture
def _synth_test(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> _TestContext:
    __tracebackhide__ = True
    node: pytest.Item = request.node
    spec = _spec(node)
    overrides = spec.rl.settings_overrides()
    settings = synth_settings.with_overrides(overrides) if overrides else synth_settings
    return _TestContext(node, spec, settings)


@pytest.fixture
def synth_clock(synth_settings: SynthSettings) -> Clock:
    """This test's clock: a fresh ``VirtualClock`` offline (sleeps are instant), real time online."""
    from pytest_synth_rl.plugin.session import new_test_clock

    return new_test_clock(synth_settings)


@pytest.fixture
def synth_policy() -> Policy | None:
    """The policy the offline fake's stand-in model answers with; ``None``: the built-in one.

    Override it in ``conftest.py`` to plug in your team's model stand-in for every test below it
    (``synth_rl(policy=...)`` overrides it for one test)::

        @pytest.fixture
        def synth_policy():
            return LearningPolicy(solve=my_reference_solver)
    """
    return None


@pytest.fixture
def _synth_fake(
    _synth_run: SynthRun,
    synth_clock: Clock,
    _synth_test: _TestContext,
    synth_settings: SynthSettings,
    synth_policy: Policy | None,
) -> FakeSynthBackend:
    """The run's fake, reset onto this test's clock, scripted by its ``synth_scenario`` and answering
    with its policy (``synth_rl(policy=...)``, else the ``synth_policy`` fixture)."""
    from pytest_synth_rl.plugin.session import offline_job_id_prefix

    __tracebackhide__ = True
    if not synth_settings.is_offline:
        pytest.skip(f"synth_fake: the offline fake is not used against {synth_settings.backend_url}")
    spec = _synth_test.spec
    fake = _synth_run.fake_backend()
    fake.reset(clock=synth_clock, job_id_prefix=offline_job_id_prefix(_synth_test.node.nodeid))
    _for_this_test(fake, spec, synth_policy)
    if spec.scenario is not None:
        fake.scenario(spec.scenario)
    return fake


def _for_this_test(fake: FakeSynthBackend, spec: SynthTestSpec, fixture_policy: object) -> None:
    """What a test's markers and ``synth_policy`` set on a fake it uses: the policy its stand-in
    model answers with and the seconds each rollout may take."""
    __tracebackhide__ = True
    fake.use_policy(_checked_policy(spec, fixture_policy))
    fake.use_rollout_timeout(spec.rl.rollout_timeout)


def _checked_policy(spec: SynthTestSpec, fixture_policy: object) -> Policy | None:
    """The test's policy: ``synth_rl(policy=...)``, else what the ``synth_policy`` fixture returned."""
    __tracebackhide__ = True
    if fixture_policy is not None and not callable(fixture_policy):
        raise SynthUsageError(
            [
                ConfigProblem(
                    "synth_policy",
                    f"the synth_policy fixture returned {fixture_policy!r:.80}, not a policy",
                    "return a callable taking the chat request, e.g. LearningPolicy(solve=...), "
                    "or None for the built-in policy",
                )
            ]
        )
    from pytest_synth_rl.fake.model.policy import policy_problem

    problem = policy_problem(fixture_policy) if fixture_policy is not None else None
    if problem is not None:
        raise SynthUsageError(
            [
                ConfigProblem(
                    "synth_policy", f"the synth_policy fixture returned a policy that cannot work: {problem}"
                )
            ]
        )
    chosen = spec.policy if spec.policy is not None else fixture_policy
    return chosen  # type: ignore[return-value]  # a callable: markers and the checks above


@pytest.fixture
def synth_fake(_synth_fake: FakeSynthBackend) -> Iterator[FakeSynthBackend]:
    """Offline only: the ``FakeSynthBackend`` of this test, reset onto its clock and mounted on
    respx for the test so your own httpx code reaches it (``.scenario()``, ``.job(id)``,
    ``.jobs``, ``.fault()``, ``.requests``). Tests using it are skipped online."""
    with _synth_fake:
        yield _synth_fake


@pytest.fixture
def synth_backend(_synth_run: SynthRun, synth_settings: SynthSettings) -> SynthBackend:
    """Where this test's jobs go, in either mode: ``.url``, ``.mode``, ``.api_key`` (masked)."""
    from pytest_synth_rl.plugin.session import SynthBackend

    __tracebackhide__ = True
    _synth_run.require_backend()
    key = _synth_run.fake_api_key() if synth_settings.is_offline else synth_settings.api_key
    return SynthBackend(url=synth_settings.backend_url, mode=synth_settings.mode, api_key=key)


@pytest.fixture
def synth_task_app(
    _synth_run: SynthRun, _synth_test: _TestContext, synth_settings: SynthSettings
) -> Iterator[TaskAppHandle]:
    """The task app under test, served in-process on a free loopback port.

    Chosen by ``@pytest.mark.synth_task_app("pkg.mod:app")`` (or a ``.py`` path), else the ini
    option ``synth_task_app``. Started once per session (per xdist worker) and shared; with
    ``scope="test"`` (marker) or ini ``synth_task_app_scope = test`` each test gets its own.
    With ``--synth-task-app-url`` no app is started: the handle points at that URL.
    """
    from pytest_synth_rl.plugin.session import ExternalTaskApp, TaskAppSpec

    __tracebackhide__ = True
    task_key = synth_settings.task_app_api_key
    if synth_settings.task_app_url:
        yield ExternalTaskApp(synth_settings.task_app_url, task_key)
        return
    marker = _synth_test.spec.task_app
    source = marker.source if marker else synth_settings.task_app
    if not source:
        raise SynthUsageError(
            [
                ConfigProblem(
                    key="synth_task_app",
                    message="no task app configured for this test",
                    hint="add @pytest.mark.synth_task_app('pkg.module:app') or a .py path, "
                    "set the ini option synth_task_app, or pass --synth-task-app-url",
                )
            ]
        )
    source = _task_app_source(_synth_test.node, source, "synth_task_app" if marker else None)
    startup = marker.startup_timeout if marker else None
    spec = TaskAppSpec(
        source=source,
        api_key=(marker.api_key if marker else None) or task_key,
        options=(("startup_timeout", startup),) if startup is not None else (),
    )
    if ((marker.scope if marker else None) or synth_settings.task_app_scope) == "test":
        app = spec.start()
        try:
            yield app
        finally:
            app.stop()
    else:
        yield _synth_run.task_app(spec)


#: Files a task app target is not (a config or data file given to the wrong marker).
_DATA_SUFFIXES = frozenset({".toml", ".json", ".jsonl", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".csv"})


def _task_app_source(node: pytest.Item, source: str, marker: str | None) -> str:
    """The task app source with its file resolved (``app.py``, ``app.py:attr``); a module target
    that is really a file next to the test (``"app"`` for ``app.py``) is a mistake named as such."""
    from pytest_synth_rl.taskapp.loading import split_app_path

    __tracebackhide__ = True
    path, attribute = split_app_path(source)
    if path.suffix == ".py":
        resolved = str(_resolve_path(node, path, marker, "synth_task_app"))
        return f"{resolved}:{attribute}" if attribute else resolved
    if ":" in source:
        return source  # a target such as "my_tasks.server:app"
    if "." in source:
        folders = dict.fromkeys([node.path.parent, node.config.rootpath])
        if path.suffix.lower() in _DATA_SUFFIXES or any((folder / path).exists() for folder in folders):
            problem = f"{source!r} is not a task app: expected a .py file or a 'package.module:app' target"
            hint = "the RL TOML goes in @pytest.mark.synth_rl(config=...)" if path.suffix == ".toml" else ""
            _where_given_error(
                node, marker, "synth_task_app", problem, hint or "give the task app's .py file"
            )
        problem = f"{source!r} names a module but not its app"
        _where_given_error(node, marker, "synth_task_app", problem, f"did you mean '{source}:app'?")
    for folder in dict.fromkeys([node.path.parent, node.config.rootpath]):
        file = folder / f"{source}.py"
        if file.is_file():
            problem = f"{source!r} is not a 'package.module:attribute' target, and {file.name} is a file"
            hint = f"did you mean {file.name!r}? A .py path loads that file"
            _where_given_error(node, marker, "synth_task_app", problem, hint)
    return source


@pytest.fixture
def synth_rl_config(_synth_test: _TestContext, synth_settings: SynthSettings) -> RLConfigRef | None:
    """The test's RL config (``RLConfigRef``: ``.path``, ``.overrides``, ``.load()``, ``.build()``),
    from ``@pytest.mark.synth_rl(config=..., overrides=...)`` or the ini option ``synth_rl_config``."""
    from pytest_synth_rl.plugin.session import RLConfigRef

    __tracebackhide__ = True
    rl = _synth_test.spec.rl
    raw = rl.config or synth_settings.config
    if not raw:
        return None
    path = _resolve_path(_synth_test.node, raw, "synth_rl" if rl.config else None, "synth_rl_config")
    return RLConfigRef(path, dict(rl.overrides))


@pytest.fixture
def synth_rl_job(
    request: pytest.FixtureRequest,
    _synth_test: _TestContext,
    _synth_run: SynthRun,
    synth_clock: Clock,
    synth_rl_config: RLConfigRef | None,
) -> Iterator[SynthJobFactory]:
    """A factory of ``RLJob`` objects bound to this test's backend, task app and clock.

    ``job = synth_rl_job()`` uses the test's config (``synth_rl`` marker / ini); pass ``config=``
    or ``overrides=`` to vary it. Offline, jobs reach the fake (or a replayed cassette) through
    their own transport, with no global patching. Every job is tracked: at teardown, jobs still
    running online are cancelled, and each job becomes a row in the run report.
    """
    from pytest_synth_rl.plugin.session import SynthJobFactory, replay_transport
    from pytest_synth_rl.taskapp import InProcessTaskApp

    __tracebackhide__ = True
    settings = _synth_test.settings
    _synth_run.require_backend()
    if "synth_cassette" in request.fixturenames:
        # Set up first, so torn down last: the teardown's own reads are recorded (and replayed).
        request.getfixturevalue("synth_cassette")
    wants_app = settings.task_app_url or settings.task_app or "synth_task_app" in request.fixturenames
    task_app = request.getfixturevalue("synth_task_app") if wants_app or _synth_test.spec.task_app else None
    api_key = settings.api_key
    http_client: httpx.Client | None = None
    transport: httpx.MockTransport | None = None
    async_transport: httpx.MockTransport | None = None
    if not settings.is_offline:
        http_client = _synth_run.http_client()
    else:
        api_key = _synth_run.fake_api_key()  # a replayed cassette does not check keys
        replayer = _replayer(request, settings)
        if replayer is not None:
            transport = replay_transport(replayer)
        else:
            fake = request.getfixturevalue("_synth_fake")
            # The key this test's task app enforces reaches its rollouts, as the upload does online.
            fake.use_task_app_key(task_app.api_key if task_app is not None else None)
            http_client, transport = _synth_run.fake_http_client(), _synth_run.fake_transport()
            async_transport = _synth_run.fake_async_transport()
    known_healthy = isinstance(task_app, InProcessTaskApp) and _synth_run.task_app_known_healthy(task_app)
    jobs = SynthJobFactory(
        test_id=request.node.nodeid,
        settings=settings,
        clock=synth_clock,
        config=synth_rl_config,
        task_app_url=task_app.url if task_app is not None else None,
        task_app_api_key=task_app.api_key if task_app is not None else None,
        api_key=api_key,
        skip_health_check=known_healthy,
        http_client=http_client,
        transport=transport,
        async_transport=async_transport,
        prepare_submit=None if settings.is_offline else _synth_run.prepare_submit,
        config_dirs=tuple(
            dict.fromkeys(
                [
                    *([synth_rl_config.path.parent] if synth_rl_config is not None else []),
                    request.node.path.parent,
                    request.config.rootpath,
                ]
            )
        ),
    )
    try:
        yield jobs
    finally:
        records = jobs.finish(cancel_running=not settings.is_offline)
        request.node.user_properties.extend(job_properties(records))
        summary = request.config.pluginmanager.get_plugin("synth-rl-summary")
        if isinstance(summary, RunSummary):
            summary.hold(request.node.nodeid, records)


@pytest.fixture
def synth_expect(_synth_test: _TestContext, synth_clock: Clock) -> Iterator[ExpectJob]:
    """``synth_expect(job)``: :func:`~pytest_synth_rl.assertions.expect_job` with this test's
    ``--synth-timeout`` and ``--synth-poll-interval`` on the test's clock. A passing test that
    made an expectation without calling a check on it gets an error at teardown."""
    from pytest_synth_rl.plugin.session import ExpectJob

    __tracebackhide__ = True
    settings = _synth_test.settings
    expect = ExpectJob(synth_clock, settings.poll_interval, settings.timeout)
    yield expect
    unchecked = expect.unchecked()
    passed: bool = _synth_test.node.stash.get(_CALL_PASSED, False)
    if unchecked and passed:
        raise SynthError(
            f"synth_expect(job) at {' and '.join(unchecked)} checked nothing",
            hint="call an expectation on it, e.g. synth_expect(job).to_succeed(within=7200); a method "
            "named without its parentheses checks nothing",
        )


@pytest.fixture(scope="session")
def _synth_served_fake() -> Iterator[ServedFake]:
    from pytest_synth_rl.plugin.session import ServedFake

    with ServedFake.start() as served:
        yield served


@pytest.fixture
def synth_fake_server(
    _synth_served_fake: ServedFake, _synth_test: _TestContext, synth_policy: Policy | None
) -> ServedFake:
    """A ``FakeSynthBackend`` served on a loopback port (for clients that are not httpx, or
    subprocesses). Yields a handle with ``.url``, ``.fake`` and ``.api_key``; like
    ``FakeSynthBackend.serve()``, jobs advance one stage each time a client looks at them, so any
    client finishes without waiting.

    One server per session (per xdist worker): its URL and jobs stay. Jobs submitted during a
    test follow that test's ``synth_scenario`` marker (else the default scenario), its policy
    (``synth_rl(policy=...)``, else the ``synth_policy`` fixture) and its
    ``synth_rl(rollout_timeout=...)``, as with ``synth_fake``.
    """
    __tracebackhide__ = True
    fake = _synth_served_fake.fake
    _for_this_test(fake, _synth_test.spec, synth_policy)
    fake.scenario(_synth_test.spec.scenario)
    return _synth_served_fake


# -- regression features: cassettes and baselines ------------------------------------------------
def _cassette_file(request: pytest.FixtureRequest, settings: SynthSettings) -> Path:
    """The test's cassette path; something other than a file there is an error, not "no cassette"."""
    from pytest_synth_rl.recording import CassetteError, cassette_path

    __tracebackhide__ = True
    path = cassette_path(request.config.rootpath / settings.cassette_dir, request.node.nodeid)
    if path.exists() and not path.is_file():
        raise CassetteError(
            f"the cassette of {request.node.nodeid} would be {path}, but that is a directory",
            hint="remove or rename it: a cassette is one JSON file per test under synth_cassette_dir",
        )
    return path


def _replayer(request: pytest.FixtureRequest, settings: SynthSettings) -> Replayer | None:
    """The test's cassette replayer, when it asks for one and a cassette exists."""
    if "synth_cassette" in request.fixturenames and _cassette_file(request, settings).is_file():
        replayer: Replayer | None = request.getfixturevalue("synth_cassette")
        return replayer
    return None


#: What ``synth_cassette_config`` may set (passed on to ``use_cassette``).
CASSETTE_CONFIG_KEYS: tuple[str, ...] = ("match_on", "ignore")


@pytest.fixture
def synth_cassette_config() -> dict[str, object]:
    """How cassettes match requests; override it in ``conftest.py`` (like ``vcr_config``)::

        @pytest.fixture
        def synth_cassette_config():
            return {"ignore": ("json.metadata.team",)}

    Keys: ``match_on`` (what a request is matched on) and ``ignore`` (body paths left out, on
    top of the per-run tags run, worker and test, which are always ignored). See ``MatchConfig``.
    """
    return {}


def _cassette_options(config: object) -> dict[str, object]:
    __tracebackhide__ = True
    import difflib

    if not isinstance(config, dict):
        problem = f"the synth_cassette_config fixture returned {type(config).__name__}, not a dict"
        raise SynthUsageError(
            [ConfigProblem("synth_cassette_config", problem, "return a dict such as {'ignore': (...)}")]
        )
    problems = []
    for key in config:
        if key in CASSETTE_CONFIG_KEYS:
            continue
        close = difflib.get_close_matches(str(key), CASSETTE_CONFIG_KEYS, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            ConfigProblem(
                f"synth_cassette_config[{key!r}]",
                f"{key!r} is not a cassette option",
                f"{guess}known keys: {', '.join(CASSETTE_CONFIG_KEYS)}",
            )
        )
    from pytest_synth_rl.recording.matching import DEFAULT_IGNORED_PATHS, DEFAULT_MATCH_ON, MatchConfig

    match_on, ignore = config.get("match_on"), config.get("ignore")  # None: the default
    try:
        MatchConfig(
            match_on=DEFAULT_MATCH_ON if match_on is None else match_on,
            ignore=DEFAULT_IGNORED_PATHS if ignore is None else ignore,
        )
    except SynthUsageError as exc:
        problems += [replace(p, key=f"synth_cassette_config[{p.key!r}]") for p in exc.problems]
    if problems:
        raise SynthUsageError(problems, subject="synth_cassette_config")
    return dict(config)


@pytest.fixture
def synth_cassette(
    request: pytest.FixtureRequest, synth_settings: SynthSettings, synth_cassette_config: dict[str, object]
) -> Iterator[Replayer | None]:
    """Record or replay this test's backend traffic in ``<synth_cassette_dir>/<test id>.json``.

    Online with ``--synth-record=once|new|rewrite``: the exchanges with the real backend (or a
    served fake) are recorded, redacted. Offline, an existing cassette is replayed in recorded
    order (no API key, no network) and stands in for the fake backend; without one the test runs
    against the fake as usual. Yields the ``Replayer`` (or ``None`` when not in use).
    """
    from pytest_synth_rl.recording import use_cassette

    __tracebackhide__ = True
    options = _cassette_options(synth_cassette_config)
    path = _cassette_file(request, synth_settings)
    node = request.node.nodeid
    if synth_settings.is_offline and not path.is_file():
        yield None
    elif synth_settings.is_offline:
        with use_cassette(path, mode="none", test_id=node, **options) as replayer:
            yield replayer
    elif synth_settings.record == "none":
        yield None
    else:
        hosts = [synth_settings.backend_url]
        with use_cassette(path, mode=synth_settings.record, test_id=node, hosts=hosts, **options) as replayer:
            yield replayer


@pytest.fixture
def synth_baseline(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> BaselineCheck:
    """``synth_baseline(result, {"reward.*": Tolerance(abs=0.1)}, final_reward=Tolerance(rel=0.05))``

    Compares a job's metrics with the stored baseline of this test
    (``<synth_baseline_dir>/<test id>.json``); fails with a table on drift.
    ``--synth-update-baselines`` writes or refreshes the baseline instead."""
    from pytest_synth_rl.baselines import BaselineStore
    from pytest_synth_rl.plugin.session import BaselineCheck

    store = BaselineStore(request.config.rootpath / synth_settings.baseline_dir)
    return BaselineCheck(store, request.node.nodeid, update=synth_settings.update_baselines)
