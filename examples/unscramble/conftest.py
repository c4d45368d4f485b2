"""The team's model stand-in for offline runs: a learning policy built on our reference solver.

Offline, the fake backend's stand-in model answers the task app's chat calls. Overriding the
``synth_policy`` fixture here plugs in a policy that knows this task: it answers with the right
word with a probability rising from 10% to 90% over training, and with a wrong shuffle of the
letters otherwise. "The reward improves" then checks our grading and reward plumbing for real.
"""

from __future__ import annotations

import random

import pytest

from pytest_synth_rl import ChatRequest, LearningPolicy, linear

WORDS = (
    "planet", "garden", "silver", "bridge", "candle", "forest", "window", "rocket",
    "pencil", "marble", "winter", "button", "coffee", "dragon", "island", "jungle",
)  # fmt: skip
_BY_LETTERS = {"".join(sorted(word)): word for word in WORDS}


def _letters(request: ChatRequest) -> str:
    prompt: str = request.prompt
    return prompt.removeprefix("Letters:").strip()


def solve(request: ChatRequest) -> str | None:
    """Our reference solver: the dictionary word made of exactly these letters."""
    return _BY_LETTERS.get("".join(sorted(_letters(request))))


def wrong(request: ChatRequest, rng: random.Random) -> str:
    """A plausible mistake: another shuffle of the same letters."""
    letters = list(_letters(request))
    rng.shuffle(letters)
    guess = "".join(letters)
    return guess if guess != solve(request) else guess[::-1]


@pytest.fixture
def synth_policy() -> LearningPolicy:
    return LearningPolicy(solve, wrong=wrong, curve=linear(0.1, 0.9), seed=7)
