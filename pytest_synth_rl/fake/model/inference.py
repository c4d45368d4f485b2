"""A stand-in model: an OpenAI-compatible chat-completions endpoint a policy answers, per rollout URL."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from pytest_synth_rl.fake.model import (
    SUBMIT_ANSWER_TOOL,
    ArithmeticPolicy,
    ChatRequest,
    Policy,
    PolicyError,
    PolicyReply,
    Progress,
    Reply,
    RolloutIdentity,
    ScriptedPolicy,
    ToolCall,
    last_user_text,
    offered_tools,
    parse_arithmetic,
    solve_arithmetic,
    tool_call,
)
from pytest_synth_rl.secrets.masking import get_logger, redact
from pytest_synth_rl.taskapp.asgi import OffLoop, Receive, Scope, Send, read_body, serve_lifespan

__all__ = [
    "MAX_CONCURRENCY",
    "SUBMIT_ANSWER_TOOL",
    "ArithmeticPolicy",
    "InferencePolicy",
    "InferenceReply",
    "ModelCall",
    "StubInference",
    "last_user_text",
    "offered_tools",
    "parse_arithmetic",
    "solve_arithmetic",
    "tool_call",
]

InferenceReply = PolicyReply
InferencePolicy = Policy

_CHAT_SUFFIX = "/chat/completions"
_ID_PREFIXES = ("trace_", "cid_", "eval_")
_ID_QUERY_KEYS = ("cid", "trace_correlation_id", "trace")
_MODELS_SUFFIX = "/models"
_MAX_BODY_BYTES = 8 * 1024 * 1024
_MAX_ROUTES = 10_000  # rollout routes and per-rollout call lists kept (the newest)
_MAX_CALLS_PER_ROLLOUT = 1_000
MAX_CONCURRENCY = 32
NO_CORRELATION_ID = (
    "the call carried no correlation id: POST {path} is not under the URL the rollout was given "
    "(policy.config.inference_url, which ends in the rollout's '/trace_...' segment)"
)
KEEP_INFERENCE_URL = (
    "build the model URL from policy.config.inference_url keeping its path and query, e.g. "
    "f\"{inference_url}/chat/completions\"; urljoin(inference_url, '/v1/chat/completions') drops the "
    "segment the trainer attributes model calls by"
)

_SERVING: dict[str, Any] = {"lifespan": "on", "protocol": "httptools", "read_timeout": 5.0}
_SERVED = (
    "POST <any path>/chat/completions (correlation id from a /trace_<id>, /cid_<id> or /eval_<id> "
    "segment, or ?cid=<id>), GET <any path>/models, GET /health"
)


@dataclass(frozen=True)
class ModelCall:
    """One chat-completions call the stub answered (or refused), and the rollout it belonged to."""

    correlation_id: str | None
    path: str
    request: dict[str, Any]
    status: int
    response: dict[str, Any]
    progress: Progress
    rollout: RolloutIdentity
    policy_error: str | None = None
    policy_traceback: str | None = None


log = get_logger("pytest_synth_rl.fake.model.inference")


def _policy_failure(exc: BaseException) -> tuple[str, str]:
    from pytest_synth_rl.secrets.callers import is_users_frame

    own = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    frames = list(traceback.walk_tb(own))
    spots = [spot for spot in frames if is_users_frame(spot[0])] or frames[:1]
    where = ""
    for frame, line in spots[-1:]:
        where = f" ({os.path.basename(frame.f_code.co_filename)}:{line} in {frame.f_code.co_name})"
    text = "".join(traceback.format_exception(type(exc), exc, own))
    return f"raised {type(exc).__name__}: {exc}{where}", text[-4000:]  # the innermost frames and the error


class _RequestError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        error_type: str = "invalid_request_error",
        failure: tuple[str, str | None] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.error_type, self.failure = status, code, error_type, failure

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.error_type, "param": None, "code": self.code}}

    def outcome(self) -> tuple[int, dict[str, Any], tuple[str, str | None] | None]:
        return self.status, self.body(), self.failure


def _policy_error(problem: str, failure: tuple[str, str | None] | None = None) -> _RequestError:
    message = f"the stub's policy {problem}"
    return _RequestError(500, message, "policy_error", "server_error", failure or (problem, None))


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    values = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    return sum(_words(v) for v in values)


def _checked(request: Any) -> dict[str, Any]:
    if isinstance(request, bytes):
        try:
            request = json.loads(request)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _RequestError(400, f"the request body is not valid JSON: {exc}", "invalid_json") from exc
    if not isinstance(request, Mapping):
        raise _RequestError(400, "the request body must be a JSON object", "invalid_body")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _RequestError(400, "'messages' must be a non-empty list of chat messages", "invalid_messages")
    if request.get("stream"):
        raise _RequestError(400, "streaming is not supported by the stub; send stream=false", "unsupported")
    return dict(request)


def _as_message(reply: Any) -> dict[str, Any]:
    if isinstance(reply, (str, ToolCall)):
        reply = Reply(reply) if isinstance(reply, str) else Reply(tool_calls=(reply,))
    if isinstance(reply, Reply):
        return reply.to_message()
    if not isinstance(reply, Mapping):
        expected = "expected a str, Reply, ToolCall, PolicyError or a message dict"
        raise _policy_error(f"returned {type(reply).__name__}; {expected}")
    message = {"role": "assistant", "content": None, **reply}
    wires = []
    for index, call in enumerate(message.pop("tool_calls", None) or ()):
        if isinstance(call, ToolCall):
            call = call.to_wire(index)
        if isinstance(call, Mapping) and "function" not in call and "name" in call:
            call = tool_call(str(call["name"]), call.get("arguments", {}))
        wire: dict[str, Any] = {"id": f"call_{index}", "type": "function", **call}
        function = dict(wire.get("function") or {})
        if not isinstance(function.get("arguments"), str):
            function["arguments"] = json.dumps(function.get("arguments") or {})
        wires.append({**wire, "function": function})
    return {**message, "tool_calls": wires} if wires else message


class StubInference:
    """An OpenAI-compatible chat-completions ASGI app answered by *policy* (or canned *replies*)."""

    def __init__(
        self,
        policy: Policy | None = None,
        replies: Sequence[PolicyReply] | None = None,
        *,
        model: str = "stub-model",
    ) -> None:
        if policy is not None and replies is not None:
            raise ValueError("give StubInference either policy= or replies=, not both")
        if replies is not None and len(replies) == 0:
            raise ValueError("replies= must hold at least one reply (the last one repeats)")
        self.replies = None if replies is None else list(replies)
        if policy is None:
            policy = ScriptedPolicy(*self.replies) if self.replies is not None else ArithmeticPolicy()
        self.policy: Policy = policy
        self.model = model
        self.progress = Progress()
        self.requests: list[dict[str, Any]] = []
        self.max_requests = 10_000
        self.dropped_requests = 0
        self.require_correlation_id = False
        self.base_url: str | None = None
        self._root_url: str | None = None
        self._routes: OrderedDict[str, tuple[RolloutIdentity, Progress]] = OrderedDict()
        self._calls: OrderedDict[str | None, list[ModelCall]] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._epoch = 0
        self._workers = OffLoop(MAX_CONCURRENCY, "synth-policy")

    def route(self, rollout: RolloutIdentity, progress: Progress) -> str:
        """Register one rollout (while served); its calls get this identity and progress."""
        cid = rollout.correlation_id
        if not cid or "/" in cid or "?" in cid:
            raise ValueError(f"a routed rollout needs a correlation id without '/' or '?', got {cid!r}")
        root = self._root_url
        if root is None:
            raise RuntimeError("StubInference.route() needs the stub to be served (use serve())")
        with self._lock:
            self._routes[cid] = (rollout, progress)
            self._routes.move_to_end(cid)
            while len(self._routes) > _MAX_ROUTES:
                self._routes.popitem(last=False)
        return f"{root}/{cid}"

    def calls(self, correlation_id: str | None = None) -> list[ModelCall]:
        """The model calls of one rollout (by correlation id), in order; None: calls without one."""
        with self._lock:
            return list(self._calls.get(correlation_id, ()))

    def policy_failure(self, correlation_id: str) -> str | None:
        """What first went wrong in the policy during one rollout, with the model call's number."""
        for number, call in enumerate(self.calls(correlation_id), 1):
            if call.policy_error is not None:
                return f"{call.policy_error}, on model call {number} of the rollout"
        return None

    def complete(self, request: Mapping[str, Any], *, correlation_id: str | None = None) -> dict[str, Any]:
        """Answer one chat-completions *request* body without HTTP; a refusal is a ValueError."""
        try:
            return self._complete(request, correlation_id, "")
        except _RequestError as exc:
            raise ValueError(str(exc)) from exc

    def clear(self) -> None:
        """Forget every call and route; calls still running are abandoned."""
        with self._lock:
            self.requests.clear()
            self.dropped_requests = 0
            self._calls.clear()
            self._routes.clear()
            self._epoch += 1
            self._workers = OffLoop(MAX_CONCURRENCY, "synth-policy")

    @property
    def last_request(self) -> dict[str, Any] | None:
        with self._lock:
            return self.requests[-1] if self.requests else None

    def _record(
        self, chat: ChatRequest, path: str, epoch: int | None, answer: dict[str, Any] | _RequestError
    ) -> None:
        if epoch is not None and epoch != self._epoch:
            return  # abandoned by a clear() (the test it belonged to ended): never recorded
        cid = chat.rollout.correlation_id
        status, response, failure = (200, answer, None) if isinstance(answer, dict) else answer.outcome()
        problem, trace = (redact(failure[0]), failure[1] and redact(failure[1])) if failure else (None, None)
        if trace is not None:
            log.warning("the stand-in model's policy %s, in rollout %s\n%s", problem, cid, trace)
        call = ModelCall(
            cid, path, dict(chat.body), status, response, chat.progress, chat.rollout, problem, trace
        )
        with self._lock:
            calls = self._calls.setdefault(cid, [])
            calls.append(call)
            if len(calls) > _MAX_CALLS_PER_ROLLOUT:  # calls without an id all land in one list
                del calls[0]
            if len(self._calls) > _MAX_ROUTES:
                self._calls.popitem(last=False)

    def _complete(
        self, request: Mapping[str, Any] | bytes, cid: str | None, path: str, epoch: int | None = None
    ) -> dict[str, Any]:
        body = _checked(request)
        with self._lock:
            if epoch is not None and epoch != self._epoch:
                ended = "the call was abandoned: the test its rollout belongs to ended before it started"
                raise _RequestError(503, ended, "abandoned", "server_error")
            self.requests.append(body)
            excess = len(self.requests) - max(1, self.max_requests)
            if excess > 0:
                del self.requests[:excess]
                self.dropped_requests += excess
            number = next(self._ids)
            routed = self._routes.get(cid) if cid is not None else None
            turn = len(self._calls.get(cid, ()))
        identity, progress = routed or (RolloutIdentity(correlation_id=cid), self.progress)
        chat = ChatRequest(body, identity, progress, turn)
        try:
            message = self._ask(chat, path)
        except _RequestError as exc:
            self._record(chat, path, epoch, exc)
            raise
        asked = _words(body["messages"])
        answered = _words(message.get("content")) + _words(message.get("tool_calls"))
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": asked, "completion_tokens": answered, "total_tokens": asked + answered}
        completion = {
            "id": f"chatcmpl-stub-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"] if isinstance(body.get("model"), str) else self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        }
        self._record(chat, path, epoch, completion)
        return completion

    def _ask(self, chat: ChatRequest, path: str) -> dict[str, Any]:
        if chat.rollout.correlation_id is None and self.require_correlation_id:
            refusal = NO_CORRELATION_ID.format(path=path or _CHAT_SUFFIX)
            raise _RequestError(400, f"{refusal}; {KEEP_INFERENCE_URL}", "missing_correlation_id")
        try:
            reply = self.policy(chat)
        except (KeyboardInterrupt, GeneratorExit):
            raise
        except BaseException as exc:  # pytest.fail() and sys.exit() in a policy fail it too
            raise _policy_error(f"raised {type(exc).__name__}: {exc}", _policy_failure(exc)) from exc
        if isinstance(reply, PolicyError):
            raise _RequestError(reply.status, reply.message, reply.code, "server_error")
        try:
            message = _as_message(reply)
            json.dumps(message, allow_nan=False)  # what cannot be sent fails here, named
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise _policy_error(
                f"returned a message the stub cannot send ({type(exc).__name__}: {exc})"
            ) from None
        return message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await serve_lifespan(receive, send)
        path = scope.get("path", "/").rstrip("/") or "/"
        method = scope.get("method", "GET")
        if path.endswith(_CHAT_SUFFIX) and method == "POST":
            params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            found = [params[key][0] for key in _ID_QUERY_KEYS if params.get(key, [""])[0]]
            found += [s for s in reversed(path.split("/")[:-2]) if s.startswith(_ID_PREFIXES)]
            cid = found[0] if found else None
            raw = await read_body(receive, _MAX_BODY_BYTES)
            with self._lock:
                epoch, workers = self._epoch, self._workers
            status, body = await workers.run(self._answer, self._complete, raw, cid, path, epoch)
        else:
            status, body = self._answer(self._route, method, path)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _answer(handler: Callable[..., dict[str, Any]], *args: Any) -> tuple[int, bytes]:
        try:
            status, payload = 200, handler(*args)
        except _RequestError as exc:
            status, payload = exc.status, exc.body()
        return status, json.dumps(payload, allow_nan=False).encode()  # replies are checked when made

    def _route(self, method: str, path: str) -> dict[str, Any]:
        if path.endswith(_CHAT_SUFFIX):
            raise _RequestError(405, f"use POST for {path}", "method_not_allowed")
        if path.endswith(_MODELS_SUFFIX) and method == "GET":
            model = {"id": self.model, "object": "model", "created": 0, "owned_by": "pytest-synth-rl"}
            return {"object": "list", "data": [model]}
        if path in ("/", "/health") and method in ("GET", "HEAD"):
            return {"status": "ok", "service": "stub-inference"}
        raise _RequestError(404, f"no route {method} {path}; the stub serves {_SERVED}", "not_found")

    @contextlib.contextmanager
    def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Serve the stub on loopback; yields ``http://127.0.0.1:<port>/v1`` (no key needed)."""
        from pytest_synth_rl.taskapp.serving import serve_asgi  # uvicorn loads only when a stub is served

        with serve_asgi(self, host=host, port=port, description="stub model", **_SERVING) as server:
            self._root_url, self.base_url = server.url, f"{server.url}/v1"
            try:
                yield self.base_url
            finally:
                self._root_url = self.base_url = None

    def __repr__(self) -> str:
        source = f"replies={len(self.replies)}" if self.replies is not None else f"policy={self.policy!r}"
        return f"StubInference({source}, requests={len(self.requests)})"
