"""The pytest entry point (``pytest11``): options, configuration, markers, reports, fixtures, and
signals: SIGTERM ends a run as Ctrl-C does; a second interrupt lets the teardown finish, a third
ends the process at once, naming the jobs left running. The rest loads when a synth fixture runs.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.plugin import fixtures
from pytest_synth_rl.plugin.fixtures import CALL_PASSED_KEY, SETTINGS_KEY, spec_of
from pytest_synth_rl.plugin.interrupts import RunInterrupts
from pytest_synth_rl.plugin.markers import MARKERS, marker_guess
from pytest_synth_rl.plugin.progress import register_views
from pytest_synth_rl.plugin.settings import (
    OPTIONS,
    WORKER_TASK_APP_KEY,
    new_task_app_key,
    resolve_settings,
    unknown_ini_key,
    with_run_task_app_key,
)
from pytest_synth_rl.reporting.summary import WORKER_ROW_SPOOL, RunSummary
from pytest_synth_rl.secrets.masking import mask_handler, short_key_warning

_RUN_TASK_KEY = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("synth-rl", "RL jobs under test (pytest-synth-rl)")
    for spec in OPTIONS:
        default = spec.shown_default
        help = spec.help + (f" Default: {default}." if default not in (None, False) else "")
        if spec.flag:
            extra: dict[str, Any] = {} if spec.is_flag else {"metavar": spec.metavar}
            action = "store_true" if spec.is_flag else "store"
            group.addoption(
                spec.flag, action=action, default=None, dest=f"synth_{spec.name}", help=help, **extra
            )
        if spec.ini:
            parser.addini(spec.ini, help, default=None)


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unknown = unknown_ini_key(getattr(config, "inicfg", None) or ())
    if unknown is not None:
        raise pytest.UsageError(unknown)
    if not settings.is_offline and settings.api_key is None:
        raise pytest.UsageError(
            f"{settings.origin('backend')} runs RL jobs against a real backend, which needs an "
            "API key: set SYNTH_API_KEY (or run offline with --synth-backend=mock)."
        )
    report_file = settings.report_file(config.rootpath)
    if report_file is not None:
        from pytest_synth_rl.reporting.files import path_problem

        problem = path_problem(report_file)
        if problem is not None:
            inside = str(settings.report) if os.path.isdir(report_file) else ""
            raise pytest.UsageError(
                f"{settings.origin('report')}: cannot write the run report to {report_file}: {problem}. "
                "Point it at a JSON file path (missing directories are created), such as "
                f"--synth-report={os.path.join(inside, 'synth-report.json')}"
            )
    if settings.is_offline and settings.record in ("new", "rewrite"):
        raise pytest.UsageError(
            f"{settings.origin('record')} needs a backend to record from: add "
            "--synth-backend=URL (a real backend or a served fake), or record none offline"
        )
    handed = getattr(config, "workerinput", {}).get(WORKER_TASK_APP_KEY)
    settings = config.stash[SETTINGS_KEY] = with_run_task_app_key(settings, handed)
    config.pluginmanager.register(fixtures, "synth-rl-fixtures")
    config.pluginmanager.register(RunSummary(config, settings), "synth-rl-summary")
    register_views(config, settings)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    settings = node.config.stash[SETTINGS_KEY]
    if settings.task_app_api_key is None:
        node.workerinput[WORKER_TASK_APP_KEY] = node.config.stash.setdefault(
            _RUN_TASK_KEY, new_task_app_key()
        )
    summary = node.config.pluginmanager.get_plugin("synth-rl-summary")
    if isinstance(summary, RunSummary):
        node.workerinput[WORKER_ROW_SPOOL] = summary.spool_for_workers()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Mask live logs and the log file; online or with a report, SIGTERM ends the run like Ctrl-C."""
    logging_plugin = session.config.pluginmanager.get_plugin("logging-plugin")
    for name in ("log_cli_handler", "log_file_handler"):
        handler = getattr(logging_plugin, name, None)
        if isinstance(handler, logging.Handler):
            mask_handler(handler)
    settings = session.config.stash.get(SETTINGS_KEY, None)
    summary = session.config.pluginmanager.get_plugin("synth-rl-summary")
    if settings and isinstance(summary, RunSummary) and (not settings.is_offline or settings.report):
        interrupts = RunInterrupts(summary.live.described)
        interrupts.install()
        session.config.pluginmanager.register(interrupts, "synth-rl-interrupts")


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash.get(SETTINGS_KEY, None)
    return settings.describe() if settings else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash[SETTINGS_KEY]
    if settings.is_offline:
        unwanted, reason = "synth_online", "synth_online: needs --synth-backend=URL (running offline)"
    else:
        unwanted = "synth_offline"
        reason = f"synth_offline: scripted for the offline fake (running against {settings.backend_url})"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker(unwanted):
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    __tracebackhide__ = True
    if any(marker.name in MARKERS or marker_guess(marker.name) is not None for marker in item.iter_markers()):
        spec_of(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if call.excinfo is not None:
        from pytest_synth_rl.plugin.frames import mark_package_modules

        mark_package_modules()
    report: pytest.TestReport = yield
    if call.when == "call":
        item.stash[CALL_PASSED_KEY] = report.passed
    if call.excinfo is not None and report.failed and not item.config.getoption("fulltrace", False):
        from pytest_synth_rl.plugin.frames import message_only, without_internal_causes

        report.longrepr = message_only(call.excinfo) or without_internal_causes(call.excinfo, report.longrepr)
    if report.longrepr is not None or report.sections:
        from pytest_synth_rl.secrets.masking import mask_test_report

        mask_test_report(report)
    return report
