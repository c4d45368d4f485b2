"""JobStore: the fake backend's state (jobs and the idempotency keys that made them, scenarios waiting
for the next submissions, faults, the request log), each bounded so a long-lived served fake stays flat,
behind one reentrant :class:`StoreLock` that a rollout batch sets aside (at any depth) while it waits on
the network. Advancing jobs is the lifecycle's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import ConfigProblem, SynthError
from pytest_synth_rl.fake.faults import Fault
from pytest_synth_rl.fake.jobs import JobState
from pytest_synth_rl.fake.scenario import Scenario, int_in
from pytest_synth_rl.fake.wire import LoggedRequest
from pytest_synth_rl.taskapp.loopback import is_loopback_url

RolloutsMode = Literal["auto"] | bool
#: How many requests the log keeps (the most recent).
REQUEST_LOG_SIZE = 1000
#: Most jobs kept, and most job data (as :func:`job_size` estimates it): the oldest finished jobs
#: are forgotten to make room; when unfinished jobs alone fill either, a submit gets a 429.
MAX_JOBS = 1000
MAX_JOB_DATA = 256 * 2**20
#: Bytes a job takes per byte of its payload's JSON, and per step of its scenario (measured).
_PAYLOAD_FACTOR = 24
_STEP_BYTES = 640
#: Ids of forgotten jobs remembered, to tell "evicted" from "never existed" in a 404.
_EVICTED_IDS = 10 * MAX_JOBS
#: Most scenarios waiting for upcoming jobs and their data, and most faults; past them, a 429.
MAX_SCRIPTED = 1000
MAX_SCRIPTED_DATA = 64 * 2**20
MAX_FAULTS = 1000
_SCENARIO_BYTES = 1024
_CURVE_VALUE_BYTES = 40
_LABEL_BYTES = 1024
_CONFIG_STEPS = ("num_epochs", "iterations_per_epoch")
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def job_size(job: JobState) -> int:
    """What *job* counts against :data:`MAX_JOB_DATA`: at least ``MAX_JOB_DATA / MAX_JOBS``."""
    estimate = _PAYLOAD_FACTOR * job.payload_bytes + _STEP_BYTES * job.scenario.steps
    return max(estimate, MAX_JOB_DATA // MAX_JOBS)


def scripted_size(scenario: Scenario) -> int:
    """What a waiting *scenario* counts against :data:`MAX_SCRIPTED_DATA` (its listed curve dominates)."""
    curve = scenario.reward_curve
    values = len(curve) if isinstance(curve, Sequence) and not isinstance(curve, str) else 0
    return _SCENARIO_BYTES + _CURVE_VALUE_BYTES * values + _LABEL_BYTES * len(scenario.labels)


class StoreLock:
    """A reentrant lock whose holder can release it for a while, and wait on a condition."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._released = threading.Condition(self._lock)
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> StoreLock:
        me = threading.get_ident()
        if self._owner != me:  # a reentry holds the inner lock already: only the depth grows
            self._lock.acquire()
            self._owner = me
        self._depth += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._owner != threading.get_ident():
            raise RuntimeError("cannot release a StoreLock this thread does not hold")
        self._depth -= 1
        if not self._depth:
            self._owner = None
            self._released.notify_all()
            self._lock.release()

    acquire, release = __enter__, __exit__

    @property
    def held(self) -> bool:
        return self._owner == threading.get_ident()

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Release the lock entirely for the block, then take it back at the same depth."""
        depth = self._depth if self.held else 0
        for _ in range(depth):
            self.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self.acquire()

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Hold the lock with *ready()* true: until then, set the lock aside and wait for a release."""
        if not self.held:
            raise RuntimeError("StoreLock.wait_until needs the lock held")
        depth = self._depth
        while not ready():
            self._owner, self._depth = None, 0
            self._released.notify_all()
            self._released.wait()  # releases the lock at any depth, takes it back at the same
            self._owner, self._depth = threading.get_ident(), depth


class StoreFull(SynthError):
    """No room for a job, a scenario for an upcoming job or a fault: a 429 with :attr:`code`."""

    def __init__(self, message: str, *, hint: str, code: str = "too_many_jobs") -> None:
        super().__init__(message, hint=hint)
        self.code = code


class IdempotencyConflict(Exception):
    """An ``Idempotency-Key`` reused with a different payload; ``job_id`` is the key's job."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


class JobStore:
    """Jobs, scenarios, faults and the request log of one fake backend (methods take :attr:`lock`)."""

    def __init__(
        self,
        *,
        clock: Clock,
        validate: bool = True,
        rollouts: RolloutsMode = "auto",
        job_id_prefix: str = "job_rl_",
    ) -> None:
        self.lock = StoreLock()
        self.clock = clock
        self.job_id_prefix = job_id_prefix
        self.validate_payloads = validate
        self.rollouts: RolloutsMode = rollouts
        self.jobs: OrderedDict[str, JobState] = OrderedDict()
        #: Unfinished jobs: the ones a clock tick may move.
        self.active: dict[str, JobState] = {}
        self._kept = 0
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._idempotency: dict[str, tuple[str, str]] = {}
        self._faults: list[Fault] = []
        self._requests: deque[LoggedRequest] = deque(maxlen=REQUEST_LOG_SIZE)
        self.default_scenario = Scenario()
        self._default_scripted = False
        self._next: deque[tuple[Scenario, int]] = deque()
        self._next_bytes = 0
        self._counter = 0

    # -- scenarios --------------------------------------------------------------------------------
    def set_default(self, scenario: Scenario, *, scripted: bool = True) -> None:
        """Jobs submitted from now on follow *scenario* (``scripted=False``: the plain default)."""
        with self.lock:
            self.default_scenario = scenario
            self._default_scripted = scripted

    def queue(self, scenario: Scenario) -> None:
        """Script the next submission; :class:`StoreFull` past :data:`MAX_SCRIPTED` or its data cap."""
        size = scripted_size(scenario)
        with self.lock:
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

    def rescript(self, job: JobState, scenario: Scenario) -> None:
        """Give *job* a new scenario (from its current stage on), recounting its size."""
        with self.lock:
            job.scenario = scenario
            size = job_size(job)
            self._kept += size - job.size
            job.size = size
            job.touch(job.updated_time)
            if not job.terminal:
                self.active[job.id] = job

    # -- jobs -------------------------------------------------------------------------------------
    def find(self, job_id: str) -> JobState | None:
        with self.lock:
            return self.jobs.get(job_id)

    def get(self, job_id: str, hint: str = "use the id returned by submit(), or fake.jobs") -> JobState:
        """The job *job_id*; :class:`SynthError` naming recent ids if there is none."""
        job = self.find(job_id)
        if job is not None:
            return job
        evicted = self.evicted_reason(job_id)
        if evicted is not None:
            raise SynthError(evicted, hint="fake.jobs (GET /_fake/jobs) lists the jobs kept")
        raise SynthError(f"no job {job_id!r} on this FakeSynthBackend (jobs: {self.recent_ids()})", hint=hint)

    def evicted_reason(self, job_id: str) -> str | None:
        """Why job *job_id* is gone, if this fake forgot it to make room (None otherwise)."""
        with self.lock:
            if job_id not in self._evicted:
                return None
        return (
            f"job {job_id!r} was evicted: this fake keeps at most {MAX_JOBS} jobs (and about "
            f"{MAX_JOB_DATA >> 20} MiB of job data), forgetting the oldest finished ones; read a job's "
            "results before submitting that many more, or reset the fake between tests"
        )

    def latest(self) -> JobState:
        with self.lock:
            if not self.jobs:
                hint = "submit a job first (POST /rl/jobs)"
                raise SynthError("no job was submitted to this FakeSynthBackend yet", hint=hint)
            return self.jobs[next(reversed(self.jobs))]

    def records(self) -> list[JobState]:
        with self.lock:
            return list(self.jobs.values())

    def recent_ids(self) -> list[str]:
        with self.lock:
            return list(self.jobs)[-5:]

    def validate(self, payload: Mapping[str, Any]) -> list[ConfigProblem]:
        if not self.validate_payloads:
            return []
        from pytest_synth_rl.config import validate_rl_payload  # the config layer, not needed until a submit

        return list(validate_rl_payload(payload))

    def replayed(self, key: str, payload: Mapping[str, Any]) -> JobState | None:
        """The job *key* already created, None if it is new; :class:`IdempotencyConflict` if it differs."""
        with self.lock:
            previous = self._idempotency.get(key)
            if previous is None:
                return None
            canonical, job_id = previous
            if canonical != _CANONICAL.encode(payload):
                raise IdempotencyConflict(job_id)
            return self.jobs[job_id]

    def create(self, payload: dict[str, Any], idempotency_key: str | None = None) -> JobState:
        """A new queued job for *payload*, on the next queued scenario or the default one."""
        with self.lock:
            self._counter += 1
            job_id = f"{self.job_id_prefix}{self._counter:06d}"
            waiting = self._next[0][0] if self._next else None
            ts = self.clock.time()
            canonical = _CANONICAL.encode(payload)
            job = JobState(
                id=job_id,
                payload=payload,
                scenario=waiting or self.default_scenario,
                created_now=self.clock.now(),
                created_time=ts,
                idempotency_key=idempotency_key,
                payload_bytes=len(canonical),
            )
            job.use_rollouts = self._uses_rollouts(job, waiting is None and not self._default_scripted)
            size = job.size = self._make_room(job)
            if waiting is not None:
                self._next_bytes -= self._next.popleft()[1]
            job.set_phase(ts, "queued")
            job.add_event(
                ts, "rl.job.created", f"RL job {job_id} created for {job.model}", {"model": job.model}
            )
            self.jobs[job_id] = self.active[job_id] = job
            self._kept += size
            if idempotency_key is not None:
                self._idempotency[idempotency_key] = (canonical, job_id)
            return job

    def _uses_rollouts(self, job: JobState, plain: bool) -> bool:
        """Whether *job* runs real rollouts (on the *plain* default, for the config's steps if fewer)."""
        use = job.scenario.uses_rollouts
        if use is None and self.rollouts == "auto":
            use = is_loopback_url(job.endpoint)
        elif use is None:
            use = bool(self.rollouts) and job.endpoint.startswith(("http://", "https://"))
        counts = [job.setting("training", key) for key in _CONFIG_STEPS] if use and plain else []
        if counts and all(int_in(count, 1, math.inf) for count in counts):
            steps = min(math.prod(counts), job.scenario.steps)
            job.scenario = dataclasses.replace(job.scenario, steps=steps)
        return use

    def _make_room(self, new: JobState) -> int:
        """Forget the oldest finished jobs until *new* fits; its size, or :class:`StoreFull`."""
        size = job_size(new)

        def fits() -> bool:
            return len(self.jobs) < MAX_JOBS and self._kept + size <= MAX_JOB_DATA

        for job in [] if fits() else list(self.jobs.values()):  # oldest first
            if job.terminal:
                self._forget(job)
                if fits():
                    break
        if fits():
            return size
        self._counter -= 1  # the id was not used
        raise StoreFull(
            f"no room for a new job: this fake keeps at most {MAX_JOBS} jobs and about {MAX_JOB_DATA >> 20} "
            f"MiB of job data, and the {len(self.jobs)} jobs it keeps are unfinished (about "
            f"{self._kept / 2**20:.1f} MiB; this job would take about {size / 2**20:.1f} MiB, for its "
            f"{new.payload_bytes}-byte payload and {new.scenario.steps} steps)",
            hint="let jobs finish (poll them), cancel some, or reset the fake (POST /_fake/reset)",
        )

    def _forget(self, job: JobState) -> None:
        del self.jobs[job.id]
        self._kept -= job.size
        self.active.pop(job.id, None)
        key = job.idempotency_key
        if key is not None and self._idempotency.get(key, ("", ""))[1] == job.id:
            del self._idempotency[key]
        self._evicted[job.id] = None
        if len(self._evicted) > _EVICTED_IDS:
            self._evicted.popitem(last=False)

    # -- faults and the request log ---------------------------------------------------------------
    @property
    def faults(self) -> list[Fault]:
        with self.lock:
            return list(self._faults)

    def add_fault(self, fault: Fault) -> Fault:
        """Register *fault*; :class:`StoreFull` past :data:`MAX_FAULTS` (used-up ones count until cleared)."""
        with self.lock:
            if len(self._faults) >= MAX_FAULTS:
                active = sum(1 for fault in self._faults if fault.active)
                raise StoreFull(
                    f"no room for another fault: this fake keeps at most {MAX_FAULTS} faults, "
                    f"and {len(self._faults)} are registered ({active} still active)",
                    hint="clear them (DELETE /_fake/faults, fake.clear_faults() in Python) or reset "
                    "the fake (POST /_fake/reset); one fault with a pattern, fail_next or "
                    "probability covers many calls",
                    code="too_many_faults",
                )
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            for fault in self._faults:
                fault.remove()
            self._faults.clear()

    def log(self, request: LoggedRequest) -> None:
        with self.lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[LoggedRequest]:
        with self.lock:
            return list(self._requests)

    # -- lifetime ---------------------------------------------------------------------------------
    def clear_jobs(self) -> None:
        with self.lock:
            for kept in (self.jobs, self._evicted, self.active, self._idempotency):
                kept.clear()
            self._kept = 0

    def reset(self, job_id_prefix: str | None = None) -> None:
        """Forget jobs, the request log, scenarios and faults; with *job_id_prefix*, ids count from 1."""
        with self.lock:
            if job_id_prefix is not None:
                self.job_id_prefix = job_id_prefix
                self._counter = 0
            self.clear_jobs()
            self._requests.clear()
            self._next.clear()
            self._next_bytes = 0
            self.set_default(Scenario(), scripted=False)
        self.clear_faults()
