"""A replay policy: answers taken from a JSONL file of real chat completions.

Each line is a ``chat.completion`` or ``{"request": ..., "response": ...}``. Lines with a request
are matched by prompt (the last user message); the others are served by turn within the rollout,
the last one repeating. A malformed file fails on load, naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_synth_rl.errors import SynthError, closest
from pytest_synth_rl.fake.model.policy import PolicyError, PolicyReply, as_chat_request, last_user_text


class ReplayError(SynthError, ValueError):
    """A replay file is missing or has a bad line; the message names the file and line."""


def _message(completion: Any, where: str) -> dict[str, Any]:
    choices = completion.get("choices") if isinstance(completion, Mapping) else None
    if not isinstance(choices, list) or not choices:
        keys = sorted(completion)[:8] if isinstance(completion, Mapping) else type(completion).__name__
        raise ReplayError(
            f"{where}: expected a chat.completion object with a non-empty 'choices' list, got {keys} "
            '(hint: one completion per line, or {"request": {...}, "response": {...}})'
        )
    first = choices[0]
    message = first.get("message") if isinstance(first, Mapping) else None
    if not isinstance(message, Mapping):
        raise ReplayError(
            f"{where}: choices[0] has no 'message' object (hint: record non-streamed completions)"
        )
    return dict(message)


class ReplayPolicy:
    """``ReplayPolicy("recorded.jsonl")``: replies recorded from a real model."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.by_prompt: dict[str, dict[str, Any]] = {}
        self.in_order: list[dict[str, Any]] = []
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            where = (
                ""
                if self.path.is_absolute()
                else f" (relative to the working directory: {self.path.absolute()})"
            )
            raise ReplayError(
                f"cannot read replay file {str(path)!r}{where}: {reason} (hint: pass an absolute path, "
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
                self.by_prompt[last_user_text(request)] = _message(entry["response"], where)
            else:
                self.in_order.append(_message(entry, where))
        if not self.by_prompt and not self.in_order:
            raise ReplayError(f"{self.path}: no completions (expected one JSON object per line)")

    def __call__(self, request: Mapping[str, Any]) -> PolicyReply:
        request = as_chat_request(request)
        if self.by_prompt:
            found = self.by_prompt.get(request.prompt)
            if found is not None:
                return found
            if not self.in_order:
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
