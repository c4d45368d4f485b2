"""Polling a job to a terminal status on the job's clock: the rules, without I/O.

Polls at t=0 and every ``min(interval, time left)``, the last on the deadline; a raising callback
warns and polling goes on; transient poll failures end the wait only ``max_failed_polls`` in a row.
"""

from __future__ import annotations

import traceback
import warnings
from itertools import groupby
from typing import Any

from pytest_synth_rl.client import results
from pytest_synth_rl.client.results import JobResult, PollRecord, add_poll, is_terminal, job_status, polls_in
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import (
    BackendError,
    ConfigProblem,
    JobFailedError,
    JobTimeoutError,
    SynthUsageError,
    seconds_problem,
)
from pytest_synth_rl.secrets.callers import outside_stacklevel

#: Consecutive failed polls (each after all its retries) that end a wait before its timeout.
DEFAULT_MAX_FAILED_POLLS = 5
#: The shortest poll interval, in seconds (the docs say why).
MIN_POLL_INTERVAL = 0.01
#: Float noise from summing many virtual sleeps must not buy an extra poll past the deadline.
_EPSILON = 1e-9


class SynthCallbackWarning(UserWarning):
    """A user callback (such as ``on_status``) raised; the plugin carried on without it."""


def summarize_history(history: list[PollRecord], limit: int = 5) -> str:
    """The last *limit* runs of equal statuses, e.g. ``queued x3 (0-20s) -> running x718 (30-7200s)``."""
    runs = [(status, list(run)) for status, run in groupby(history, lambda r: r.status or "<no status>")]
    parts = [
        f"{status} x{polls_in(run)} ({run[0].elapsed:g}-{run[-1].elapsed:g}s)"
        if polls_in(run) > 1
        else f"{status} ({run[0].elapsed:g}s)"
        for status, run in runs[-limit:]
    ]
    return ("... -> " if len(runs) > limit else "") + " -> ".join(parts)


def interval_problem(value: object) -> str | None:
    """What is wrong with *value* as seconds between polls, or None"""
    problem = seconds_problem(value)
    if problem is None and isinstance(value, (int, float)) and value < MIN_POLL_INTERVAL:
        return f"must be at least {MIN_POLL_INTERVAL:g} seconds (the shortest poll interval), got {value!r}"
    return problem


def is_transient(exc: BackendError) -> bool:
    """Whether a failed request may succeed if asked again later (no answer, 408, 429 or 5xx)."""
    code = exc.status_code
    return code is None or code in (408, 429) or code >= 500


def job_failed(result: JobResult, message: str, details: object) -> JobFailedError:
    """The error for a job that ended without success; *details* becomes its ``result``."""
    hint = "see job.events() for the backend's log of the run"
    return JobFailedError(
        message, job_id=result.job_id, status=result.status, error=result.error, result=details, hint=hint
    )


class Poller:
    """State and rules of one ``poll_until_complete`` call."""

    def __init__(
        self,
        job_id: str,
        *,
        timeout: float,
        interval: float,
        clock: Clock,
        raise_on_failure: bool = False,
        max_failed_polls: int = DEFAULT_MAX_FAILED_POLLS,
    ) -> None:
        bad_count = type(max_failed_polls) is not int or max_failed_polls < 1
        count_problem = f"must be an integer >= 1, got {max_failed_polls!r}" if bad_count else None
        times = "timeout=7200, interval=10"
        for name, problem, example in (
            ("max_failed_polls", count_problem, "max_failed_polls=5"),
            ("timeout", seconds_problem(timeout, allow_zero=True), times),
            ("interval", interval_problem(interval), times),
        ):
            if problem is not None:
                hint = f"e.g. poll_until_complete({example})"
                raise SynthUsageError([ConfigProblem(f"poll_until_complete.{name}", problem, hint)])
        self.max_failed_polls, self.timeout, self.interval = max_failed_polls, float(timeout), float(interval)
        self.job_id, self.clock, self.raise_on_failure = job_id, clock, raise_on_failure
        #: The errors of the current run of consecutive failed polls, and how many failed in all.
        self.failures: list[BackendError] = []
        self.failed_polls, self.started = 0, clock.now()
        self.note: str | None = None
        self.deadline = self.started + self.timeout
        self.history: list[PollRecord] = []

    def record(self, payload: dict[str, Any], note: str | None = None) -> PollRecord:
        entry = PollRecord(self.clock.time(), self.clock.now() - self.started, job_status(payload), payload)
        entry, self.note = add_poll(self.history, entry), note
        for observer in results.poll_observers():
            try:
                observer(self, entry)
            except Exception as exc:
                self.callback_failed(exc)
        self.failures.clear()
        return entry

    def poll_failed(self, exc: BackendError) -> float:
        """The seconds to wait after a poll that failed after its retries"""
        if not is_transient(exc):
            raise exc
        self.failures.append(exc)
        self.failed_polls += 1
        if len(self.failures) >= self.max_failed_polls:
            message = f"polling RL job {self.job_id} failed: {len(self.failures)} consecutive poll(s) failed "
            message += f"after their retries (failure budget max_failed_polls={self.max_failed_polls}); "
            hint = "the backend kept failing; check its status, or raise "
            hint += "poll_until_complete(max_failed_polls=...) to wait through longer outages"
            raise BackendError(
                message + f"last: {str(exc.message).splitlines()[0]}",
                method=exc.method,
                url=exc.url,
                status_code=exc.status_code,
                response_text=exc.response_excerpt,
                attempts=[a for failure in self.failures for a in failure.attempts],
                hint=hint,
            ) from exc
        return self._wait(exc)

    def callback_failed(self, exc: BaseException) -> None:
        formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        warnings.warn(
            SynthCallbackWarning(
                f"on_status callback raised {type(exc).__name__}: {exc} "
                f"(poll {polls_in(self.history)} of job {self.job_id}); polling continues.\n{formatted}"
            ),
            stacklevel=outside_stacklevel(),
        )

    def next_wait(self) -> float | None:
        """Seconds to sleep before the next poll; None when the last answer was terminal"""
        return None if self.history and is_terminal(self.history[-1].status) else self._wait()

    def _wait(self, cause: BaseException | None = None) -> float:
        remaining = self.deadline - self.clock.now()
        if remaining <= _EPSILON:
            raise self._timeout() from cause
        return min(self.interval, remaining)

    def finish(self) -> JobResult:
        elapsed = self.clock.now() - self.started
        result = JobResult.from_payload(
            self.job_id, self.history[-1].payload, history=self.history, elapsed=elapsed
        )
        if self.raise_on_failure and not result.succeeded:
            message = f"RL job {self.job_id} {result.outcome} (status {result.status!r}): "
            raise job_failed(result, message + (result.error or "the backend gave no error text"), result)
        return result

    def _timeout(self) -> JobTimeoutError:
        last = self.history[-1].status if self.history else None
        note = f"; the last answer was unreadable: {self.note}" if self.note else ""
        if self.failed_polls:
            last_error = str(self.failures[-1].message if self.failures else "").splitlines()
            tail = f", the last one in a row: {last_error[0]}" if last_error else ""
            note += f"; {self.failed_polls} poll(s) failed after their retries{tail}"
        return JobTimeoutError(
            f"RL job {self.job_id} did not finish within {self.timeout:g}s on {self.clock!r}: "
            f"{polls_in(self.history)} polls every {self.interval:g}s; statuses: "
            f"{summarize_history(self.history)}{note}",
            job_id=self.job_id,
            timeout=self.timeout,
            last_status=last,
            history=self.history,
            hint=(
                "if the job is just slow, raise poll_until_complete(timeout=...) (or --synth-timeout); "
                f"otherwise inspect it with RLJob.from_job_id({self.job_id!r}).get_status() / .events(), "
                "or stop it with .cancel()"
            ),
        )
