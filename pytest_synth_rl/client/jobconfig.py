"""Where a job's backend, keys and task app come from (arguments, then the environment, resolved once
when the job is made), and the preflight steps: upload the task app's key sealed (contract §1.2, §10.5)
and have the backend reach the task app with it (§10.3), so a job that would fail on its first rollout
fails now.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from nacl.public import PublicKey, SealedBox

from pytest_synth_rl.client.retry import Call, RetryPolicy, Sender, Steps, answer_error, read_object
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.config import normalize_backend_url
from pytest_synth_rl.errors import (
    ConfigError,
    ConfigProblem,
    EnvKeyUploadError,
    SynthUsageError,
    TaskAppVerificationError,
    a_type,
    seconds_problem,
)
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, key_problem, mask_secret

DEFAULT_BACKEND_URL = "https://api.usesynth.ai"
#: Read in order when no ``backend_url`` is given, as ``--synth-backend`` reads them.
BACKEND_URL_ENV_VARS: tuple[str, ...] = ("SYNTH_BACKEND_URL", "BACKEND_BASE_URL")


def usage_error(key: str, message: str, hint: str) -> SynthUsageError:
    return SynthUsageError([ConfigProblem(key=key, message=message, hint=hint)])


def _text(value: str | None, env_name: str | None = None) -> str | None:
    """*value* stripped, else the environment variable *env_name* stripped; None when blank."""
    value = (value or "").strip() or (os.environ.get(env_name, "").strip() if env_name else "")
    return value or None


def resolve_backend_url(backend_url: str | None = None) -> str:
    """``backend_url``, then ``SYNTH_BACKEND_URL``, ``BACKEND_BASE_URL``, the public service."""
    source, value = "backend_url", _text(backend_url)
    for name in BACKEND_URL_ENV_VARS:
        if value is None:
            source, value = name, _text(None, name)
    if value is None:
        return DEFAULT_BACKEND_URL
    if not _is_http_url(value):
        hint = f"use e.g. {DEFAULT_BACKEND_URL} (with or without /api)"
        raise usage_error(source, f"{value!r} is not an absolute http(s) URL", hint)
    return value


@functools.lru_cache(maxsize=64)  # every job of a suite names the same backend; parsing is costly
def _is_http_url(value: str) -> bool:
    try:
        parsed = httpx.URL(value)
    except httpx.InvalidURL:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def resolve_api_key(api_key: str | Secret | None = None) -> Secret:
    """``api_key``, then ``SYNTH_API_KEY``; a job without a key is a configuration error."""
    if isinstance(api_key, Secret) and api_key:
        return api_key
    key = _key(api_key if isinstance(api_key, str) else None, "api_key", "SYNTH_API_KEY")
    if key is None:
        message, hint = "no Synth API key was given and SYNTH_API_KEY is not set", "set SYNTH_API_KEY in "
        raise usage_error("api_key", message, hint + "the environment or pass api_key=")
    return key


def _key(value: str | None, argument: str, env_name: str) -> Secret | None:
    """*value*, else *env_name*, as a key; one no HTTP header could carry is refused here."""
    text = _text(value, env_name)
    if text and (problem := key_problem(text)) is not None:
        raise usage_error(argument, problem, f"pass {argument}= or set {env_name} to the key")
    return Secret(text) if text else None


def _is(kind: type | tuple[type, ...]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, kind)


def _tags(value: object) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


#: name: (None means the default, check, what it must be, an example); overrides checks None itself.
ArgumentRule = tuple[bool, Callable[[object], bool], str, str]


@functools.cache
def argument_rules(sync: bool) -> dict[str, ArgumentRule]:
    """What each job argument must be, for :class:`RLJob` (*sync*) or :class:`AsyncRLJob`."""
    client = httpx.Client if sync else httpx.AsyncClient
    transport = httpx.BaseTransport if sync else httpx.AsyncBaseTransport
    text, key, flag = _is(str), _is((str, Secret)), _is(bool)
    # fmt: off
    return {
        "overrides": (False, _is((type(None), Mapping)), "a mapping of dotted config keys to values",
                      "overrides={'training.batch_size': 2}"),
        "backend_url": (True, text, "an http(s) URL string", "backend_url='https://api.usesynth.ai'"),
        "api_key": (True, key, "a key string or a Secret", "api_key=os.environ['SYNTH_API_KEY']"),
        "task_app_url": (True, text, "an http(s) URL string", "task_app_url='http://127.0.0.1:8001'"),
        "task_app_api_key": (True, key, "a key string or a Secret", "task_app_api_key=app.api_key"),
        "idempotency_key": (True, text, "a string", "idempotency_key='nightly-42'"),
        "allow_experimental": (True, flag, "True, False or None", "allow_experimental=True"),
        "skip_health_check": (False, flag, "True or False", "skip_health_check=True"),
        "allow_new_keys": (False, flag, "True or False", "allow_new_keys=True"),
        "tags": (True, _tags, "a mapping of str to str", "tags={'team': 'rl'}"),
        "request_timeout": (False, lambda v: seconds_problem(v) is None, "a finite number of seconds > 0",
                            "request_timeout=30"),
        "clock": (True, _is(Clock), "a Clock", "clock=synth_clock"),
        "retry": (True, _is(RetryPolicy), "a RetryPolicy", "retry=RetryPolicy()"),
        "http_client": (True, _is(client), f"an {client.__module__}.{client.__name__}",
                        f"http_client=httpx.{client.__name__}()"),
        "transport": (True, _is(transport), f"an {transport.__module__}.{transport.__name__}",
                      "transport=httpx.MockTransport(handler)"),
    }
    # fmt: on


def argument_problems(
    call: str, values: Mapping[str, Any], rules: Mapping[str, ArgumentRule], hints: Mapping[str, str]
) -> list[ConfigProblem]:
    """A problem for each of *values* its rule refuses, naming ``call(name=...)``; keys are never shown."""
    problems = []
    for name, value in values.items():
        rule = rules.get(name)
        if rule is None or (value is None and rule[0]) or rule[1](value):
            continue
        nullable, _, expected, example = rule
        shown = "..." if name.endswith("api_key") else f"{value!r:.60}"
        expected += " or None" if nullable and "None" not in expected else ""
        message = f"got {call}({name}={shown}), {a_type(value)}; expected {expected}"
        hint = hints.get(name, f"e.g. {call}({example}), or leave {name} out")
        problems.append(ConfigProblem(f"{call}.{name}", message, hint))
    return problems


@dataclass
class RLJobConfig:
    """Everything needed to submit or follow one job, already resolved (field names as in the upstream SDK)"""

    config_path: Path | None
    backend_url: str
    api_key: Secret
    task_app_url: str | None = None
    task_app_api_key: Secret | None = None
    allow_experimental: bool | None = None
    overrides: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    tags: Mapping[str, str] | None = None
    allow_new_keys: bool = False
    api_base: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, Secret):
            self.api_key = Secret(str(self.api_key))
        if self.task_app_api_key is not None and not isinstance(self.task_app_api_key, Secret):
            self.task_app_api_key = Secret(str(self.task_app_api_key))
        self.api_base = normalize_backend_url(self.backend_url)

    @classmethod
    def resolve(
        cls,
        config_path: str | os.PathLike[str] | None,
        *,
        backend_url: str | None = None,
        api_key: str | Secret | None = None,
        task_app_url: str | None = None,
        task_app_api_key: str | Secret | None = None,
        allow_experimental: bool | None = None,
        overrides: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        tags: Mapping[str, str] | None = None,
        allow_new_keys: bool = False,
    ) -> RLJobConfig:
        """Arguments first, then ``SYNTH_BACKEND_URL`` / ``BACKEND_BASE_URL``, ``SYNTH_API_KEY``,
        ``TASK_APP_URL``, ``ENVIRONMENT_API_KEY``; a *config_path* that is not a file is reported here."""
        given = {name: value for name, value in locals().items() if name in argument_rules(True)}
        if problems := argument_problems("RLJobConfig.resolve", given, argument_rules(True), {}):
            raise SynthUsageError(problems)
        path = Path(config_path) if config_path is not None else None
        if path is not None and not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            hint = "pass the path of an RL TOML config (relative paths are resolved from the working "
            hint += f"directory, {os.getcwd()!r})"
            problem = ConfigProblem("config_path", f"RL config file {str(path)!r} {what}", hint)
            raise ConfigError([problem], path=str(path))
        return cls(
            path,
            resolve_backend_url(backend_url),
            resolve_api_key(api_key),
            _text(task_app_url, "TASK_APP_URL"),
            (task_app_api_key or None)
            if isinstance(task_app_api_key, Secret)
            else _key(task_app_api_key, "task_app_api_key", "ENVIRONMENT_API_KEY"),
            allow_experimental,
            dict(overrides) if overrides is not None else None,
            _text(idempotency_key),
            dict(tags) if tags is not None else None,
            allow_new_keys,
        )


ENV_KEY_NAME = "ENVIRONMENT_API_KEY"
SEALED_BOX_ALG = "libsodium.sealedbox.v1"
#: The backend refuses larger plaintexts; checked before anything is sent.
MAX_ENV_KEY_BYTES = 8 * 1024

_FIX_BACKEND = (
    "check backend_url / BACKEND_BASE_URL: it must be a Synth backend (or a fake of it) that serves "
    "the environment-key routes under /api/v1"
)


@dataclass(frozen=True)
class EnvKeyUpload:
    """What the backend said about an uploaded key. ``verified`` is None when not asked."""

    url: str
    name: str
    id: str | None = None
    updated_at: str | None = None
    verified: bool | None = None


@dataclass(frozen=True)
class TaskAppVerification:
    """The backend's verdict on a task app: key prefixes tried (``candidates_first15``) and its probes."""

    task_url: str
    any_ok: bool
    candidates_first15: list[str] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def statuses(self) -> list[Any]:
        return [attempt.get("status") for attempt in self.attempts]

    def describe(self) -> str:
        keys = ", ".join(mask_secret(c) for c in self.candidates_first15) or "none"
        wheres = (
            (a.get("path") or a.get("url") or a.get("endpoint"), a.get("status", "?")) for a in self.attempts
        )
        tried = [f"{where} -> {status}" if where else f"status {status}" for where, status in wheres]
        return f"keys tried: {keys}; attempts: {', '.join(tried) or 'no attempts reported'}"


def _unusable(response: httpx.Response, what: str, fix: str = _FIX_BACKEND) -> EnvKeyUploadError:
    return answer_error(EnvKeyUploadError, response, f"uploading {ENV_KEY_NAME} failed: {what}", fix)


def _read_public_key(response: httpx.Response) -> bytes:
    """The 32 raw bytes of the backend's X25519 public key, after checking the advertised algorithm."""
    body, note = read_object(response)
    alg = body.get("alg")
    if alg is not None and alg != SEALED_BOX_ALG:
        message = f"the backend seals with alg {alg!r}, expected {SEALED_BOX_ALG!r}"
        raise _unusable(response, message, "this client only speaks libsodium sealed boxes; " + _FIX_BACKEND)
    encoded = body.get("public_key")
    if not isinstance(encoded, str) or not encoded.strip():
        reason = f" ({note})" if note else ""
        raise _unusable(response, f"the answer has no public_key string{reason}")
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _unusable(response, "public_key is not valid base64") from None
    if len(raw) != PublicKey.SIZE:
        message = f"public_key decodes to {len(raw)} bytes, expected {PublicKey.SIZE} (an X25519 key)"
        raise _unusable(response, message)
    return raw


def _read_upload(url: str, response: httpx.Response) -> EnvKeyUpload:
    body = read_object(response)[0]
    name, id_, at = (
        str(v) if isinstance(v := body.get(k), (str, int)) and not isinstance(v, bool) else None
        for k in ("name", "id", "updated_at")
    )
    return EnvKeyUpload(url, name or ENV_KEY_NAME, id_, at)


def _resolve_env_key(env_key: str | Secret | None, url: str) -> Secret:
    """``env_key`` argument, then ``ENVIRONMENT_API_KEY``; within the backend's size limit."""
    value = env_key.value if isinstance(env_key, Secret) else env_key
    value = (value or "").strip() or os.environ.get(ENV_KEY_NAME, "").strip()
    if not value:
        message = f"no task app key was given and {ENV_KEY_NAME} is not set"
        raise usage_error(
            "env_key", message, f"pass env_key= (the key the task app enforces) or set {ENV_KEY_NAME}"
        )
    key = env_key if isinstance(env_key, Secret) and env_key.value == value else Secret(value)
    size = len(value.encode("utf-8"))
    if size > MAX_ENV_KEY_BYTES:
        raise EnvKeyUploadError(
            f"{ENV_KEY_NAME} ({key.masked}) is {size} bytes; the backend accepts at most "
            f"{MAX_ENV_KEY_BYTES} bytes (8 KiB), so it was not uploaded to {url}",
            url=url,
            hint="use a shorter task app key (e.g. 64 hex characters) in the task app and in env_key=",
        )
    return key


def upload_steps(
    sender: Sender[Any], api_base: str, auth: SecretHeaders, env_key: str | Secret | None, verify: bool
) -> Steps[EnvKeyUpload]:
    """Fetch the backend's public key, post the sealed key, and with *verify* check it is held."""
    url = f"{api_base}/v1/env-keys"
    key = _resolve_env_key(env_key, url)
    key_call = partial(Call, headers=auth, error_cls=EnvKeyUploadError, fix=_FIX_BACKEND)
    action = f"fetching the backend's public key to upload {ENV_KEY_NAME} failed"
    fetch = key_call("public-key", "GET", f"{api_base}/v1/crypto/public-key", _read_public_key, action=action)
    public_key = yield from sender.send(fetch)
    ciphertext = SealedBox(PublicKey(public_key)).encrypt(key.value.encode("utf-8"))
    sealed = {"name": ENV_KEY_NAME, "ciphertext_b64": base64.b64encode(ciphertext).decode("ascii")}
    action, fix = f"uploading {ENV_KEY_NAME} failed", "the backend refused the sealed key; " + _FIX_BACKEND
    call = key_call(
        "env-key-upload", "POST", url, partial(_read_upload, url), json=sealed, action=action, fix=fix
    )
    upload = yield from sender.send(call)
    if not verify:
        return upload
    check, action = f"{url}/verify", f"checking that the backend holds {ENV_KEY_NAME} failed"
    present = yield from sender.send(key_call("env-key-verify", "GET", check, _reads_present, action=action))
    if not present:
        raise EnvKeyUploadError(
            f"the backend accepted {ENV_KEY_NAME} but {check} does not report it present",
            method="GET",
            url=check,
            hint="the upload did not stick: check that backend_url is one backend (not a load balancer "
            "over several) and that SYNTH_API_KEY is the account the trainer runs under",
        )
    return EnvKeyUpload(upload.url, upload.name, upload.id, upload.updated_at, verified=True)


def _reads_present(response: httpx.Response) -> bool:
    return read_object(response)[0].get("present") is True


def _read_verification(task_url: str, response: httpx.Response) -> TaskAppVerification:
    body, _ = read_object(response)
    candidates, attempts = body.get("candidates_first15"), body.get("attempts")
    result = TaskAppVerification(
        task_url=task_url,
        any_ok=bool(body.get("any_ok")),
        candidates_first15=[str(c) for c in candidates] if isinstance(candidates, list) else [],
        attempts=[a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else [],
        raw=body,
    )
    if not result.any_ok:
        raise TaskAppVerificationError(
            f"Task app verification failed (auth): the backend could not reach {task_url} with any "
            f"key it holds; {result.describe()}",
            method=response.request.method,
            url=str(response.request.url),
            status_code=response.status_code,
            hint="upload the key the task app enforces with upload_environment_api_key(env_key=...) "
            "and check that the task app URL is reachable from the backend",
        )
    return result


def verify_steps(
    sender: Sender[Any], api_base: str, auth: SecretHeaders, task_url: str | None
) -> Steps[TaskAppVerification]:
    """``POST /rl/verify_task_app`` for *task_url* (``TASK_APP_URL`` if None)."""
    url = (task_url or "").strip() or os.environ.get("TASK_APP_URL", "").strip()
    if not url:
        message, hint = "no task app URL was given and TASK_APP_URL is not set", "pass task_url= (the task "
        raise usage_error("task_url", message, hint + "app's base URL, e.g. InProcessTaskApp(...).url)")
    call = Call(
        operation="verify-task-app",
        method="POST",
        url=f"{api_base}/rl/verify_task_app",
        parse=partial(_read_verification, url),
        headers=auth,
        json={"endpoint_base_url": url},
        error_cls=TaskAppVerificationError,
        action=f"Task app verification failed for {url}",
        fix="the backend refused to verify the task app: check the task app URL (task_url= / "
        "TASK_APP_URL) and backend_url / BACKEND_BASE_URL",
    )
    return (yield from sender.send(call))
