"""Does a task app keep the contract the trainer relies on? Auth, ``/task_info``, ``/info`` and one
real rollout against a stub model, checked in one pass that lists every problem in a report."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import httpx

from pytest_synth_rl.errors import TaskAppError, excerpt, finite_number, keywords_checked
from pytest_synth_rl.fake.model import Progress, RolloutIdentity
from pytest_synth_rl.fake.model.inference import KEEP_INFERENCE_URL, InferencePolicy, StubInference
from pytest_synth_rl.fake.model.rewards import reward_of
from pytest_synth_rl.fake.rollouts import crash_note
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, redact
from pytest_synth_rl.taskapp.health import (
    json_or_none,
    key_refusal,
    key_refused,
    task_app_auth_headers,
    task_app_base_url,
)
from pytest_synth_rl.taskapp.loopback import is_loopback_host
from pytest_synth_rl.taskapp.serving import crash_of
from pytest_synth_rl.taskapp.tls import shared_ssl_context

_REJECTED = (400, 401, 403)
#: An endpoint's answer, or why there is none.
_Reply = httpx.Response | str
_REWARD_KEYS = ("reward_info", "metrics")

#: Rollout response schemas of the SDK releases that submit RL jobs: (era, id key, reward key).
ROLLOUT_ERAS: tuple[tuple[str, str, str], ...] = (
    ("0.4.4–0.4.11", "run_id", "metrics"),
    ("0.4.12", "trace_correlation_id", "metrics"),
    ("0.5.0", "trace_correlation_id", "reward_info"),
)


@dataclass(frozen=True)
class ContractCheck:
    """One verdict; ``required=False`` marks an informational check (a warning when failed)."""

    name: str
    passed: bool
    expected: str
    got: str
    required: bool = True

    def render(self) -> str:
        return f"{self.name}: expected {self.expected}; got {self.got}"


@dataclass
class ContractReport:
    """All checks of one run, in order; ``eras``: the :data:`ROLLOUT_ERAS` the rollout's answer fits."""

    url: str
    checks: list[ContractCheck] = field(default_factory=list)
    eras: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def problems(self) -> list[ContractCheck]:
        return [c for c in self.checks if c.required and not c.passed]

    @property
    def warnings(self) -> list[ContractCheck]:
        return [c for c in self.checks if not c.required and not c.passed]

    def summary(self) -> str:
        warned = f", {len(self.warnings)} warning(s)" if self.warnings else ""
        return (f"{len(self.problems)} problem(s)" if self.problems else "ok") + warned

    def check(self, name: str) -> ContractCheck:
        found = [item for item in self.checks if item.name == name]
        if not found:
            raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")
        return found[0]

    def render(self) -> str:
        width = max([len(c.name) for c in self.checks] + [5])
        lines = [f"task app contract: {self.url} ({self.summary()})"]
        for c in self.checks:
            result = "PASS" if c.passed else ("FAIL" if c.required else "WARN")
            lines.append(f"  {result}  {c.name.ljust(width)}  {excerpt(' '.join(c.got.split()), 160)}")
            if not c.passed:
                lines.append(f"        {' ' * width}  expected: {c.expected}")
        return redact("\n".join(lines))

    def raise_for_problems(self) -> None:
        if self.problems:
            raise TaskAppContractError(self)

    def __str__(self) -> str:
        return self.render()


class TaskAppContractError(TaskAppError, AssertionError):
    """The task app broke its contract (an ``AssertionError`` too)."""

    def __init__(self, report: ContractReport) -> None:
        self.report, problems, warnings = report, report.problems, report.warnings
        listing = "".join(f"\n  - {c.render()}" for c in problems) + "".join(
            f"\n  - (warning) {w.render()}" for w in warnings
        )
        super().__init__(
            f"task app at {report.url} breaks the task app contract ({len(problems)} problem(s)):{listing}",
            url=report.url,
            hint="serve GET /health, GET /task_info[?seed=N], GET /info, POST /rollout; refuse a missing key",
            details={"problems": [p.name for p in problems], "warnings": [w.name for w in warnings]},
        )


_ERA_TEXT = {era: f"{era} ({id_key} + {reward_key})" for era, id_key, reward_key in ROLLOUT_ERAS}
_SEEDED = "GET /task_info?seed"
#: What each check expects, said when it fails.
_EXPECTED = {
    "GET / (no auth)": "HTTP 200 without a key",
    "GET /health": "HTTP 200 with the key",
    "task app key accepted": "GET /task_info answers 200 with the key the checks send",
    "GET /task_info": "HTTP 200 with a JSON object holding `taskset`",
    _SEEDED: "HTTP 200 with a TaskInfo (task.id, task.name) or a list of them",
    "GET /info": "HTTP 200 with a JSON object",
    "POST /rollout": "HTTP 2xx with a JSON object",
    "rollout echoes its id": "trace_correlation_id={0!r} or run_id={1!r}, and no other value for either",
    "rollout reward is numeric": "a numeric outcome_reward under `reward_info` (0.5.0) or `metrics` "
    "(0.4.x), or both",
    "rollout response era": "the response schema of at least one SDK era: " + ", ".join(_ERA_TEXT.values()),
    "rollout trace shape": "trace {event_history: list, metadata: object} if present",
    "rollout called the model": "at least one request to policy.config.inference_url",
    "model calls keep the inference URL": "chat calls under policy.config.inference_url, carrying the "
    "rollout's correlation id",
}
#: Checks whose failure is a warning.
_INFORMATIONAL = ("GET / (no auth)", "rollout response era", "rollout called the model")


def _status_text(response: httpx.Response, ok_status: int | None = None) -> str:
    if response.status_code == ok_status:
        return f"HTTP {response.status_code}"
    return f"HTTP {response.status_code}: {excerpt(response.text, 160)}"


def _json_200(response: _Reply) -> Any:
    return json_or_none(response) if not isinstance(response, str) and response.status_code == 200 else None


def _looks_like_task_info(value: Any) -> TypeGuard[dict[str, Any]]:
    task = value.get("task") if isinstance(value, dict) else None
    return isinstance(task, dict) and bool(task.get("id")) and bool(task.get("name"))


def _reward_verdict(body: dict[str, Any]) -> tuple[bool, str]:
    """Every reward key present (at least one) must hold a numeric reward."""
    verdicts = []
    for where in [key for key in _REWARD_KEYS if body.get(key) is not None]:
        try:
            key, _ = reward_of(body[where], where)
        except ValueError as exc:
            verdicts.append((False, str(exc)))
        else:
            legacy = "legacy " if key != "outcome_reward" else ""
            verdicts.append((True, f"{legacy}{where}.{key} = {body[where][key]!r}"))
    if not verdicts:
        return False, f"neither `reward_info` nor `metrics` in the response (keys {sorted(body)})"
    return all(ok for ok, _ in verdicts), "; ".join(text for _, text in verdicts)


def rollout_eras(body: dict[str, Any]) -> tuple[str, ...]:
    """The :data:`ROLLOUT_ERAS` whose response schema *body* satisfies."""
    return tuple(
        label
        for label, id_key, reward_key in ROLLOUT_ERAS
        if isinstance(ident := body.get(id_key), str)
        and ident
        and isinstance(reward := body.get(reward_key), dict)
        and (id_key != "trace_correlation_id" or finite_number(reward.get("outcome_reward")) is not None)
    )


def _trace_verdict(body: dict[str, Any]) -> tuple[bool, str]:
    trace, trajectories = body.get("trace"), body.get("trajectories")
    if trace is None and trajectories is None:
        return True, "no trace (optional)"
    shown = []
    if trace is not None:
        if not isinstance(trace, dict):
            return False, f"trace is {type(trace).__name__}, not an object"
        if "event_history" not in trace and "metadata" not in trace:
            return False, f"trace has neither event_history nor metadata (keys {sorted(trace)})"
        for key, kind, name in (("event_history", list, "a list"), ("metadata", dict, "an object")):
            if key in trace and not isinstance(trace[key], kind):
                return False, f"trace.{key} is {type(trace[key]).__name__}, not {name}"
        shown.append(f"trace with {len(trace.get('event_history') or [])} event(s)")
    if trajectories is not None:  # the 0.4.0 shape
        if not isinstance(trajectories, list) or not all(
            isinstance(t, dict) and isinstance(t.get("steps", []), list) for t in trajectories
        ):
            return False, "trajectories is not a list of objects with a steps list"
        shown.append(f"{len(trajectories)} legacy trajectory(ies)")
    return True, ", ".join(shown)


class _Checker:
    def __init__(
        self,
        client: httpx.Client,
        base: str,
        headers: SecretHeaders,
        timeout: float,
        policy: InferencePolicy | None,
    ) -> None:
        self.client, self.base, self.headers, self.timeout = client, base, headers, timeout
        self.report = ContractReport(url=redact(base))
        self.seed, self.env_name, self.env_guessed = 0, "default", False
        self.stub = StubInference(policy=policy)
        self.stub.require_correlation_id = True

    def add(self, name: str, passed: bool, got: str, expected: str = "", *, required: bool = True) -> None:
        expected = expected or _EXPECTED[name.partition("=")[0]]
        required = required and name not in _INFORMATIONAL
        self.report.checks.append(ContractCheck(name, passed, expected, redact(got), required))

    def status_check(self, name: str, response: _Reply, passed: bool) -> None:
        if isinstance(response, str):
            self.add(name, False, response)
        else:
            self.add(name, passed, _status_text(response, 200 if passed else None))

    def send(self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any) -> _Reply:
        """The answer (*headers* default to the key's), or why there is none."""
        sent = self.headers if headers is None else headers
        try:
            return self.client.request(method, self.base + path, headers=sent, **kw)
        except httpx.HTTPError as exc:
            return f"request failed: {type(exc).__name__}: {exc}"

    def rollout_request(self, tag: str) -> tuple[dict[str, Any], str, str]:
        """A request every rollout schema era accepts, its ``run_id`` and its correlation id."""
        token = uuid.uuid4().hex[:12]
        run_id, correlation_id = f"{tag}-{token}", f"trace_{tag}-{token}"
        identity = RolloutIdentity(
            correlation_id=correlation_id, seed=self.seed, env_name=self.env_name, mode="rl", run_id=run_id
        )
        config = {"model": "Qwen/Qwen3-0.6B", "inference_url": self.stub.route(identity, Progress())}
        request: dict[str, Any] = {
            "run_id": run_id,
            "trace_correlation_id": correlation_id,
            "env": {"env_name": self.env_name, "seed": self.seed, "config": {"seed": self.seed}},
            "policy": {"policy_name": "contract-check", "config": config},
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
    policy: InferencePolicy | None = None,
    timeout: float = 10.0,
) -> ContractReport:
    """Check the task app at *url* against the contract; raises only for a malformed *url*.
    ``env_name`` defaults to the one the app advertises; ``policy`` decides what the stub model
    answers (default: the right answer to the arithmetic example)."""
    base = task_app_base_url(url)
    loopback = is_loopback_host(httpx.URL(base).host)  # never through an environment's proxy
    with httpx.Client(
        timeout=httpx.Timeout(timeout), verify=shared_ssl_context(), trust_env=not loopback
    ) as client:
        checker = _Checker(client, base, task_app_auth_headers(api_key), timeout, policy)
        root = checker.send("GET", "/", headers={})
        if isinstance(root, str):
            checker.add("reachable", False, root, f"an HTTP server at {redact(base)}")
            return checker.report
        checker.add("GET / (no auth)", root.status_code == 200, _status_text(root, 200))
        with checker.stub.serve():
            plain = checker.send("GET", "/task_info")
            if not isinstance(plain, str) and key_refused(plain.status_code, plain.content):
                refusal = key_refusal(api_key, "check_task_app_contract(url, api_key=...)")
                got = f"{refusal}; GET /task_info answered {_status_text(plain)}"
                checker.add("task app key accepted", False, got)
                return checker.report
            seeded = checker.send("GET", "/task_info", params={"seed": seed})
            chosen = env_name or _advertised_env(plain, seeded)
            checker.seed, checker.env_name, checker.env_guessed = seed, chosen or "default", chosen is None
            _check_health_and_auth(checker)
            _check_task_info(checker, seed, plain, seeded)
            info = checker.send("GET", "/info")
            if isinstance(body := _json_200(info), dict):
                checker.add("GET /info", True, f"HTTP 200, keys {sorted(body)}")
            else:
                checker.status_check("GET /info", info, False)
            _check_rollout(checker)
        return checker.report


def _check_health_and_auth(checker: _Checker) -> None:
    """``/health`` answers with the key; ``/task_info`` and ``/rollout`` refuse no key or a wrong one."""
    health = checker.send("GET", "/health")
    checker.status_check("GET /health", health, not isinstance(health, str) and health.status_code == 200)
    probes = {
        "/task_info": checker.send("GET", "/task_info", headers={}),
        "/rollout": checker.send("POST", "/rollout", {}, json=checker.rollout_request("contract-nokey")[0]),
    }
    expected = "400/401/403 for /task_info and /rollout without a key"
    if checker.headers:
        wrong = task_app_auth_headers(Secret(f"wrong-key-{uuid.uuid4().hex}"))
        probes["/task_info with a wrong key"] = checker.send("GET", "/task_info", headers=wrong)
        request = checker.rollout_request("contract-wrongkey")[0]
        probes["/rollout with a wrong key"] = checker.send("POST", "/rollout", json=request, headers=wrong)
        expected += " or with a wrong one"
    seen = [f"{p}: {r}" if isinstance(r, str) else f"{p}=HTTP {r.status_code}" for p, r in probes.items()]
    enforced = all(not isinstance(r, str) and r.status_code in _REJECTED for r in probes.values())
    checker.add("auth enforced", enforced, ", ".join(seen), expected)


def _advertised_env(plain: _Reply, seeded: _Reply) -> str | None:
    """``taskset.env_name`` in ``GET /task_info``, else the seed's TaskInfo ``environment``."""
    body = _json_200(plain)
    taskset = body.get("taskset") if isinstance(body, dict) else None
    name = taskset.get("env_name") if isinstance(taskset, dict) else None
    if isinstance(name, str) and name:
        return name
    info = _json_200(seeded)
    environment = info.get("environment") if _looks_like_task_info(info) else None
    return environment if isinstance(environment, str) and environment else None


def _check_task_info(checker: _Checker, seed: int, plain: _Reply, seeded: _Reply) -> None:
    body = _json_200(plain)
    if isinstance(plain, str) or plain.status_code != 200:
        checker.status_check("GET /task_info", plain, False)
    elif isinstance(body, dict) and "taskset" in body:
        checker.add("GET /task_info", True, "HTTP 200")
    else:
        checker.add("GET /task_info", False, f"HTTP 200 without `taskset`: {excerpt(plain.text, 160)}")
    name = f"{_SEEDED}={seed}"
    if isinstance(seeded, str) or seeded.status_code != 200:
        checker.status_check(name, seeded, False)
        return
    body = json_or_none(seeded)
    if _looks_like_task_info(body):
        checker.add(name, True, f"TaskInfo {body['task']['id']!r}")
    elif body == []:
        checker.add(name, False, "HTTP 200 with an empty list: no TaskInfo for this seed", required=False)
    elif isinstance(body, list) and all(_looks_like_task_info(item) for item in body):
        checker.add(name, True, f"list of {len(body)} TaskInfo")
    elif isinstance(body, dict) and "taskset" in body:
        checker.add(name, False, "the taskset description: the seed parameter was ignored")
    else:
        checker.add(name, False, f"HTTP 200 without task.id/task.name: {excerpt(seeded.text, 160)}")


def _check_rollout(checker: _Checker) -> None:
    stub = checker.stub
    refused_before, calls_before = len(stub.calls(None)), len(stub.requests)
    try:
        request, run_id, correlation_id = checker.rollout_request("contract")
        response = checker.send("POST", "/rollout", json=request)
        if isinstance(response, str):
            checker.add("POST /rollout", False, response, "HTTP 200")
            return
        body = json_or_none(response)
        success = 200 <= response.status_code < 300  # any 2xx, as the fake and trainers take it
        if not success or not isinstance(body, dict):
            got = f"HTTP {response.status_code} but not a JSON object" if success else _status_text(response)
            if response.status_code >= 500:
                got += crash_note(crash_of(correlation_id), len(checker.stub.calls(correlation_id)))
            expected = _EXPECTED["POST /rollout"]
            if checker.env_guessed:
                expected += f" (the request's env_name={checker.env_name!r} is a guess: GET /task_info names "
                expected += "none; pass check_task_app_contract(..., env_name=...))"
            checker.add("POST /rollout", False, got, expected)
            return
        checker.add("POST /rollout", True, f"HTTP {response.status_code}")
        sent = {"trace_correlation_id": correlation_id, "run_id": run_id}
        echoed = {k: body[k] for k in sent if body.get(k) is not None}
        matches = [k for k, v in echoed.items() if v == sent[k]]
        wrong = [f"{k}={v!r}" for k, v in echoed.items() if v != sent[k]]
        got = ", ".join(wrong or [f"{k} echoed" for k in matches]) or "no id in the response"
        expected = _EXPECTED["rollout echoes its id"].format(correlation_id, run_id)
        checker.add("rollout echoes its id", bool(matches) and not wrong, got, expected)
        checker.add("rollout reward is numeric", *_reward_verdict(body))
        checker.report.eras = eras = rollout_eras(body)
        satisfied = ", ".join(_ERA_TEXT[label] for label in eras) or "none of the eras 0.4.4 to 0.5.0"
        checker.add("rollout response era", bool(eras), f"satisfies {satisfied}")
        checker.add("rollout trace shape", *_trace_verdict(body))
        calls = len(checker.stub.requests) - calls_before
        checker.add("rollout called the model", calls > 0, f"{calls} chat completion request(s)")
    finally:
        refused = [call.path for call in stub.calls(None)][refused_before:]
        got = f"{len(refused)} call(s) to POST {', '.join(dict.fromkeys(refused))} without it; "
        got = got + KEEP_INFERENCE_URL if refused else "every call carried it"
        checker.add("model calls keep the inference URL", not refused, got)


def assert_task_app_contract(url: str, api_key: str | Secret | None, **kwargs: Any) -> ContractReport:
    """:func:`check_task_app_contract`, raising :class:`TaskAppContractError` on any problem."""
    report = check_task_app_contract(url, api_key, **kwargs)
    report.raise_for_problems()
    return report
