"""A policy whose right answers grow likelier over training, reproducibly from the seed and rollout."""

from __future__ import annotations

import operator
import random
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_synth_rl.errors import ConfigProblem, SynthUsageError
from pytest_synth_rl.fake.model.policy import (
    ChatRequest,
    PolicyReply,
    Reply,
    answer_with,
    as_chat_request,
    signature_problem,
)

SUBMIT_ANSWER_TOOL = "submit_answer"

Curve = Callable[[float], float]


@dataclass(frozen=True)
class linear:
    """A straight line from *start* (fraction 0) to *end* (fraction 1)."""

    start: float = 0.15
    end: float = 0.95

    def __post_init__(self) -> None:
        problems = [_probability_problem(getattr(self, name), f"linear.{name}") for name in ("start", "end")]
        if any(problems):
            raise SynthUsageError([p for p in problems if p is not None])

    def __call__(self, fraction: float) -> float:
        return self.start + (self.end - self.start) * fraction


def _probability_problem(value: object, what: str) -> ConfigProblem | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return ConfigProblem(what, f"must be a probability in [0, 1], got {value!r}", "e.g. linear(0.2, 0.9)")
    return None


def _callable_problem(name: str, value: object, usage: str, arguments: int = 1) -> ConfigProblem | None:
    if not callable(value):
        problem = f"must be a function, got {value!r:.80}"
    elif takes := signature_problem(value, arguments):
        problem = f"{takes}; it is called with {arguments} argument(s)"
    else:
        return None
    return ConfigProblem(f"LearningPolicy.{name}", problem, f"pass {usage}")


def _say_wrong(request: ChatRequest, rng: random.Random) -> PolicyReply:
    return "I am not sure."


class LearningPolicy:
    """Right answers ``solve(request)`` (None: send *unanswerable*) with probability
    ``curve(fraction done)`` (or a constant; default ``linear(0.15, 0.95)``), else
    ``wrong(request, rng)`` (use *rng* for any randomness, so answers stay reproducible).
    *seed* varies which calls are answered right, reproducibly.
    """

    def __init__(
        self,
        solve: Callable[[ChatRequest], PolicyReply | None],
        *,
        wrong: Callable[[ChatRequest, random.Random], PolicyReply] = _say_wrong,
        curve: float | Curve | None = None,
        seed: int = 0,
        unanswerable: str = "I could not find a question to answer.",
    ) -> None:
        if curve is None:
            curve = linear()
        curve_usage = "curve(fraction done) -> probability, e.g. linear(0.1, 0.9)"
        problems = [
            _callable_problem("curve", curve, curve_usage)
            if callable(curve)
            else _probability_problem(curve, "LearningPolicy.curve"),
            _callable_problem("solve", solve, "solve(request) -> the right reply, e.g. my_reference_solver"),
            _callable_problem("wrong", wrong, "wrong(request, rng) -> a wrong reply", arguments=2),
        ]
        if isinstance(seed, bool) or not isinstance(seed, int):
            problems.append(
                ConfigProblem("LearningPolicy.seed", f"must be an int, got {seed!r}", "e.g. seed=0")
            )
        if not isinstance(unanswerable, str):
            problems.append(
                ConfigProblem("LearningPolicy.unanswerable", f"must be text, got {unanswerable!r}")
            )
        if any(problems):
            raise SynthUsageError([p for p in problems if p is not None])
        self.solve = solve
        self.wrong = wrong
        self.curve: float | Curve = curve
        self.seed = seed
        self.unanswerable = unanswerable
        self._asked: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def accuracy_at(self, fraction: float) -> float:
        value = self.curve(fraction) if callable(self.curve) else self.curve
        problem = _probability_problem(value, f"the curve's value at fraction {fraction:g}")
        if problem is not None:
            raise SynthUsageError([problem])
        return float(value)

    def _rng(self, request: ChatRequest) -> random.Random:
        rollout, step = request.rollout, request.progress.step
        if rollout.correlation_id is not None:
            key = f"{self.seed}|{rollout.mode}|{step}|{rollout.seed}|{request.prompt}|{request.turn}"
        else:  # a direct call: vary by how often this prompt was asked at this step
            with self._lock:
                occurrence = self._asked.get((step, request.prompt), 0)
                self._asked[step, request.prompt] = occurrence + 1
            key = f"{self.seed}|{step}|{request.prompt}|{occurrence}"
        return random.Random(key)

    def __call__(self, request: Mapping[str, Any]) -> PolicyReply:
        request = as_chat_request(request)
        rng = self._rng(request)
        if rng.random() >= self.accuracy_at(request.progress.fraction):
            return self.wrong(request, rng)
        answer = self.solve(request)
        return self.unanswerable if answer is None else answer

    def __repr__(self) -> str:
        curve = repr(self.curve) if isinstance(self.curve, (int, float, linear)) else "<function>"
        name = getattr(self.solve, "__name__", type(self.solve).__name__)
        return f"{type(self).__name__}(solve={name}, curve={curve}, seed={self.seed})"


_OPERATORS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_QUESTION = re.compile(r"(-?\d+)\s*([-+*×x])\s*(-?\d+)")


def parse_arithmetic(text: str) -> tuple[int, str, int] | None:
    """The last ``a <op> b`` in *text* (op one of ``+ - *``; ``×``/``x`` read as ``*``)."""
    for left, op, right in _QUESTION.findall(text)[-1:]:
        return int(left), "*" if op in ("×", "x") else op, int(right)
    return None


def solve_arithmetic(left: int, op: str, right: int) -> int:
    if op not in _OPERATORS:
        raise ValueError(f"unsupported operator {op!r}; expected one of + - *")
    return _OPERATORS[op](left, right)


_NO_QUESTION = "I could not find an arithmetic question to answer."


def _solve_arithmetic(request: ChatRequest, off_by: int = 0) -> Reply | None:
    parsed = parse_arithmetic(request.prompt)
    if parsed is None:
        return None
    return answer_with(request, solve_arithmetic(*parsed) + off_by, tool=SUBMIT_ANSWER_TOOL)


def _wrong_arithmetic(request: ChatRequest, rng: random.Random) -> PolicyReply:
    return _solve_arithmetic(request, rng.choice((-3, -2, -1, 1, 2, 3))) or _NO_QUESTION


class ArithmeticPolicy(LearningPolicy):
    """The arithmetic example's model: a :class:`LearningPolicy` whose solver does the sum, through
    the ``submit_answer`` tool when offered; ``accuracy`` is its curve (default: always right)."""

    def __init__(self, accuracy: float | Curve = 1.0, *, seed: int = 0) -> None:
        super().__init__(
            _solve_arithmetic, wrong=_wrong_arithmetic, curve=accuracy, seed=seed, unanswerable=_NO_QUESTION
        )
