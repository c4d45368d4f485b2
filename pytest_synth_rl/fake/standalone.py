"""``python -m pytest_synth_rl serve`` as a library: serve a fake backend until stopped, with
policies loaded from ``[ENV=]file.py:NAME`` specs."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, TaskAppError
from pytest_synth_rl.fake.backend import FakeSynthBackend
from pytest_synth_rl.fake.lifecycle import Pacing
from pytest_synth_rl.fake.model.policy import Policy, policy_problem
from pytest_synth_rl.fake.stand_in import EVERY_OTHER_ENV, Policies
from pytest_synth_rl.taskapp.loading import is_factory, load_attribute

_SPEC_HINT = "a policy is 'path/to/file.py:NAME' or 'package.module:NAME', optionally after 'ENV='"


def load_policy(spec: str) -> Policy:
    """The policy (or factory of no arguments' policy) ``"file.py:NAME"`` or ``"module:NAME"`` names."""
    try:
        found = load_attribute(
            spec, kind="policy", fits=lambda obj: policy_problem(obj) is None, found="policies"
        )
    except TaskAppError as exc:
        raise SynthUsageError([ConfigProblem(spec, exc.message, exc.hint)], subject="policy") from None
    policy, made = found, ""
    if policy_problem(found) is not None and is_factory(found):
        made = " (returned by the factory)"
        try:
            policy = found()
        except Exception as exc:
            raised = f"the factory raised {type(exc).__name__}: {exc}"
            raise SynthUsageError([ConfigProblem(spec, raised, _SPEC_HINT)], subject="policy") from exc
    problem = policy_problem(policy)
    if problem is not None:
        hint = "NAME must be a policy, policy(request) -> reply, or a function of no arguments returning one"
        raise SynthUsageError([ConfigProblem(spec, f"{problem}{made}", hint)], subject="policy")
    return policy  # type: ignore[no-any-return]


def policies_from_specs(specs: Sequence[str]) -> dict[str, Policy]:
    """``["unscramble=policy.py:policy", "mod:default"]`` -> ``{"unscramble": ..., "*": ...}``."""
    policies: dict[str, Policy] = {}
    for text in specs:
        env, equals, spec = text.partition("=") if "=" in text.split(":", 1)[0] else ("", "", text)
        env = env.strip() if equals else EVERY_OTHER_ENV
        if not env or env in policies:
            problem = "has no env name before '='" if not env else f"gives env {env!r} a second policy"
            if env == EVERY_OTHER_ENV:
                problem = "is a second default policy (a policy without 'ENV=')"
            raise SynthUsageError([ConfigProblem(text, problem, _SPEC_HINT)], subject="policy")
        policies[env] = load_policy(spec.strip())
    return policies


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set *stop* (from the main thread; an ignored signal stays ignored)."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def serve_until_stopped(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    policy: Policies | None = None,
    pacing: Pacing | None = None,
    speed: float | None = None,
    task_app_api_key: str | None = None,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve a :class:`FakeSynthBackend` until *stop* is set (or SIGINT/SIGTERM), printing
    ``SYNTH_BACKEND_URL=...``, ``SYNTH_API_KEY=...`` and a readiness line to *out*."""
    out = sys.stdout if out is None else out
    stop = threading.Event() if stop is None else stop
    key = api_key or os.environ.get("SYNTH_API_KEY") or f"sk_fake_{secrets.token_hex(16)}"
    fake = FakeSynthBackend(api_key=key, policy=policy, task_app_api_key=task_app_api_key)
    try:
        with _stopped_by_signals(stop), fake.serve(host=host, port=port, pacing=pacing, speed=speed) as url:
            print(f"SYNTH_BACKEND_URL={url}", f"SYNTH_API_KEY={key}", sep="\n", file=out)
            print(
                f"synth-rl: fake backend ready at {url}, answering with {fake.inference.policy!r}; "
                "Ctrl-C or SIGTERM stops it",
                file=out,
                flush=True,
            )
            stop.wait()
    finally:
        fake.close()
