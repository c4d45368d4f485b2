"""JobStore: the fake backend's state, behind one lock and a small public interface.

Everything a request or a test can change lives here: jobs (and the idempotency keys that
created them), the scenarios waiting for the next submissions, the faults, the request log, and
the lifecycle engine with the helpers it runs rollouts with (the stub model, the rollout
client). Route handlers, the admin API and :class:`~.handle.FakeJob` work through these methods
only, so the rules (a job is brought up to date with the clock before anyone reads it; ids and
keys are unique) are kept in one place.

Methods take :attr:`JobStore.lock` themselves; it is reentrant, and the request handler holds it
around a whole request so that logging and answering are one step. A rollout batch sets the
lock aside while it waits on the task app (see :mod:`.locking`): other requests and other jobs
go on, the job itself stays put (readers see it mid-step; writers such as cancel wait for the
batch, which the rollout timeout bounds).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, SealedBox

from pytest_synth_rl.clock import Clock, VirtualClock
from pytest_synth_rl.errors import ConfigProblem, SynthError, SynthUsageError
from pytest_synth_rl.fake.checks import error_text_problem
from pytest_synth_rl.fake.faults import Fault
from pytest_synth_rl.fake.jobs import JobRecord
from pytest_synth_rl.fake.lifecycle import Lifecycle, Target
from pytest_synth_rl.fake.locking import StoreLock
from pytest_synth_rl.fake.model import (
    ArithmeticPolicy,
    Policy,
    PolicyReply,
    Progress,
    RolloutIdentity,
    linear,
)
from pytest_synth_rl.fake.model.inference import StubInference
from pytest_synth_rl.fake.rollouts import RolloutDriver
from pytest_synth_rl.fake.scenario import Scenario
from pytest_synth_rl.fake.wire import RecordedRequest
from pytest_synth_rl.secrets.masking import Secret, key_problem, mask_secret
from pytest_synth_rl.taskapp.health import check_task_app_health
from pytest_synth_rl.taskapp.loopback import is_loopback_url

__all__ = [
    "MAX_ENV_KEY_BYTES",
    "MAX_FAULTS",
    "MAX_JOBS",
    "MAX_JOB_DATA",
    "MAX_SCRIPTED",
    "MAX_SCRIPTED_DATA",
    "PACING_MODES",
    "REQUEST_LOG_SIZE",
    "SEALED_BOX_ALG",
    "STALL_POLLS",
    "EnvKeyRejected",
    "IdempotencyConflict",
    "JobStore",
    "Pacing",
    "RolloutsMode",
    "StoreFull",
    "job_size",
    "scripted_size",
]

RolloutsMode = Literal["auto"] | bool
#: How jobs on a virtual clock move: ``"clock"`` when someone advances the clock (tests in the
#: same process), ``"observed"`` one stage each time a client looks at the job (served fakes).
Pacing = Literal["clock", "observed"]
PACING_MODES: tuple[str, ...] = ("clock", "observed")
#: Status polls that see neither the job nor the clock move before the status body says why.
STALL_POLLS = 3
SEALED_BOX_ALG = "libsodium.sealedbox.v1"
#: The largest environment key the fake accepts (the hosted backend's limit).
MAX_ENV_KEY_BYTES = 8 * 1024
#: How many requests the log keeps: the most recent ones (each body is capped, see
#: :data:`~.wire.MAX_LOGGED_BODY`), so a long-lived served fake stays flat in memory.
REQUEST_LOG_SIZE = 1000
#: Most jobs one fake keeps, and most job data (as :func:`job_size` estimates it). To make room
#: for a new job, the oldest finished jobs are forgotten (reading one later gets a 404 saying
#: so); when unfinished jobs alone fill either limit, the submit gets a 429. Generous for any
#: test (the plugin resets the fake for each one); what makes a long-lived served fake flat.
MAX_JOBS = 1000
MAX_JOB_DATA = 256 * 2**20
#: Bytes a kept job takes, per byte of its payload's JSON (parsed JSON takes up to ~22 times
#: its text, for a body of small objects) and per step of its scenario (its history, kept
#: compact: ~0.25 KB a step, ~0.65 KB when it evaluates after every step).
_PAYLOAD_FACTOR = 24
_STEP_BYTES = 640
#: Ids of forgotten jobs remembered, to tell "evicted" from "never existed" in a 404.
_EVICTED_IDS = 10 * MAX_JOBS
#: Most scenarios scripted for upcoming jobs (``script("next", ...)``) waiting at once, and most
#: data they hold (as :func:`scripted_size` estimates it), and most faults registered at once.
#: Past either, scripting or adding one more is refused (:class:`StoreFull`, a 429 on the wire)
#: rather than kept: a served fake takes them from any client, and nothing else removes them.
#: Far above what a test scripts ahead; what keeps a long-lived served fake flat.
MAX_SCRIPTED = 1000
MAX_SCRIPTED_DATA = 64 * 2**20
MAX_FAULTS = 1000
#: Bytes a waiting scenario takes: its fields, each value of a listed reward curve (a float and
#: its slot: ~34 bytes measured), each label (two strings of at most 256 characters).
_SCENARIO_BYTES = 1024
_CURVE_VALUE_BYTES = 40
_LABEL_BYTES = 1024


def job_size(job: JobRecord) -> int:
    """What *job* counts against :data:`MAX_JOB_DATA`: an upper estimate of its memory, sized
    from its payload and its scenario's steps, and at least ``MAX_JOB_DATA / MAX_JOBS``."""
    estimate = _PAYLOAD_FACTOR * job.payload_bytes + _STEP_BYTES * job.scenario.steps
    return max(estimate, MAX_JOB_DATA // MAX_JOBS)


def scripted_size(scenario: Scenario) -> int:
    """What a waiting *scenario* counts against :data:`MAX_SCRIPTED_DATA`: an upper estimate
    of its memory, which a listed reward curve dominates (10,000 values are ~0.4 MB)."""
    curve = scenario.reward_curve
    values = len(curve) if isinstance(curve, Sequence) and not isinstance(curve, str) else 0
    return _SCENARIO_BYTES + _CURVE_VALUE_BYTES * values + _LABEL_BYTES * len(scenario.labels)


class StoreFull(SynthError):
    """No room for what a caller adds: a job (every kept job is unfinished), a scenario for an
    upcoming job or a fault. A 429 on the wire, with :attr:`code` as its error code."""

    def __init__(self, message: str, *, hint: str, code: str = "too_many_jobs") -> None:
        super().__init__(message, hint=hint)
        self.code = code


class EnvKeyRejected(ValueError):
    """An uploaded environment key that cannot be used; ``str()`` says what was wrong."""


class IdempotencyConflict(Exception):
    """An ``Idempotency-Key`` reused with a different payload; ``job_id`` is the key's job."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


def default_policy() -> Policy:
    """The built-in model: solves the arithmetic example, right 15% of the time at the start of
    training rising linearly to 95% at the end, so rewards from real rollouts rise."""
    return ArithmeticPolicy(linear(0.15, 0.95))


def _with_config_steps(scenario: Scenario, payload: Mapping[str, Any]) -> Scenario:
    """*scenario* running as many steps as the trainer would for *payload*'s config
    (``training.num_epochs * training.iterations_per_epoch``) when the config says, and never
    more than the scenario's own count (a long real run still costs at most that offline).

    Used for real-rollout jobs nobody scripted: each step costs real rollouts, and a job that
    runs the config's own number of steps is both closer to the real trainer and cheaper than
    the scenario's generic default.
    """
    data = payload.get("data")
    config = data.get("config") if isinstance(data, Mapping) else None
    training = config.get("training") if isinstance(config, Mapping) else None
    if not isinstance(training, Mapping):
        return scenario
    steps = 1
    for key in ("num_epochs", "iterations_per_epoch"):
        count = training.get(key)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return scenario
        steps *= count
    return dataclasses.replace(scenario, steps=min(steps, scenario.steps))


class JobStore:
    """Jobs, scenarios, faults and the request log of one fake backend, on one clock.

    Public interface, by concern:

    * clock: :attr:`clock`, :meth:`use_clock`; jobs follow a subscribed ``VirtualClock`` as it
      advances, without being polled.
    * scenarios: :attr:`default_scenario`, :meth:`set_default`, :meth:`script`.
    * jobs: :meth:`find`, :meth:`get`, :meth:`latest`, :meth:`records`, :meth:`recent_ids`,
      :meth:`validate`, :meth:`replay`, :meth:`create`.
    * moving jobs: :meth:`sync`, :meth:`advance`, :meth:`succeed`, :meth:`fail`, :meth:`cancel`.
    * faults and the request log: :attr:`faults`, :meth:`add_fault`, :meth:`clear_faults`,
      :meth:`log`, :attr:`requests`.
    * lifetime: :meth:`reset`, :meth:`clear_jobs`, :meth:`stop_helpers`, :meth:`close`.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        validate: bool = True,
        rollouts: RolloutsMode = "auto",
        task_app_key: Secret | None = None,
        policy: Policy | None = None,
        replies: Sequence[PolicyReply] | None = None,
        max_rollouts_per_step: int = 4,
        rollout_timeout: float = 30.0,
        job_id_prefix: str = "job_rl_",
    ) -> None:
        self.lock = StoreLock()
        self.job_id_prefix = job_id_prefix
        self.validate_payloads = validate
        self.rollouts: RolloutsMode = rollouts
        self._clock = clock
        self._jobs: OrderedDict[str, JobRecord] = OrderedDict()
        # Each kept job's job_size when admitted, and their sum: admission stays O(1) per job.
        self._sizes: dict[str, int] = {}
        self._kept = 0
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._active: dict[str, JobRecord] = {}
        self._idempotency: dict[str, tuple[str, str]] = {}
        self._faults: list[Fault] = []
        self._requests: deque[RecordedRequest] = deque(maxlen=REQUEST_LOG_SIZE)
        self._default = Scenario()
        self._default_scripted = False
        # Scenarios scripted for the next submissions, each with its scripted_size, and the sum.
        self._next: deque[tuple[Scenario, int]] = deque()
        self._next_bytes = 0
        self._counter = 0
        self._task_app_key = task_app_key
        self._policy = policy
        self.pacing: Pacing = "clock"
        # The fake's own X25519 key pair: clients seal the task app's key to its public half.
        self._box_key = PrivateKey.generate()
        self._uploaded_key: Secret | None = None
        #: Whether an upload replaced another key: two runs sharing this backend with their own keys.
        self.key_replaced = False
        self.inference = StubInference(
            policy=policy if policy is not None or replies is not None else default_policy(), replies=replies
        )
        # Every rollout's inference URL carries its correlation id, as the trainer's do.
        self.inference.require_correlation_id = True
        # The stub model server's own lock: stopping it must never wait on a request in flight.
        self._helpers_lock = threading.Lock()
        self._stub_stack: contextlib.ExitStack | None = None
        self._stub_url: str | None = None
        self._driver = RolloutDriver(
            api_key=self._rollout_key,
            inference_url=self._inference_url,
            policy_failure=lambda correlation_id: self.inference.policy_failure(correlation_id),
            unattributed_calls=lambda: self.inference.calls(None),
            key_replaced=lambda: self.key_replaced,
            timeout=rollout_timeout,
        )
        self._lifecycle = Lifecycle(
            clock=lambda: self._clock,
            driver=self._driver,
            max_rollouts_per_step=max_rollouts_per_step,
            set_aside=self.lock.set_aside,
        )
        self._unsubscribe: Callable[[], None] | None = None
        self._subscribe()

    # -- clock ------------------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    def use_clock(self, clock: Clock) -> Clock:
        """Run jobs on *clock* from now on; returns the previous clock."""
        previous = self._clock
        if clock is not previous:
            self._detach()
            with self.lock:
                self._clock = clock
            self._subscribe()
        return previous

    def _subscribe(self) -> None:
        if not isinstance(self._clock, VirtualClock):
            return
        ref = weakref.WeakMethod(self._on_clock)

        def on_advance(before: float, after: float) -> None:
            on_clock = ref()
            if on_clock is not None:
                on_clock(after)

        self._unsubscribe = self._clock.subscribe(on_advance)

    def _detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_clock(self, now: float) -> None:
        # Cheap when nothing is due: one comparison per active job.
        if not self._active:
            return
        with self.lock:
            for job in list(self._active.values()):
                due = self._lifecycle.next_due(job)
                if job.scenario.mode == "immediate" or (due is not None and due <= now + 1e-9):
                    self._lifecycle.sync(job)
                if job.terminal:
                    self._active.pop(job.id, None)

    # -- scenarios --------------------------------------------------------------------------------
    @property
    def default_scenario(self) -> Scenario:
        return self._default

    def set_default(self, scenario: Scenario, *, scripted: bool = True) -> None:
        """Jobs submitted from now on follow *scenario*; ``scripted=False`` marks it as the plain
        default, whose real-rollout jobs run their config's number of steps."""
        with self.lock:
            self._default = scenario
            self._default_scripted = scripted

    def script(self, target: str, scenario: Scenario) -> None:
        """Script ``"next"`` (the next submission; calls queue up) or the existing job *target*.

        An existing job follows the new script from its current stage on.
        """
        with self.lock:
            if target == "next":
                self._queue(scenario)
                return
            hint = "use scenario_for('next', ...) before submitting, or an id from fake.jobs"
            job = self.get(target, hint=hint)
            self._idle(job)
            self._lifecycle.sync(job)
            job.scenario = scenario
            size = job_size(job)
            self._kept += size - self._sizes[job.id]
            self._sizes[job.id] = size
            job.touch(job.updated_time)
            if not job.terminal:
                self._active[job.id] = job

    def _queue(self, scenario: Scenario) -> None:
        """Queue *scenario* for the next submission; :class:`StoreFull` past
        :data:`MAX_SCRIPTED` waiting scenarios or :data:`MAX_SCRIPTED_DATA` of them."""
        size = scripted_size(scenario)
        if len(self._next) < MAX_SCRIPTED and self._next_bytes + size <= MAX_SCRIPTED_DATA:
            self._next.append((scenario, size))
            self._next_bytes += size
            return
        raise StoreFull(
            f"no room for another scenario scripted for an upcoming job: this fake keeps at most "
            f"{MAX_SCRIPTED} of them waiting, and about {MAX_SCRIPTED_DATA >> 20} MiB of them; "
            f"{len(self._next)} are waiting (about {self._next_bytes / 2**20:.1f} MiB; this one would "
            f"take about {size / 2**10:.0f} KiB, for its reward curve and labels)",
            hint="submit jobs to use the waiting scenarios up, script fewer ahead (or set a default "
            "with POST /_fake/scenario without 'job', fake.scenario(...) in Python), "
            "or reset the fake (POST /_fake/reset)",
            code="too_many_scenarios",
        )

    def _dequeue(self) -> None:
        """Take the first waiting scenario off the queue: its job was admitted."""
        self._next_bytes -= self._next.popleft()[1]

    # -- jobs -------------------------------------------------------------------------------------
    def find(self, job_id: str) -> JobRecord | None:
        with self.lock:
            return self._jobs.get(job_id)

    def get(self, job_id: str, hint: str = "use the id returned by submit(), or fake.jobs") -> JobRecord:
        """The job *job_id*; :class:`SynthError` naming recent ids if there is none."""
        job = self.find(job_id)
        if job is None:
            evicted = self.evicted_reason(job_id)
            if evicted is not None:
                raise SynthError(evicted, hint="fake.jobs (GET /_fake/jobs) lists the jobs kept")
            raise SynthError(
                f"no job {job_id!r} on this FakeSynthBackend (jobs: {self.recent_ids()})", hint=hint
            )
        return job

    def evicted_reason(self, job_id: str) -> str | None:
        """Why job *job_id* is gone, if this fake forgot it to make room (None otherwise)."""
        with self.lock:
            if job_id not in self._evicted:
                return None
        return (
            f"job {job_id!r} was evicted: this fake keeps at most {MAX_JOBS} jobs (and about "
            f"{MAX_JOB_DATA >> 20} MiB of job data), forgetting the oldest finished ones to make room "
            "for new ones; read a job's results before submitting that many more, or reset the fake "
            "between tests"
        )

    def latest(self) -> JobRecord:
        with self.lock:
            if not self._jobs:
                raise SynthError(
                    "no job was submitted to this FakeSynthBackend yet",
                    hint="submit a job first (POST /rl/jobs)",
                )
            return self._jobs[next(reversed(self._jobs))]

    def records(self) -> list[JobRecord]:
        """Every job, oldest first (not synced: call :meth:`sync` before reading state)."""
        with self.lock:
            return list(self._jobs.values())

    def recent_ids(self, count: int = 5) -> list[str]:
        with self.lock:
            return list(self._jobs)[-count:]

    def validate(self, payload: Mapping[str, Any]) -> list[ConfigProblem]:
        """Problems with a submitted payload (none when validation is off)."""
        if not self.validate_payloads:
            return []
        from pytest_synth_rl.config import validate_rl_payload  # the config layer, not needed until a submit

        return list(validate_rl_payload(payload))

    def replay(self, key: str, payload: Mapping[str, Any]) -> JobRecord | None:
        """The job *key* already created (synced), None if the key is new.

        Raises :class:`IdempotencyConflict` when the key was used for a different payload.
        """
        with self.lock:
            previous = self._idempotency.get(key)
            if previous is None:
                return None
            canonical, job_id = previous
            if canonical != _canonical(payload):
                raise IdempotencyConflict(job_id)
            job = self._jobs[job_id]
            self._lifecycle.sync(job)
            return job

    def create(self, payload: dict[str, Any], idempotency_key: str | None = None) -> JobRecord:
        """A new queued job for *payload*, on the next queued scenario or the default one."""
        with self.lock:
            self._counter += 1
            job_id = f"{self.job_id_prefix}{self._counter:06d}"
            # Peeked, and taken off the queue once the job is admitted: a refused submit (a full
            # store) leaves it for the next one.
            waiting = self._next[0][0] if self._next else None
            scripted = waiting is not None or self._default_scripted
            scenario = waiting if waiting is not None else self._default
            endpoint = str((payload.get("data") or {}).get("endpoint_base_url") or "")
            forced = scenario.uses_rollouts
            if forced is not None:
                use_rollouts = forced
            elif self.rollouts == "auto":
                use_rollouts = is_loopback_url(endpoint)
            else:
                use_rollouts = bool(self.rollouts) and endpoint.startswith(("http://", "https://"))
            if use_rollouts and not scripted:
                scenario = _with_config_steps(scenario, payload)
            now, ts = self._clock.now(), self._clock.time()
            canonical = _canonical(payload)
            job = JobRecord(
                id=job_id,
                payload=payload,
                scenario=scenario,
                created_now=now,
                created_time=ts,
                use_rollouts=use_rollouts,
                idempotency_key=idempotency_key,
                updated_time=ts,
                payload_bytes=len(canonical),
            )
            size = self._make_room(job)
            if waiting is not None:
                self._dequeue()
            job.set_phase(ts, "queued")
            created = f"RL job {job_id} created for {job.model}"
            job.add_event(ts, "rl.job.created", created, {"model": job.model})
            self._jobs[job_id] = job
            self._sizes[job_id] = size
            self._kept += size
            self._active[job_id] = job
            if idempotency_key is not None:
                self._idempotency[idempotency_key] = (canonical, job_id)
            return job

    def _make_room(self, new: JobRecord) -> int:
        """Forget the oldest finished jobs until *new* fits in :data:`MAX_JOBS` and
        :data:`MAX_JOB_DATA`, and return its size; :class:`StoreFull` if unfinished jobs leave
        no room."""
        size = job_size(new)

        def fits() -> bool:
            return len(self._jobs) < MAX_JOBS and self._kept + size <= MAX_JOB_DATA

        if fits():
            return size
        for job in list(self._jobs.values()):  # oldest first
            if job.terminal:
                self._forget(job)
                if fits():
                    return size
        self._counter -= 1  # the id was not used
        raise StoreFull(
            f"no room for a new job: this fake keeps at most {MAX_JOBS} jobs and about "
            f"{MAX_JOB_DATA >> 20} MiB of job data, and the {len(self._jobs)} jobs it keeps are "
            f"unfinished (about {self._kept / 2**20:.1f} MiB; this job would take about "
            f"{size / 2**20:.1f} MiB, for its {new.payload_bytes}-byte payload and "
            f"{new.scenario.steps} steps)",
            hint="let jobs finish (poll them), cancel some, or reset the fake (POST /_fake/reset)",
        )

    def _forget(self, job: JobRecord) -> None:
        """Drop finished *job* to make room, remembering its id for the 404 that explains."""
        del self._jobs[job.id]
        self._kept -= self._sizes.pop(job.id)
        self._active.pop(job.id, None)
        key = job.idempotency_key
        if key is not None and self._idempotency.get(key, ("", ""))[1] == job.id:
            del self._idempotency[key]
        self._evicted[job.id] = None
        if len(self._evicted) > _EVICTED_IDS:
            self._evicted.popitem(last=False)

    # -- moving jobs ------------------------------------------------------------------------------
    def sync(self, job: JobRecord) -> JobRecord:
        """Run the stages of *job* that are due by now; returns the job."""
        with self.lock:
            self._lifecycle.sync(job)
            return job

    def observe(self, job: JobRecord) -> JobRecord:
        """A client looked at *job* (a status poll, an events or metrics read, a stream tick).

        The job catches up with the clock; with :attr:`progress` ``"observed"`` a job on the
        default (duration) timing then also runs its next stage, so clients that cannot move
        the clock (other processes, a served fake) still see it finish.
        """
        with self.lock:
            self._lifecycle.sync(job)
            if self.pacing == "observed" and not job.terminal and job.scenario.mode == "duration":
                stage = job.scenario.next_stage(job.started, job.steps_done, job.outcome_override)
                if stage.kind == "start":
                    target = Target("start")
                elif stage.kind == "step":
                    target = Target("step", stage.step)
                else:
                    target = Target("end")
                self._lifecycle.sync(job, target)
            return job

    def next_due(self, job: JobRecord) -> float | None:
        """Clock ``now()`` at which *job*'s next stage is due (None unless it runs on duration)."""
        with self.lock:
            return self._lifecycle.next_due(job)

    def stall_reason(self, job: JobRecord) -> str | None:
        """Note a status poll of *job* (after :meth:`observe`); why it is stuck, if it is.

        A job on a virtual clock that nothing advances never moves; after :data:`STALL_POLLS`
        polls that found the job and the clock unchanged, the answer says so instead of
        letting the client wait out its timeout in silence.
        """
        with self.lock:
            mark = (job.version, self._clock.now())
            if job.last_poll == mark:
                job.stalled_polls += 1
            else:
                job.stalled_polls = 0
                job.last_poll = mark
            if (
                job.terminal
                or job.stalled_polls < STALL_POLLS
                or job.scenario.mode != "duration"
                or not isinstance(self._clock, VirtualClock)
            ):
                return None
            return (
                f"job {job.id} has not moved in {job.stalled_polls + 1} status polls: this fake backend "
                "runs jobs on a virtual clock that nothing advances. Advance it "
                '(POST /_fake/clock/advance {"seconds": 60}, or fake.clock.advance(60) in-process), '
                "serve with pacing='observed' (the serve() default: each look at a job moves it one "
                "stage) or speed=<factor> (real time, sped up), or script the job with "
                "Scenario(polls=N) or Scenario(immediate=True)"
            )

    def advance(self, job: JobRecord, target: Target) -> None:
        """Run *job*'s stages now, up to *target*, stamped with the current time."""
        with self.lock:
            self._idle(job)
            self._lifecycle.sync(job)
            self._lifecycle.sync(job, target)

    def succeed(self, job: JobRecord) -> None:
        """Finish *job* successfully now, running its remaining steps."""
        with self.lock:
            self._idle(job)
            self._lifecycle.sync(job)
            job.outcome_override = "succeeded"
            job.version += 1  # the plan changed
            self._lifecycle.sync(job, Target("end"))

    def fail(self, job: JobRecord, message: str) -> None:
        """Fail *job* now with *message* as its error (bounded like ``Scenario.error``)."""
        problem = error_text_problem(message, "FakeJob.fail")
        if problem is not None:
            raise SynthUsageError([problem])
        with self.lock:
            self._idle(job)
            self._lifecycle.sync(job)
            self._lifecycle.fail(job, message, self._clock.time(), data={"step": job.steps_done})

    def cancel(self, job: JobRecord, reason: str) -> None:
        """Cancel *job* now (a job already finished stays as it is)."""
        with self.lock:
            self._idle(job)
            self._lifecycle.sync(job)
            self._lifecycle.cancel(job, self._clock.time(), reason=reason)

    def _idle(self, job: JobRecord) -> None:
        """Wait (with the lock set aside) until no other thread runs a rollout batch of *job*."""
        me = threading.get_ident()
        self.lock.wait_until(lambda: job.batch_thread in (None, me))

    # -- faults and the request log ---------------------------------------------------------------
    @property
    def faults(self) -> list[Fault]:
        with self.lock:
            return list(self._faults)

    def add_fault(self, fault: Fault) -> Fault:
        """Register *fault*; :class:`StoreFull` when :data:`MAX_FAULTS` are registered already
        (used-up faults count until cleared: they still show what was injected)."""
        with self.lock:
            if len(self._faults) >= MAX_FAULTS:
                raise StoreFull(
                    f"no room for another fault: this fake keeps at most {MAX_FAULTS} faults, "
                    f"and {len(self._faults)} are registered ({self._active_faults()} still active)",
                    hint="clear them (DELETE /_fake/faults, fake.clear_faults() in Python) or reset "
                    "the fake (POST /_fake/reset); one fault with a pattern, fail_next or "
                    "probability covers many calls",
                    code="too_many_faults",
                )
            self._faults.append(fault)
        return fault

    def _active_faults(self) -> int:
        return sum(1 for fault in self._faults if fault.active)

    def clear_faults(self) -> None:
        with self.lock:
            for fault in self._faults:
                fault.remove()
            self._faults.clear()

    def log(self, request: RecordedRequest) -> None:
        """Keep *request* in the log; past :data:`REQUEST_LOG_SIZE` the oldest is dropped."""
        with self.lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self._requests)

    # -- lifetime ---------------------------------------------------------------------------------
    def clear_jobs(self) -> None:
        with self.lock:
            self._jobs.clear()
            self._sizes.clear()
            self._kept = 0
            self._evicted.clear()
            self._active.clear()
            self._idempotency.clear()

    def reset(self, job_id_prefix: str | None = None) -> None:
        """Forget jobs, the request log, scenarios and faults, and give the stub model a fresh start.

        With *job_id_prefix*, ids from now on are that prefix and a count from 1 again; without,
        the count goes on, so no id is given twice."""
        with self.lock:
            if job_id_prefix is not None:
                self.job_id_prefix = job_id_prefix
                self._counter = 0
            self.clear_jobs()
            self._requests.clear()
            self._next.clear()
            self._next_bytes = 0
            self._default = Scenario()
            self._default_scripted = False
        self.clear_faults()
        self.inference.clear()
        # This fake's own model again, fresh: a test must not see another test's policy, nor
        # rewards that depend on which tests ran first.
        self.use_policy(None)

    def use_rollout_timeout(self, seconds: float) -> None:
        """Give each rollout *seconds* (real) from now on."""
        self._driver.timeout = seconds

    def use_policy(self, policy: Policy | None) -> None:
        """Answer model calls with *policy* from now on; None restores this store's own (the
        constructor's ``policy=``/``replies=``, else a fresh built-in :func:`default_policy`)."""
        if policy is not None:
            self.inference.policy = policy
        elif self._policy is not None:
            self.inference.policy = self._policy
        elif self.inference.replies is not None:
            self.inference.policy = StubInference(replies=self.inference.replies).policy
        else:
            self.inference.policy = default_policy()

    def stop_helpers(self) -> None:
        """Stop the stub model server and the rollout client (both restart when needed)."""
        with self._helpers_lock:
            stack, self._stub_stack = self._stub_stack, None
            self._stub_url = None
        if stack is not None:
            stack.close()
        self._driver.close()

    def close(self) -> None:
        self.stop_helpers()
        self._detach()

    # -- the task app's key, uploaded sealed (contract §10.5) --------------------------------------
    @property
    def public_key_b64(self) -> str:
        """The fake's X25519 public key, base64: clients seal the environment key to it."""
        return base64.b64encode(bytes(self._box_key.public_key)).decode("ascii")

    def store_env_key(self, name: object, ciphertext_b64: object) -> None:
        """Open a sealed environment key and keep it for rollouts (it replaces an earlier one).

        Raises :class:`EnvKeyRejected` naming what was wrong; the key itself is never echoed.
        """
        if name != "ENVIRONMENT_API_KEY":
            raise EnvKeyRejected(
                f"'name' must be \"ENVIRONMENT_API_KEY\", got {name!r:.60}: it is the only key the "
                "trainer sends to task apps"
            )
        if not isinstance(ciphertext_b64, str) or not ciphertext_b64:
            raise EnvKeyRejected(
                "'ciphertext_b64' must be a non-empty base64 string (the libsodium sealed box of the key, "
                "sealed to GET /api/v1/crypto/public-key)"
            )
        try:
            sealed = base64.b64decode(ciphertext_b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise EnvKeyRejected(f"'ciphertext_b64' is not valid base64 ({exc})") from None
        try:
            plain = SealedBox(self._box_key).decrypt(sealed)
        except CryptoError:
            raise EnvKeyRejected(
                f"'ciphertext_b64' does not open as a sealed box ({SEALED_BOX_ALG}) for this backend's "
                "public key: seal the key with the public key from GET /api/v1/crypto/public-key of this "
                "same backend (each fake makes a new key pair)"
            ) from None
        if len(plain) > MAX_ENV_KEY_BYTES:
            raise EnvKeyRejected(
                f"the key is {len(plain)} bytes; at most {MAX_ENV_KEY_BYTES} bytes are accepted"
            )
        try:
            text = plain.decode("utf-8")
        except UnicodeDecodeError:
            raise EnvKeyRejected("the key is not UTF-8 text") from None
        if not text.strip():
            raise EnvKeyRejected("the key is empty")
        problem = key_problem(text)
        if problem is not None:  # rollouts send it in headers: refused now, not at every rollout
            raise EnvKeyRejected(f"the key {problem}")
        self.keep_env_key(Secret(text))

    def keep_env_key(self, key: Secret | None) -> None:
        """Use *key* for rollouts, as an uploaded key (it replaces an earlier one; None forgets)."""
        with self.lock:
            previous, self._uploaded_key = self._uploaded_key, key
            if previous is not None and key is not None and key != previous:
                self.key_replaced = True

    @property
    def has_env_key(self) -> bool:
        """Whether a client uploaded an environment key."""
        with self.lock:
            return self._uploaded_key is not None

    def key_source(self) -> str:
        """Where the key sent to task apps comes from: ``uploaded``, ``task_app_api_key``,
        ``env:ENVIRONMENT_API_KEY`` or ``none``."""
        candidates = self._key_candidates()
        return candidates[0][0] if candidates else "none"

    def _key_candidates(self) -> list[tuple[str, Secret]]:
        found: list[tuple[str, Secret]] = []
        env = os.environ.get("ENVIRONMENT_API_KEY", "").strip()
        # No lock: rollout threads ask while a batch runs under the store's lock, and reading one
        # reference is atomic (the upload replaces the Secret, never mutates it).
        uploaded = self._uploaded_key
        for source, key in (
            ("uploaded", uploaded),
            ("task_app_api_key", self._task_app_key),
            ("env:ENVIRONMENT_API_KEY", Secret(env) if env else None),
        ):
            if key and all(key != seen for _, seen in found):
                found.append((source, key))
        return found

    def verify_task_app(self, url: str) -> dict[str, Any]:
        """Probe the task app at *url* (``/health`` and ``/task_info``) with each key this fake
        would send it, as the hosted backend does before a CLI submit (contract §10.3).

        Answers ``{any_ok, candidates_first15, attempts}``; keys appear only masked.
        """
        candidates = self._key_candidates()
        masked = [mask_secret(key.value) for _, key in candidates]
        if not (is_loopback_url(url) or self.rollouts is True):
            return {
                "any_ok": False,
                "endpoint_base_url": url,
                "candidates_first15": masked,
                "attempts": [
                    {
                        "status": None,
                        "error": f"not probed: {url!r} is not on loopback and this fake only calls "
                        "loopback task apps (create it with rollouts=True to allow any http(s) URL)",
                    }
                ],
            }
        attempts: list[dict[str, Any]] = []
        tries: list[tuple[str, Secret | None]] = list(candidates) or [("none", None)]
        for source, key in tries:
            shown = mask_secret(key.value) if key else "<none>"
            with self.lock.set_aside():  # network I/O: other requests go on meanwhile
                report = check_task_app_health(url, key, client=self._driver.client)
            attempts.append(
                {
                    "status": report.task_info_status,
                    "health_status": report.health_status,
                    "task_info_status": report.task_info_status,
                    "ok": report.ok,
                    "key_source": source,
                    "key_first15": shown,
                    "detail": report.detail,
                }
            )
        return {
            "any_ok": any(a["ok"] for a in attempts),
            "endpoint_base_url": url,
            "candidates_first15": masked,
            "attempts": attempts,
        }

    # -- rollout helpers --------------------------------------------------------------------------
    def _rollout_key(self) -> str | Secret | None:
        # An uploaded key wins: it is what the client said the task app expects.
        candidates = self._key_candidates()
        return candidates[0][1] if candidates else None

    def _inference_url(self, rollout: RolloutIdentity, progress: Progress) -> str:
        """The rollout's own inference URL on the stub model (served on first use)."""
        with self._helpers_lock:
            if self._stub_url is None:
                stack = contextlib.ExitStack()
                self._stub_url = stack.enter_context(self.inference.serve())
                self._stub_stack = stack
        return self.inference.route(rollout, progress)


#: One encoder for every canonical payload (``json.dumps`` with options builds one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def _canonical(payload: Mapping[str, Any]) -> str:
    return _CANONICAL.encode(payload)
