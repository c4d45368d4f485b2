"""A complete Synth task app: one-step arithmetic, graded exactly.

Written the way a team writes its own task app (FastAPI, async httpx to the model), so it doubles
as the reference target for pytest-synth-rl's tests and as a template:

* the environment is deterministic: ``seed`` -> one problem (``a + b``, ``a - b`` or ``a * b``),
  so the same seed always asks the same question;
* ``POST /rollout`` asks the model behind ``policy.config.inference_url`` (an OpenAI-compatible
  ``/chat/completions``) to answer through a ``submit_answer`` tool, grades the answer, and
  returns the rollout response: the echoed ``trace_correlation_id`` and ``run_id``, the reward
  under both ``metrics`` and ``reward_info`` (``outcome_reward`` 1.0/0.0, ``event_rewards``,
  ``details``) so every SDK era from 0.4.4 to 0.5.0 accepts it, and a v3-shaped ``trace``;
* every route except ``/`` checks ``ENVIRONMENT_API_KEY`` the way Synth task apps do.

Run it alone with ``uvicorn arithmetic_task_app:app --port 8114`` (after exporting
``ENVIRONMENT_API_KEY``), or in a test::

    with InProcessTaskApp(task_app_path="examples/arithmetic_task_app.py") as task_app:
        check_task_app_contract(task_app.url, task_app.api_key).raise_for_problems()
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

APP_ID = "arithmetic"
ENV_NAME = "arithmetic"
VERSION = "1.0.0"
SUBMIT_ANSWER = "submit_answer"
OPERATIONS = ("+", "-", "*")
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"

SYSTEM_PROMPT = (
    "You are a careful calculator. Work out the integer result and report it by calling the "
    f"`{SUBMIT_ANSWER}` tool exactly once."
)

SUBMIT_ANSWER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SUBMIT_ANSWER,
        "description": "Submit the final integer answer to the arithmetic problem.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "integer", "description": "the exact result"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}


# -- the environment ----------------------------------------------------------------------------
class Problem(BaseModel):
    """One arithmetic question, fully determined by its seed."""

    seed: int
    left: int
    op: str
    right: int

    @property
    def answer(self) -> int:
        if self.op == "+":
            return self.left + self.right
        if self.op == "-":
            return self.left - self.right
        return self.left * self.right

    @property
    def question(self) -> str:
        return f"What is {self.left} {self.op} {self.right}?"


def make_problem(seed: int) -> Problem:
    """Seed -> problem. Multiplication uses smaller factors so every answer stays readable."""
    rng = random.Random(seed)
    op = rng.choice(OPERATIONS)
    if op == "*":
        left, right = rng.randint(2, 12), rng.randint(2, 12)
    else:
        left, right = rng.randint(0, 99), rng.randint(0, 99)
    return Problem(seed=seed, left=left, op=op, right=right)


def grade(problem: Problem, answer: int | None) -> float:
    return 1.0 if answer is not None and answer == problem.answer else 0.0


# -- request models (lenient: accept every rollout schema era) ----------------------------------
class EnvSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    env_id: str | None = None
    env_name: str | None = None
    seed: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    policy_id: str | None = None
    policy_name: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class SafetySpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    max_time_s: float = 3600.0


class RolloutRequest(BaseModel):
    """``trace_correlation_id`` (0.4.12) and ``run_id`` (0.4.0-0.4.11) are both optional here,
    but at least one is required; unknown fields (``ops``, ``mode``, ``record``...) are kept."""

    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    trace_correlation_id: str | None = None
    env: EnvSpec
    policy: PolicySpec
    on_done: str = "reset"
    safety: SafetySpec = Field(default_factory=SafetySpec)


# -- authentication (contract §4.2) -------------------------------------------------------------
def _allowed_keys(explicit: str | None) -> list[str]:
    if explicit:
        primary = explicit
    else:
        primary = os.environ.get("ENVIRONMENT_API_KEY") or os.environ.get("DEV_ENVIRONMENT_API_KEY") or ""
    keys = [primary] if primary else []
    for alias in os.environ.get("ENVIRONMENT_API_KEY_ALIASES", "").split(","):
        alias = alias.strip()
        if alias and alias not in keys:
            keys.append(alias)
    return keys


def _presented_keys(request: Request) -> list[str]:
    found: list[str] = []
    single = request.headers.get("x-api-key")
    if single:
        found.append(single.strip())
    for part in request.headers.get("x-api-keys", "").split(","):
        if part.strip():
            found.append(part.strip())
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        found.append(authorization[7:].strip())
    return found


def _masked(key: str) -> str:
    # The contract's diagnostic fields carry key prefixes; we keep the fields but never reveal
    # more than a fingerprint, because these bodies end up in test reports.
    return f"{key[:4]}…" if len(key) >= 10 else "…"


def _check_key(request: Request, explicit: str | None) -> None:
    """Raise the contract's answer (400 wrong key, 503 none configured) unless a key matches."""
    allowed = _allowed_keys(explicit)
    if not allowed:
        raise HTTPException(
            503,
            {
                "error": {
                    "code": "missing_environment_api_key",
                    "message": "ENVIRONMENT_API_KEY is not configured on the task app server",
                }
            },
        )
    presented = _presented_keys(request)
    if any(key in allowed for key in presented):
        return
    raise HTTPException(
        400,
        {
            "error": {
                "code": "unauthorised",
                "message": "API key missing or invalid: send it as X-API-Key, X-API-Keys or "
                "Authorization: Bearer",
                "allowed_first15": [_masked(k) for k in allowed],
                "allowed_count": len(allowed),
                "got_first15": [_masked(k) for k in presented],
                "got_lens": [len(k) for k in presented],
            }
        },
    )


# -- helpers ------------------------------------------------------------------------------------
def _task_info(problem: Problem | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "task": {
            "id": APP_ID,
            "name": "Arithmetic",
            "description": "Answer one integer arithmetic question through a tool call.",
            "version": VERSION,
        },
        "environment": ENV_NAME,
        "dataset": {
            "id": "arithmetic-seeded",
            "name": "Seeded arithmetic",
            "version": VERSION,
            "splits": ["train", "test"],
            "default_split": "train",
            "description": "seed -> a + b, a - b (0..99) or a * b (2..12)",
        },
        "inference": {"model": DEFAULT_MODEL, "tool": SUBMIT_ANSWER},
        "limits": {"max_turns": 1, "max_response_tokens": 256, "timeout_seconds": 60},
        "task_metadata": {},
    }
    if problem is not None:
        info["task_metadata"] = {"seed": problem.seed, "operation": problem.op, "question": problem.question}
    return info


def _taskset() -> dict[str, Any]:
    return {
        "id": APP_ID,
        "name": "Arithmetic",
        "env_name": ENV_NAME,
        "version": VERSION,
        "operations": list(OPERATIONS),
        "splits": ["train", "test"],
        "seeds": "any integer",
        "description": "One-step arithmetic; the seed fully determines the problem.",
    }


def _chat_url(inference_url: str) -> str:
    """``{inference_url}/chat/completions``, keeping a query string such as ``?cid=...``."""
    parts = urlsplit(inference_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def _extract_answer(message: dict[str, Any]) -> tuple[int | None, str]:
    """(answer, how it was given) from the assistant message."""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        if function.get("name") != SUBMIT_ANSWER:
            continue
        arguments = function.get("arguments")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
            value = parsed["answer"]
            if isinstance(value, bool):
                raise TypeError("boolean answer")
            return int(value), "tool_call"
        except (ValueError, TypeError, KeyError):
            return None, "malformed tool call"
    content = message.get("content")
    if isinstance(content, str):
        digits = [token for token in content.replace("?", " ").split() if token.lstrip("-").isdigit()]
        if digits:
            return int(digits[-1]), "text"
    return None, "no answer"


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message, **extra}})


# -- the app ------------------------------------------------------------------------------------
def create_app(*, api_key: str | None = None, require_api_key: bool = True) -> FastAPI:
    """Build the task app.

    ``api_key`` pins the accepted key instead of reading ``ENVIRONMENT_API_KEY`` at each
    request; ``require_api_key=False`` turns authentication off (as ``TaskAppConfig`` allows).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # One connection pool for all rollouts; closed when the server stops.
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
            app.state.http = client
            yield

    async def authenticate(request: Request) -> None:
        if require_api_key:
            _check_key(request, api_key)

    app = FastAPI(title="Arithmetic task app", version=VERSION, lifespan=lifespan)
    # Every route but the root needs the key. A router dependency rather than an HTTP middleware:
    # the key is checked before the handler just the same, without the middleware's extra task
    # and streams around every request.
    routes = APIRouter(dependencies=[Depends(authenticate)])

    @app.get("/")
    @app.head("/")
    async def root() -> dict[str, Any]:
        return {"status": "ok", "service": APP_ID}

    @routes.get("/health")
    async def health() -> dict[str, Any]:
        keys = _allowed_keys(api_key)
        prefix = f"{keys[0][:6]}..." if keys else ""
        return {"healthy": True, "auth": {"required": require_api_key, "expected_prefix": prefix}}

    @routes.get("/info")
    async def info() -> dict[str, Any]:
        base = _task_info()
        return {
            "service": {"task": base["task"], "version": VERSION},
            "dataset": base["dataset"],
            "rubrics": {"outcome": {"criteria": "exact integer answer"}, "events": None},
            "inference": base["inference"],
            "limits": base["limits"],
        }

    @routes.get("/task_info", response_model=None)
    async def task_info(
        seed: Annotated[list[int] | None, Query()] = None,
        seeds: Annotated[list[str] | None, Query()] = None,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        wanted: list[int] = list(seed or [])
        for item in seeds or []:
            for part in item.split(","):
                if part.strip():
                    try:
                        wanted.append(int(part))
                    except ValueError:
                        raise HTTPException(422, f"seeds must be integers, got {part!r}") from None
        if not wanted:
            return {"taskset": _taskset()}
        infos = [_task_info(make_problem(s)) for s in wanted]
        return infos[0] if len(infos) == 1 else infos

    @routes.post("/rollout", response_model=None)
    async def rollout(body: RolloutRequest, request: Request) -> JSONResponse:
        if not body.run_id and not body.trace_correlation_id:
            raise HTTPException(
                422,
                [
                    {
                        "loc": ["body", "trace_correlation_id"],
                        "msg": "send trace_correlation_id (or the older run_id)",
                        "type": "missing",
                    }
                ],
            )
        if body.env.env_name not in (None, ENV_NAME):
            return _error(
                400, "unknown_env", f"this task app serves env_name={ENV_NAME!r}", got=body.env.env_name
            )
        config = body.policy.config
        inference_url = config.get("inference_url") or config.get("api_base") or config.get("base_url")
        if not isinstance(inference_url, str) or not inference_url:
            return _error(422, "missing_inference_url", "policy.config.inference_url is required")
        seed = body.env.seed if body.env.seed is not None else int(body.env.config.get("seed", 0))
        problem = make_problem(seed)
        model = str(config.get("model") or DEFAULT_MODEL)
        chat_request = {
            "model": model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"{problem.question} Reply by calling {SUBMIT_ANSWER}."},
            ],
            "tools": [SUBMIT_ANSWER_TOOL],
            "tool_choice": "auto",
            "temperature": float(config.get("temperature", 0.0)),
            "max_tokens": int(config.get("max_tokens", config.get("max_completion_tokens", 256))),
        }
        url = _chat_url(inference_url)
        started = time.time()
        client: httpx.AsyncClient = request.app.state.http
        try:
            reply = await client.post(url, json=chat_request, timeout=min(60.0, body.safety.max_time_s))
        except httpx.HTTPError as exc:
            return _error(
                502, "inference_unreachable", f"calling the model failed: {exc!r}", inference_url=url
            )
        if reply.status_code != 200:
            return _error(
                502,
                "inference_error",
                f"the model endpoint answered HTTP {reply.status_code}",
                inference_url=url,
                body=reply.text[:500],
            )
        try:
            message = reply.json()["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return _error(
                502, "inference_bad_response", f"unusable chat completion ({exc!r})", inference_url=url
            )
        answer, answered_by = _extract_answer(message)
        reward = grade(problem, answer)
        correlation_id = body.trace_correlation_id or body.run_id or ""
        details = {
            "seed": seed,
            "question": problem.question,
            "expected": problem.answer,
            "answer": answer,
            "answered_by": answered_by,
            "correct": reward == 1.0,
        }
        response: dict[str, Any] = {
            "trace_correlation_id": correlation_id,
            "metrics": {
                "outcome_reward": reward,
                "event_rewards": [reward],
                "outcome_objectives": {"reward": reward},
                "num_steps": 1,
                "num_episodes": 1,
                "details": details,
            },
            "trace": {
                "event_history": [
                    {
                        "type": "lm_call",
                        "time": started,
                        "model": model,
                        "request": chat_request,
                        "response": message,
                    },
                    {"type": "environment", "time": time.time(), "reward": reward, "details": details},
                ],
                "markov_blanket_message_history": [],
                "metadata": {
                    "session_id": f"session-{uuid.uuid4().hex[:12]}",
                    "env_name": ENV_NAME,
                    "policy_name": body.policy.policy_name,
                    "seed": seed,
                    "trace_correlation_id": correlation_id,
                },
            },
            "inference_url": inference_url,
        }
        # Both ids and both reward keys (the same object): the response then validates under
        # every rollout schema from synth-ai 0.4.4 (run_id + metrics) through 0.4.12
        # (trace_correlation_id + metrics) to 0.5.0 (trace_correlation_id + reward_info).
        response["run_id"] = body.run_id or correlation_id
        response["reward_info"] = response["metrics"]
        # Already plain JSON: answering it directly spares FastAPI a second walk to encode it.
        return JSONResponse(response)

    app.include_router(routes)
    return app


app = create_app()
