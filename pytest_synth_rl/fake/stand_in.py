"""The stand-in model's lifetime: which policy it answers with, served on first use, stopped on demand."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, closest
from pytest_synth_rl.fake.model import (
    ArithmeticPolicy,
    ChatRequest,
    Policy,
    PolicyReply,
    Progress,
    RolloutIdentity,
    linear,
)
from pytest_synth_rl.fake.model.inference import StubInference
from pytest_synth_rl.fake.model.policy import policy_problem

#: One policy for every env, or ``{env_name: policy}`` (``"*"``: every env not named).
Policies = Policy | Mapping[str, Policy]
#: The key of a :data:`Policies` mapping that stands for every env not named.
EVERY_OTHER_ENV = "*"


def default_policy() -> Policy:
    """The built-in model: solves the arithmetic example, right 15% rising linearly to 95% over training."""
    return ArithmeticPolicy(linear(0.15, 0.95))


class PolicyPerEnv:
    """Answers each call with its rollout's env's policy, else the ``"*"`` one, else the built-in."""

    def __init__(self, policies: Mapping[str, Policy]) -> None:
        self.policies = {env: p for env, p in policies.items() if env != EVERY_OTHER_ENV}
        self.default = policies[EVERY_OTHER_ENV] if EVERY_OTHER_ENV in policies else default_policy()
        self._misses: dict[str, str | None] = {}  # an env with no policy: the named env it is near

    def __call__(self, request: ChatRequest, /) -> PolicyReply:
        env = request.rollout.env_name or ""
        policy = self.policies.get(env)
        if policy is not None:
            return policy(request)
        if env not in self._misses:
            self._misses[env] = closest(env, self.policies) if env else None
        near = self._misses[env]
        if near is not None:  # a misspelt env name would silently get another policy
            problem = f"is given for env {near!r}, but this rollout's env is {env!r}"
            hint = f"did you mean {env!r}? name the env as the task app's rollouts do ({env}=SPEC)"
            raise SynthUsageError([ConfigProblem(f"policy[{near!r}]", problem, hint)], subject="policy")
        return self.default(request)

    def __repr__(self) -> str:
        named = ", ".join(f"{env!r}: {p!r}" for env, p in self.policies.items())
        return f"PolicyPerEnv({{{named}}}, other envs: {self.default!r})"


def policies_problem(policies: object) -> str | None:
    """Why *policies* is neither a policy nor ``{env_name: policy}``, or None."""
    if not isinstance(policies, Mapping):
        return policy_problem(policies)
    for env, policy in policies.items():
        if not isinstance(env, str) or not env.strip():
            return f"has the key {env!r}; its keys are env names (non-empty strings)"
        problem = policy_problem(policy)
        if problem is not None:
            return f"[{env!r}]: {problem}"
    return None


def _one_policy(policies: Policies | None) -> Policy:
    if policies is None:
        return default_policy()
    return PolicyPerEnv(policies) if isinstance(policies, Mapping) else policies


class StandInModel:
    """One fake's stub model server: its policy (the constructor's, else :func:`default_policy`) and URL."""

    def __init__(self, policy: Policies | None = None, replies: Sequence[PolicyReply] | None = None) -> None:
        self._policy = policy
        own = None if policy is None and replies is not None else _one_policy(policy)
        self.inference = StubInference(policy=own, replies=replies)
        self.inference.require_correlation_id = True
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None

    def use_policy(self, policy: Policies | None) -> None:
        """Answer model calls with *policy* from now on; None restores this fake's own (a fresh default)."""
        if policy is None and self._policy is not None:
            policy = self._policy
        elif policy is None and self.inference.replies is not None:
            policy = StubInference(replies=self.inference.replies).policy
        self.inference.policy = _one_policy(policy)

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
