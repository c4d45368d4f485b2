"""The stand-in model's lifetime: which policy it answers with, served on first use, stopped on demand."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

from pytest_synth_rl.fake.model import (
    ArithmeticPolicy,
    Policy,
    PolicyReply,
    Progress,
    RolloutIdentity,
    linear,
)
from pytest_synth_rl.fake.model.inference import StubInference


def default_policy() -> Policy:
    """The built-in model: solves the arithmetic example, right 15% of the time at the start of
    training rising linearly to 95% at the end, so rewards from real rollouts rise."""
    return ArithmeticPolicy(linear(0.15, 0.95))


class StandInModel:
    """One fake's stub model server: its policy (the constructor's, else :func:`default_policy`) and URL."""

    def __init__(self, policy: Policy | None = None, replies: Sequence[PolicyReply] | None = None) -> None:
        self._policy = policy
        own = policy if policy is not None or replies is not None else default_policy()
        self.inference = StubInference(policy=own, replies=replies)
        # Every rollout's inference URL carries its correlation id, as the trainer's do.
        self.inference.require_correlation_id = True
        # Its own lock: stopping the server must never wait on a request in flight.
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None

    def use_policy(self, policy: Policy | None) -> None:
        """Answer model calls with *policy* from now on; None restores this fake's own (a fresh default)."""
        if policy is None and self._policy is not None:
            policy = self._policy
        elif policy is None and self.inference.replies is not None:
            policy = StubInference(replies=self.inference.replies).policy
        self.inference.policy = policy if policy is not None else default_policy()

    def reset(self) -> None:
        """Forget every call; this fake's own policy again."""
        self.inference.clear()
        self.use_policy(None)

    def url_for(self, rollout: RolloutIdentity, progress: Progress) -> str:
        """The rollout's own inference URL on the stub model (served on first use)."""
        with self._lock:
            if self._stack is None:
                stack = contextlib.ExitStack()
                stack.enter_context(self.inference.serve())
                self._stack = stack
        return self.inference.route(rollout, progress)

    def stop(self) -> None:
        """Stop the server (it restarts when a rollout needs it)."""
        with self._lock:
            stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
