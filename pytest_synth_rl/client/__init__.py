"""Submit, follow and inspect RL jobs on the Synth backend (or a fake of it).

:class:`RLJob` (blocking) and :class:`AsyncRLJob` keep the upstream SDK's interface and fix its
defects: timeout and interval are honoured on an injectable clock, every terminal spelling is
terminal, transient failures are retried with backoff and reported attempt by attempt, and keys
never show up in reprs or errors.
"""

from __future__ import annotations

from .aio import AsyncRLJob, async_list_rl_jobs
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

__all__ = [
    "CANCELLED_STATUSES",
    "DEFAULT_BACKEND_URL",
    "FAILURE_STATUSES",
    "SUCCESS_STATUSES",
    "TERMINAL_STATUSES",
    "AsyncRLJob",
    "EventPage",
    "JobResult",
    "PollRecord",
    "RLJob",
    "RLJobConfig",
    "RetryPolicy",
    "SynthCallbackWarning",
    "async_list_rl_jobs",
    "is_terminal",
    "job_status",
    "list_rl_jobs",
    "parse_retry_after",
    "resolve_api_key",
    "resolve_backend_url",
]
