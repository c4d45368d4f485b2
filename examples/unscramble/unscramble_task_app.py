"""A word-level Synth task app: unscramble the letters into the hidden word, graded exactly.

A second, non-arithmetic example (FastAPI). The environment is deterministic: ``seed`` -> one word
from :data:`WORDS` and a scrambled spelling of it. ``POST /rollout`` asks the model behind
``policy.config.inference_url`` the way upstream's math demo does,
``{inference_url}/v1/chat/completions``, grades the reply (1.0 if it is the word, else 0.0), and
answers a response valid for every rollout schema era (``metrics`` and ``reward_info``, both ids
echoed). Every route but ``/`` requires ``ENVIRONMENT_API_KEY``.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

ENV_NAME = "unscramble"
VERSION = "1.0.0"
WORDS = (
    "planet", "garden", "silver", "bridge", "candle", "forest", "window", "rocket",
    "pencil", "marble", "winter", "button", "coffee", "dragon", "island", "jungle",
)  # fmt: skip
SYSTEM_PROMPT = "Unscramble the letters into one English word. Reply with the word only."


def scramble(seed: int) -> tuple[str, str]:
    """Seed -> (word, letters): the letters are a shuffle of the word that differs from it."""
    rng = random.Random(seed)
    word = WORDS[rng.randrange(len(WORDS))]
    letters = list(word)
    while "".join(letters) == word:
        rng.shuffle(letters)
    return word, "".join(letters)


def question(letters: str) -> str:
    return f"Letters: {letters}"


def grade(word: str, reply: str | None) -> float:
    return 1.0 if (reply or "").strip().strip(".").lower() == word else 0.0


class Env(BaseModel):
    model_config = ConfigDict(extra="allow")
    env_name: str | None = None
    seed: int = 0


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    config: dict[str, object] = Field(default_factory=dict)


class RolloutRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    trace_correlation_id: str | None = None
    env: Env
    policy: PolicySpec


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}})


def create_app() -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
            app.state.http = client
            yield

    app = FastAPI(title="Unscramble task app", version=VERSION, lifespan=lifespan)

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.url.path != "/":
            expected = os.environ.get("ENVIRONMENT_API_KEY", "")
            presented = request.headers.get("x-api-key", "")
            bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not expected or expected not in (presented, bearer):
                return _error(401, "unauthorised", "send ENVIRONMENT_API_KEY as X-API-Key")
        return await call_next(request)

    @app.get("/")
    async def root() -> dict[str, object]:
        return {"status": "ok", "service": ENV_NAME}

    @app.get("/health")
    async def health() -> dict[str, object]:
        return {"healthy": True, "service": ENV_NAME}

    @app.get("/info")
    async def info() -> dict[str, object]:
        return {"service": {"task": {"id": ENV_NAME, "name": "Unscramble"}, "version": VERSION}}

    @app.get("/task_info", response_model=None)
    async def task_info(seed: int | None = None) -> dict[str, object]:
        if seed is None:
            return {"taskset": {"id": ENV_NAME, "env_name": ENV_NAME, "words": len(WORDS)}}
        _, letters = scramble(seed)
        return {
            "task": {"id": ENV_NAME, "name": "Unscramble"},
            "environment": ENV_NAME,
            "task_metadata": {"letters": letters},
        }

    @app.post("/rollout", response_model=None)
    async def rollout(body: RolloutRequest, request: Request) -> dict[str, object] | JSONResponse:
        if body.env.env_name not in (None, ENV_NAME):
            return _error(400, "unknown_env", f"this task app serves env_name={ENV_NAME!r}")
        inference_url = body.policy.config.get("inference_url")
        if not isinstance(inference_url, str) or not inference_url:
            return _error(422, "missing_inference_url", "policy.config.inference_url is required")
        word, letters = scramble(body.env.seed)
        chat = {
            "model": str(body.policy.config.get("model") or "Qwen/Qwen3-0.6B"),
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": question(letters)},
            ],
            "temperature": 0.0,
            "max_tokens": 16,
        }
        client: httpx.AsyncClient = request.app.state.http
        reply = await client.post(f"{inference_url.rstrip('/')}/v1/chat/completions", json=chat)
        if reply.status_code != 200:
            return _error(502, "inference_error", f"the model answered HTTP {reply.status_code}")
        answer = reply.json()["choices"][0]["message"].get("content")
        reward = grade(word, answer)
        metrics = {
            "outcome_reward": reward,
            "episode_returns": [reward],
            "mean_return": reward,
            "num_steps": 1,
        }
        return {
            "run_id": body.run_id,
            "trace_correlation_id": body.trace_correlation_id or body.run_id,
            "metrics": metrics,
            "reward_info": metrics,
            "details": {"letters": letters, "answer": answer, "correct": reward == 1.0},
        }

    return app


app = create_app()
