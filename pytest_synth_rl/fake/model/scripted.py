"""A scripted policy: fixed replies, or a function of the request.

Fixed replies are indexed by the call's turn within its rollout, so concurrent rollouts all see
the same script; the last reply repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.fake.model.policy import ChatRequest, PolicyReply, as_chat_request


class ScriptedPolicy:
    """``ScriptedPolicy("42")``, ``ScriptedPolicy(Reply.tool("submit", answer=1), "done")`` or
    ``ScriptedPolicy(lambda request: ...)``."""

    def __init__(self, *replies: PolicyReply | Callable[[ChatRequest], PolicyReply]) -> None:
        __tracebackhide__ = True
        functions = [r for r in replies if callable(r)]
        if not replies or (functions and len(replies) > 1):
            got = (
                "no replies" if not replies else f"{len(functions)} function(s) among {len(replies)} replies"
            )
            raise SynthUsageError(
                [
                    ConfigProblem(
                        "ScriptedPolicy",
                        f"takes at least one reply (the last one repeats) or one function of the "
                        f"request, not both; got {got}",
                        'e.g. ScriptedPolicy("42"), ScriptedPolicy(Reply.tool("submit", answer=1), '
                        '"done") or ScriptedPolicy(lambda request: ...)',
                    )
                ]
            )
        self._function: Callable[[ChatRequest], PolicyReply] | None = functions[0] if functions else None
        self.replies: tuple[PolicyReply, ...] = () if functions else tuple(replies)  # type: ignore[arg-type]

    def __call__(self, request: Mapping[str, Any]) -> PolicyReply:
        request = as_chat_request(request)
        if self._function is not None:
            return self._function(request)
        return self.replies[min(request.turn, len(self.replies) - 1)]

    def __repr__(self) -> str:
        if self._function is not None:
            return f"ScriptedPolicy({getattr(self._function, '__name__', '<function>')})"
        return f"ScriptedPolicy({len(self.replies)} replies)"
