"""What ``synth_rl_job`` returns: :class:`SynthJobFactory` builds one test's jobs, checks each
call's arguments (every problem at once, a key's value never shown) and finishes them at teardown.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx

from pytest_synth_rl.assertions import job_rewards
from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob
from pytest_synth_rl.client.jobconfig import ArgumentRule, argument_problems, argument_rules
from pytest_synth_rl.client.results import is_terminal, job_status
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.config import build_rl_payload, load_rl_config, normalize_backend_url
from pytest_synth_rl.errors import (
    ConfigError,
    ConfigProblem,
    SynthError,
    SynthUsageError,
    a_type,
    closest,
    unknown_argument,
)
from pytest_synth_rl.plugin.interrupts import CANCEL_SECONDS
from pytest_synth_rl.plugin.markers import is_config_path
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.files import find_file
from pytest_synth_rl.reporting.report import JobRecord, LiveJobs, job_record
from pytest_synth_rl.secrets.masking import Secret, get_logger, redact, secret_or_none

log = get_logger("pytest_synth_rl.plugin.jobs")

_J = TypeVar("_J", RLJob, AsyncRLJob)


def job_tags(test_id: str) -> dict[str, str]:
    tags = {"source": "pytest-synth-rl", "test": redact(test_id)[-200:]}
    if os.environ.get("PYTEST_XDIST_TESTRUNUID"):
        tags["run"] = os.environ["PYTEST_XDIST_TESTRUNUID"]
    tags["worker"] = os.environ.get("PYTEST_XDIST_WORKER") or "main"
    return tags


@dataclass(frozen=True)
class RLConfigRef:
    """The RL config a test uses: a TOML path and the overrides applied on top of it."""

    path: Path
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> dict[str, Any]:
        return load_rl_config(self.path, overrides=dict(self.overrides))

    def build(self, task_url: str | None = None) -> dict[str, Any]:
        return build_rl_payload(self.path, task_url=task_url, overrides=dict(self.overrides)).payload


@functools.cache
def _forwarded_names() -> tuple[str, ...]:
    parameters = inspect.signature(RLJob.from_config).parameters
    return tuple(name for name in parameters if name not in ("config_path", "overrides"))


@functools.cache
def _rules(sync: bool) -> dict[str, ArgumentRule]:
    config = (False, is_config_path, "the path of an RL TOML file (a non-empty str or a pathlib.Path)", "")
    return {"config": config, **argument_rules(sync)}


def _argument_problems(
    call: str, config: object, overrides: object, kwargs: Mapping[str, Any]
) -> list[ConfigProblem]:
    forwarded, rules = _forwarded_names(), _rules(not call.endswith("async_job"))
    usage = f"it takes config=, overrides= and {', '.join(f'{name}=' for name in forwarded)}"
    accepted, paths = ["config", "overrides", *forwarded], ("config_path", "path")
    problems = [
        unknown_argument(call, name, "config" if name in paths else closest(name, accepted), usage)
        for name in kwargs
        if name not in forwarded
    ]
    key, override_hint = f"{call}.overrides", f"e.g. {call}(overrides={{'training.batch_size': 2}})"
    hints = {  # config and overrides, the test's own, are not left out
        "overrides": override_hint,
        "config": f"to change keys of the test's config pass them by keyword: {call}(overrides={{...}})"
        if isinstance(config, Mapping)
        else f"e.g. {call}(config='rl.toml') (relative to the test's synth_rl config, the test file or the "
        "rootdir), or leave it out for the test's synth_rl marker config",
    }
    problems += argument_problems(call, {**kwargs, "config": config, "overrides": overrides}, rules, hints)
    for name in overrides if isinstance(overrides, Mapping) else ():
        if not isinstance(name, str) or not name.strip():
            wrong = "blank" if isinstance(name, str) else a_type(name)
            message = (
                f"got {call}(overrides={{{name!r:.60}: ...}}): the key is {wrong}; "
                "expected dotted config keys as non-empty strings"
            )
            problems.append(ConfigProblem(key, message, override_hint))
    return problems


@dataclass(kw_only=True, eq=False, repr=False)
class SynthJobFactory:
    """The jobs one test made, and how to build more (what ``synth_rl_job`` returns): call it,
    ``synth_rl_job(config="other.toml", overrides={"training.batch_size": 2})``."""

    test_id: str
    settings: SynthSettings
    clock: Clock
    config: RLConfigRef | None
    task_app_url: str | None
    task_app_api_key: Secret | None
    api_key: Secret | None
    skip_health_check: bool = False
    http_client: httpx.Client | None = None
    transport: httpx.MockTransport | None = None
    async_transport: httpx.MockTransport | None = None
    prepare_submit: Callable[[Secret | None, str | None, Secret | None], None] | None = None
    config_dirs: tuple[Path, ...] = ()
    jobs: list[RLJob] = field(default_factory=list, init=False)
    async_jobs: list[AsyncRLJob] = field(default_factory=list, init=False)
    live: LiveJobs | None = None
    _own_transport: set[int] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.task_app_api_key = secret_or_none(self.task_app_api_key)
        self.api_key = secret_or_none(self.api_key)
        if self.async_transport is None:
            self.async_transport = self.transport

    def __call__(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> RLJob:
        """An unsubmitted ``RLJob`` bound to this test; ``RLJob.from_config`` keywords win."""
        __tracebackhide__ = True
        return self._make(RLJob, config, overrides, kwargs)

    def async_job(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncRLJob:
        """The same as calling this object, for an ``AsyncRLJob`` (use it with ``async with``)."""
        __tracebackhide__ = True
        return self._make(AsyncRLJob, config, overrides, kwargs)

    def _make(
        self,
        kind: type[_J],
        config: str | os.PathLike[str] | None,
        overrides: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> _J:
        __tracebackhide__ = True
        call = "synth_rl_job" if kind is RLJob else "synth_rl_job.async_job"
        problems = _argument_problems(call, config, overrides, kwargs)
        if problems:
            raise SynthUsageError(problems, subject=f"{call}() arguments")
        path, base_overrides = self._config_of(config, call)
        options: dict[str, Any] = {
            "backend_url": self.settings.backend_url,
            "api_key": self.api_key,
            "task_app_url": self.task_app_url,
            "task_app_api_key": self.task_app_api_key,
            "overrides": {**base_overrides, **(overrides or {})} or None,
            "clock": self.clock,
            "tags": job_tags(self.test_id),
            "skip_health_check": self.skip_health_check
            and not {"task_app_url", "task_app_api_key"} & kwargs.keys(),
        }
        own_transport = bool({"http_client", "transport"} & kwargs.keys())
        if not own_transport:
            if kind is AsyncRLJob:
                options["transport"] = self.async_transport
            elif self.http_client is not None:
                options["http_client"] = self.http_client
            else:
                options["transport"] = self.transport
        options.update(kwargs)
        if self.prepare_submit is not None:
            self.prepare_submit(self.api_key, options.get("task_app_url"), self.task_app_api_key)
        try:
            job = kind.from_config(path, **options)
        except ConfigError as error:
            if self.task_app_url is not None or "services.task_url" not in error.keys:
                raise
            hint = (
                "this test serves no task app: add @pytest.mark.synth_task_app('my_task_app.py') (or set "
                "the ini option synth_task_app, or pass --synth-task-app-url), or give "
                "synth_rl_job(task_app_url=...)"
            )
            problems = [replace(p, hint=hint) if p.key == "services.task_url" else p for p in error.problems]
            raise ConfigError(problems, path=error.path) from None
        job.poll_timeout, job.poll_interval = self.settings.timeout, self.settings.poll_interval
        live, backend = self.live, job.config.backend_url
        if live is not None:
            job.on_submitted = lambda job_id: live.add(self.test_id, job_id, backend)
        if isinstance(job, RLJob):
            self.jobs.append(job)
        else:
            self.async_jobs.append(job)
            if own_transport:
                self._own_transport.add(id(job))
        return job

    def _config_of(self, config: str | os.PathLike[str] | None, call: str) -> tuple[Path, Mapping[str, Any]]:
        """The RL TOML a call uses (found near the test) and the overrides that come with it."""
        __tracebackhide__ = True
        if config is None:
            if self.config is None:
                hint = (
                    "add @pytest.mark.synth_rl(config='path/to/rl.toml'), set the ini option "
                    "synth_rl_config, or pass synth_rl_job(config=...)"
                )
                raise SynthUsageError([ConfigProblem("synth_rl.config", "no RL config for this test", hint)])
            return self.config.path, self.config.overrides
        folders = self.config_dirs or ((self.config.path.parent,) if self.config is not None else ())
        found = find_file(Path(config), folders) if folders else Path(config)
        if isinstance(found, Path):
            return found, {}
        hint = (
            f"{found.hint}give a path relative to the test file (or to the test's synth_rl config, or the "
            "rootdir), or an absolute path"
        )
        raise SynthUsageError([ConfigProblem(f"{call}.config", f"RL config file {found.problem}", hint)])

    def finish(self, *, cancel_running: bool, deadline: float | None = None) -> list[JobRecord]:
        """Teardown: cancel jobs still running (online), then a record of every submitted job;
        past *deadline* (``time.monotonic()``) a job is described as last seen."""
        records = []
        every: list[RLJob | AsyncRLJob] = [*self.jobs, *self.async_jobs]
        for job in every:
            if job.job_id is not None:
                records.append(self._finish(job, job.job_id, cancel_running, deadline))
                if self.live is not None and (not cancel_running or is_terminal(records[-1].status or "")):
                    self.live.discard(job.job_id)
            if isinstance(job, RLJob):
                job.close()
        return records

    def _finish(
        self, job: RLJob | AsyncRLJob, job_id: str, cancel_running: bool, deadline: float | None
    ) -> JobRecord:
        own = id(job) in self._own_transport
        late = deadline is not None and time.monotonic() >= deadline
        if late:
            log.warning("RL job %s of %s may still be running: the interrupted teardown ran out of time",
                        job_id, self.test_id)  # fmt: skip
        if late or (own and self.settings.is_offline):  # offline, a job's own transport is not read
            return finish_job(self.test_id, None, job, cancel_running=False, clock=self.clock)
        if isinstance(job, RLJob) and (deadline is None or job.http_client is not self.http_client):
            return finish_job(self.test_id, job, job, cancel_running=cancel_running, clock=self.clock)
        backend, key, transport = job.config.backend_url, job.config.api_key, None if own else self.transport
        with job_handle(job_id, backend, key, deadline, transport, clock=job.clock) as fresh:
            return finish_job(self.test_id, fresh, job, cancel_running=cancel_running, clock=self.clock)


def job_handle(
    job_id: str,
    backend_url: str,
    api_key: Secret | None,
    deadline: float | None = None,
    transport: httpx.MockTransport | None = None,
    clock: Clock | None = None,
) -> RLJob:
    options: dict[str, Any] = {"backend_url": backend_url, "api_key": api_key, "transport": transport}
    if deadline is not None:
        remaining = max(deadline - time.monotonic(), 0.001)
        options["retry"] = RetryPolicy(max_attempts=2, total_budget=remaining)
        options["request_timeout"] = remaining
    return RLJob.from_job_id(job_id, clock=clock, **options)


def finish_job(
    test_id: str, handle: RLJob | None, job: RLJob | AsyncRLJob, *, cancel_running: bool, clock: Clock
) -> JobRecord:
    """The record of *job*, read through *handle* (None: as the job saw it), cancelled first if
    *cancel_running* and not ended."""
    now_clock = job.finished_at if job.finished_at is not None else clock.now()
    now_wall = job.finished_wall if job.finished_wall is not None else time.perf_counter()
    cancelled = False
    status_payload: dict[str, Any] | None = None
    rewards: list[float] = []
    try:
        if handle is not None:
            if job.last_result is None:
                status_payload = handle.get_status()
                if cancel_running and not is_terminal(job_status(status_payload)):
                    handle.cancel()
                    cancelled = True
                    log.warning("cancelled RL job %s left running by %s", job.job_id, test_id)
                    status_payload = handle.get_status()
            rewards = job_rewards(handle)
    except SynthError as exc:
        log.warning("could not finish RL job %s of %s: %s", job.job_id, test_id, exc)
    return job_record(
        test_id,
        job,
        backend=job.config.backend_url,
        rewards=rewards,
        status_payload=status_payload,
        now_clock=now_clock,
        now_wall=now_wall,
        cancelled_by_plugin=cancelled,
    )


def orphan_records(orphans: list[tuple[str, str, str]], settings: SynthSettings) -> list[JobRecord]:
    """Records of (test, job id, backend) of a dead xdist worker; online, ours are cancelled."""
    deadline = time.monotonic() + CANCEL_SECONDS
    records = []
    for test_id, job_id, backend in orphans:
        log.warning("RL job %s of %s was orphaned: its xdist worker died", job_id, test_id)
        ours = normalize_backend_url(backend) == normalize_backend_url(settings.backend_url)
        if settings.is_offline or not ours or time.monotonic() >= deadline:
            records.append(JobRecord(test_id, job_id, None, backend, orphaned=True))
            continue
        with job_handle(job_id, backend, settings.api_key, deadline) as handle:
            record = finish_job(test_id, handle, handle, cancel_running=True, clock=handle.clock)
        records.append(replace(record, orphaned=True))
    return records
