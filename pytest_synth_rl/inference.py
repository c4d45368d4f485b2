"""A stand-in for the model: an OpenAI-compatible ``/v1/chat/completions`` endpoint.

During a rollout the task app calls ``{policy.config.inference_url}/chat/completions``; in
production that URL is the trainer's vLLM server. Offline we hand the task app this stub instead,
so a rollout really runs end to end (task app → HTTP → model reply → grading) without a GPU,
while the test decides what the "model" answers:

* ``StubInference()`` answers the arithmetic example correctly, through its ``submit_answer``
  tool (see :class:`ArithmeticPolicy`);
* ``StubInference(policy=fn)`` calls ``fn(request_body)`` for each request; ``fn`` returns the
  assistant message (a dict, possibly with ``tool_calls``) or just its text;
* ``StubInference(replies=[...])`` serves canned replies in order, repeating the last one.

It is a plain ASGI app (no web framework; the runtime dependencies stay pytest, httpx, respx,
uvicorn), records every request body in :attr:`StubInference.requests`, and is served on loopback
with :meth:`StubInference.serve`. :meth:`StubInference.complete` is the same logic without HTTP,
for callers that already hold the request body.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .support.asgi import Receive, Scope, Send, read_body, serve_lifespan

__all__ = [
    "SUBMIT_ANSWER_TOOL",
    "ArithmeticPolicy",
    "InferencePolicy",
    "InferenceReply",
    "StubInference",
    "last_user_text",
    "offered_tools",
    "parse_arithmetic",
    "solve_arithmetic",
    "tool_call",
]

#: What a policy returns: the assistant message (dict) or its text content (str).
InferenceReply = dict[str, Any] | str
#: A policy maps the chat-completions request body to the assistant's reply.
InferencePolicy = Callable[[dict[str, Any]], InferenceReply]

#: The tool the arithmetic example app offers; the default policy answers through it.
SUBMIT_ANSWER_TOOL = "submit_answer"

_QUESTION = re.compile(r"(-?\d+)\s*([-+*×x])\s*(-?\d+)")
_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_MAX_BODY_BYTES = 8 * 1024 * 1024


# -- request helpers ------------------------------------------------------------------------
def _content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a multi-part content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(str(p) for p in parts)
    return ""


def last_user_text(request: Mapping[str, Any]) -> str:
    """The text of the last ``user`` message in a chat-completions request ("" if none)."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def offered_tools(request: Mapping[str, Any]) -> list[str]:
    """Names of the tools (or legacy ``functions``) the request offers."""
    names: list[str] = []
    for tool in request.get("tools") or []:
        if isinstance(tool, Mapping):
            function = tool.get("function")
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                names.append(function["name"])
    for function in request.get("functions") or []:
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def parse_arithmetic(text: str) -> tuple[int, str, int] | None:
    """The last ``a <op> b`` in *text* (op one of ``+ - *``; ``×``/``x`` read as ``*``)."""
    matches = _QUESTION.findall(text)
    if not matches:
        return None
    left, op, right = matches[-1]
    return int(left), "*" if op in ("×", "x") else op, int(right)


def solve_arithmetic(left: int, op: str, right: int) -> int:
    """The exact answer to ``left op right``."""
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    raise ValueError(f"unsupported operator {op!r}; expected one of + - *")


def tool_call(name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None) -> dict[str, Any]:
    """One OpenAI tool call; *arguments* may be a dict (it is JSON-encoded as the API does)."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return {
        "id": call_id or f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


# -- the arithmetic policy ------------------------------------------------------------------
class ArithmeticPolicy:
    """Answers the arithmetic example's question, correct with a chosen probability.

    ``accuracy`` is a probability in [0, 1], or a function of :attr:`step` returning one, so a
    fake trainer can make the "model" improve: set ``policy.step = n`` before the rollouts of
    training step *n* (e.g. ``ArithmeticPolicy(accuracy=lambda step: min(1.0, 0.2 + 0.1 * step))``).

    Whether an answer is right is deterministic: it depends only on ``seed``, ``step``, the
    question text and how many times that question was already asked at that step, so re-running
    the same rollouts reproduces the same rewards, and a question asked twice in a group can get
    different outcomes. A wrong answer is the right one plus a small non-zero offset.

    If the request offers the ``submit_answer`` tool the answer is a call to it with
    ``{"answer": <int>}``; otherwise it is the number as text.
    """

    def __init__(
        self, accuracy: float | Callable[[int], float] = 1.0, *, seed: int = 0, step: int = 0
    ) -> None:
        if not callable(accuracy):
            self._check_probability(accuracy)
        self.accuracy = accuracy
        self.seed = seed
        #: The training step the next answers belong to; set it as training progresses.
        self.step = step
        self._asked: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _check_probability(value: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"accuracy must be a probability in [0, 1], got {value!r}")
        return float(value)

    def __repr__(self) -> str:
        accuracy = "<function>" if callable(self.accuracy) else f"{self.accuracy:g}"
        return f"ArithmeticPolicy(accuracy={accuracy}, seed={self.seed}, step={self.step})"

    def accuracy_at(self, step: int) -> float:
        """The probability of a correct answer at *step*."""
        value = self.accuracy(step) if callable(self.accuracy) else self.accuracy
        return self._check_probability(value)

    def __call__(self, request: dict[str, Any]) -> InferenceReply:
        question = last_user_text(request)
        parsed = parse_arithmetic(question)
        if parsed is None:
            return "I could not find an arithmetic question to answer."
        correct = solve_arithmetic(*parsed)
        step = self.step
        with self._lock:
            occurrence = self._asked.get((step, question), 0)
            self._asked[(step, question)] = occurrence + 1
        rng = random.Random(f"{self.seed}|{step}|{question}|{occurrence}")
        right = rng.random() < self.accuracy_at(step)
        answer = correct if right else correct + rng.choice((-3, -2, -1, 1, 2, 3))
        if SUBMIT_ANSWER_TOOL in offered_tools(request):
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(SUBMIT_ANSWER_TOOL, {"answer": answer})],
            }
        return str(answer)


# -- the stub -------------------------------------------------------------------------------
class _RequestError(Exception):
    def __init__(
        self, status: int, message: str, code: str, error_type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.error_type = error_type


def _error_body(message: str, code: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, Mapping):
        return sum(_words(v) for v in value.values())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 0


class StubInference:
    """An OpenAI-compatible chat-completions server whose answers the test controls.

    Give at most one of *policy* (``fn(request_body) -> message dict | str``) and *replies*
    (served in order, the last one repeating). With neither, an :class:`ArithmeticPolicy` answers
    correctly. :attr:`requests` holds every well-formed request body received, in order.
    """

    def __init__(
        self,
        policy: InferencePolicy | None = None,
        replies: Sequence[InferenceReply] | None = None,
        *,
        model: str = "stub-model",
    ) -> None:
        if policy is not None and replies is not None:
            raise ValueError("give StubInference either policy= or replies=, not both")
        if replies is not None and len(replies) == 0:
            raise ValueError("replies= must hold at least one reply (the last one repeats)")
        self.policy: InferencePolicy = policy if policy is not None else ArithmeticPolicy()
        self.replies: list[InferenceReply] | None = list(replies) if replies is not None else None
        self.model = model
        #: Every chat-completions request body received, in arrival order.
        self.requests: list[dict[str, Any]] = []
        #: The base URL (``http://127.0.0.1:<port>/v1``) while :meth:`serve` is active.
        self.base_url: str | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- plain-Python use ---------------------------------------------------------------------
    def complete(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one chat-completions *request* body; returns the ``chat.completion`` object.

        Raises :class:`ValueError` if the body is not a chat-completions request.
        """
        try:
            return self._complete(request)
        except _RequestError as exc:
            raise ValueError(str(exc)) from exc

    def clear(self) -> None:
        """Forget recorded requests and restart canned replies from the first."""
        with self._lock:
            self.requests.clear()

    @property
    def last_request(self) -> dict[str, Any] | None:
        """The most recent request body, or None."""
        with self._lock:
            return self.requests[-1] if self.requests else None

    def _complete(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(request, Mapping):
            raise _RequestError(400, "the request body must be a JSON object", "invalid_body")
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _RequestError(
                400, "'messages' must be a non-empty list of chat messages", "invalid_messages"
            )
        if request.get("stream"):
            raise _RequestError(
                400, "streaming is not supported by the stub; send stream=false", "unsupported"
            )
        body = dict(request)
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            number = next(self._ids)
        if self.replies is not None:
            reply = self.replies[min(index, len(self.replies) - 1)]
        else:
            try:
                reply = self.policy(body)
            except Exception as exc:
                raise _RequestError(
                    500,
                    f"the stub's policy raised {type(exc).__name__}: {exc}",
                    "policy_error",
                    "server_error",
                ) from exc
        message = self._as_message(reply)
        model = request.get("model") if isinstance(request.get("model"), str) else self.model
        prompt_tokens = _words(messages)
        completion_tokens = _words(message.get("content")) + _words(message.get("tool_calls"))
        return {
            "id": f"chatcmpl-stub-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @staticmethod
    def _as_message(reply: Any) -> dict[str, Any]:
        if isinstance(reply, str):
            return {"role": "assistant", "content": reply}
        if not isinstance(reply, Mapping):
            raise _RequestError(
                500,
                f"the stub's policy returned {type(reply).__name__}; expected a message dict or a string",
                "policy_error",
                "server_error",
            )
        message = dict(reply)
        message.setdefault("role", "assistant")
        message.setdefault("content", None)
        calls = message.get("tool_calls")
        if calls:
            normalised = []
            for i, call in enumerate(calls):
                if isinstance(call, Mapping) and "function" not in call and "name" in call:
                    call = tool_call(str(call["name"]), call.get("arguments", {}))
                call = dict(call)
                call.setdefault("id", f"call_{i}")
                call.setdefault("type", "function")
                function = dict(call.get("function") or {})
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments") or {})
                call["function"] = function
                normalised.append(call)
            message["tool_calls"] = normalised
        else:
            message.pop("tool_calls", None)
        return message

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope.get("path", "/").rstrip("/") or "/"
        method = scope.get("method", "GET")
        if path in _CHAT_PATHS:
            if method != "POST":
                await self._respond(
                    send,
                    405,
                    _error_body(f"use POST for {path}", "method_not_allowed", "invalid_request_error"),
                )
                return
            raw = await read_body(receive, _MAX_BODY_BYTES)
            status, payload = self._handle(raw)
            try:
                encoded = _encode(payload)
            except (TypeError, ValueError) as exc:
                status, encoded = (
                    500,
                    _encode(
                        _error_body(
                            f"the stub's reply is not JSON serialisable: {exc}",
                            "policy_error",
                            "server_error",
                        )
                    ),
                )
            await self._send(send, status, encoded)
        elif path in _MODELS_PATHS and method == "GET":
            await self._respond(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": self.model, "object": "model", "created": 0, "owned_by": "pytest-synth-rl"}
                    ],
                },
            )
        elif path in ("/", "/health") and method in ("GET", "HEAD"):
            await self._respond(send, 200, {"status": "ok", "service": "stub-inference"})
        else:
            await self._respond(
                send,
                404,
                _error_body(
                    f"no route {method} {path}; the stub serves POST /v1/chat/completions",
                    "not_found",
                    "invalid_request_error",
                ),
            )

    def _handle(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise _RequestError(
                    400, f"the request body is not valid JSON: {exc}", "invalid_json"
                ) from exc
            return 200, self._complete(body)
        except _RequestError as exc:
            return exc.status, _error_body(str(exc), exc.code, exc.error_type)

    @classmethod
    async def _respond(cls, send: Send, status: int, payload: Mapping[str, Any]) -> None:
        await cls._send(send, status, _encode(payload))

    @staticmethod
    async def _send(send: Send, status: int, body: bytes) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    # -- serving ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Serve the stub on loopback; yields the base URL ``http://127.0.0.1:<port>/v1``.

        Pass that URL as ``policy.config.inference_url``; task apps append
        ``/chat/completions``. No API key is needed, and the environment is not touched.
        """
        from .support.serving import serve_asgi  # uvicorn loads only when a stub is served

        with serve_asgi(self, host=host, port=port, lifespan="on", description="stub model") as server:
            self.base_url = f"{server.url}/v1"
            try:
                yield self.base_url
            finally:
                self.base_url = None

    def __repr__(self) -> str:
        source = f"replies={len(self.replies)}" if self.replies is not None else f"policy={self.policy!r}"
        return f"StubInference({source}, requests={len(self.requests)})"


def _encode(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, allow_nan=False).encode()
