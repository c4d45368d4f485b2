"""The policies a team hands the stand-in model: wrong arguments are refused when the policy is
built, naming every problem, and a replay file is read as documented."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake.model import (
    ChatRequest,
    LearningPolicy,
    PolicyError,
    ReplayError,
    ReplayPolicy,
    linear,
)


def _completion(text: str) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


def _chat(prompt: str, turn: int = 0) -> ChatRequest:
    return ChatRequest({"messages": [{"role": "user", "content": prompt}]}, turn=turn)


# -- built wrong: every problem at once, when it is built, not when the model is first called --------
def test_linear_names_both_bounds_out_of_range() -> None:
    with pytest.raises(SynthUsageError) as info:
        linear(1.5, -2)
    assert info.value.keys == ["linear.start", "linear.end"]
    assert "linear.end: must be a probability in [0, 1], got -2 (hint: e.g. linear(0.2, 0.9))" in str(
        info.value
    )


def test_learning_policy_refuses_what_it_could_not_call() -> None:
    # Before: accepted, then "'str' object is not callable" inside the first rollout.
    with pytest.raises(SynthUsageError) as info:
        LearningPolicy("42", wrong="maybe", curve=1.5, seed="7")  # type: ignore[arg-type]
    assert info.value.keys == [
        "LearningPolicy.curve",
        "LearningPolicy.solve",
        "LearningPolicy.wrong",
        "LearningPolicy.seed",
    ]
    assert "LearningPolicy.solve: must be a function, got '42'" in str(info.value)
    assert "LearningPolicy.wrong: must be a function, got 'maybe' (hint: pass wrong(request, rng)" in str(
        info.value
    )


def test_learning_policy_refuses_functions_it_would_call_with_the_wrong_arguments() -> None:
    # Before: wrong(request) was accepted, then failed inside every rollout with a TypeError
    # seen only in the captured log.
    def wrong(request: object) -> str:
        return "no"

    with pytest.raises(SynthUsageError) as info:
        LearningPolicy(lambda: "right", wrong=wrong, curve=lambda: 0.5)  # type: ignore[arg-type]
    assert info.value.keys == ["LearningPolicy.curve", "LearningPolicy.solve", "LearningPolicy.wrong"]
    text = str(info.value)
    assert "takes (); it is called with 1 argument(s)" in text
    assert (
        "takes (request: 'object') -> 'str'; it is called with 2 argument(s) (hint: pass wrong(request, rng)"
        in text
    )


def test_a_learning_policy_with_valid_arguments_answers() -> None:
    policy = LearningPolicy(lambda request: "right", curve=1.0)
    assert policy(_chat("anything")) == "right"


# -- replay files ---------------------------------------------------------------------------
def test_a_missing_replay_file_says_where_it_looked_and_shows_no_chained_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ReplayError) as info:
        ReplayPolicy("recorded.jsonl")
    looked = tmp_path / "recorded.jsonl"
    assert str(info.value) == (
        f"cannot read replay file 'recorded.jsonl' (relative to the working directory: {looked}): "
        "No such file or directory (hint: pass an absolute path, "
        "e.g. Path(__file__).parent / 'recorded.jsonl' for a file next to the test)"
    )
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_replay_answers_by_prompt_then_by_turn(tmp_path: Path) -> None:
    path = tmp_path / "recorded.jsonl"
    lines = [
        {
            "request": {"messages": [{"role": "user", "content": "What is 2 + 2?"}]},
            "response": _completion("4"),
        },
        _completion("first"),
        _completion("second"),
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    policy = ReplayPolicy(path)
    assert repr(policy) == f"ReplayPolicy({str(path)!r}, 3 completions)"
    assert policy(_chat("What is 2 + 2?")) == {"role": "assistant", "content": "4"}
    assert [policy(_chat("other", turn))["content"] for turn in (0, 1, 5)] == ["first", "second", "second"]


def test_replay_by_prompt_only_answers_an_unknown_prompt_with_a_404_and_a_near_miss(tmp_path: Path) -> None:
    path = tmp_path / "recorded.jsonl"
    line = {
        "request": {"messages": [{"role": "user", "content": "What is 2 + 2?"}]},
        "response": _completion("4"),
    }
    path.write_text(json.dumps(line))
    reply = ReplayPolicy(path)(_chat("What is 2 + 3?"))
    assert isinstance(reply, PolicyError)
    assert (reply.status, reply.code) == (404, "not_recorded")
    assert reply.message.endswith(
        "has no recorded completion for the prompt 'What is 2 + 3?'; did you mean 'What is 2 + 2?'?"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", ":1: not valid JSON"),
        ('{"choices": []}', ":1: expected a chat.completion object with a non-empty 'choices' list"),
        ('{"request": "hi", "response": {}}', ":1: 'request' must be the chat request object it answered"),
        ("\n\n", ": no completions (expected one JSON object per line)"),
    ],
)
def test_a_malformed_replay_file_names_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ReplayError) as info:
        ReplayPolicy(path)
    assert str(info.value).startswith(f"{path}{message}")


class _CallablePolicy:
    def __call__(self, request: ChatRequest) -> str:
        return "ok"


async def _async_policy(request: ChatRequest) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (_CallablePolicy, "_CallablePolicy is a class, not a policy: pass an instance, _CallablePolicy(...)"),
        (lambda: "ok", "takes (); a policy takes one argument, the chat request"),
        (
            lambda request, extra: "ok",
            "takes (request, extra); a policy takes one argument, the chat request",
        ),
        (_async_policy, "is async; the stand-in model calls policies synchronously: use a plain def"),
    ],
    ids=["class", "no-argument", "two-arguments", "async"],
)
def test_a_policy_that_cannot_be_called_with_the_request_is_refused_where_given(
    pytester: pytest.Pytester, policy: Any, problem: str
) -> None:
    # Before: accepted, and every rollout of every job failed with a TypeError or a coroutine.
    from pytest_synth_rl.fake import FakeSynthBackend
    from pytest_synth_rl.fake.model.policy import policy_problem

    assert problem in (policy_problem(policy) or "")
    with pytest.raises(SynthUsageError, match=r"FakeSynthBackend\.policy: "):
        FakeSynthBackend(policy=policy)
    assert policy_problem(_CallablePolicy()) is None
    assert policy_problem(LearningPolicy(lambda request: "ok")) is None


CONFTEST_POLICY = """
import pytest


@pytest.fixture
def synth_policy():
    async def policy(request):
        return "42"

    return policy
"""


def test_the_synth_policy_fixture_is_checked_at_setup(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST_POLICY)
    pytester.makepyfile(test_p="def test_it(synth_fake):\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*synth_policy: the synth_policy fixture returned a policy that cannot work: <function * is async;*"]
    )
