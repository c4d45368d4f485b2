"""Submit, follow and inspect RL jobs on the Synth backend (or a fake of it).

:class:`RLJob` (blocking) and :class:`AsyncRLJob` keep the upstream SDK's interface and fix its
defects: timeout and interval are honoured on an injectable clock, every terminal spelling is
terminal, transient failures are retried with backoff and reported attempt by attempt, and keys
never show up in reprs or errors.
"""

from __future__ import annotations

from .aio import AsyncRLJob, async_list_rl_jobs
from .env_keys import (
    ENV_KEY_NAME,
    MAX_ENV_KEY_BYTES,
    SEALED_BOX_ALG,
    EnvKeyUpload,
    async_upload_environment_api_key,
    upload_environment_api_key,
)
from .jobconfig import DEFAULT_BACKEND_URL, RLJobConfig, resolve_api_key, resolve_backend_url
from .polling import SynthCallbackWarning
from .results import (
    CANCELLED_STATUSES,
    FAILURE_STATUSES,
    SUCCESS_STATUSES,
    TERMINAL_STATUSES,
    EventPage,
    JobResult,
    PollRecord,
    is_terminal,
    job_status,
)
from .retry import RetryPolicy, parse_retry_after
from .sync import RLJob, list_rl_jobs
from .task_verify import TaskAppVerification, async_verify_task_app, verify_task_app

__all__ = [
    "CANCELLED_STATUSES",
    "DEFAULT_BACKEND_URL",
    "ENV_KEY_NAME",
    "FAILURE_STATUSES",
    "MAX_ENV_KEY_BYTES",
    "SEALED_BOX_ALG",
    "SUCCESS_STATUSES",
    "TERMINAL_STATUSES",
    "AsyncRLJob",
    "EnvKeyUpload",
    "EventPage",
    "JobResult",
    "PollRecord",
    "RLJob",
    "RLJobConfig",
    "RetryPolicy",
    "SynthCallbackWarning",
    "TaskAppVerification",
    "async_list_rl_jobs",
    "async_upload_environment_api_key",
    "async_verify_task_app",
    "is_terminal",
    "job_status",
    "list_rl_jobs",
    "parse_retry_after",
    "resolve_api_key",
    "resolve_backend_url",
    "upload_environment_api_key",
    "verify_task_app",
]
