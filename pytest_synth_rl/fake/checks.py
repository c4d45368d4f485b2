"""What the fake accepts as a flag or an error text: one rule each, for every way in."""

from __future__ import annotations

from pytest_synth_rl.errors import ConfigProblem

__all__ = ["MAX_ERROR_CHARS", "bool_problem", "error_text_problem", "written"]

#: Longest scripted ``error`` message (characters).
MAX_ERROR_CHARS = 10_000


def written(value: object) -> str:
    """What a caller wrote, short and with its type: ``str '500'``, ``float 500.5``."""
    return f"{type(value).__name__} {value!r:.40}"


def bool_problem(value: object, key: str, example: str) -> ConfigProblem | None:
    """The problem with *value* as a flag named *key* (only ``True`` and ``False`` are flags), or None."""
    if isinstance(value, bool):
        return None
    return ConfigProblem(
        key=key, message=f"must be true or false, got {written(value)}", hint=f"e.g. {example}"
    )


def error_text_problem(value: object, key: str) -> ConfigProblem | None:
    """The problem with *value* as a job's error message: a string of at most :data:`MAX_ERROR_CHARS`."""
    if isinstance(value, str) and len(value) <= MAX_ERROR_CHARS:
        return None
    got = f"{len(value)} characters" if isinstance(value, str) else written(value)
    return ConfigProblem(
        key=key,
        message=f"must be a string of at most {MAX_ERROR_CHARS} characters, got {got}",
        hint="pass a short error message, e.g. 'CUDA out of memory'",
    )
