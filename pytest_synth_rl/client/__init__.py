"""Submit, follow and inspect RL jobs on the Synth backend (or a fake of it).

:class:`RLJob` and :class:`AsyncRLJob` keep the upstream SDK's interface, done right (see
docs/design.md). Names load on first use, so the plugin starts without httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_synth_rl.client.jobconfig import DEFAULT_BACKEND_URL as DEFAULT_BACKEND_URL
    from pytest_synth_rl.client.jobconfig import ENV_KEY_NAME as ENV_KEY_NAME
    from pytest_synth_rl.client.jobconfig import MAX_ENV_KEY_BYTES as MAX_ENV_KEY_BYTES
    from pytest_synth_rl.client.jobconfig import SEALED_BOX_ALG as SEALED_BOX_ALG
    from pytest_synth_rl.client.jobconfig import EnvKeyUpload as EnvKeyUpload
    from pytest_synth_rl.client.jobconfig import RLJobConfig as RLJobConfig
    from pytest_synth_rl.client.jobconfig import TaskAppVerification as TaskAppVerification
    from pytest_synth_rl.client.jobconfig import resolve_api_key as resolve_api_key
    from pytest_synth_rl.client.jobconfig import resolve_backend_url as resolve_backend_url
    from pytest_synth_rl.client.jobs import AsyncRLJob as AsyncRLJob
    from pytest_synth_rl.client.jobs import RLJob as RLJob
    from pytest_synth_rl.client.jobs import async_list_rl_jobs as async_list_rl_jobs
    from pytest_synth_rl.client.jobs import (
        async_upload_environment_api_key as async_upload_environment_api_key,
    )
    from pytest_synth_rl.client.jobs import async_verify_task_app as async_verify_task_app
    from pytest_synth_rl.client.jobs import list_rl_jobs as list_rl_jobs
    from pytest_synth_rl.client.jobs import upload_environment_api_key as upload_environment_api_key
    from pytest_synth_rl.client.jobs import verify_task_app as verify_task_app
    from pytest_synth_rl.client.polling import SynthCallbackWarning as SynthCallbackWarning
    from pytest_synth_rl.client.results import CANCELLED_STATUSES as CANCELLED_STATUSES
    from pytest_synth_rl.client.results import FAILURE_STATUSES as FAILURE_STATUSES
    from pytest_synth_rl.client.results import SUCCESS_STATUSES as SUCCESS_STATUSES
    from pytest_synth_rl.client.results import TERMINAL_STATUSES as TERMINAL_STATUSES
    from pytest_synth_rl.client.results import EventPage as EventPage
    from pytest_synth_rl.client.results import JobResult as JobResult
    from pytest_synth_rl.client.results import PollRecord as PollRecord
    from pytest_synth_rl.client.results import is_terminal as is_terminal
    from pytest_synth_rl.client.results import job_status as job_status
    from pytest_synth_rl.client.retry import RetryPolicy as RetryPolicy
    from pytest_synth_rl.client.retry import parse_retry_after as parse_retry_after

#: Each public name's module (keep in step with the imports above).
_HOMES = {
    name: home
    for home, names in {
        "jobconfig": "DEFAULT_BACKEND_URL RLJobConfig resolve_api_key resolve_backend_url ENV_KEY_NAME "
        "MAX_ENV_KEY_BYTES SEALED_BOX_ALG EnvKeyUpload TaskAppVerification",
        "jobs": "AsyncRLJob RLJob async_list_rl_jobs list_rl_jobs async_upload_environment_api_key "
        "async_verify_task_app upload_environment_api_key verify_task_app",
        "polling": "SynthCallbackWarning",
        "results": "CANCELLED_STATUSES FAILURE_STATUSES SUCCESS_STATUSES TERMINAL_STATUSES EventPage "
        "JobResult PollRecord is_terminal job_status",
        "retry": "RetryPolicy parse_retry_after",
    }.items()
    for name in names.split()
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    return value


__all__ = sorted(_HOMES)
