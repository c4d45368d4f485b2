"""What ``synth_rl_job(...)`` and ``synth_rl_job.async_job(...)`` accept, checked before any job
is built.

Without this, a misspelled keyword reached ``JobBase.from_config`` as a raw ``TypeError`` naming
an internal function, ``config=5`` failed inside pathlib and ``tags="x"`` much later. Every
problem is listed at once, named the way the user wrote the call; a key's value is never shown.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from pytest_synth_rl.clock import Clock
from pytest_synth_rl.config.known_keys import near_miss
from pytest_synth_rl.errors import ConfigProblem, a_type, unknown_argument
from pytest_synth_rl.secrets.masking import Secret

__all__ = ["forwarded_names", "job_argument_problems"]


@functools.cache
def forwarded_names() -> tuple[str, ...]:
    """The keywords passed on to ``RLJob.from_config`` (*config* stands for its ``config_path``)."""
    from pytest_synth_rl.client import RLJob

    parameters = inspect.signature(RLJob.from_config).parameters
    return tuple(name for name in parameters if name not in ("config_path", "overrides"))


def _seconds(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 < float(value) < float("inf")


def _tags(value: object) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _is(kind: type | tuple[type, ...]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, kind)


#: name: (None means "the default", check, what it must be, an example).
_Rule = tuple[bool, Callable[[object], bool], str, str]


@functools.cache
def _rules(sync: bool) -> dict[str, _Rule]:
    from pytest_synth_rl.client import RetryPolicy

    client = httpx.Client if sync else httpx.AsyncClient
    transport = httpx.BaseTransport if sync else httpx.AsyncBaseTransport
    text, key, flag = _is(str), _is((str, Secret)), _is(bool)
    return {
        "backend_url": (True, text, "an http(s) URL string", "backend_url='https://api.usesynth.ai'"),
        "api_key": (True, key, "a key string or a Secret", "api_key=os.environ['SYNTH_API_KEY']"),
        "task_app_url": (True, text, "an http(s) URL string", "task_app_url='http://127.0.0.1:8001'"),
        "task_app_api_key": (True, key, "a key string or a Secret", "task_app_api_key=app.api_key"),
        "idempotency_key": (True, text, "a string", "idempotency_key='nightly-42'"),
        "allow_experimental": (True, flag, "True, False or None", "allow_experimental=True"),
        "skip_health_check": (False, flag, "True or False", "skip_health_check=True"),
        "allow_new_keys": (False, flag, "True or False", "allow_new_keys=True"),
        "tags": (True, _tags, "a mapping of str to str", "tags={'team': 'rl'}"),
        "request_timeout": (False, _seconds, "a finite number of seconds > 0", "request_timeout=30"),
        "clock": (True, _is(Clock), "a Clock", "clock=synth_clock"),
        "retry": (True, _is(RetryPolicy), "a RetryPolicy", "retry=RetryPolicy()"),
        "http_client": (
            True,
            _is(client),
            f"an {client.__module__}.{client.__name__}",
            f"http_client=httpx.{client.__name__}()",
        ),
        "transport": (
            True,
            _is(transport),
            f"an {transport.__module__}.{transport.__name__}",
            "transport=httpx.MockTransport(handler)",
        ),
    }


def _value_problems(call: str, kwargs: Mapping[str, Any]) -> list[ConfigProblem]:
    """Forwarded arguments of the wrong type (``None`` is fine where it means the default)."""
    rules = _rules(not call.endswith("async_job"))
    problems = []
    for name, value in kwargs.items():
        rule = rules.get(name)
        if rule is None or (value is None and rule[0]) or rule[1](value):
            continue
        nullable, _, expected, example = rule
        shown = "..." if name.endswith("api_key") else f"{value!r:.60}"  # a key's value is never shown
        problems.append(
            ConfigProblem(
                key=f"{call}.{name}",
                message=f"got {call}({name}={shown}), {a_type(value)}; expected {expected}"
                + (" or None" if nullable and "None" not in expected else ""),
                hint=f"e.g. {call}({example}), or leave {name} out",
            )
        )
    return problems


def _name_problems(call: str, kwargs: Mapping[str, Any]) -> list[ConfigProblem]:
    """Keywords the call does not take, with a "did you mean" (their values are not shown)."""
    forwarded = forwarded_names()
    accepted = ["config", "overrides", *forwarded]
    usage = f"it takes config=, overrides= and {', '.join(f'{name}=' for name in forwarded)}"
    problems = []
    for name in kwargs:
        if name in forwarded:
            continue
        guess = "config" if name in ("config_path", "path") else near_miss(name, accepted)
        problems.append(unknown_argument(call, name, guess, usage))
    return problems


def _config_problems(call: str, config: object) -> list[ConfigProblem]:
    if config is None or (isinstance(config, str) and config.strip()) or isinstance(config, os.PathLike):
        return []
    hint = (
        f"e.g. {call}(config='rl.toml') (relative to the test's synth_rl config, the test file or "
        "the rootdir), or leave it out for the test's synth_rl marker config"
    )
    if isinstance(config, Mapping):
        hint = f"to change keys of the test's config pass them by keyword: {call}(overrides={{...}})"
    return [
        ConfigProblem(
            key=f"{call}.config",
            message=f"got {call}(config={config!r:.60}), {a_type(config)}; expected the path of an "
            "RL TOML file (a non-empty str or a pathlib.Path)",
            hint=hint,
        )
    ]


def _override_problems(call: str, overrides: object) -> list[ConfigProblem]:
    example = f"e.g. {call}(overrides={{'training.batch_size': 2}})"
    if overrides is None:
        return []
    if not isinstance(overrides, Mapping):
        return [
            ConfigProblem(
                key=f"{call}.overrides",
                message=f"got {call}(overrides={overrides!r:.60}), {a_type(overrides)}; "
                "expected a mapping of dotted config keys to values",
                hint=example,
            )
        ]
    return [
        ConfigProblem(
            key=f"{call}.overrides",
            message=f"got {call}(overrides={{{key!r:.60}: ...}}): the key is "
            + (a_type(key) if not isinstance(key, str) else "blank")
            + "; expected dotted config keys as non-empty strings",
            hint=example,
        )
        for key in overrides
        if not isinstance(key, str) or not key.strip()
    ]


def job_argument_problems(
    call: str, config: object, overrides: object, kwargs: Mapping[str, Any]
) -> list[ConfigProblem]:
    """Everything wrong with one ``synth_rl_job(...)`` call (*call* names it in messages)."""
    return [
        *_name_problems(call, kwargs),
        *_value_problems(call, kwargs),
        *_config_problems(call, config),
        *_override_problems(call, overrides),
    ]
