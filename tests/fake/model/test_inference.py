"""The stub model: OpenAI-shaped answers, the arithmetic policy, canned replies, errors, serving."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import pytest

from pytest_synth_rl.fake.model import Progress
from pytest_synth_rl.fake.model.inference import (
    SUBMIT_ANSWER_TOOL,
    ArithmeticPolicy,
    StubInference,
    last_user_text,
    offered_tools,
    parse_arithmetic,
    solve_arithmetic,
    tool_call,
)

TOOLS = [{"type": "function", "function": {"name": SUBMIT_ANSWER_TOOL, "parameters": {"type": "object"}}}]


def chat(question: str, *, tools: bool = True, model: str = "Qwen/Qwen3-0.6B") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": question},
        ],
    }
    if tools:
        body["tools"] = TOOLS
    return body


def submitted_answer(completion: dict[str, Any]) -> int:
    message = completion["choices"][0]["message"]
    call = message["tool_calls"][0]
    assert call["type"] == "function"
    assert call["function"]["name"] == SUBMIT_ANSWER_TOOL
    return int(json.loads(call["function"]["arguments"])["answer"])


# -- response shape -----------------------------------------------------------------------------
def test_default_policy_answers_through_the_tool_with_a_full_completion_body() -> None:
    stub = StubInference()
    completion = stub.complete(chat("What is 17 + 25? Reply by calling submit_answer."))
    assert completion["object"] == "chat.completion"
    assert completion["id"].startswith("chatcmpl-")
    assert isinstance(completion["created"], int)
    assert completion["model"] == "Qwen/Qwen3-0.6B"
    choice = completion["choices"][0]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] is None
    assert isinstance(choice["message"]["tool_calls"][0]["id"], str)
    assert submitted_answer(completion) == 42
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0


@pytest.mark.parametrize(
    ("question", "expected"),
    [("What is 6 * 7?", 42), ("What is 10 - 93?", -83), ("What is 0 + 0?", 0), ("What is 12 × 12?", 144)],
)
def test_default_policy_is_correct_for_each_operation(question: str, expected: int) -> None:
    assert submitted_answer(StubInference().complete(chat(question))) == expected


def test_without_the_tool_the_answer_is_text() -> None:
    completion = StubInference().complete(chat("What is 2 + 3?", tools=False))
    choice = completion["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "5"}
    assert choice["finish_reason"] == "stop"


def test_unparseable_question_gets_a_text_reply() -> None:
    completion = StubInference().complete(chat("Tell me a joke"))
    assert "could not find" in completion["choices"][0]["message"]["content"]


def test_every_request_is_recorded_in_order() -> None:
    stub = StubInference()
    stub.complete(chat("What is 1 + 1?"))
    stub.complete(chat("What is 2 + 2?"))
    assert [last_user_text(r) for r in stub.requests] == ["What is 1 + 1?", "What is 2 + 2?"]
    assert stub.last_request is not None
    assert last_user_text(stub.last_request) == "What is 2 + 2?"
    stub.clear()
    assert stub.requests == []
    assert stub.last_request is None


def test_only_the_newest_requests_are_kept_and_the_dropped_ones_counted() -> None:
    stub = StubInference()
    assert stub.max_requests == 10_000
    stub.max_requests = 3
    for n in range(1, 6):
        stub.complete(chat(f"What is {n} + {n}?"))
    assert [last_user_text(r) for r in stub.requests] == [
        "What is 3 + 3?",
        "What is 4 + 4?",
        "What is 5 + 5?",
    ]
    assert stub.dropped_requests == 2
    stub.clear()
    assert stub.dropped_requests == 0
    stub.max_requests = 0  # nonsense: the newest one is still kept
    stub.complete(chat("What is 6 + 6?"))
    assert [last_user_text(r) for r in stub.requests] == ["What is 6 + 6?"]


# -- custom policies and canned replies ---------------------------------------------------------
def test_policy_receives_the_request_and_may_return_text() -> None:
    seen: list[dict[str, Any]] = []

    def policy(request: dict[str, Any]) -> str:
        seen.append(request)
        return f"echo: {last_user_text(request)}"

    completion = StubInference(policy=policy).complete(chat("hello"))
    assert completion["choices"][0]["message"]["content"] == "echo: hello"
    assert seen[0]["model"] == "Qwen/Qwen3-0.6B"


def test_policy_tool_call_shorthand_is_normalised() -> None:
    stub = StubInference(
        policy=lambda _: {"tool_calls": [{"name": "submit_answer", "arguments": {"answer": 7}}]}
    )
    message = stub.complete(chat("x"))["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["tool_calls"][0]["function"] == {"name": "submit_answer", "arguments": '{"answer": 7}'}
    assert message["tool_calls"][0]["type"] == "function"


def test_canned_replies_in_order_then_the_last_repeats() -> None:
    stub = StubInference(replies=["first", {"role": "assistant", "content": "second"}, "third"])
    contents = [stub.complete(chat("q"))["choices"][0]["message"]["content"] for _ in range(5)]
    assert contents == ["first", "second", "third", "third", "third"]
    stub.clear()
    assert stub.complete(chat("q"))["choices"][0]["message"]["content"] == "first"


def test_policy_and_replies_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either policy= or replies="):
        StubInference(policy=lambda _: "x", replies=["y"])
    with pytest.raises(ValueError, match="at least one reply"):
        StubInference(replies=[])


def test_tool_call_helper_encodes_arguments() -> None:
    call = tool_call("submit_answer", {"answer": 3}, call_id="call_1")
    assert call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "submit_answer", "arguments": '{"answer": 3}'},
    }


# -- the arithmetic policy ----------------------------------------------------------------------
def test_parse_and_solve() -> None:
    assert parse_arithmetic("What is 17 + 25? Reply now.") == (17, "+", 25)
    assert parse_arithmetic("compute 3 x 4") == (3, "*", 4)
    assert parse_arithmetic("no numbers") is None
    assert solve_arithmetic(9, "-", 12) == -3
    with pytest.raises(ValueError, match="unsupported operator"):
        solve_arithmetic(1, "/", 2)


def test_zero_accuracy_is_always_wrong() -> None:
    stub = StubInference(policy=ArithmeticPolicy(accuracy=0.0))
    for a in range(20):
        assert submitted_answer(stub.complete(chat(f"What is {a} + 5?"))) != a + 5


def test_accuracy_is_deterministic_and_close_to_the_requested_rate() -> None:
    questions = [f"What is {a} + {a * 3 % 17}?" for a in range(400)]

    def correct_count(policy: ArithmeticPolicy) -> list[bool]:
        results = []
        for q in questions:
            left, _, right = parse_arithmetic(q) or (0, "+", 0)
            results.append(submitted_answer(StubInference(policy=policy).complete(chat(q))) == left + right)
        return results

    first = correct_count(ArithmeticPolicy(accuracy=0.3, seed=11))
    again = correct_count(ArithmeticPolicy(accuracy=0.3, seed=11))
    other_seed = correct_count(ArithmeticPolicy(accuracy=0.3, seed=12))
    assert first == again
    assert first != other_seed
    assert 0.22 < sum(first) / len(first) < 0.38


def test_accuracy_rising_with_step_gives_an_improving_reward_curve() -> None:
    policy = ArithmeticPolicy(accuracy=lambda fraction: min(1.0, 0.1 + 0.8 * fraction), seed=3)
    stub = StubInference(policy=policy)
    rates = []
    for step in range(5):
        stub.progress = Progress(step=step, steps=4)
        correct = 0
        for a in range(200):
            answer = submitted_answer(stub.complete(chat(f"What is {a} * 3?")))
            correct += answer == a * 3
        rates.append(correct / 200)
    assert rates == sorted(rates), rates
    assert rates[0] < 0.25
    assert rates[-1] > 0.8


def test_repeated_question_within_a_step_can_differ() -> None:
    policy = ArithmeticPolicy(accuracy=0.5, seed=1)
    stub = StubInference(policy=policy)
    answers = {submitted_answer(stub.complete(chat("What is 40 + 2?"))) for _ in range(30)}
    assert 42 in answers
    assert len(answers) > 1


def test_accuracy_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="probability"):
        ArithmeticPolicy(accuracy=1.5)
    policy = ArithmeticPolicy(accuracy=lambda step: 2.0)
    with pytest.raises(ValueError, match="probability"):
        policy(chat("What is 1 + 1?"))


def test_offered_tools_reads_tools_and_legacy_functions() -> None:
    assert offered_tools({"tools": TOOLS}) == ["submit_answer"]
    assert offered_tools({"functions": [{"name": "f"}]}) == ["f"]
    assert offered_tools({}) == []


# -- over HTTP ----------------------------------------------------------------------------------
def test_served_stub_answers_over_loopback() -> None:
    stub = StubInference()
    with stub.serve() as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        assert stub.base_url == base_url
        response = httpx.post(base_url + "/chat/completions", json=chat("What is 8 * 9?"))
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert submitted_answer(response.json()) == 72
        # The path without the /v1 prefix works too (some clients drop it).
        root = base_url.removesuffix("/v1")
        assert httpx.post(root + "/chat/completions", json=chat("What is 1 + 1?")).status_code == 200
        models = httpx.get(base_url + "/models").json()
        assert models["data"][0]["id"] == "stub-model"
    assert stub.base_url is None
    assert len(stub.requests) == 2


def test_bad_json_is_a_400_with_an_openai_error_body() -> None:
    stub = StubInference()
    with stub.serve() as base_url:
        response = httpx.post(
            base_url + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_json"
    assert "not valid JSON" in error["message"]
    assert stub.requests == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ([1, 2], "invalid_body"),
        ({"model": "m"}, "invalid_messages"),
        ({"model": "m", "messages": []}, "invalid_messages"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}, "unsupported"),
    ],
)
def test_malformed_requests_are_400s(body: Any, code: str) -> None:
    with StubInference().serve() as base_url:
        response = httpx.post(base_url + "/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_policy_exception_is_a_500_with_the_reason() -> None:
    def policy(request: dict[str, Any]) -> str:
        raise RuntimeError("model crashed")

    with StubInference(policy=policy).serve() as base_url:
        response = httpx.post(base_url + "/chat/completions", json=chat("q"))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error"
    assert "model crashed" in error["message"]


def test_unserialisable_reply_is_a_500_not_a_crash() -> None:
    with StubInference(policy=lambda _: {"content": object()}).serve() as base_url:
        response = httpx.post(base_url + "/chat/completions", json=chat("q"))
    assert response.status_code == 500
    assert response.json()["error"]["message"] == (
        "the stub's policy returned a message the stub cannot send "
        "(TypeError: Object of type object is not JSON serializable)"
    )


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (
            lambda _: {"tool_calls": 5},
            "returned a message the stub cannot send (TypeError: 'int' object is not iterable)",
        ),
        (
            lambda _: {"content": float("nan")},
            "returned a message the stub cannot send (ValueError: Out of range",
        ),
        (
            lambda _: pytest.fail("no answer for this prompt"),
            "raised Failed: no answer for this prompt (test_inference.py:",
        ),
        (lambda _: sys.exit(3), "raised SystemExit: 3 (test_inference.py:"),
    ],
    ids=["tool-calls-not-a-list", "nan-content", "pytest-fail", "sys-exit"],
)
def test_a_policy_reply_or_exit_the_stub_cannot_use_is_the_policys_failure(policy: Any, problem: str) -> None:
    # Before: a crash inside the stub (a bare 500, or a dropped connection for pytest.fail and
    # sys.exit), blamed on the task app.
    stub = StubInference(policy=policy)
    with pytest.raises(ValueError, match=r"^the stub's policy "):
        stub.complete(chat("q"), correlation_id="trace_p")
    assert [call.status for call in stub.calls("trace_p")] == [500]
    assert (stub.policy_failure("trace_p") or "").startswith(problem)


def test_unknown_route_and_wrong_method() -> None:
    with StubInference().serve() as base_url:
        assert httpx.get(base_url + "/chat/completions").status_code == 405
        missing = httpx.post(base_url + "/embeddings", json={})
    assert missing.status_code == 404
    assert (
        "the stub serves POST <any path>/chat/completions (correlation id from a /trace_<id>"
        in missing.json()["error"]["message"]
    )


def test_complete_rejects_non_chat_bodies() -> None:
    with pytest.raises(ValueError, match="messages"):
        StubInference().complete({"model": "m"})
