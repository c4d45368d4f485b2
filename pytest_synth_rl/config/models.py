"""Which models an RL job may train, and when a model counts as experimental (contract §7.3).

A model can be known (SFT-only) and still be refused for RL, with a message that says so. Lookups
ignore case and answer with the canonical spelling; ``SDK_EXPERIMENTAL`` and
``SDK_EXPERIMENTAL_MODELS`` are read on every check, so tests can ``monkeypatch`` them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["EXPERIMENTAL_MODELS", "FINE_TUNED_PREFIXES", "KNOWN_BASE_MODELS", "SUPPORTED_RL_MODELS"]
__all__ += [
    "ModelRejected",
    "ResolvedModel",
    "experimental_allowed",
    "experimental_models",
    "resolve_rl_model",
]


def _qwen(names: str) -> frozenset[str]:
    """``Qwen/Qwen3-<name>`` for each name; a trailing ``+`` adds its ``-FP8`` variant too."""
    out: set[str] = set()
    for name in names.split():
        model = f"Qwen/Qwen3-{name.rstrip('+')}"
        out |= {model, f"{model}-FP8"} if name.endswith("+") else {model}
    return frozenset(out)


#: Base models the RL trainer accepts (contract §7.3).
SUPPORTED_RL_MODELS = _qwen(
    "0.6B 1.7B 4B 8B 14B 30B-A3B 4B-2507 4B-Instruct-2507+ 30B-A3B-Instruct-2507+ 4B-Thinking-2507+ "
    "30B-A3B-Thinking-2507+ Coder-30B-A3B-Instruct+ VL-2B-Instruct VL-2B-Thinking VL-4B-Instruct "
    "VL-4B-Thinking VL-8B-Instruct VL-8B-Thinking"
)
#: Models blocked unless experimental use is enabled (before ``SDK_EXPERIMENTAL_MODELS``).
EXPERIMENTAL_MODELS = _qwen(
    "235B-A22B-Instruct-2507+ 235B-A22B-Thinking-2507+ Coder-480B-A35B-Instruct+ 30B-A3B-Thinking-2507+ "
    "4B-Thinking-2507+"
)
#: Every base model id the SDK knows (RL-capable or not).
KNOWN_BASE_MODELS = (
    SUPPORTED_RL_MODELS
    | EXPERIMENTAL_MODELS
    | _qwen("32B VL-30B-A3B-Instruct VL-30B-A3B-Thinking VL-32B-Instruct VL-32B-Thinking")
    | _qwen("VL-235B-A22B-Instruct VL-235B-A22B-Thinking")
)
#: Prefixes of fine-tuned model ids issued by the backend.
FINE_TUNED_PREFIXES: tuple[str, ...] = ("ft:", "fft:", "qft:", "rl:")

_BY_LOWER: dict[str, str] = {name.lower(): name for name in KNOWN_BASE_MODELS}
_EXAMPLES = "Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B, Qwen/Qwen3-8B"


class ModelRejected(ValueError):
    """A model id cannot be used for RL; carries a user-facing message and hint."""

    def __init__(self, message: str, hint: str) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message)


@dataclass(frozen=True)
class ResolvedModel:
    """A usable model: ``payload_id`` is sent, ``base`` is the canonical base it trains."""

    payload_id: str
    base: str


def experimental_models() -> frozenset[str]:
    """The experimental set in force: defaults plus ``SDK_EXPERIMENTAL_MODELS``."""
    extra = os.environ.get("SDK_EXPERIMENTAL_MODELS", "")
    return EXPERIMENTAL_MODELS | frozenset(part.strip() for part in extra.split(",") if part.strip())


def experimental_allowed(allow_experimental: bool | None) -> bool:
    """The explicit argument wins; ``None`` defers to ``SDK_EXPERIMENTAL=1`` (exactly ``1``)."""
    if allow_experimental is not None:
        return bool(allow_experimental)
    return os.environ.get("SDK_EXPERIMENTAL", "0") == "1"


def _base_of(model_id: str, *, fine_tuned: bool) -> str | None:
    names = [model_id, *(part.strip() for part in model_id.split(":")[1:] if fine_tuned)]
    return next((_BY_LOWER[name.lower()] for name in names if name.lower() in _BY_LOWER), None)


def resolve_rl_model(model_id: str, *, fine_tuned: bool, allow_experimental: bool | None) -> ResolvedModel:
    """What goes into the payload for *model_id*, else :class:`ModelRejected` with the reason and a
    fix; ``fine_tuned`` ids (``ft:<base>:<job>``) must name a known base in a later ``:`` part."""
    cleaned = model_id.strip()
    if not cleaned:
        raise ModelRejected("is empty; expected a model id", f"use a base model such as {_EXAMPLES}")
    if _base_of(cleaned, fine_tuned=True) is None:
        hint = f"use one of the RL base models ({_EXAMPLES}, …)"
        if fine_tuned:
            hint += " or a fine-tuned id that names one, like ft:Qwen/Qwen3-0.6B:<job-id>"
        raise ModelRejected(f"{cleaned!r} is not a supported model", hint)
    base = _base_of(cleaned, fine_tuned=fine_tuned)
    if base is None:
        raise ModelRejected(
            f"{cleaned!r} is a fine-tuned model id, but this key expects a plain base model id",
            "move it to [model].source (and remove [model].base), or use a base id such as Qwen/Qwen3-0.6B",
        )
    if base in experimental_models() and not experimental_allowed(allow_experimental):
        raise ModelRejected(
            f"{base!r} is experimental and disabled",
            "pass allow_experimental=True or set SDK_EXPERIMENTAL=1 to use it, or pick a core model",
        )
    if base not in SUPPORTED_RL_MODELS:
        raise ModelRejected(
            f"{base!r} does not support RL (online policy_gradient / gspo) training",
            f"pick an RL-capable base model such as {_EXAMPLES}",
        )
    payload_id = base if cleaned.lower() in _BY_LOWER else cleaned
    return ResolvedModel(payload_id=payload_id, base=base)
