"""The policy protocol, ``policy(request: ChatRequest) -> PolicyReply``, and the canned policies."""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_synth_rl.errors import ConfigProblem, SynthError, SynthUsageError, closest


@dataclass(frozen=True)
class Progress:
    """How far training is: ``step`` of ``steps`` (1-based); ``Progress(0, 0)`` outside a job."""

    step: int = 0
    steps: int = 0

    def __post_init__(self) -> None:
        for name in ("step", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Progress.{name} must be an int >= 0, got {value!r}")
        if self.step > self.steps:
            raise ValueError(f"Progress.step ({self.step}) must not exceed Progress.steps ({self.steps})")

    @property
    def fraction(self) -> float:
        """The fraction of training done, in [0, 1] (0.0 outside a job)."""
        return self.step / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class RolloutIdentity:
    """Which rollout a model call belongs to (all None outside any rollout)."""

    correlation_id: str | None = None
    seed: int | None = None
    env_name: str | None = None
    mode: str | None = None  # "rl" or "eval"
    run_id: str | None = None


def last_user_text(request: Mapping[str, Any]) -> str:
    """The text of the last ``user`` message ("" if none); of a content list, its text parts."""
    messages = request.get("messages")
    messages = messages if isinstance(messages, list) else []
    users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(str(p) for p in parts)
    return content if isinstance(content, str) else ""


def offered_tools(request: Mapping[str, Any]) -> list[str]:
    """Names of the tools (or legacy ``functions``) the request offers."""
    tools = [tool.get("function") for tool in request.get("tools") or [] if isinstance(tool, Mapping)]
    functions = [*tools, *(request.get("functions") or [])]
    return [f["name"] for f in functions if isinstance(f, Mapping) and isinstance(f.get("name"), str)]


_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "tool_choice",
)


@dataclass(frozen=True)
class ChatRequest(Mapping[str, Any]):
    """One chat-completions call as a policy sees it (also a read-only mapping over ``body``)."""

    body: Mapping[str, Any]
    rollout: RolloutIdentity = field(default_factory=RolloutIdentity)
    progress: Progress = field(default_factory=Progress)
    turn: int = 0

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return [dict(m) for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []

    @property
    def tools(self) -> list[str]:
        return offered_tools(self.body)

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def sampling(self) -> dict[str, Any]:
        """The sampling options present in the request (temperature, top_p, max_tokens...)."""
        return {key: self.body[key] for key in _SAMPLING_KEYS if key in self.body}

    @property
    def prompt(self) -> str:
        return last_user_text(self.body)


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes; *arguments* is JSON-encoded on the wire if it is a dict."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def to_wire(self, index: int = 0) -> dict[str, Any]:
        return tool_call(self.name, self.arguments, call_id=self.id or f"call_{index}")


@dataclass(frozen=True)
class Reply:
    """The assistant's answer: text, tool calls, or both."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def tool(cls, name: str, /, **arguments: Any) -> Reply:
        """A reply that is one call of tool *name* with *arguments*."""
        return cls(tool_calls=(ToolCall(name, arguments),))

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_wire(i) for i, call in enumerate(self.tool_calls)]
        return message


@dataclass(frozen=True)
class PolicyError:
    """Make the model endpoint answer an HTTP error (e.g. 429 or 503) instead of a completion."""

    message: str
    status: int = 500
    code: str = "policy_error"

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 400 <= self.status <= 599:
            raise ValueError(f"PolicyError.status must be an HTTP error status 400..599, got {self.status!r}")


PolicyReply = str | Reply | ToolCall | PolicyError | Mapping[str, Any]


@runtime_checkable
class Policy(Protocol):
    """Answers one chat-completions call of a rollout."""

    def __call__(self, request: ChatRequest, /) -> PolicyReply: ...


def as_chat_request(request: Mapping[str, Any]) -> ChatRequest:
    """*request* as a :class:`ChatRequest` (a bare body: outside any rollout, progress 0)."""
    return request if isinstance(request, ChatRequest) else ChatRequest(request)


def tool_call(name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None) -> dict[str, Any]:
    """One OpenAI tool call on the wire; *arguments* may be a dict (it is JSON-encoded as the API does)."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return {
        "id": call_id or f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


def answer_with(
    request: Mapping[str, Any], value: Any, *, tool: str = "submit_answer", argument: str = "answer"
) -> Reply:
    """*value* as a call of *tool* (``{argument: value}``) if the request offers it, else as text."""
    if tool in offered_tools(request):
        return Reply(tool_calls=(ToolCall(tool, {argument: value}),))
    return Reply(text=str(value))


def policy_problem(policy: object) -> str | None:
    """Why *policy* cannot answer the stand-in model's calls, or None (checked when given)."""
    if not callable(policy):
        return f"{policy!r:.80} is not callable"
    if inspect.isclass(policy):
        return f"{policy.__name__} is a class, not a policy: pass an instance, {policy.__name__}(...)"
    call = policy if inspect.isroutine(policy) else getattr(policy, "__call__", policy)  # noqa: B004
    if inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call):
        return f"{policy!r:.80} is async; the stand-in model calls policies synchronously: use a plain def"
    takes = signature_problem(policy, 1)
    return f"{takes}; a policy takes one argument, the chat request" if takes else None


def signature_problem(function: Any, arguments: int) -> str | None:
    """``"<function> takes (a, b)"`` if *function* cannot take *arguments* positional arguments."""
    try:
        return _signature_problem(function, arguments)
    except TypeError:  # an unhashable callable
        return _signature_problem.__wrapped__(function, arguments)


@functools.lru_cache(maxsize=256)
def _signature_problem(function: Any, arguments: int) -> str | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*range(arguments))
    except TypeError:
        return f"{function!r:.80} takes {signature}"
    return None


class ScriptedPolicy:
    """``ScriptedPolicy("42")``, ``ScriptedPolicy(Reply.tool("submit", answer=1), "done")`` or
    ``ScriptedPolicy(lambda request: ...)``. Fixed replies go by the call's turn within its rollout
    (concurrent rollouts all see the same script), the last one repeating."""

    def __init__(self, *replies: PolicyReply | Callable[[ChatRequest], PolicyReply]) -> None:
        __tracebackhide__ = True
        functions = [r for r in replies if callable(r)]
        if not replies or (functions and len(replies) > 1):
            got = f"{len(functions)} function(s) among {len(replies)} replies" if replies else "no replies"
            problem = "takes at least one reply (the last one repeats) or one function of the request"
            hint = 'e.g. ScriptedPolicy("42"), ScriptedPolicy("a", "b") or ScriptedPolicy(lambda r: ...)'
            raise SynthUsageError([ConfigProblem("ScriptedPolicy", f"{problem}, not both; got {got}", hint)])
        self._function: Callable[[ChatRequest], PolicyReply] | None = functions[0] if functions else None
        self.replies: tuple[PolicyReply, ...] = () if functions else tuple(replies)  # type: ignore[arg-type]

    def __call__(self, request: Mapping[str, Any]) -> PolicyReply:
        request = as_chat_request(request)
        if self._function is not None:
            return self._function(request)
        return self.replies[min(request.turn, len(self.replies) - 1)]

    def __repr__(self) -> str:
        if self._function is not None:
            return f"ScriptedPolicy({getattr(self._function, '__name__', '<function>')})"
        return f"ScriptedPolicy({len(self.replies)} replies)"


class ReplayError(SynthError, ValueError):
    """A replay file is missing or has a bad line; the message names the file and line."""


def _replayed_message(completion: Any, where: str) -> dict[str, Any]:
    choices = completion.get("choices") if isinstance(completion, Mapping) else None
    if not isinstance(choices, list) or not choices:
        keys = sorted(completion)[:8] if isinstance(completion, Mapping) else type(completion).__name__
        raise ReplayError(
            f"{where}: expected a chat.completion object with a non-empty 'choices' list, got {keys} "
            '(hint: one completion per line, or {"request": {...}, "response": {...}})'
        )
    message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
    if not isinstance(message, Mapping):
        raise ReplayError(
            f"{where}: choices[0] has no 'message' object (hint: record non-streamed completions)"
        )
    return dict(message)


class ReplayPolicy:
    """``ReplayPolicy("recorded.jsonl")``: replies recorded from a real model, one ``chat.completion``
    or ``{"request": ..., "response": ...}`` a line. Lines with a request are matched by prompt; the
    others go by turn within the rollout, the last one repeating. A malformed file fails on load."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.by_prompt: dict[str, dict[str, Any]] = {}
        self.in_order: list[dict[str, Any]] = []
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            relative = f" (relative to the working directory: {self.path.absolute()})"
            relative = "" if self.path.is_absolute() else relative
            raise ReplayError(
                f"cannot read replay file {str(path)!r}{relative}: {reason} (hint: pass an absolute path, "
                "e.g. Path(__file__).parent / 'recorded.jsonl' for a file next to the test)"
            ) from None
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{self.path}:{number}"
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise ReplayError(f"{where}: not valid JSON ({exc})") from None
            if isinstance(entry, Mapping) and "response" in entry:
                request = entry.get("request")
                if not isinstance(request, Mapping):
                    raise ReplayError(f"{where}: 'request' must be the chat request object it answered")
                self.by_prompt[last_user_text(request)] = _replayed_message(entry["response"], where)
            else:
                self.in_order.append(_replayed_message(entry, where))
        if not self.by_prompt and not self.in_order:
            raise ReplayError(f"{self.path}: no completions (expected one JSON object per line)")

    def __call__(self, request: Mapping[str, Any]) -> PolicyReply:
        request = as_chat_request(request)
        found = self.by_prompt.get(request.prompt)
        if found is not None:
            return found
        if self.by_prompt and not self.in_order:
            near = closest(request.prompt, self.by_prompt)
            hint = f"; did you mean {near!r}?" if near is not None else ""
            return PolicyError(
                f"{self.path} has no recorded completion for the prompt {request.prompt!r:.200}{hint}",
                status=404,
                code="not_recorded",
            )
        return self.in_order[min(request.turn, len(self.in_order) - 1)]

    def __repr__(self) -> str:
        return f"ReplayPolicy({str(self.path)!r}, {len(self.by_prompt) + len(self.in_order)} completions)"
