"""The ``synth_*`` markers, parsed once per test into a validated :class:`SynthTestSpec`; any
mistake is one ``MarkerError`` naming the marker, the test and the fix. Arguments merge module <
class < function, the closest winning (``overrides`` key by key).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from pytest_synth_rl.errors import MarkerError, SynthUsageError, closest, did_you_mean, seconds_problem
from pytest_synth_rl.secrets.masking import Secret, key_problem, secret_or_none

if TYPE_CHECKING:
    import pytest

    from pytest_synth_rl.fake.scenario import Scenario

TaskAppScope = Literal["session", "test"]

MARKERS = {
    "synth_rl": "(config=None, overrides=None, timeout=None, poll_interval=None, policy=None, "
    "rollout_timeout=None): the RL TOML config of this test (path relative to the test file), "
    "dotted-key overrides, per-test settings, the offline model policy and the seconds a rollout may take.",
    "synth_task_app": "(target_or_path, *, api_key=None, scope='session', startup_timeout=10): the "
    "task app to serve in-process ('pkg.module:attr' or a .py path); scope='test' starts a fresh one.",
    "synth_scenario": "(**scenario): the offline lifecycle for jobs of this test "
    "(outcome=, steps=, duration=, polls=, fail_at_step=, error=, reward_curve=...); ignored online.",
    "synth_online": ": needs a real backend (--synth-backend=URL); skipped offline.",
    "synth_offline": ": only meaningful against the offline fake; skipped online.",
}
_RL_USAGE = (
    "synth_rl(config='rl.toml', overrides={...}, timeout=..., poll_interval=..., policy=..., "
    "rollout_timeout=...)"
)
#: How to fix a policy that ``policy_problem`` refuses, given by marker or by the fixture.
POLICY_HINT = (
    "a policy is policy(request) -> reply, a callable taking the chat request, e.g. "
    "LearningPolicy(solve=...), ScriptedPolicy('42') or ReplayPolicy('calls.jsonl')"
)
_TASK_APP_USAGE = (
    "synth_task_app('pkg.module:app', 'app.py' or 'app.py:attr', api_key=None, scope='session'|'test', "
    "startup_timeout=10)"
)


def is_config_path(value: object) -> bool:
    """Whether *value* can name an RL TOML (``None``: the test's default), in a marker or a call."""
    return value is None or isinstance(value, os.PathLike) or (isinstance(value, str) and value.strip() != "")


@functools.lru_cache(maxsize=256)
def marker_guess(name: str) -> str | None:
    """The synth marker *name* misspells (``""``: a ``synth_`` name that is none), else None."""
    if name in MARKERS:
        return None
    near = closest(name, MARKERS)
    return "" if near is None and name.startswith("synth_") else near


@dataclass(frozen=True)
class RLMarker:
    config: str | os.PathLike[str] | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    poll_interval: float | None = None
    policy: object | None = None
    rollout_timeout: float | None = None

    def settings_overrides(self) -> dict[str, float]:
        given = {"timeout": self.timeout, "poll_interval": self.poll_interval}
        return {name: value for name, value in given.items() if value is not None}


@dataclass(frozen=True)
class TaskAppMarker:
    source: str
    api_key: Secret | None = None
    scope: TaskAppScope | None = None
    startup_timeout: float | None = None


@dataclass(frozen=True)
class SynthTestSpec:
    rl: RLMarker = field(default_factory=RLMarker)
    task_app: TaskAppMarker | None = None
    scenario: Scenario | None = None
    online: bool = False
    offline: bool = False


class _Reader:
    def __init__(self, node: pytest.Item, name: str, allowed: Iterable[str], usage: str) -> None:
        self.name, self.test_id, self.usage = name, node.nodeid, f"write it as {usage}"
        self.levels = list(node.iter_markers(name))[::-1]  # farthest first
        self.args: tuple[Any, ...] = next((m.args for m in reversed(self.levels) if m.args), ())
        self.kwargs: dict[str, Any] = {k: v for marker in self.levels for k, v in marker.kwargs.items()}
        known = list(allowed)
        for key in (key for key in self.kwargs if key not in known):
            takes = ", ".join(k + "=" for k in known) or "no arguments"
            hint = f"{did_you_mean(key, known, '{}=')} {name} takes {takes}".lstrip()
            self.fail(f"unknown argument {key}=", hint, key)

    def fail(self, problem: str, hint: str, argument: str = "") -> NoReturn:
        __tracebackhide__ = True
        raise MarkerError(self.name, self.test_id, problem, hint=hint, argument=argument)

    def no_positional(self, allowed: int = 0) -> None:
        __tracebackhide__ = True
        extra = self.args[allowed:]
        if extra:
            plural = "s" if len(extra) > 1 else ""
            self.fail(f"unexpected positional argument{plural} {', '.join(map(repr, extra))}", self.usage)

    def number(self, key: str) -> float | None:
        __tracebackhide__ = True
        value = self.kwargs.get(key)
        if value is None:
            return None
        if (problem := seconds_problem(value)) is not None:
            self.fail(f"{key} {problem}", f"e.g. {key}=30", key)
        return float(value)


def _rl(node: pytest.Item) -> RLMarker:
    __tracebackhide__ = True
    reader = _Reader(node, "synth_rl", [f.name for f in dataclasses.fields(RLMarker)], _RL_USAGE)
    reader.no_positional()
    config = reader.kwargs.get("config")
    if not is_config_path(config):
        hint = "pass the RL TOML path as a string, relative to the test file, or leave config out to use "
        wrong = "empty" if isinstance(config, str) else "not a path"
        reader.fail(f"config={config!r} is {wrong}", hint + "the ini option synth_rl_config", "config")
    overrides: dict[str, Any] = {}
    for level in (marker.kwargs.get("overrides") for marker in reader.levels):
        if level is not None and (
            not isinstance(level, Mapping) or not all(isinstance(k, str) for k in level)
        ):
            example = "e.g. overrides={'training.batch_size': 2}"
            reader.fail(f"overrides={level!r} is not a mapping of dotted keys", example, "overrides")
        overrides.update(level or {})
    policy = reader.kwargs.get("policy")
    if policy is not None:
        from pytest_synth_rl.fake.model.policy import policy_problem

        if (problem := policy_problem(policy)) is not None:
            reader.fail(f"policy: {problem}", POLICY_HINT, "policy")
    return RLMarker(
        config=config,
        overrides=overrides,
        timeout=reader.number("timeout"),
        poll_interval=reader.number("poll_interval"),
        rollout_timeout=reader.number("rollout_timeout"),
        policy=policy,
    )


def _task_app(node: pytest.Item) -> TaskAppMarker | None:
    __tracebackhide__ = True
    reader = _Reader(node, "synth_task_app", ("api_key", "scope", "startup_timeout"), _TASK_APP_USAGE)
    if not reader.levels:
        return None
    reader.no_positional(1)
    if not reader.args or not isinstance(reader.args[0], (str, os.PathLike)) or not str(reader.args[0]):
        got = repr(reader.args[0]) if reader.args else "nothing"
        expected = "expected the task app ('pkg.module:app' or a .py path)"
        reader.fail(f"{expected}, got {got}", f"write {_TASK_APP_USAGE}")
    api_key = reader.kwargs.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        reader.fail(f"api_key must be a string, got {type(api_key).__name__}", "api_key='...'", "api_key")
    if isinstance(api_key, str) and not api_key.strip():
        hint = "give the key the app should enforce, or leave api_key out to use ENVIRONMENT_API_KEY"
        reader.fail("api_key is empty", f"{hint} (or a key generated for the run)", "api_key")
    if isinstance(api_key, str) and (problem := key_problem(api_key)) is not None:
        reader.fail(f"api_key {problem}", "give the key as printable ASCII text", "api_key")
    scope = reader.kwargs.get("scope")
    if scope is not None and scope not in ("session", "test"):
        guess = did_you_mean(str(scope), ("session", "test"), "scope={!r}")
        hint = f"{guess} scope is 'session' (shared, the default) or 'test' (a fresh app per test)".lstrip()
        reader.fail(f"scope={scope!r} is not a task app scope", hint, "scope")
    return TaskAppMarker(
        source=str(reader.args[0]),
        api_key=secret_or_none(api_key),
        scope=scope,
        startup_timeout=reader.number("startup_timeout"),
    )


def _scenario(node: pytest.Item) -> Scenario | None:
    __tracebackhide__ = True
    if next(iter(node.iter_markers("synth_scenario")), None) is None:
        return None
    from pytest_synth_rl.fake.scenario import Scenario

    known = [f.name for f in dataclasses.fields(Scenario) if f.init]
    reader = _Reader(node, "synth_scenario", known, "synth_scenario(outcome='failed', steps=4, ...)")
    reader.no_positional()
    if not reader.kwargs:
        return None
    try:
        return Scenario(**reader.kwargs)
    except SynthUsageError as exc:
        wrong = exc
    reader.fail(
        "; ".join(f"{p.key.removeprefix('Scenario.')}: {p.message}" for p in wrong.problems),
        "; ".join(p.hint for p in wrong.problems if p.hint)
        or "see the Scenario docstring in pytest_synth_rl.fake",
        wrong.keys[0].removeprefix("Scenario.") if wrong.keys else "",
    )


def _flag(node: pytest.Item, name: str) -> bool:
    __tracebackhide__ = True
    reader = _Reader(node, name, (), f"@pytest.mark.{name} (no arguments)")
    reader.no_positional()
    return bool(reader.levels)


def parse_test_spec(node: pytest.Item) -> SynthTestSpec:
    """Read and validate every ``synth_*`` marker on *node*; raises :class:`MarkerError`."""
    __tracebackhide__ = True
    for marker in node.iter_markers():
        guess = marker_guess(marker.name)
        if guess is not None:
            known = ", ".join(f"@pytest.mark.{m}" for m in MARKERS)
            hint = f"{did_you_mean(marker.name, MARKERS, '@pytest.mark.{}')} the markers are {known}".lstrip()
            raise MarkerError(marker.name, node.nodeid, "is not a pytest-synth-rl marker", hint=hint)
    online, offline = _flag(node, "synth_online"), _flag(node, "synth_offline")
    if online and offline:
        raise MarkerError(
            "synth_online",
            node.nodeid,
            "and @pytest.mark.synth_offline are both on this test, so it is skipped in either mode",
            hint="keep the one for the mode the test needs (markers on its module or class count too)",
        )
    return SynthTestSpec(
        rl=_rl(node),
        task_app=_task_app(node),
        scenario=_scenario(node),
        online=online,
        offline=offline,
    )
