"""Task apps under test: serving one in process, the health probe, and loading."""

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
