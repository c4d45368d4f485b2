"""Scripted job lifecycles: a job walks ``start`` (slot 0), ``step 1 .. steps``, then ``end`` (slot
``steps + 1``; ``fail_at_step=k`` ends in slot k). Slots map to time by mode: ``duration`` (spread over
``duration`` seconds after ``queue_time``), ``polls=N`` (terminal on the N-th status poll) or
``immediate=True`` (the first look runs the whole job)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeGuard

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, closest, keywords_checked
from pytest_synth_rl.fake.model.rewards import REWARD_RANGE, reward_in_range

#: Longest scripted ``error`` message (characters).
MAX_ERROR_CHARS = 10_000


def written(value: object) -> str:
    """What a caller wrote, short and with its type: ``str '500'``, ``float 500.5``."""
    return f"{type(value).__name__} {value!r:.40}"


def bool_problem(value: object, key: str, example: str) -> ConfigProblem | None:
    """The problem with *value* as a flag named *key* (only ``True`` and ``False`` are flags), or None."""
    if isinstance(value, bool):
        return None
    return ConfigProblem(key, f"must be true or false, got {written(value)}", f"e.g. {example}")


def error_text_problem(value: object, key: str) -> ConfigProblem | None:
    """The problem with *value* as a job's error message: a string of at most :data:`MAX_ERROR_CHARS`."""
    if isinstance(value, str) and len(value) <= MAX_ERROR_CHARS:
        return None
    got = f"{len(value)} characters" if isinstance(value, str) else written(value)
    message = f"must be a string of at most {MAX_ERROR_CHARS} characters, got {got}"
    return ConfigProblem(key, message, "pass a short error message, e.g. 'CUDA out of memory'")


Outcome = Literal["succeeded", "failed", "cancelled", "error"]
#: ``error`` ends the job in the terminal failure status ``error`` (contract §10.4).
OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "cancelled", "error")

#: A function of the (1-based) step, a list indexed by ``step - 1``, or ``"rollouts"`` (real rollouts).
RewardCurve = Callable[[int], float] | Sequence[float] | Literal["rollouts"]

#: Default virtual length of a job: 7 polls at the SDK's 10 s.
DEFAULT_DURATION = 60.0
MAX_STEPS = 10_000
#: Longest ``duration`` and ``queue_time``: 30 days.
MAX_DURATION = 30 * 86400.0
MAX_POLLS = 1_000_000
MAX_LABELS = 64
MAX_LABEL_CHARS = 256
_HINT = "see the Scenario docstring in pytest_synth_rl.fake"


def default_reward_curve(step: int, steps: int) -> float:
    """A smooth, rising, deterministic curve in (0.2, 0.9): what a healthy run looks like."""
    return round(0.9 - 0.7 * math.exp(-3.0 * step / max(1, steps)), 6)


def _problem(key: str, message: str, hint: str = "") -> ConfigProblem:
    return ConfigProblem(key=f"Scenario.{key}", message=message, hint=hint)


def int_in(value: object, low: int, high: float) -> TypeGuard[int]:
    """A real int (not a bool, not a float such as ``500.0``) from *low* to *high*."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def number_in(value: object, low: float, high: float) -> bool:
    """A real number (not a bool) from *low* to *high*; NaN and infinities are neither."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


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

    def __post_init__(self) -> None:
        problems: list[ConfigProblem] = []

        def bad(key: str, message: str, hint: str = "") -> None:
            problems.append(_problem(key, message, hint))

        if self.outcome not in OUTCOMES:
            close = closest(str(self.outcome), OUTCOMES)
            guess = f"did you mean outcome={close!r}? " if close else ""
            bad("outcome", f"unknown outcome {self.outcome!r}", f"{guess}use one of {', '.join(OUTCOMES)}")
        if not int_in(self.steps, 1, MAX_STEPS):
            bad("steps", f"must be an int from 1 to {MAX_STEPS}, got {self.steps!r:.40}", "e.g. steps=10")
        flags = {"duration=": self.duration is not None, "polls=": self.polls is not None}
        modes = [name for name, on in {**flags, "immediate=True": self.immediate is True}.items() if on]
        if len(modes) > 1:
            message = f"choose one timing mode, got {' and '.join(modes)}"
            bad("duration", message, "pass only one of duration=, polls=, immediate=True")
        days = f"{MAX_DURATION:.0f} (30 days), got"
        duration = self.duration
        if duration is not None and not (number_in(duration, 0, MAX_DURATION) and duration > 0):
            bad("duration", f"must be a finite number of seconds above 0, at most {days} {duration!r:.40}")
        if self.polls is not None and not int_in(self.polls, 1, MAX_POLLS):
            message = f"must be an int from 1 to {MAX_POLLS}, got {self.polls!r:.40}"
            bad("polls", message, "polls=N ends the job on poll N")
        if not number_in(self.queue_time, 0, MAX_DURATION):
            bad("queue_time", f"must be a finite number of seconds from 0 to {days} {self.queue_time!r:.40}")
        flag = bool_problem(self.immediate, "Scenario.immediate", "immediate=True")
        error = None if self.error is None else error_text_problem(self.error, "Scenario.error")
        problems.extend(p for p in (flag, error) if p is not None)
        problems.extend(self._check_labels())
        if self.fail_at_step is not None:
            if self.outcome == "succeeded":
                message = "only applies when outcome is 'failed', 'error' or 'cancelled'"
                bad("fail_at_step", message, "add outcome='failed'")
            real = isinstance(self.steps, int) and not isinstance(self.steps, bool)
            if not int_in(self.fail_at_step, 1, self.steps if real else math.inf):
                bad("fail_at_step", f"must be an int in 1..steps ({self.steps}), got {self.fail_at_step!r}")
        if self.eval_every is not None and not int_in(self.eval_every, 1, math.inf):
            bad("eval_every", f"must be an int >= 1, got {self.eval_every!r:.40}")
        problems.extend(self._check_curve())
        if problems:
            raise SynthUsageError(problems, hint=_HINT)

    def _check_labels(self) -> list[ConfigProblem]:
        labels = self.labels
        if not isinstance(labels, dict):
            return [_problem("labels", f"must be a dict of strings, got {type(labels).__name__}")]
        texts = [text for item in labels.items() for text in item]
        if len(labels) > MAX_LABELS or any(not isinstance(t, str) or len(t) > MAX_LABEL_CHARS for t in texts):
            message = f"must be at most {MAX_LABELS} string keys and values of at most {MAX_LABEL_CHARS} "
            return [_problem("labels", message + "characters each")]
        return []

    def _check_curve(self) -> list[ConfigProblem]:
        curve = self.reward_curve
        if curve is None or callable(curve) or curve == "rollouts":
            return []
        if isinstance(curve, str):
            hint = "use 'rollouts', a list or a callable"
            return [_problem("reward_curve", f"unknown curve {curve!r}", hint)]
        if not isinstance(curve, Sequence) or isinstance(curve, (bytes, bytearray)):
            return [_problem("reward_curve", f"unsupported type {type(curve).__name__}")]
        if len(curve) > MAX_STEPS:
            message = f"has {len(curve)} values; at most {MAX_STEPS} (one per step) are accepted"
            return [_problem("reward_curve", message, "give one reward per step")]
        bad = next((i for i, v in enumerate(curve) if not reward_in_range(v)), None)
        if bad is not None:
            message = f"entry [{bad}] is {curve[bad]!r:.40}; expected {REWARD_RANGE}"
            return [_problem("reward_curve", message, "give one number per step, e.g. [0.1, 0.4, 0.8]")]
        if isinstance(self.steps, int) and len(curve) < self.steps:
            message = (
                f"has {len(curve)} values but the scenario runs {self.steps} steps (its "
                "steps=, 10 by default; the fake does not read the step count from the TOML)"
            )
            hint = f"pass steps={len(curve)}, or give one reward per step"
            return [_problem("reward_curve", message, hint)]
        return []

    @property
    def mode(self) -> Literal["duration", "polls", "immediate"]:
        if self.immediate:
            return "immediate"
        return "polls" if self.polls is not None else "duration"

    @property
    def total_duration(self) -> float:
        return float(self.duration if self.duration is not None else DEFAULT_DURATION)

    @property
    def uses_rollouts(self) -> bool | None:
        """True if forced to real rollouts, False if scripted rewards, None if the fake decides."""
        return None if self.reward_curve is None else self.reward_curve == "rollouts"

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
        failing = final != "succeeded" and outcome is None and self.fail_at_step is not None
        if failing and steps_done + 1 >= self.fail_at_step:  # type: ignore[operator]
            return Stage("end", self.fail_at_step, step=steps_done, outcome=final)  # type: ignore[arg-type]
        if steps_done < self.steps:
            return Stage("step", steps_done + 1, step=steps_done + 1, outcome=final)
        return Stage("end", self.steps + 1, step=steps_done, outcome=final)

    def scripted_reward(self, step: int) -> float:
        """Reward for *step* when not from rollouts; a callable's value out of range fails the job."""
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
        plain = curve is None or isinstance(curve, str)
        shown = curve if plain else "callable" if callable(curve) else list(curve)  # type: ignore[arg-type]
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "immediate"}
        timing = {"mode": self.mode, "duration": self.total_duration if self.mode == "duration" else None}
        return {**fields, **timing, "reward_curve": shown, "labels": dict(self.labels)}


Scenario.__init__ = keywords_checked(Scenario.__init__)  # type: ignore[method-assign]
