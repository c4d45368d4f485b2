"""Real rollouts: the fake backend calls the task app's ``/rollout`` the way the trainer would, and a
broken task app fails the job with the evidence the trainer would give (URL, step, seed, ids). A job's
batches run back to back on a :class:`RolloutFeed`, up to ``rollout.max_concurrent_rollouts`` at once,
in seed order; one failing among concurrent ones is retried alone to name concurrency bugs."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

import httpx

from pytest_synth_rl.errors import excerpt
from pytest_synth_rl.fake.http_post import PostFailure, PostPool, PostResponse
from pytest_synth_rl.fake.jobs import RolloutRecord
from pytest_synth_rl.fake.model import Progress, RolloutIdentity
from pytest_synth_rl.fake.model.inference import KEEP_INFERENCE_URL, MAX_CONCURRENCY, ModelCall
from pytest_synth_rl.fake.model.rewards import MAX_REWARD, extract_reward
from pytest_synth_rl.fake.scenario import int_in
from pytest_synth_rl.secrets.masking import Secret, redact
from pytest_synth_rl.taskapp.health import key_refused, task_app_auth_headers
from pytest_synth_rl.taskapp.serving import crash_of
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = [
    "DEFAULT_MAX_CONCURRENT_ROLLOUTS",
    "BatchPlan",
    "RolloutDriver",
    "RolloutFailure",
    "RolloutFeed",
    "RolloutSpec",
    "extract_reward",
]

T = TypeVar("T")
#: Rollouts in flight at once when the config has no ``rollout.max_concurrent_rollouts``.
DEFAULT_MAX_CONCURRENT_ROLLOUTS = 4


def _key_matched(content: bytes) -> bool:
    """Whether an SDK task app's 400 body says the key it got is one it allows (its own rejection)."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return False
    detail = body.get("detail", body) if isinstance(body, dict) else None
    error = detail.get("error", detail) if isinstance(detail, dict) else None
    if not isinstance(error, dict):
        return False
    got, allowed = error.get("got_first15"), error.get("allowed_first15")
    return isinstance(got, str) and bool(got) and isinstance(allowed, list) and got in allowed


#: What to do about a rollout whose exchange failed, by the kind of failure.
_POST_HINTS = {
    "timeout": "make the rollout faster, or give it longer: @pytest.mark.synth_rl(rollout_timeout=...) "
    "in a test, FakeSynthBackend(rollout_timeout=...) or fake.use_rollout_timeout(...) outside one",
    "connect": "start the task app (e.g. InProcessTaskApp) before submitting, and check the job's "
    "data.endpoint_base_url",
    "too_large": "return a compact RolloutResponse (the fake asks for record.return_trace = false)",
}


def _status_hint(response: PostResponse, key_sent: bool, key_replaced: bool = False) -> str:
    if response.status_code in (400, 401, 403) and _key_matched(response.content):
        return (
            "the key the fake sent is one the task app allows (its got_first15 is among its "
            "allowed_first15), so the rejection comes from the task app itself: see its answer above"
        )
    if key_refused(response.status_code, response.content):
        refused = (
            "the task app rejected the environment key the fake sent (ENVIRONMENT_API_KEY; SDK task apps "
            "answer 400 to a wrong key)"
            if key_sent
            else "no task-app key was sent (none was uploaded, the fake has no task_app_api_key and "
            "ENVIRONMENT_API_KEY is unset)"
        )
        replaced = (  # another upload replaced the one this run made
            "; this fake's uploaded key was replaced by a later upload of another key: runs that share "
            "one backend (CI shards, two terminals) must share one ENVIRONMENT_API_KEY"
        )
        return (
            f"{refused}: upload the task app's key (POST /api/v1/env-keys: this plugin's "
            "RLJob.upload_environment_api_key(), which it calls before a run's first submit; with the "
            "upstream SDK, set ENVIRONMENT_API_KEY before RLJob.from_config, or call "
            "setup_environment_api_key()), or create the fake with task_app_api_key="
            + (replaced if key_replaced else "")
        )
    if response.status_code == 422 and b"invalid_rollout_response" in response.content:
        return (
            "contract failure: the task app's own RolloutResponse model rejected what its rollout "
            "returned (invalid_rollout_response); return reward_info (0.5.0) / metrics (0.4.x) with "
            "outcome_reward and echo trace_correlation_id"
        )
    return "the task app's /rollout must answer 2xx with a RolloutResponse; see its server log"


def crash_note(crash: str | None, model_calls: int) -> str:
    """What raised in the app behind a rollout's 5xx (if served here), and the model calls it made."""
    if crash is None and not model_calls:
        return ""
    raised = f"; the task app raised {crash}" if crash else ""
    return f"{raised}; {model_calls} model call(s) made in this rollout before it failed"


class RolloutFailure(Exception):
    """A rollout the job cannot survive; ``str()`` is the job's error message."""

    def __init__(
        self, message: str, record: RolloutRecord, *, policy_failed: bool = False, timed_out: bool = False
    ) -> None:
        super().__init__(message)
        self.record = record
        self.policy_failed = policy_failed
        self.timed_out = timed_out


@dataclass(frozen=True)
class RolloutSpec:
    """What the fake needs from the job's config to build rollout requests."""

    env_name: str
    policy_name: str
    model: str
    max_turns: int
    env_config: dict[str, Any]
    policy_config: dict[str, Any]
    concurrency: int = DEFAULT_MAX_CONCURRENT_ROLLOUTS

    @classmethod
    def from_config(cls, config: Mapping[str, Any], model: str) -> RolloutSpec:
        rollout = config.get("rollout")
        rollout = rollout if isinstance(rollout, Mapping) else {}
        max_turns, concurrency = rollout.get("max_turns"), rollout.get("max_concurrent_rollouts")
        return cls(
            env_name=str(rollout.get("env_name") or ""),
            policy_name=str(rollout.get("policy_name") or ""),
            model=model,
            max_turns=max_turns if int_in(max_turns, 1, math.inf) else 1,
            env_config=dict(rollout.get("env_config") or {}),
            policy_config=dict(rollout.get("policy_config") or {}),
            concurrency=min(
                concurrency if int_in(concurrency, 1, math.inf) else DEFAULT_MAX_CONCURRENT_ROLLOUTS,
                MAX_CONCURRENCY,
            ),
        )


RolloutResult = Any  # a RolloutRecord, or the RolloutFailure that carries one
#: Runs one body of the batch with the given key: its record, or it raises a :class:`RolloutFailure`.
Attempt = Callable[[Any, dict[str, Any]], Any]


class FeedBatch:
    """One queued batch of a :class:`RolloutFeed`: its bodies, the results so far, how far it got."""

    __slots__ = ("bodies", "error", "finished", "key", "results", "started", "stopped")

    def __init__(self, key: Hashable, bodies: list[dict[str, Any]]) -> None:
        self.key = key
        self.bodies = bodies
        self.results: list[RolloutResult | None] = [None] * len(bodies)
        self.started = 0
        self.finished = 0
        self.stopped = False
        self.error: BaseException | None = None

    @property
    def settled(self) -> bool:
        """Nothing of it is in flight and nothing more will start."""
        return self.finished == self.started and (self.stopped or self.started == len(self.bodies))


class RolloutFeed:
    """Queued batches of one job, run in order by up to *workers* tasks on *pool*: the next batch starts
    in this one's tail, and a failed batch holds back every later one."""

    def __init__(self, pool: Callable[[], ThreadPoolExecutor], attempt: Attempt, workers: int) -> None:
        self._pool = pool
        self._attempt = attempt
        self.workers = max(1, workers)
        self._batches: list[FeedBatch] = []
        self._active = 0
        self._cond = threading.Condition()

    def add(self, key: Hashable, bodies: list[dict[str, Any]]) -> FeedBatch:
        """Queue a batch after those queued; free workers start it once earlier ones are all started."""
        batch = FeedBatch(key, bodies)
        with self._cond:
            self._batches.append(batch)
            spawn = max(0, min(self.workers - self._active, self._unstarted()))
            self._active += spawn
        for started in range(spawn):
            try:
                future = self._pool().submit(self._work)
            except RuntimeError:  # the pool is shut down: this worker and the rest never run
                self._ended(spawn - started)
                raise
            future.add_done_callback(self._cancelled)
        return batch

    def take(self, key: Hashable) -> FeedBatch | None:
        """The first queued batch if it is *key* (queued ahead); otherwise drop the queue, None."""
        with self._cond:
            first = self._batches[0] if self._batches else None
        if first is not None and first.key == key:
            return first
        self.stop()
        return None

    def wait(self, batch: FeedBatch) -> list[RolloutResult | None]:
        """Block until *batch* is settled; it leaves the queue, its results are returned."""
        with self._cond:
            while not batch.settled:
                if self._active == 0:
                    raise RuntimeError("rollout workers stopped before the batch finished (fake closed)")
                self._cond.wait()
            if batch in self._batches:
                self._batches.remove(batch)
        if batch.error is not None:
            raise batch.error
        return batch.results

    def stop(self) -> None:
        """Start nothing more, wait for what is in flight, and forget every queued batch."""
        with self._cond:
            for batch in self._batches:
                batch.stopped = True
            while self._active:
                self._cond.wait()
            self._batches.clear()

    @property
    def running(self) -> int:
        """Worker tasks started and not yet ended (never more than :attr:`workers`)."""
        with self._cond:
            return self._active

    def _unstarted(self) -> int:
        stopped = next((i for i, batch in enumerate(self._batches) if batch.stopped), len(self._batches))
        return sum(len(batch.bodies) - batch.started for batch in self._batches[:stopped])

    def _cancelled(self, future: Future[None]) -> None:
        if future.cancelled():
            self._ended()

    def _ended(self, workers: int = 1) -> None:
        with self._cond:
            self._active -= workers
            self._cond.notify_all()

    def _next(self) -> tuple[FeedBatch, int] | None:
        for batch in self._batches:
            if batch.stopped:
                return None  # a failed batch holds back every later one
            if batch.started < len(batch.bodies):
                batch.started += 1
                return batch, batch.started - 1
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._next()
                if picked is None:
                    self._ended()
                    return
            batch, index = picked
            try:
                result = self._attempt(batch.key, batch.bodies[index])
            except RolloutFailure as failure:  # the batch's result; it stops the batch
                result = failure
            except BaseException as exc:  # a bug, not a task app failure: the waiter re-raises it
                with self._cond:
                    batch.error = batch.error or exc
                    batch.finished += 1
                    batch.stopped = True
                    self._ended()
                return
            with self._cond:
                batch.results[index] = result
                batch.finished += 1
                if isinstance(result, RolloutFailure):
                    batch.stopped = True
                self._cond.notify_all()


@dataclass(frozen=True)
class BatchPlan:
    """Which rollouts a batch runs: a step, its seeds in order, and the mode (``rl`` or ``eval``)."""

    step: int
    seeds: tuple[int, ...]
    mode: str


class RolloutDriver:
    """Posts rollouts to task apps, validates the answers, and turns them into rewards."""

    def __init__(
        self,
        *,
        api_key: Callable[[], str | Secret | None],
        inference_url: Callable[[RolloutIdentity, Progress], str],
        policy_failure: Callable[[str], str | None] = lambda correlation_id: None,
        calls: Callable[[str | None], Sequence[ModelCall]] = lambda correlation_id: (),
        key_replaced: Callable[[], bool] = lambda: False,
        timeout: float = 30.0,
    ) -> None:
        self._api_key, self._inference_url, self._key_replaced = api_key, inference_url, key_replaced
        self._policy_failure, self._calls = policy_failure, calls
        self.timeout = timeout
        self._made: dict[str, Any] = {}  # the pool, the connections and the client, made on first use
        self._lock = threading.Lock()

    def _make(self, name: str, make: Callable[..., T], **options: Any) -> T:
        with self._lock:
            if name not in self._made:
                self._made[name] = make(**options)
            return cast(T, self._made[name])

    @property
    def http(self) -> PostPool:
        """The connections rollouts are posted on."""
        return self._make(
            "http", PostPool, timeout=self.timeout, max_idle=MAX_CONCURRENCY, ssl_context=shared_ssl_context
        )

    @property
    def client(self) -> httpx.Client:
        """An httpx client for the health probe of task apps."""
        limits, tls = httpx.Limits(max_keepalive_connections=MAX_CONCURRENCY), shared_ssl_context()
        return self._make(
            "client", httpx.Client, timeout=self.timeout, trust_env=False, verify=tls, limits=limits
        )

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, {}
        if "pool" in made:
            made["pool"].shutdown(wait=False, cancel_futures=True)
        for name in ("http", "client"):
            if name in made:
                made[name].close()

    def build_request(
        self, spec: RolloutSpec, job_id: str, plan: BatchPlan, index: int, steps: int, suffix: str = ""
    ) -> dict[str, Any]:
        """The ``/rollout`` body for seed *index* of *plan*, routed on the stand-in model."""
        step, seed, mode = plan.step, plan.seeds[index], plan.mode
        run_id = f"{job_id}-{mode}-s{step}-{index}{suffix}"
        correlation_id = f"trace_{run_id}"
        identity = RolloutIdentity(
            correlation_id=correlation_id, seed=seed, env_name=spec.env_name, mode=mode, run_id=run_id
        )
        policy_config = dict(spec.policy_config)
        policy_config["model"] = spec.model
        policy_config["inference_url"] = self._inference_url(identity, Progress(step, max(step, steps)))
        return {
            "run_id": run_id,
            "trace_correlation_id": correlation_id,
            "env": {"env_name": spec.env_name, "seed": seed, "config": dict(spec.env_config)},
            "policy": {"policy_name": spec.policy_name, "config": policy_config},
            "mode": mode,
            "ops": ["agent", "env"] * spec.max_turns,
            "record": {"return_trace": False, "trace_format": "compact"},
            "on_done": "reset",
            "safety": {"max_time_s": self.timeout},
            "training_session_id": job_id,
        }

    def feed(self, base_url: str, spec: RolloutSpec) -> RolloutFeed:
        """A feed for one job's consecutive batches, at the config's concurrency."""

        def attempt(plan: BatchPlan, body: dict[str, Any]) -> RolloutRecord:
            return self.send(base_url, body, step=plan.step, mode=plan.mode)

        return RolloutFeed(self._executor, attempt, spec.concurrency)

    def run_batch(
        self,
        base_url: str,
        spec: RolloutSpec,
        feed: RolloutFeed,
        *,
        job_id: str,
        steps: int,
        plan: BatchPlan,
        then: BatchPlan | None = None,
    ) -> tuple[list[RolloutRecord], RolloutFailure | None]:
        """One rollout per seed of *plan*: records in seed order, the first failure; *then* queues behind."""

        def build(plan: BatchPlan) -> list[dict[str, Any]]:
            return [self.build_request(spec, job_id, plan, index, steps) for index in range(len(plan.seeds))]

        batch = feed.take(plan) or feed.add(plan, build(plan))
        if then is not None:
            feed.add(then, build(then))
        results = feed.wait(batch)
        records = [r.record if isinstance(r, RolloutFailure) else r for r in results if r is not None]
        failures = [(i, r) for i, r in enumerate(results) if isinstance(r, RolloutFailure)]
        if not failures:
            return records, None
        failed, failure = failures[0]
        feed.stop()  # nothing else in flight: the retry below runs alone
        # Retried alone (not after a policy failure, nor a timeout: it would cost as long again),
        # as a rollout of its own (new ids, so the stand-in model starts it at turn 0 again).
        if feed.workers == 1 or failure.policy_failed or failure.timed_out:
            return records, failure
        alone = self.build_request(spec, job_id, plan, failed, steps, "-alone")
        try:
            self.send(base_url, alone, step=plan.step, mode=plan.mode)
        except RolloutFailure:
            return records, failure
        workers = feed.workers
        failure.record.error = message = redact(
            f"{failure} -- with {workers} rollouts in flight at once it failed, but the same rollout "
            f"passes when run alone: the task app is not safe under concurrency (the real trainer also "
            f"runs up to rollout.max_concurrent_rollouts = {workers} rollouts at once; keep per-rollout "
            "state local to the /rollout request instead of in module or app globals; set "
            "rollout.max_concurrent_rollouts = 1 to confirm)"
        )
        return records, RolloutFailure(message, failure.record)

    def _executor(self) -> ThreadPoolExecutor:
        return self._make(
            "pool", lambda: ThreadPoolExecutor(MAX_CONCURRENCY, thread_name_prefix="synth-rollout")
        )

    def send(self, base_url: str, body: dict[str, Any], *, step: int, mode: str) -> RolloutRecord:
        """POST one built rollout *body*; raises :class:`RolloutFailure` if it is unusable."""
        seed = int(body["env"]["seed"])
        url = base_url.rstrip("/") + "/rollout"
        record = RolloutRecord(step=step, seed=seed, mode=mode, run_id=body["run_id"], url=url, request=body)
        key = self._api_key()
        headers = task_app_auth_headers(key)  # masked in any repr
        headers["Content-Type"] = "application/json"
        started = time.perf_counter()
        try:
            response = self.http.post(url, json.dumps(body).encode(), headers, timeout=self.timeout)
        except PostFailure as exc:
            record.elapsed = time.perf_counter() - started
            what = f"task app unreachable: {exc}" if exc.kind == "connect" else str(exc)
            hint = _POST_HINTS.get(exc.kind, "check the task app's server log")
            self._fail(record, what, hint, timed_out=exc.kind == "timeout")
        record.elapsed = time.perf_counter() - started
        record.status_code = response.status_code
        if not 200 <= response.status_code < 300:
            what = f"HTTP {response.status_code}: {excerpt(response.content, 300)}"
            if response.status_code >= 500:
                cid = body["trace_correlation_id"]
                what += crash_note(crash_of(cid), len(self._calls(cid)))
            self._fail(record, what, _status_hint(response, bool(key), self._key_replaced()))
        try:
            parsed = json.loads(response.content)
            record.keep_response(response.content)
            return self._read_answer(record, body, parsed)
        except ValueError:  # only the decoding raises one
            what = f"response is not JSON: {excerpt(response.content, 200)}"
            self._fail(record, what, "return a JSON RolloutResponse object")
        except RecursionError:  # decoding, or an error message's repr of a value nested almost too deeply
            what = (
                "the response is nested too deeply to decode (arrays or objects nested more than about "
                f"{sys.getrecursionlimit()} levels deep)"
            )
            hint = (
                "return a flat RolloutResponse: keep any trace or details shallow, or leave the trace out "
                "(the fake asks for record.return_trace = false)"
            )
            self._fail(record, what, hint)

    def _read_answer(self, record: RolloutRecord, body: dict[str, Any], parsed: Any) -> RolloutRecord:
        if not isinstance(parsed, dict):
            what = f"response must be a JSON object, got {type(parsed).__name__}"
            self._fail(record, what, "return a RolloutResponse object")
        self._check_echo(record, body, parsed)
        field = next((k for k in ("reward_info", "metrics") if parsed.get(k) is not None), None)
        if field is None:
            what = f"response has neither 'reward_info' nor 'metrics' (keys: {sorted(parsed)[:12]})"
            hint = (
                "include reward_info.outcome_reward (synth-ai 0.5.0) or metrics.outcome_reward "
                "(0.4.x); send the same object under both keys to suit every release"
            )
            self._fail(record, what, hint)
        try:
            record.reward = extract_reward(parsed[field], field)
        except ValueError as exc:
            hint = f"set {field}.outcome_reward to a float from {-MAX_REWARD:g} to {MAX_REWARD:g}"
            self._fail(record, str(exc), hint)
        return record

    def _check_echo(self, record: RolloutRecord, sent: Mapping[str, Any], got: Mapping[str, Any]) -> None:
        expected = {sent["run_id"], sent["trace_correlation_id"]}
        echoed = False
        for key in ("trace_correlation_id", "run_id"):
            value = got.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in expected:
                shown = f"={value[:80]!r}" if isinstance(value, str) else f" is a {type(value).__name__}"
                what = f"id echo mismatch: response {key}{shown}, expected {sent[key]!r}"
                self._fail(record, what, "echo the request's run_id / trace_correlation_id unchanged")
            echoed = True
        if not echoed:
            hint = "echo the request's trace_correlation_id (0.4.12) or run_id (older apps)"
            self._fail(record, "response echoes neither run_id nor trace_correlation_id", hint)

    def _fail(self, record: RolloutRecord, what: str, hint: str, *, timed_out: bool = False) -> NoReturn:
        cid = record.request.get("trace_correlation_id")
        ids = f"seed {record.seed}, run_id {record.run_id}, trace_correlation_id {cid}"
        policy = self._policy_failure(cid) if isinstance(cid, str) else None
        refused = [call.path for call in self._calls(None) if call.status == 400]
        if policy is None and refused:
            # The model refused calls sent outside the handed-out URL: that is what to fix.
            paths = ", ".join(dict.fromkeys(refused))
            what = (
                f"the stand-in model refused model calls that carried no correlation id (POST "
                f"{paths}: not under policy.config.inference_url); the task app's rollout then "
                f"failed: {what}"
            )
            hint = KEEP_INFERENCE_URL
        elif policy is not None:
            # The task app only passed the model's failure on: name the code that really failed.
            what = f"the stand-in model's policy {policy}; the task app's rollout then failed: {what}"
            hint = (
                "fix the policy (given with synth_rl(policy=...), the synth_policy fixture or "
                "FakeSynthBackend(policy=...)); its traceback is in the test's captured log and in "
                f"fake.inference.calls({cid!r})"
            )
        message = redact(
            f"task app rollout failed at step {record.step} ({record.mode}; {ids}): POST {record.url}: {what}"
            f" (hint: {hint})"
        )
        record.error = message
        raise RolloutFailure(message, record, policy_failed=policy is not None, timed_out=timed_out)
