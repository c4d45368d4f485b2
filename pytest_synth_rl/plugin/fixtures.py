"""The plugin's fixtures (registered at configure time); everything heavy is imported on first use."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_synth_rl.errors import ConfigProblem, MarkerError, SynthError, SynthUsageError, did_you_mean
from pytest_synth_rl.plugin.interrupts import RunInterrupts
from pytest_synth_rl.plugin.markers import POLICY_HINT, SynthTestSpec, parse_test_spec
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.summary import RunSummary, job_properties

if TYPE_CHECKING:
    import httpx

    from pytest_synth_rl.clock import Clock
    from pytest_synth_rl.fake import FakeSynthBackend
    from pytest_synth_rl.fake.model import Policy
    from pytest_synth_rl.plugin.jobs import RLConfigRef, SynthJobFactory
    from pytest_synth_rl.plugin.session import (
        BaselineCheck,
        ExpectJob,
        ServedFake,
        SynthBackend,
        SynthRun,
        TaskAppHandle,
    )
    from pytest_synth_rl.recording import Replayer

SETTINGS_KEY = pytest.StashKey[SynthSettings]()
CALL_PASSED_KEY = pytest.StashKey[bool]()
_SPEC_KEY = pytest.StashKey[SynthTestSpec]()
_JOBS_KEY = pytest.StashKey["SynthJobFactory"]()
CASSETTE_CONFIG_KEYS: tuple[str, ...] = ("match_on", "ignore")


def spec_of(item: pytest.Item) -> SynthTestSpec:
    __tracebackhide__ = True
    spec = item.stash.get(_SPEC_KEY, None)
    if spec is None:
        spec = item.stash[_SPEC_KEY] = parse_test_spec(item)
    return spec


def _given_error(node: pytest.Item, marker: str | None, ini_key: str, problem: str, hint: str) -> NoReturn:
    __tracebackhide__ = True
    if marker is not None:
        raise MarkerError(marker, node.nodeid, problem, hint=hint)
    raise SynthUsageError([ConfigProblem(ini_key, problem, hint)], subject="ini option")


def _resolve_path(node: pytest.Item, raw: str | os.PathLike[str], marker: str | None, ini_key: str) -> Path:
    from pytest_synth_rl.reporting.files import find_file

    __tracebackhide__ = True
    found = find_file(Path(raw), [node.path.parent, node.config.rootpath])
    if isinstance(found, Path):
        return found
    fix = "give" if marker is not None else f"set {ini_key} to"
    hint = f"{found.hint}{fix} a path relative to the test file or the rootdir"
    _given_error(node, marker, ini_key, found.problem, hint)


_DATA_SUFFIXES = frozenset({".toml", ".json", ".jsonl", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".csv"})


def _task_app_source(node: pytest.Item, source: str, marker: str | None) -> str:
    """*source* with its ``.py`` file resolved; a file given as a target, or a data file, is an error."""
    from pytest_synth_rl.taskapp.loading import split_app_path

    __tracebackhide__ = True
    path, attribute = split_app_path(source)
    if path.suffix == ".py":
        resolved = str(_resolve_path(node, path, marker, "synth_task_app"))
        return f"{resolved}:{attribute}" if attribute else resolved
    if ":" in source:
        return source
    folders = dict.fromkeys([node.path.parent, node.config.rootpath])
    if "." not in source:
        file = next((f for f in (folder / f"{source}.py" for folder in folders) if f.is_file()), None)
        if file is None:
            return source
        problem = f"{source!r} is not a 'package.module:attribute' target, and {file.name} is a file"
        hint = f"did you mean {file.name!r}? A .py path loads that file"
    elif path.suffix.lower() in _DATA_SUFFIXES or any((folder / path).exists() for folder in folders):
        problem = f"{source!r} is not a task app: expected a .py file or a 'package.module:app' target"
        toml = "the RL TOML goes in @pytest.mark.synth_rl(config=...)"
        hint = toml if path.suffix == ".toml" else "give the task app's .py file"
    else:
        problem, hint = f"{source!r} names a module but not its app", f"did you mean '{source}:app'?"
    _given_error(node, marker, "synth_task_app", problem, hint)


@pytest.fixture(scope="session")
def synth_settings(pytestconfig: pytest.Config) -> SynthSettings:
    """The resolved pytest-synth-rl settings (marker-free; see ``synth_rl`` for per-test ones)."""
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def _synth_run(synth_settings: SynthSettings) -> Iterator[SynthRun]:
    from pytest_synth_rl.plugin.session import SynthRun

    run = SynthRun(synth_settings)
    yield run
    run.close()


@dataclass(frozen=True)
class _TestContext:
    node: pytest.Item
    spec: SynthTestSpec
    settings: SynthSettings


@pytest.fixture
def _synth_test(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> _TestContext:
    __tracebackhide__ = True
    spec = spec_of(request.node)
    overrides = spec.rl.settings_overrides()
    settings = synth_settings.with_overrides(overrides) if overrides else synth_settings
    return _TestContext(request.node, spec, settings)


@pytest.fixture
def synth_clock(synth_settings: SynthSettings) -> Clock:
    """A fresh ``VirtualClock`` offline, real time online."""
    from pytest_synth_rl.clock import RealClock, VirtualClock

    return VirtualClock() if synth_settings.is_offline else RealClock()


@pytest.fixture
def synth_policy() -> Policy | None:
    """The offline fake model's policy (``None``: built-in); override it in ``conftest.py``."""
    return None


@contextlib.contextmanager
def _one_test(
    fake: FakeSynthBackend, test: _TestContext, fixture_policy: object, **reset: Any
) -> Iterator[FakeSynthBackend]:
    """*fake* reset for one test, with its policy, rollout timeout and scenario; reset again after."""
    __tracebackhide__ = True
    from pytest_synth_rl.fake.model.policy import policy_problem

    spec = test.spec
    fake.reset(**reset)
    try:
        if fixture_policy is not None and (broken := policy_problem(fixture_policy)) is not None:
            message = f"the synth_policy fixture returned a policy that cannot work: {broken}"
            hint = f"return {POLICY_HINT.removeprefix('a policy is ')}; or None for the built-in policy"
            raise SynthUsageError([ConfigProblem("synth_policy", message, hint)])
        fake.use_policy(spec.rl.policy if spec.rl.policy is not None else fixture_policy)  # type: ignore[arg-type]
        fake.use_rollout_timeout(spec.rl.rollout_timeout)
        if spec.scenario is not None:
            fake.scenario(spec.scenario)
        yield fake
    finally:
        fake.reset()


@pytest.fixture
def _synth_fake(
    _synth_run: SynthRun, synth_clock: Clock, _synth_test: _TestContext, synth_policy: Policy | None
) -> Iterator[FakeSynthBackend]:
    from pytest_synth_rl.plugin.session import offline_job_id_prefix

    __tracebackhide__ = True
    settings = _synth_run.settings
    if not settings.is_offline:
        pytest.skip(f"synth_fake: the offline fake is not used against {settings.backend_url}")
    prefix = offline_job_id_prefix(_synth_test.node.nodeid)
    fake = _synth_run.fake_backend()
    with _one_test(fake, _synth_test, synth_policy, clock=synth_clock, job_id_prefix=prefix):
        yield fake


@pytest.fixture
def synth_fake(_synth_fake: FakeSynthBackend) -> Iterator[FakeSynthBackend]:
    """Offline only: this test's ``FakeSynthBackend`` on its clock, mounted on respx."""
    with _synth_fake:
        yield _synth_fake


@pytest.fixture
def synth_backend(_synth_run: SynthRun, synth_settings: SynthSettings) -> SynthBackend:
    """Where this test's jobs go: ``.url``, ``.mode``, ``.api_key`` (masked)."""
    from pytest_synth_rl.plugin.session import SynthBackend

    __tracebackhide__ = True
    _synth_run.require_backend()
    key = _synth_run.fake_api_key() if synth_settings.is_offline else synth_settings.api_key
    return SynthBackend(url=synth_settings.backend_url, mode=synth_settings.mode, api_key=key)


@pytest.fixture
def synth_task_app(
    _synth_run: SynthRun, _synth_test: _TestContext, synth_settings: SynthSettings
) -> Iterator[TaskAppHandle]:
    """The task app under test (marker or ini option), served in-process per session or per test."""
    from pytest_synth_rl.plugin.session import ExternalTaskApp, TaskAppSpec

    __tracebackhide__ = True
    task_key = synth_settings.task_app_api_key
    if synth_settings.task_app_url:
        yield ExternalTaskApp(synth_settings.task_app_url, task_key)
        return
    marker = _synth_test.spec.task_app
    source = marker.source if marker else synth_settings.task_app
    if not source:
        hint = (
            "add @pytest.mark.synth_task_app('pkg.module:app') or a .py path, set the ini option "
            "synth_task_app, or pass --synth-task-app-url"
        )
        raise SynthUsageError([ConfigProblem("synth_task_app", "no task app configured for this test", hint)])
    spec = TaskAppSpec(
        source=_task_app_source(_synth_test.node, source, "synth_task_app" if marker else None),
        api_key=(marker.api_key if marker else None) or task_key,
        startup_timeout=marker.startup_timeout if marker else None,
    )
    if ((marker.scope if marker else None) or synth_settings.task_app_scope) == "test":
        app = spec.start()
        yield app
        app.stop()
    else:
        yield _synth_run.task_app(spec)


@pytest.fixture
def synth_rl_config(_synth_test: _TestContext, synth_settings: SynthSettings) -> RLConfigRef | None:
    """The test's RL config, from ``@pytest.mark.synth_rl(config=...)`` or ``synth_rl_config``."""
    from pytest_synth_rl.plugin.jobs import RLConfigRef

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
    """A factory of ``RLJob`` bound to this test; at teardown online jobs left running are cancelled."""
    from pytest_synth_rl.plugin.jobs import SynthJobFactory
    from pytest_synth_rl.plugin.session import replay_transport
    from pytest_synth_rl.taskapp import InProcessTaskApp

    __tracebackhide__ = True
    settings = _synth_test.settings
    _synth_run.require_backend()
    cassette = request.getfixturevalue("synth_cassette") if "synth_cassette" in request.fixturenames else None
    wants_app = settings.task_app_url or settings.task_app or "synth_task_app" in request.fixturenames
    task_app = request.getfixturevalue("synth_task_app") if wants_app or _synth_test.spec.task_app else None
    api_key = settings.api_key
    http_client: httpx.Client | None = None
    transport = async_transport = None
    if not settings.is_offline:
        http_client = _synth_run.http_client()
    else:
        api_key = _synth_run.fake_api_key()
        if cassette is not None:
            transport = replay_transport(cassette)
        else:
            fake = request.getfixturevalue("_synth_fake")
            fake.use_task_app_key(task_app.api_key if task_app is not None else None)
            http_client, transport = _synth_run.fake_http_client(), fake.transport()
            async_transport = _synth_run.fake_async_transport()
    config_dir = [synth_rl_config.path.parent] if synth_rl_config is not None else []
    summary = request.config.pluginmanager.get_plugin("synth-rl-summary")
    jobs = SynthJobFactory(
        test_id=request.node.nodeid,
        settings=settings,
        clock=synth_clock,
        config=synth_rl_config,
        task_app_url=task_app.url if task_app is not None else None,
        task_app_api_key=task_app.api_key if task_app is not None else None,
        api_key=api_key,
        skip_health_check=isinstance(task_app, InProcessTaskApp)
        and _synth_run.task_app_known_healthy(task_app),
        http_client=http_client,
        transport=transport,
        async_transport=async_transport,
        prepare_submit=None if settings.is_offline else _synth_run.prepare_submit,
        config_dirs=tuple(dict.fromkeys([*config_dir, request.node.path.parent, request.config.rootpath])),
        live=summary.live if isinstance(summary, RunSummary) else None,
    )
    request.node.stash[_JOBS_KEY] = jobs
    yield jobs
    interrupts = request.config.pluginmanager.get_plugin("synth-rl-interrupts")
    deadline = (
        interrupts.deadline() if isinstance(interrupts, RunInterrupts) and not settings.is_offline else None
    )
    records = jobs.finish(cancel_running=not settings.is_offline, deadline=deadline)
    request.node.user_properties.extend(job_properties(records))
    if isinstance(summary, RunSummary):
        summary.hold(request.node.nodeid, records)


@pytest.fixture
def synth_expect(_synth_test: _TestContext, synth_clock: Clock) -> Iterator[ExpectJob]:
    """``synth_expect(job)``: ``expect_job`` with this test's timeout, poll interval and clock."""
    from pytest_synth_rl.plugin.session import ExpectJob

    __tracebackhide__ = True
    settings = _synth_test.settings
    expect = ExpectJob(synth_clock, settings.poll_interval, settings.timeout)
    yield expect
    unchecked = expect.unchecked()
    passed: bool = _synth_test.node.stash.get(CALL_PASSED_KEY, False)
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
) -> Iterator[ServedFake]:
    """A ``FakeSynthBackend`` served on loopback once per session, reset for each test."""
    __tracebackhide__ = True
    with _one_test(_synth_served_fake.fake, _synth_test, synth_policy):
        yield _synth_served_fake


@pytest.fixture
def synth_cassette_config() -> dict[str, object]:
    """How cassettes match requests (``match_on``, ``ignore``); override it in ``conftest.py``."""
    return {}


@pytest.fixture
def synth_cassette(
    request: pytest.FixtureRequest, synth_settings: SynthSettings, synth_cassette_config: dict[str, object]
) -> Iterator[Replayer | None]:
    """Record (online) or replay (offline) this test's backend traffic; ``None`` when not in use."""
    from pytest_synth_rl.recording import CassetteError, cassette_path, use_cassette
    from pytest_synth_rl.recording.matching import MatchConfig

    __tracebackhide__ = True
    config: object = synth_cassette_config
    if not isinstance(config, dict):
        problem = f"the synth_cassette_config fixture returned {type(config).__name__}, not a dict"
        hint = "return a dict such as {'ignore': (...)}"
        raise SynthUsageError([ConfigProblem("synth_cassette_config", problem, hint)])
    known = ", ".join(CASSETTE_CONFIG_KEYS)
    problems = [
        ConfigProblem(
            f"synth_cassette_config[{key!r}]",
            f"{key!r} is not a cassette option",
            f"{did_you_mean(str(key), CASSETTE_CONFIG_KEYS)} known keys: {known}".lstrip(),
        )
        for key in config
        if key not in CASSETTE_CONFIG_KEYS
    ]
    try:
        MatchConfig(**{key: config[key] for key in CASSETTE_CONFIG_KEYS if config.get(key) is not None})
    except SynthUsageError as exc:
        problems += [replace(p, key=f"synth_cassette_config[{p.key!r}]") for p in exc.problems]
    if problems:
        raise SynthUsageError(problems, subject="synth_cassette_config")
    options = dict(config)
    node = request.node.nodeid
    path = cassette_path(request.config.rootpath / synth_settings.cassette_dir, node)
    if path.exists() and not path.is_file():
        raise CassetteError(
            f"the cassette of {node} would be {path}, but that is a directory",
            hint="remove or rename it: a cassette is one JSON file per test under synth_cassette_dir",
        )
    if synth_settings.is_offline and path.is_file():
        with use_cassette(path, mode="none", test_id=node, **options) as replayer:
            yield replayer
    elif synth_settings.is_offline or synth_settings.record == "none":
        yield None
    else:
        hosts = [synth_settings.backend_url]
        with use_cassette(path, mode=synth_settings.record, test_id=node, hosts=hosts, **options) as replayer:
            yield replayer


@pytest.fixture
def synth_baseline(request: pytest.FixtureRequest, synth_settings: SynthSettings) -> BaselineCheck:
    """``synth_baseline(job, {"reward.*": Tolerance(abs=0.1)})``: compare with the stored baseline."""
    from pytest_synth_rl.baselines import BaselineStore
    from pytest_synth_rl.plugin.session import BaselineCheck

    node = request.node
    return BaselineCheck(
        BaselineStore(request.config.rootpath / synth_settings.baseline_dir),
        node.nodeid,
        update=synth_settings.update_baselines,
        jobs=lambda: node.stash[_JOBS_KEY].jobs if _JOBS_KEY in node.stash else [],
    )
