"""Scripted job lifecycles: what a fake job does, and when.

A :class:`Scenario` is a small, declarative script (the state-manager idea from moto): the
outcome, how many training steps, how the job moves through time, and where its rewards come
from. The fake never runs a timer; it *derives* the job's stage from the clock (or the poll count)
whenever someone looks, so a two-hour scenario costs nothing until it is observed.

Every job walks the same stage list: ``start`` (slot 0), ``step 1 .. steps`` (slots 1..steps),
then ``end`` (slot ``steps + 1``). A failure or cancellation with ``fail_at_step=k`` ends the job
in slot ``k`` instead of running step ``k``. How a slot maps to time depends on the mode:

* ``duration`` (default): slots are spread evenly over ``duration`` virtual seconds that begin
  after ``queue_time``; the job ends exactly ``queue_time + duration`` seconds after submission.
* ``polls=N``: slots are spread evenly over status polls; the job is terminal on its N-th status
  poll. With ``N = steps + 2`` every poll advances exactly one stage.
* ``immediate=True``: the first observation after submission runs the whole job.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, keywords_checked
from pytest_synth_rl.fake.checks import MAX_ERROR_CHARS, bool_problem, error_text_problem
from pytest_synth_rl.fake.model.rewards import MAX_REWARD, REWARD_RANGE, reward_in_range

__all__ = [
    "MAX_DURATION",
    "MAX_ERROR_CHARS",
    "MAX_LABELS",
    "MAX_POLLS",
    "MAX_REWARD",
    "MAX_STEPS",
    "OUTCOMES",
    "REWARD_RANGE",
    "RewardCurve",
    "Scenario",
    "Stage",
    "default_reward_curve",
    "reward_in_range",
]

Outcome = Literal["succeeded", "failed", "cancelled", "error"]
#: ``error`` ends the job in the terminal failure status ``error`` (contract §10.4), like ``failed``.
OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "cancelled", "error")

#: A reward source: a function of the (1-based) step, a list indexed by ``step - 1``, or the
#: literal ``"rollouts"`` (rewards come from real ``/rollout`` calls to the task app).
RewardCurve = Callable[[int], float] | Sequence[float] | Literal["rollouts"]

#: Default virtual length of a job. Short on purpose: a client polling at the SDK's 10 s needs 7
#: polls, which keeps a suite of hundreds of offline job tests fast (virtual time makes the length
#: cosmetic otherwise). Ask for ``duration=7200`` to model a real two-hour run.
DEFAULT_DURATION = 60.0

# Limits: a scenario is a test's script, and a served fake takes scenarios from any client, so
# every size is bounded. A job's events, metric points and rollouts grow with its steps; these
# keep one job under a few megabytes and one admin request well under a second of work.
#: Most training steps one job runs.
MAX_STEPS = 10_000
#: Longest ``duration`` and ``queue_time``, in (virtual) seconds: 30 days.
MAX_DURATION = 30 * 86400.0
#: Most status polls ``polls=N`` can spread a job over.
MAX_POLLS = 1_000_000
#: Most labels, and the longest label key or value (characters).
MAX_LABELS = 64
MAX_LABEL_CHARS = 256


def default_reward_curve(step: int, steps: int) -> float:
    """A smooth, rising, deterministic curve in (0.2, 0.9): what a healthy run looks like."""
    return round(0.9 - 0.7 * math.exp(-3.0 * step / max(1, steps)), 6)


def _problem(key: str, message: str, hint: str) -> ConfigProblem:
    return ConfigProblem(key=f"Scenario.{key}", message=message, hint=hint)


@dataclass(frozen=True)
class Stage:
    """The next thing a job will do: ``kind`` is ``start``, ``step`` or ``end``."""

    kind: Literal["start", "step", "end"]
    slot: int
    step: int = 0
    outcome: str = "succeeded"


@dataclass(frozen=True)
class Scenario:
    """How one fake job behaves. Build it with :meth:`FakeSynthBackend.scenario` or directly.

    Invalid combinations raise :class:`~pytest_synth_rl.errors.SynthUsageError` naming the field.
    """

    outcome: Outcome = "succeeded"
    steps: int = 10
    duration: float | None = None
    polls: int | None = None
    immediate: bool = False
    queue_time: float = 0.0
    fail_at_step: int | None = None
    error: str | None = None
    reward_curve: RewardCurve | None = None
    eval_every: int | None = None
    #: Free-form labels, shown in the admin job listing; never interpreted.
    labels: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Scenario:
        """``Scenario(**fields)``, but an unknown field is a :class:`SynthUsageError` with a
        "did you mean", not a ``TypeError``."""
        known = [f.name for f in dataclasses.fields(cls) if f.init]
        problems = []
        for name in fields:
            if name not in known:
                close = difflib.get_close_matches(str(name), known, n=1)
                guess = f"did you mean {close[0]}=? " if close else ""
                problems.append(
                    _problem(str(name), f"unknown field {name}=", f"{guess}fields: {', '.join(known)}")
                )
        if problems:
            raise SynthUsageError(problems, hint="see the Scenario docstring in pytest_synth_rl.fake")
        return cls(**fields)

    def __post_init__(self) -> None:
        problems: list[ConfigProblem] = []
        if self.outcome not in OUTCOMES:
            close = difflib.get_close_matches(str(self.outcome), OUTCOMES, n=1)
            guess = f"did you mean outcome={close[0]!r}? " if close else ""
            problems.append(
                _problem(
                    "outcome", f"unknown outcome {self.outcome!r}", f"{guess}use one of {', '.join(OUTCOMES)}"
                )
            )
        if (
            isinstance(self.steps, bool)
            or not isinstance(self.steps, int)
            or not 1 <= self.steps <= MAX_STEPS
        ):
            problems.append(
                _problem(
                    "steps", f"must be an int from 1 to {MAX_STEPS}, got {self.steps!r:.40}", "e.g. steps=10"
                )
            )
        modes = [name for name, on in self._mode_flags().items() if on]
        if len(modes) > 1:
            problems.append(
                _problem(
                    "duration",
                    f"choose one timing mode, got {' and '.join(modes)}",
                    "pass only one of duration=, polls=, immediate=True",
                )
            )
        if self.duration is not None and not (
            isinstance(self.duration, (int, float))
            and not isinstance(self.duration, bool)
            and 0 < self.duration <= MAX_DURATION
        ):
            problems.append(
                _problem(
                    "duration",
                    f"must be a finite number of seconds above 0, at most {MAX_DURATION:.0f} (30 days), "
                    f"got {self.duration!r:.40}",
                    "",
                )
            )
        if self.polls is not None and (
            isinstance(self.polls, bool)
            or not isinstance(self.polls, int)
            or not 1 <= self.polls <= MAX_POLLS
        ):
            problems.append(
                _problem(
                    "polls",
                    f"must be an int from 1 to {MAX_POLLS}, got {self.polls!r:.40}",
                    "polls=N ends the job on poll N",
                )
            )
        if (
            isinstance(self.queue_time, bool)
            or not isinstance(self.queue_time, (int, float))
            or not 0 <= self.queue_time <= MAX_DURATION
        ):
            problems.append(
                _problem(
                    "queue_time",
                    f"must be a finite number of seconds from 0 to {MAX_DURATION:.0f} (30 days), "
                    f"got {self.queue_time!r:.40}",
                    "",
                )
            )
        flag = bool_problem(self.immediate, "Scenario.immediate", "immediate=True")
        error = None if self.error is None else error_text_problem(self.error, "Scenario.error")
        problems.extend(p for p in (flag, error) if p is not None)
        problems.extend(self._check_labels())
        if self.fail_at_step is not None:
            if self.outcome == "succeeded":
                problems.append(
                    _problem(
                        "fail_at_step",
                        "only applies when outcome is 'failed', 'error' or 'cancelled'",
                        "add outcome='failed'",
                    )
                )
            steps_ok = isinstance(self.steps, int) and not isinstance(self.steps, bool)
            if (
                isinstance(self.fail_at_step, bool)
                or not isinstance(self.fail_at_step, int)
                or self.fail_at_step < 1
                or (steps_ok and self.fail_at_step > self.steps)
            ):
                problems.append(
                    _problem(
                        "fail_at_step",
                        f"must be an int in 1..steps ({self.steps}), got {self.fail_at_step!r}",
                        "",
                    )
                )
        if self.eval_every is not None and (
            isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) or self.eval_every < 1
        ):
            problems.append(_problem("eval_every", f"must be an int >= 1, got {self.eval_every!r:.40}", ""))
        problems.extend(self._check_curve())
        if problems:
            raise SynthUsageError(problems, hint="see the Scenario docstring in pytest_synth_rl.fake")

    def _mode_flags(self) -> dict[str, bool]:
        return {
            "duration=": self.duration is not None,
            "polls=": self.polls is not None,
            "immediate=True": self.immediate is True,
        }

    def _check_labels(self) -> list[ConfigProblem]:
        labels = self.labels
        if not isinstance(labels, dict):
            return [_problem("labels", f"must be a dict of strings, got {type(labels).__name__}", "")]
        if len(labels) > MAX_LABELS or any(
            not isinstance(k, str)
            or not isinstance(v, str)
            or len(k) > MAX_LABEL_CHARS
            or len(v) > MAX_LABEL_CHARS
            for k, v in labels.items()
        ):
            return [
                _problem(
                    "labels",
                    f"must be at most {MAX_LABELS} string keys and values of at most {MAX_LABEL_CHARS} "
                    "characters each",
                    "",
                )
            ]
        return []

    def _check_curve(self) -> list[ConfigProblem]:
        curve = self.reward_curve
        if curve is None or callable(curve):
            return []
        if isinstance(curve, str):
            if curve != "rollouts":
                return [
                    _problem(
                        "reward_curve", f"unknown curve {curve!r}", "use 'rollouts', a list or a callable"
                    )
                ]
            return []
        if isinstance(curve, Sequence) and not isinstance(curve, (bytes, bytearray)):
            if len(curve) > MAX_STEPS:
                return [
                    _problem(
                        "reward_curve",
                        f"has {len(curve)} values; at most {MAX_STEPS} (one per step) are accepted",
                        "give one reward per step",
                    )
                ]
            bad = next((i for i, v in enumerate(curve) if not reward_in_range(v)), None)
            if bad is not None:
                return [
                    _problem(
                        "reward_curve",
                        f"entry [{bad}] is {curve[bad]!r:.40}; expected {REWARD_RANGE}",
                        "give one number per step, e.g. [0.1, 0.4, 0.8]",
                    )
                ]
            if isinstance(self.steps, int) and len(curve) < self.steps:
                return [
                    _problem(
                        "reward_curve",
                        f"has {len(curve)} values but the scenario runs {self.steps} steps (its "
                        "steps=, 10 by default; the fake does not read the step count from the TOML)",
                        f"pass steps={len(curve)}, or give one reward per step",
                    )
                ]
            return []
        return [_problem("reward_curve", f"unsupported type {type(curve).__name__}", "")]

    # -- derived schedule -------------------------------------------------------------------
    @property
    def mode(self) -> Literal["duration", "polls", "immediate"]:
        if self.immediate:
            return "immediate"
        if self.polls is not None:
            return "polls"
        return "duration"

    @property
    def total_duration(self) -> float:
        return float(self.duration if self.duration is not None else DEFAULT_DURATION)

    @property
    def uses_rollouts(self) -> bool | None:
        """True if forced to real rollouts, False if scripted rewards, None if the fake decides."""
        if self.reward_curve is None:
            return None
        return self.reward_curve == "rollouts"

    def slot_position(self, slot: int) -> float:
        """Where slot *slot* lies on this scenario's axis (seconds since submit, or poll number)."""
        last = self.steps + 1
        if self.mode == "immediate":
            return 0.0
        if self.mode == "polls":
            assert self.polls is not None
            return 1.0 + slot * (self.polls - 1) / last
        return float(self.queue_time) + slot * self.total_duration / last

    def next_stage(self, started: bool, steps_done: int, outcome: str | None = None) -> Stage:
        """The stage after *steps_done* completed steps (``outcome`` overrides the scripted one)."""
        final = outcome or self.outcome
        if not started:
            return Stage("start", 0, outcome=final)
        if (
            final != "succeeded"
            and outcome is None
            and self.fail_at_step is not None
            and steps_done + 1 >= self.fail_at_step
        ):
            return Stage("end", self.fail_at_step, step=steps_done, outcome=final)
        if steps_done < self.steps:
            return Stage("step", steps_done + 1, step=steps_done + 1, outcome=final)
        return Stage("end", self.steps + 1, step=steps_done, outcome=final)

    def scripted_reward(self, step: int) -> float:
        """Reward for *step* when it does not come from rollouts. A callable's value is held to
        the bounds a list's entries were checked against at construction: out of range, it fails
        the job (the lifecycle says why) instead of overflowing the job's means."""
        curve = self.reward_curve
        if callable(curve):
            value = curve(step)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"reward_curve({step}) returned {value!r}; expected a float")
            if not reward_in_range(value):
                raise ValueError(f"reward_curve({step}) returned {value!r:.40}; expected {REWARD_RANGE}")
            return float(value)
        if isinstance(curve, Sequence) and not isinstance(curve, str):
            return float(curve[step - 1])
        return default_reward_curve(step, self.steps)

    def describe(self) -> dict[str, object]:
        """A JSON-friendly summary, for the admin API and reprs."""
        curve = self.reward_curve
        return {
            "outcome": self.outcome,
            "steps": self.steps,
            "mode": self.mode,
            "duration": self.total_duration if self.mode == "duration" else None,
            "polls": self.polls,
            "queue_time": self.queue_time,
            "fail_at_step": self.fail_at_step,
            "error": self.error,
            "reward_curve": (
                "callable"
                if callable(curve)
                else list(curve)
                if isinstance(curve, Sequence) and not isinstance(curve, str)
                else curve
            ),
            "eval_every": self.eval_every,
            "labels": dict(self.labels),
        }


# ``Scenario(outcom="failed")``: a usage error with a "did you mean", like ``Scenario.from_fields``.
Scenario.__init__ = keywords_checked(Scenario.__init__)  # type: ignore[method-assign]
