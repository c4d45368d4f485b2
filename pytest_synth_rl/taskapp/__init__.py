"""Task apps under test: serve one in-process, probe its health, check its contract.

* :class:`InProcessTaskApp` serves a task app (an ASGI app, a ``.py`` file, an import target
  or a factory) with uvicorn on loopback for the duration of a test.
* :func:`check_task_app_health` is the probe run before a job is submitted.
* :func:`check_task_app_contract` checks every endpoint the trainer uses, including one real
  rollout against a stub model.
"""

from __future__ import annotations

from pytest_synth_rl.taskapp.health import (
    HealthReport,
    async_check_task_app_health,
    check_task_app_health,
    task_app_auth_headers,
)
from pytest_synth_rl.taskapp.in_process import CONTRACT_ENDPOINTS, InProcessTaskApp
from pytest_synth_rl.taskapp.loading import FACTORY_NAMES, is_asgi_app, resolve_app

__all__ = [
    "CONTRACT_ENDPOINTS",
    "FACTORY_NAMES",
    "HealthReport",
    "InProcessTaskApp",
    "async_check_task_app_health",
    "check_task_app_health",
    "is_asgi_app",
    "resolve_app",
    "task_app_auth_headers",
]
