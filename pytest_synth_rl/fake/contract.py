"""Does a task app keep the contract the trainer relies on? One pass over every endpoint.

A health probe proves the app is up; the trainer needs more: that it enforces the key, describes
its taskset and individual seeds, answers ``/info``, and that a rollout echoes the id it was given
and reports a numeric reward (what training optimises) and a well-formed trace (what verifiers
score). Each of those breaks in its own way in real task apps, and the trainer reports them late
and vaguely, so :func:`check_task_app_contract` checks them all up front, keeps going after a
failure, and returns a :class:`ContractReport` listing every problem once.

The check is calibrated on what upstream's own apps do and the trainer accepts (contract §10.6):
"auth enforced" is judged on ``/task_info`` and ``/rollout`` (demo apps answer ``/health``
without a key); an empty ``/task_info?seed=N`` list and a rollout that never asks the model are
*warnings*, shown in the report but never failing it. The rollout reward is read from
``reward_info`` (0.5.0), ``metrics`` (0.4.x) or both, and the report names every SDK era whose
response schema the answer satisfies.

The rollout really runs: a :class:`~pytest_synth_rl.fake.model.inference.StubInference` is served on
loopback for the duration of the check and passed as ``policy.config.inference_url``, so the app
exercises its model-calling path. The request carries both ``run_id`` and
``trace_correlation_id`` so apps of every rollout schema era accept it.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_synth_rl.errors import TaskAppError, excerpt, keywords_checked
from pytest_synth_rl.fake.model import Progress, RolloutIdentity
from pytest_synth_rl.fake.model.inference import KEEP_INFERENCE_URL, InferencePolicy, StubInference
from pytest_synth_rl.fake.model.rewards import reward_of
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, redact
from pytest_synth_rl.taskapp.health import json_or_none, task_app_auth_headers, task_app_base_url
from pytest_synth_rl.taskapp.loopback import is_loopback_host
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = [
    "ROLLOUT_ERAS",
    "ContractCheck",
    "ContractReport",
    "TaskAppContractError",
    "assert_task_app_contract",
    "check_task_app_contract",
]

_REJECTED = (400, 401, 403)
_REWARD_KEYS = ("reward_info", "metrics")

#: The rollout response schemas of the SDK releases that submit RL jobs: era label, the id key
#: it requires, the reward key it requires (contract §4.4 and §10.1).
ROLLOUT_ERAS: tuple[tuple[str, str, str], ...] = (
    ("0.4.4–0.4.11", "run_id", "metrics"),
    ("0.4.12", "trace_correlation_id", "metrics"),
    ("0.5.0", "trace_correlation_id", "reward_info"),
)
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


@dataclass(frozen=True)
class ContractCheck:
    """One verdict: what was checked, whether it held, what we expected and what we got.

    ``required=False`` marks informational checks: shown in the report (a failed one as a
    warning), never a problem.
    """

    name: str
    passed: bool
    expected: str
    got: str
    required: bool = True

    @property
    def is_problem(self) -> bool:
        return self.required and not self.passed

    @property
    def is_warning(self) -> bool:
        return not self.required and not self.passed

    def render(self) -> str:
        return f"{self.name}: expected {self.expected}; got {self.got}"


@dataclass
class ContractReport:
    """All checks of one run, in order; ``ok`` when no required check failed.

    ``eras`` names the SDK releases whose rollout response schema the app's answer satisfies
    (labels from :data:`ROLLOUT_ERAS`; empty when the rollout failed or satisfies none).
    """

    url: str
    checks: list[ContractCheck] = field(default_factory=list)
    eras: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def problems(self) -> list[ContractCheck]:
        return [c for c in self.checks if c.is_problem]

    @property
    def warnings(self) -> list[ContractCheck]:
        """Failed informational checks: worth knowing, never a reason to fail."""
        return [c for c in self.checks if c.is_warning]

    def summary(self) -> str:
        """``ok``, ``ok, 1 warning(s)``, ``2 problem(s), 1 warning(s)``."""
        parts = [f"{len(self.problems)} problem(s)" if self.problems else "ok"]
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s)")
        return ", ".join(parts)

    def check(self, name: str) -> ContractCheck:
        """The check called *name* (``KeyError`` listing the names if absent)."""
        for item in self.checks:
            if item.name == name:
                return item
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def render(self) -> str:
        """A plain-text table, one row per check; failed checks also say what was expected."""
        width = max([len(c.name) for c in self.checks] + [5])
        lines = [f"task app contract: {self.url} ({self.summary()})"]
        for c in self.checks:
            result = "PASS" if c.passed else ("FAIL" if c.required else "WARN")
            lines.append(f"  {result}  {c.name.ljust(width)}  {_clip(c.got, 160)}")
            if not c.passed:
                lines.append(f"        {' ' * width}  expected: {c.expected}")
        return redact("\n".join(lines))

    def raise_for_problems(self) -> None:
        """Raise :class:`TaskAppContractError` listing every failed required check (and, apart,
        the warnings); warnings alone never raise."""
        if self.problems:
            raise TaskAppContractError(self)

    def __str__(self) -> str:
        return self.render()


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class TaskAppContractError(TaskAppError, AssertionError):
    """The task app broke its contract. An ``AssertionError`` too, so pytest shows it as a failure."""

    def __init__(self, report: ContractReport) -> None:
        self.report = report
        problems = report.problems
        listing = "\n".join(f"  - {p.render()}" for p in problems)
        if report.warnings:
            listing += "\n  warnings (not failures):\n" + "\n".join(
                f"  - {w.render()}" for w in report.warnings
            )
        super().__init__(
            f"task app at {report.url} breaks the Synth task app contract "
            f"({len(problems)} problem(s)):\n{listing}",
            url=report.url,
            hint="see the contract: GET /health, GET /task_info[?seed=N], GET /info, "
            "POST /rollout; /task_info and /rollout must reject requests without the key",
            details={"problems": [p.name for p in problems], "warnings": [w.name for w in report.warnings]},
        )


# -- response inspection ------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _status_text(response: httpx.Response, ok_status: int | None = None) -> str:
    """``HTTP <status>``, plus a body excerpt unless the status is the expected one."""
    if response.status_code == ok_status:
        return f"HTTP {response.status_code}"
    return f"HTTP {response.status_code}: {excerpt(response.text, 160)}"


def _looks_like_task_info(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    task = value.get("task")
    return isinstance(task, dict) and bool(task.get("id")) and bool(task.get("name"))


def _one_reward_verdict(where: str, metrics: Any) -> tuple[bool, str]:
    """The reward under one key (*where*), read as the fake's jobs read it."""
    try:
        key, _ = reward_of(metrics, where)
    except ValueError as exc:
        return False, str(exc)
    legacy = "legacy " if key != "outcome_reward" else ""
    return True, f"{legacy}{where}.{key} = {metrics[key]!r}"


def _reward_verdict(body: dict[str, Any]) -> tuple[bool, str]:
    """Every reward key present must hold a numeric reward; at least one must be present."""
    present = [key for key in _REWARD_KEYS if body.get(key) is not None]
    if not present:
        return False, f"neither `reward_info` nor `metrics` in the response (keys {sorted(body)})"
    verdicts = [_one_reward_verdict(key, body[key]) for key in present]
    return all(ok for ok, _ in verdicts), "; ".join(text for _, text in verdicts)


def rollout_eras(body: dict[str, Any]) -> tuple[str, ...]:
    """The :data:`ROLLOUT_ERAS` labels whose schema *body* satisfies: its id key is a non-empty
    string and its reward key an object (from 0.4.12 on, with a numeric ``outcome_reward``)."""
    eras = []
    for label, id_key, reward_key in ROLLOUT_ERAS:
        ident, reward = body.get(id_key), body.get(reward_key)
        if not (isinstance(ident, str) and ident and isinstance(reward, dict)):
            continue
        if id_key == "trace_correlation_id" and not _is_number(reward.get("outcome_reward")):
            continue
        eras.append(label)
    return tuple(eras)


def _era_text(label: str) -> str:
    for era, id_key, reward_key in ROLLOUT_ERAS:
        if era == label:
            return f"{era} ({id_key} + {reward_key})"
    return label


def _trajectories_ok(trajectories: Any) -> bool:
    """The 0.4.0-era shape: a list of objects, each with a ``steps`` list."""
    return isinstance(trajectories, list) and all(
        isinstance(t, dict) and isinstance(t.get("steps", []), list) for t in trajectories
    )


def _trace_verdict(body: dict[str, Any]) -> tuple[bool, str]:
    trace = body.get("trace")
    trajectories = body.get("trajectories")
    if trace is None and trajectories is None:
        return True, "no trace (optional)"
    if trace is not None:
        if not isinstance(trace, dict):
            return False, f"trace is {type(trace).__name__}, not an object"
        if "event_history" not in trace and "metadata" not in trace:
            return False, f"trace has neither event_history nor metadata (keys {sorted(trace)})"
        history, metadata = trace.get("event_history"), trace.get("metadata")
        if "event_history" in trace and not isinstance(history, list):
            return False, f"trace.event_history is {type(history).__name__}, not a list"
        if "metadata" in trace and not isinstance(metadata, dict):
            return False, f"trace.metadata is {type(metadata).__name__}, not an object"
    if trajectories is not None and not _trajectories_ok(trajectories):
        return False, "trajectories is not a list of objects with a steps list"
    shown = []
    if isinstance(trace, dict):
        n = len(trace.get("event_history") or [])
        shown.append(f"trace with {n} event(s)")
    if trajectories is not None:
        shown.append(f"{len(trajectories)} legacy trajectory(ies)")
    return True, ", ".join(shown)


# -- the check ----------------------------------------------------------------------------------
class _Checker:
    def __init__(self, client: httpx.Client, base: str, headers: SecretHeaders) -> None:
        self.client = client
        self.base = base
        self.headers = headers
        self.report = ContractReport(url=redact(base))

    def add(self, name: str, passed: bool, expected: str, got: str, *, required: bool = True) -> None:
        self.report.checks.append(ContractCheck(name, passed, expected, redact(got), required))

    def get(
        self, path: str, *, auth: bool = True, params: Any = None, headers: SecretHeaders | None = None
    ) -> httpx.Response | str:
        sent = headers if headers is not None else self.headers if auth else {}
        try:
            return self.client.get(self.base + path, headers=sent, params=params)
        except httpx.HTTPError as exc:
            return f"request failed: {type(exc).__name__}: {exc}"

    def post(
        self, path: str, body: Any, *, auth: bool = True, headers: SecretHeaders | None = None
    ) -> httpx.Response | str:
        sent = headers if headers is not None else self.headers if auth else {}
        try:
            return self.client.post(self.base + path, json=body, headers=sent)
        except httpx.HTTPError as exc:
            return f"request failed: {type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _RolloutPlan:
    """What the check's rollouts ask for; each rollout gets fresh ids from :meth:`request`."""

    seed: int
    env_name: str
    policy_name: str
    model: str
    #: The stand-in model, served: each rollout gets its own inference URL on it, ending in the
    #: rollout's correlation id, as the trainer hands them out.
    stub: StubInference
    timeout: float
    env_guessed: bool = False  # no env_name given or advertised: "default" is the check's guess

    @property
    def expected_rollout(self) -> str:
        expected = "HTTP 2xx with a JSON object"
        if self.env_guessed:
            expected += (
                f" (the request's env_name={self.env_name!r} is a guess: GET /task_info advertises no "
                "taskset.env_name or environment; pass check_task_app_contract(..., env_name=...))"
            )
        return expected

    def request(self, tag: str) -> tuple[dict[str, Any], str, str]:
        """A request every rollout schema era accepts, with its ``run_id`` and correlation id."""
        token = uuid.uuid4().hex[:12]
        run_id = f"{tag}-{token}"
        correlation_id = f"trace_{tag}-{token}"
        identity = RolloutIdentity(
            correlation_id=correlation_id, seed=self.seed, env_name=self.env_name, mode="rl", run_id=run_id
        )
        inference_url = self.stub.route(identity, Progress())
        request: dict[str, Any] = {
            "run_id": run_id,
            "trace_correlation_id": correlation_id,
            "env": {"env_name": self.env_name, "seed": self.seed, "config": {"seed": self.seed}},
            "policy": {
                "policy_name": self.policy_name,
                "config": {"model": self.model, "inference_url": inference_url},
            },
            "ops": ["agent", "env"],
            "on_done": "reset",
            "safety": {"max_time_s": self.timeout, "max_ops": 100000},
            "mode": "rl",
            "record": {"return_trace": True, "trace_format": "structured"},
        }
        return request, run_id, correlation_id


@keywords_checked
def check_task_app_contract(
    url: str,
    api_key: str | Secret | None,
    *,
    seed: int = 0,
    env_name: str | None = None,
    policy_name: str | None = None,
    policy: InferencePolicy | None = None,
    timeout: float = 10.0,
    model: str = DEFAULT_MODEL,
) -> ContractReport:
    """Check the task app at *url* against the contract; never raises for contract breaches.

    ``env_name`` defaults to the taskset's ``env_name`` (or the TaskInfo ``environment``) when
    the app advertises one. ``policy`` decides what the stub model answers during the rollout
    (default: the correct answer to the arithmetic example). Raises :class:`TaskAppError` only
    for a malformed *url*.
    """
    base = task_app_base_url(url)
    headers = task_app_auth_headers(api_key)
    # Loopback traffic must never go through a proxy configured in the environment.
    loopback = is_loopback_host(httpx.URL(base).host)
    with httpx.Client(
        timeout=httpx.Timeout(timeout), verify=shared_ssl_context(), trust_env=not loopback
    ) as client:
        checker = _Checker(client, base, headers)
        root = checker.get("/", auth=False)
        if isinstance(root, str):
            checker.add("reachable", False, f"an HTTP server at {redact(base)}", root)
            return checker.report
        # The SDK's template serves ``/``, but the trainer never calls it: a missing root is
        # worth a warning, not a failure.
        checker.add(
            "GET / (no auth)",
            root.status_code == 200,
            "HTTP 200 without a key",
            _status_text(root, 200),
            required=False,
        )
        # The stub model serves every rollout of the check, the unauthenticated probe included
        # (an app that does not enforce the key runs that one for real).
        stub = StubInference(policy=policy)
        stub.require_correlation_id = True
        with stub.serve():
            # Read the advertised env name first, so the probe rollout is one the app can run.
            plain_task_info = checker.get("/task_info")
            seeded_task_info = checker.get("/task_info", params={"seed": seed})
            chosen = env_name or _advertised_env(plain_task_info, seeded_task_info)
            plan = _RolloutPlan(
                seed=seed,
                env_name=chosen or "default",
                env_guessed=chosen is None,
                policy_name=policy_name or "contract-check",
                model=model,
                stub=stub,
                timeout=timeout,
            )
            _check_health_and_auth(checker, plan)
            _check_task_info(checker, seed, plain_task_info, seeded_task_info)
            _check_info(checker)
            _check_rollout(checker, plan, stub)
        return checker.report


def _check_health_and_auth(checker: _Checker, plan: _RolloutPlan) -> None:
    """``/health`` must answer with the key; the key is *enforced* on ``/task_info`` and
    ``/rollout``. ``/health`` without a key is not judged: upstream demos answer it with 200
    ``{"authorized": false}`` and later releases drop auth on it entirely."""
    health = checker.get("/health")
    if isinstance(health, str):
        checker.add("GET /health", False, "HTTP 200 with the key", health)
    else:
        checker.add(
            "GET /health", health.status_code == 200, "HTTP 200 with the key", _status_text(health, 200)
        )
    probes = {
        "/task_info": checker.get("/task_info", auth=False),
        "/rollout": checker.post("/rollout", plan.request("contract-nokey")[0], auth=False),
    }
    expected = "400/401/403 for /task_info and /rollout without a key"
    if checker.headers:
        # A key of the same shape that is not the app's: an app that only checks a key is there
        # lets the trainer in with any key, and anyone else too.
        wrong = task_app_auth_headers(Secret(f"wrong-key-{uuid.uuid4().hex}"))
        probes["/task_info with a wrong key"] = checker.get("/task_info", headers=wrong)
        request = plan.request("contract-wrongkey")[0]
        probes["/rollout with a wrong key"] = checker.post("/rollout", request, headers=wrong)
        expected += " or with a wrong one"
    got: list[str] = []
    enforced = True
    for path, response in probes.items():
        if isinstance(response, str):
            got.append(f"{path}: {response}")
            enforced = False
            continue
        got.append(f"{path}=HTTP {response.status_code}")
        enforced = enforced and response.status_code in _REJECTED
    checker.add("auth enforced", enforced, expected, ", ".join(got))


def _advertised_env(plain: httpx.Response | str, seeded: httpx.Response | str) -> str | None:
    """The env name the app advertises: ``taskset.env_name`` in ``GET /task_info``, else the
    seed's TaskInfo ``environment``."""
    if not isinstance(plain, str) and plain.status_code == 200:
        body = json_or_none(plain)
        taskset = body.get("taskset") if isinstance(body, dict) else None
        name = taskset.get("env_name") if isinstance(taskset, dict) else None
        if isinstance(name, str) and name:
            return name
    if not isinstance(seeded, str) and seeded.status_code == 200:
        info = json_or_none(seeded)
        environment = info.get("environment") if _looks_like_task_info(info) else None
        if isinstance(environment, str) and environment:
            return environment
    return None


def _check_task_info(
    checker: _Checker, seed: int, plain: httpx.Response | str, seeded: httpx.Response | str
) -> None:
    """Check both /task_info forms (answers fetched up front, with the key)."""
    expected = "HTTP 200 with a JSON object holding `taskset`"
    if isinstance(plain, str):
        checker.add("GET /task_info", False, expected, plain)
    else:
        body = json_or_none(plain)
        passed = plain.status_code == 200 and isinstance(body, dict) and "taskset" in body
        got = _status_text(plain, 200 if passed else None)
        if plain.status_code == 200 and not passed:
            got = f"HTTP 200 without `taskset`: {excerpt(plain.text, 160)}"
        checker.add("GET /task_info", passed, expected, got)
    expected = "HTTP 200 with a TaskInfo (task.id, task.name) or a list of them"
    name = f"GET /task_info?seed={seed}"
    if isinstance(seeded, str):
        checker.add(name, False, expected, seeded)
        return
    body = json_or_none(seeded)
    if seeded.status_code != 200:
        checker.add(name, False, expected, _status_text(seeded))
    elif _looks_like_task_info(body):
        checker.add(name, True, expected, f"TaskInfo {body['task']['id']!r}")
    elif body == []:
        # The SDK's own template answers [] when it has no instances, and its validator accepts
        # any 200: training still runs, but nothing describes the seeds.
        checker.add(
            name, False, expected, "HTTP 200 with an empty list: no TaskInfo for this seed", required=False
        )
    elif isinstance(body, list) and all(_looks_like_task_info(item) for item in body):
        checker.add(name, True, expected, f"list of {len(body)} TaskInfo")
    elif isinstance(body, dict) and "taskset" in body:
        checker.add(name, False, expected, "the taskset description: the seed parameter was ignored")
    else:
        checker.add(name, False, expected, f"HTTP 200 without task.id/task.name: {excerpt(seeded.text, 160)}")


def _check_info(checker: _Checker) -> None:
    info = checker.get("/info")
    expected = "HTTP 200 with a JSON object"
    if isinstance(info, str):
        checker.add("GET /info", False, expected, info)
        return
    body = json_or_none(info)
    passed = info.status_code == 200 and isinstance(body, dict)
    got = _status_text(info) if not passed else f"HTTP 200, keys {sorted(body)}"
    checker.add("GET /info", passed, expected, got)


def _check_model_urls(checker: _Checker, stub: StubInference, refused_before: int) -> None:
    """Fails when the rollout's model calls left the URL they were given (its correlation id)."""
    refused = [call.path for call in stub.calls(None)][refused_before:]
    checker.add(
        "model calls keep the inference URL",
        not refused,
        "chat calls under policy.config.inference_url, carrying the rollout's correlation id",
        f"{len(refused)} call(s) to POST {', '.join(dict.fromkeys(refused))} without it; {KEEP_INFERENCE_URL}"
        if refused
        else "every call carried it",
    )


def _check_rollout(checker: _Checker, plan: _RolloutPlan, stub: StubInference) -> None:
    calls_before = len(stub.requests)
    refused_before = len(stub.calls(None))
    request, run_id, correlation_id = plan.request("contract")
    response = checker.post("/rollout", request)
    if isinstance(response, str):
        checker.add("POST /rollout", False, "HTTP 200", response)
        _check_model_urls(checker, stub, refused_before)
        return
    body = json_or_none(response)
    # Any 2xx, as the fake (and a trainer's client checking for success) takes it; the SDK's
    # own server answers 200.
    success = 200 <= response.status_code < 300
    if not success or not isinstance(body, dict):
        got = f"HTTP {response.status_code} but not a JSON object" if success else _status_text(response)
        checker.add("POST /rollout", False, plan.expected_rollout, got)
        _check_model_urls(checker, stub, refused_before)
        return
    checker.add("POST /rollout", True, "HTTP 2xx with a JSON object", f"HTTP {response.status_code}")

    echoed = {k: body.get(k) for k in ("trace_correlation_id", "run_id") if body.get(k) is not None}
    sent = {"trace_correlation_id": correlation_id, "run_id": run_id}
    matches = [k for k, v in echoed.items() if v == sent[k]]
    wrong = [f"{k}={v!r}" for k, v in echoed.items() if v != sent[k]]
    checker.add(
        "rollout echoes its id",
        bool(matches) and not wrong,
        f"trace_correlation_id={correlation_id!r} or run_id={run_id!r}, and no other value for either",
        ", ".join(wrong) if wrong else (", ".join(f"{k} echoed" for k in matches) or "no id in the response"),
    )
    passed, got = _reward_verdict(body)
    checker.add(
        "rollout reward is numeric",
        passed,
        "a numeric outcome_reward under `reward_info` (0.5.0) or `metrics` (0.4.x), or both",
        got,
    )
    eras = rollout_eras(body)
    checker.report.eras = eras
    checker.add(
        "rollout response era",
        bool(eras),
        "the response schema of at least one SDK era: "
        + ", ".join(_era_text(label) for label, _, _ in ROLLOUT_ERAS),
        ("satisfies " + ", ".join(_era_text(label) for label in eras))
        if eras
        else "satisfies none of the eras 0.4.4 to 0.5.0",
        required=False,
    )
    passed, got = _trace_verdict(body)
    checker.add(
        "rollout trace shape",
        passed,
        "trace {event_history: list, metadata: object} if present",
        got,
    )
    calls = len(stub.requests) - calls_before
    checker.add(
        "rollout called the model",
        calls > 0,
        "at least one request to policy.config.inference_url",
        f"{calls} chat completion request(s)",
        required=False,
    )
    _check_model_urls(checker, stub, refused_before)


def assert_task_app_contract(url: str, api_key: str | Secret | None, **kwargs: Any) -> ContractReport:
    """:func:`check_task_app_contract`, raising :class:`TaskAppContractError` on any problem."""
    report = check_task_app_contract(url, api_key, **kwargs)
    report.raise_for_problems()
    return report
