"""The team's model stand-in for offline runs: a learning policy built on our reference solver.

It answers with the right word with a probability rising from 10% to 90% over training, and with
a wrong shuffle of the letters otherwise, so "the reward improves" checks our grading and reward
plumbing for real. The conftest plugs it in offline; a served fake takes it with
``python -m pytest_synth_rl serve --policy unscramble=examples/unscramble/policy.py:policy``.
"""

from __future__ import annotations

import random

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


policy = LearningPolicy(solve, wrong=wrong, curve=linear(0.1, 0.9), seed=7)
