"""Metric baselines: a test records its job's numbers once (one JSON file per test); later runs
compare against them with a per-metric :class:`Tolerance`. Metric names: ``docs/design.md``."""

from __future__ import annotations

import fnmatch
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pytest_synth_rl.assertions import job_rewards
from pytest_synth_rl.client import AsyncRLJob, RLJob
from pytest_synth_rl.client.results import STEP_PATHS, JobResult, number_at, polls_in
from pytest_synth_rl.errors import SynthError, did_you_mean
from pytest_synth_rl.reporting.files import (
    UnreadableDocument,
    atomic_write_text,
    parse_json_document,
    safe_file_stem,
    shell_quote,
)
from pytest_synth_rl.reporting.render import table
from pytest_synth_rl.secrets.masking import redact

Direction = Literal["two_sided", "higher_is_better", "lower_is_better"]
Verdict = Literal["ok", "drift", "missing", "new"]

FORMAT_VERSION = 1
_FIX_FILE = "fix the file by hand, or delete it and re-run with --synth-update-baselines"


def update_command(test_id: str) -> str:
    return f"pytest --synth-update-baselines {shell_quote(test_id)}"


class BaselineError(SynthError):
    """A baseline could not be used: unreadable file, bad metric value, bad tolerance."""


class BaselineMissing(BaselineError, AssertionError):
    """The test compares against a baseline that was never written (a failed test, with the fix)."""

    def __init__(self, test_id: str, path: Path) -> None:
        self.test_id, self.path = test_id, path
        super().__init__(
            f"no metric baseline for {test_id} (expected file {path})",
            hint=f"create it by running: {update_command(test_id)}",
        )


class BaselineMismatch(BaselineError, AssertionError):
    """Metrics drifted beyond tolerance (or disappeared); the message is the comparison table."""

    def __init__(self, comparison: BaselineComparison) -> None:
        self.comparison = comparison
        test_id, path = comparison.test_id, comparison.path
        where = (f" for {test_id}" if test_id else "") + (f" (baseline file {path})" if path else "")
        counts = [(len(comparison.drifted), "drifted"), (len(comparison.missing), "missing")]
        problems = ", ".join(f"{n} {what}" for n, what in counts if n)
        hint = f"if the change is intended, refresh the baseline with: {update_command(test_id or '')}"
        super().__init__(
            f"metrics differ from the baseline{where}: {problems}\n{comparison.render()}",
            hint=hint if test_id else None,
        )


_NOISE = 1e-9  # tolerances this small only absorb float noise: tables call them "exact"
_ROUNDING = 1e-12  # relative slack so float rounding never decides a boundary case


def _fmt(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move: ``|now - base| <= max(abs, rel * |base|)``; ``direction=
    "higher_is_better"`` fails only a drop beyond that, ``"lower_is_better"`` only a rise."""

    abs: float = 0.0
    rel: float = 0.0
    direction: Direction = "two_sided"

    def __post_init__(self) -> None:
        for name in ("abs", "rel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise BaselineError(
                    f"Tolerance({name}={value!r}) is invalid: expected a number >= 0",
                    hint="pass e.g. Tolerance(abs=0.05) or Tolerance(rel=0.1) (10%)",
                )
        if self.direction not in get_args(Direction):
            raise BaselineError(
                f"Tolerance(direction={self.direction!r}) is invalid: expected one of "
                f"{', '.join(get_args(Direction))}",
                hint='use direction="higher_is_better" for rewards, "lower_is_better" for durations',
            )

    def allowed(self, base: float) -> float:
        return max(self.abs, self.rel * abs(base))

    def accepts(self, base: float, now: float) -> bool:
        if now == base:  # also equal infinities
            return True
        delta = now - base
        if math.isnan(delta):
            return False
        # Slack scaled by the finite values only: an infinite one would let inf pass against -inf.
        scale = max([1.0] + [abs(v) for v in (base, now) if math.isfinite(v)])
        limit = self.allowed(base) + _ROUNDING * scale
        moved = {"higher_is_better": -delta, "lower_is_better": delta}.get(self.direction, abs(delta))
        return moved <= limit

    def render(self) -> str:
        """``±0.05``, ``-10%`` (may drop), ``+max(0.05, 10%)``, ``exact``, ``not compared``."""
        if math.isinf(self.abs) or math.isinf(self.rel):
            return "not compared"
        if self.direction == "two_sided" and max(self.abs, self.rel) <= _NOISE:
            return "exact"
        parts = [_fmt(self.abs)] if self.abs else []
        if self.rel:
            parts.append(f"{_fmt(self.rel * 100)}%")
        body = f"max({parts[0]}, {parts[1]})" if len(parts) == 2 else (parts or ["0"])[0]
        sign = {"two_sided": "±", "higher_is_better": "-", "lower_is_better": "+"}[self.direction]
        return f"{sign}{body}"

    def to_json(self) -> dict[str, Any]:
        sided = {} if self.direction == "two_sided" else {"direction": self.direction}
        return {"abs": self.abs, "rel": self.rel, **sided}

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Tolerance:
        if not isinstance(data, Mapping):
            raise BaselineError(f'{where}: expected a tolerance object like {{"abs": 0.05}}, got {data!r}')
        if unknown := sorted(set(data) - {"abs", "rel", "direction"}):
            raise BaselineError(f"{where}: unknown tolerance keys {unknown}; expected abs, rel, direction")
        for name in ("abs", "rel"):
            number = _as_number(data.get(name))
            if number is not None and not math.isfinite(number):  # JSON could not write it back
                raise BaselineError(
                    f"{where}: {name} is {number!r}: expected a finite number >= 0",
                    hint='write a number such as {"abs": 0.05}, or leave the key out for 0',
                )
        try:
            return cls(data.get("abs", 0.0), data.get("rel", 0.0), data.get("direction", "two_sided"))
        except BaselineError as error:
            raise BaselineError(f"{where}: {error.message}", hint=error.hint) from None


#: For metrics without an explicit tolerance: offline runs are deterministic.
DEFAULT_TOLERANCE = Tolerance(abs=1e-9, rel=1e-9)
#: What a metric of :data:`WAIT_METRICS` gets unless a tolerance names it: any value passes.
NOT_COMPARED = Tolerance(abs=math.inf)
#: Metrics of how the test waited, not what the job learned: not compared by default.
WAIT_METRICS = frozenset({"polls", "elapsed_s"})


def _as_number(value: Any) -> float | None:
    """*value* as a float; an integer too large for one (JSON has no limit) is an infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _flatten_numbers(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten_numbers(value, f"{prefix}{key}."))
        elif (number := _as_number(value)) is not None and math.isfinite(number):
            out[f"{prefix}{key}"] = number
    return out


def _numbers(value: Any, *, exact: bool = False) -> tuple[dict[str, float], list[float]]:
    """*value*'s metrics and reward curve: a job's, a result's, or a mapping's (*exact*: as is)."""
    rewards: list[float] = []
    if isinstance(value, (RLJob, AsyncRLJob)):
        if isinstance(value, AsyncRLJob) or value.last_result is None:
            kind = "an AsyncRLJob" if isinstance(value, AsyncRLJob) else f"job {value.job_id} before its wait"
            raise BaselineError(
                f"cannot summarise {kind}: expected a blocking RLJob whose wait has ended",
                hint="wait first, e.g. synth_expect(job).to_succeed(), then pass the job; for an async "
                "job pass the result of await job.poll_until_complete() (it has no reward curve)",
            )
        value, rewards = value.last_result, job_rewards(value)
    if isinstance(value, Mapping) and not hasattr(value, "history"):  # a JobResult has a history
        return (_validated_metrics(value) if exact else _flatten_numbers(value)), rewards
    if not isinstance(value, JobResult):
        raise BaselineError(
            f"cannot summarise {type(value).__name__}: expected a job after its wait, its JobResult, "
            "or a mapping of metric name -> number",
            hint="pass the job: synth_expect(job).to_succeed(), then synth_baseline(job)",
        )
    metrics = _flatten_numbers(value.raw)
    if rewards:
        metrics.update({"reward.first": rewards[0], "reward.last": rewards[-1], "reward.max": max(rewards)})
        metrics.update({"reward.min": min(rewards), "reward.mean": sum(rewards) / len(rewards)})
        metrics["reward.points"] = float(len(rewards))
    step = number_at(value.raw, STEP_PATHS)
    if step is not None or rewards:
        metrics["steps"] = step if step is not None else float(len(rewards))
    if value.history:
        metrics["polls"] = float(polls_in(value.history))
    metrics.update(_flatten_numbers({"final_reward": value.final_reward, "elapsed_s": value.elapsed}))
    return metrics, rewards


def summarize_job(value: Any, *, extra: Mapping[str, float] | None = None) -> dict[str, float]:
    """A finished job's numbers (see :func:`_numbers`); *extra* overrides them."""
    return {**_numbers(value)[0], **_validated_metrics(extra or {})}


def _validated_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        raise BaselineError(
            f"metrics must be a mapping of name -> number, got {type(metrics).__name__}",
            hint="use summarize_job(result) to turn a job result into metrics",
        )
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise BaselineError(f"metric names must be non-empty strings, got {name!r}")
        number = _as_number(value)
        if number is None or not math.isfinite(number):
            raise BaselineError(
                f"metric {name!r} has value {value if number is None else number!r}: "
                "expected a finite number",
                hint="baselines compare numbers only; drop the metric or convert it (e.g. float(x))",
            )
        out[name] = number
    return out


@dataclass(frozen=True)
class Baseline:
    """One test's stored metrics, their tolerances, and the reward curve of the run that wrote it."""

    test_id: str
    metrics: dict[str, float]
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    path: Path | None = None
    reward_curve: list[float] = field(default_factory=list)

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "test_id": redact(self.test_id),
            "metrics": self.metrics,
            "tolerances": {name: tol.to_json() for name, tol in self.tolerances.items()},
        }
        if self.reward_curve:
            document["reward_curve"] = self.reward_curve
        return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, path: Path) -> Baseline:
        def broken(problem: str) -> BaselineError:
            return BaselineError(f"baseline file {path}{problem}", hint=_FIX_FILE)

        try:
            data = parse_json_document(text)
        except UnreadableDocument as error:
            raise broken(f" {error}") from None
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
            raise broken(': expected an object with a "metrics" object')
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise broken(f" has format version {version!r}; this plugin reads version {FORMAT_VERSION}")
        try:
            metrics = _validated_metrics(data["metrics"])
        except BaselineError as error:
            raise broken(f": {error.message}") from None
        raw_tolerances = data.get("tolerances") or {}
        if not isinstance(raw_tolerances, dict):
            raise broken(': "tolerances" must be an object')
        tolerances = {
            str(name): Tolerance.from_json(value, where=f"baseline file {path}, tolerances.{name}")
            for name, value in raw_tolerances.items()
        }
        raw_curve = data.get("reward_curve") or []
        curve = [_as_number(v) for v in raw_curve] if isinstance(raw_curve, list) else [None]
        numbers = [v for v in curve if v is not None]
        if len(numbers) < len(curve):
            raise broken(': "reward_curve" must be a list of numbers')
        for index, value in enumerate(numbers):
            if not math.isfinite(value):
                raise broken(f': "reward_curve"[{index}] is {value!r}: expected a finite number')
        return cls(str(data.get("test_id", "")), metrics, tolerances, path, numbers)


class BaselineStore:
    """A directory of baselines, one sorted, indented JSON file per test id, written atomically."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"BaselineStore({str(self.directory)!r})"

    def path_for(self, test_id: str) -> Path:
        return self.directory / f"{safe_file_stem(test_id)}.json"

    def exists(self, test_id: str) -> bool:
        return self.path_for(test_id).is_file()

    def load(self, test_id: str) -> Baseline | None:
        path = self.path_for(test_id)
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise BaselineError(f"cannot read baseline file {path}: {error.strerror}") from None
        return Baseline.from_json(text, path=path)

    def save(
        self,
        test_id: str,
        metrics: Mapping[str, float],
        tolerances: Mapping[str, Tolerance] | None = None,
        reward_curve: Sequence[float] = (),
    ) -> Path:
        metrics, curve = _validated_metrics(metrics), [float(v) for v in reward_curve]
        baseline = Baseline(test_id, metrics, _validated_tolerances(tolerances), None, curve)
        return atomic_write_text(self.path_for(test_id), baseline.to_json())


def _validated_tolerances(tolerances: Mapping[str, Tolerance] | None) -> dict[str, Tolerance]:
    out: dict[str, Tolerance] = {}
    for name, tol in (tolerances or {}).items():
        if not isinstance(tol, Tolerance):
            raise BaselineError(
                f"tolerance for {name!r} must be a Tolerance, got {tol!r}",
                hint=f'e.g. tolerances={{"{name}": Tolerance(abs=0.05)}}',
            )
        out[str(name)] = tol
    return out


@dataclass(frozen=True)
class ComparisonRow:
    metric: str
    baseline: float | None
    now: float | None
    tolerance: Tolerance
    verdict: Verdict

    @property
    def delta(self) -> float | None:
        return None if self.baseline is None or self.now is None else self.now - self.baseline


@dataclass(frozen=True)
class BaselineComparison:
    """A run's metrics against its baseline: not ``ok`` if one drifted or went missing."""

    rows: list[ComparisonRow]
    test_id: str | None = None
    path: Path | None = None
    updated: bool = False

    @property
    def drifted(self) -> list[ComparisonRow]:
        return [r for r in self.rows if r.verdict == "drift"]

    @property
    def missing(self) -> list[ComparisonRow]:
        return [r for r in self.rows if r.verdict == "missing"]

    @property
    def new(self) -> list[ComparisonRow]:
        return [r for r in self.rows if r.verdict == "new"]

    @property
    def ok(self) -> bool:
        return self.updated or not (self.drifted or self.missing)

    def __bool__(self) -> bool:
        return self.ok

    def render(self) -> str:
        body = []
        for row in self.rows:
            verdict: str = {"missing": "MISSING"}.get(row.verdict, row.verdict)
            if row.verdict == "drift" and row.delta is not None:
                verdict = f"DRIFT ({row.delta:+.6g})"
            values = ["-" if v is None else _fmt(v) for v in (row.baseline, row.now)]
            body.append([row.metric, *values, row.tolerance.render(), verdict])
        return table(["metric", "baseline", "now", "tolerance", "verdict"], body)

    def raise_for_drift(self) -> BaselineComparison:
        if not self.ok:
            raise BaselineMismatch(self)
        return self


def _tolerance_for(
    name: str, explicit: Mapping[str, Tolerance], stored: Mapping[str, Tolerance], default: Tolerance
) -> Tolerance:
    """Exact name, then glob patterns; explicit beats stored beats default (wait metrics: not compared)."""
    for source in (explicit, stored):
        if name in source:
            return source[name]
        for pattern, tol in source.items():
            if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(name, pattern):
                return tol
    return NOT_COMPARED if name in WAIT_METRICS else default


def compare(
    metrics: Mapping[str, float] | Any,
    baseline: Baseline | Mapping[str, float],
    tolerances: Mapping[str, Tolerance] | None = None,
    default: Tolerance = DEFAULT_TOLERANCE,
    *,
    test_id: str | None = None,
) -> BaselineComparison:
    """Compare *metrics* (a mapping or a job result) with *baseline*, metric by metric."""
    now = _numbers(metrics, exact=True)[0]
    explicit = _validated_tolerances(tolerances)
    if isinstance(baseline, Baseline):
        base, stored, path = baseline.metrics, baseline.tolerances, baseline.path
        test_id = test_id or baseline.test_id or None
    else:
        base, stored, path = _validated_metrics(baseline), {}, None
    rows = []
    for name in sorted(set(base) | set(now)):
        tol = _tolerance_for(name, explicit, stored, default)
        b, n = base.get(name), now.get(name)
        verdict: Verdict = (
            "new" if b is None else "missing" if n is None else "ok" if tol.accepts(b, n) else "drift"
        )
        rows.append(ComparisonRow(name, b, n, tol, verdict))
    return BaselineComparison(rows=rows, test_id=test_id, path=path)


def check_baseline(
    store: BaselineStore,
    test_id: str,
    metrics: Any,
    *,
    tolerances: Mapping[str, Tolerance] | None = None,
    update: bool = False,
) -> BaselineComparison:
    """Compare *metrics* with *test_id*'s stored baseline (:class:`BaselineMissing`,
    :class:`BaselineMismatch`), or with ``update=True`` refresh it, keeping stored tolerances."""
    values, curve = _numbers(metrics, exact=True)
    explicit = _validated_tolerances(tolerances)  # before the baseline is read: a first run checks too
    existing = store.load(test_id)
    names = sorted({*values, *(existing.metrics if existing else ())})
    for name in explicit:
        if name not in names and not any(fnmatch.fnmatchcase(metric, name) for metric in names):
            guess = did_you_mean(name, names)
            raise BaselineError(
                f"the tolerance for {name!r} matches no metric of this job "
                f"(its metrics: {', '.join(names) or 'none'})",
                hint=f"{guess + ' ' if guess else ''}name a metric, or a pattern such as 'reward.*'",
            )
    if update:
        kept = {**(existing.tolerances if existing else {}), **explicit}
        path = store.save(test_id, values, kept, reward_curve=curve)
        rows = compare(values, existing or {}, tolerances, test_id=test_id).rows
        return BaselineComparison(rows=rows, test_id=test_id, path=path, updated=True)
    if existing is None:
        raise BaselineMissing(test_id, store.path_for(test_id))
    return compare(values, existing, tolerances, test_id=test_id).raise_for_drift()
