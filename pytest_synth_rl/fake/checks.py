"""What the fake accepts as a field value, one rule per kind of field.

Scenarios, faults, the in-process job handle and the admin routes all take flags and error texts
from users; each rule lives here once so that every way in says the same thing about a value.
"""

from __future__ import annotations

from pytest_synth_rl.errors import ConfigProblem

__all__ = ["MAX_ERROR_CHARS", "bool_problem", "error_text_problem", "written"]

#: Longest scripted ``error`` message (characters).
MAX_ERROR_CHARS = 10_000


def written(value: object) -> str:
    """What a caller wrote, short and with its type, which the repr alone can hide (``'500'``
    against ``500``, ``1`` against ``True``): ``str '500'``, ``float 500.5``."""
    return f"{type(value).__name__} {value!r:.40}"


def bool_problem(value: object, key: str, example: str) -> ConfigProblem | None:
    """The problem with *value* as a flag named *key*, or None: only ``True`` and ``False`` are
    flags (``"no"`` and ``1`` are not; ``"no"`` would even count as true)."""
    if isinstance(value, bool):
        return None
    return ConfigProblem(
        key=key, message=f"must be true or false, got {written(value)}", hint=f"e.g. {example}"
    )


def error_text_problem(value: object, key: str) -> ConfigProblem | None:
    """The problem with *value* as a job's error message (named *key*), or None if it is fine.

    One rule for every way a test sets an error text (``Scenario(error=...)``, failing a job in
    process or through the admin API): a string of at most :data:`MAX_ERROR_CHARS` characters.
    """
    if isinstance(value, str) and len(value) <= MAX_ERROR_CHARS:
        return None
    got = f"{len(value)} characters" if isinstance(value, str) else written(value)
    return ConfigProblem(
        key=key,
        message=f"must be a string of at most {MAX_ERROR_CHARS} characters, got {got}",
        hint="pass a short error message, e.g. 'CUDA out of memory'",
    )
