"""Metric baselines: catch a training run that quietly got worse.

An RL job can "succeed" while its reward falls from 0.8 to 0.3. Asserting an exact number is too
brittle and asserting nothing misses the regression, so a test records the numbers that describe
its job once (the baseline, a small JSON file per test committed next to the tests) and later runs
compare against it with a per-metric :class:`Tolerance`. When a change is intended, the baseline is
refreshed with one command, which every failure message prints.

Library only: the pytest wiring (``--synth-update-baselines``, a fixture that knows the node id)
calls :func:`check_baseline`.

Metric names produced by :func:`summarize_job`
-----------------------------------------------
==================  ==================================================================
``final_reward``    the job's final reward
``reward.first``    first point of the reward curve (one point per training step)
``reward.last``     last point of the curve
``reward.max``      best point of the curve
``reward.min``      worst point of the curve
``reward.mean``     mean over the curve's points
``reward.points``   number of points on the curve
``steps``           highest training step reported (``progress.completed`` / ``step``),
                    else the number of curve points
``polls``           number of status polls the client made [wait]
``elapsed_s``       seconds from submit to terminal status, on the job's clock (virtual
                    time offline, so it is deterministic) [wait]
``<path>``          every other numeric field of the final status payload, flattened with
                    dots: ``metrics.reward``, ``results.metrics.accuracy``,
                    ``progress.total`` ... (lists and non-numbers are skipped)
==================  ==================================================================

[wait] How the test waited, not what the job learned: they follow the poll interval and the
backend's speed (an offline baseline checked online, or a run with another
``--synth-poll-interval``), so they are recorded and shown but not compared unless a tolerance
names them (``{"polls": Tolerance(abs=2)}``).
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_synth_rl.client.status_numbers import REWARD_PATHS, STEP_PATHS, number_at
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.reporting.files import (
    UnreadableDocument,
    atomic_write_text,
    parse_json_document,
    safe_file_stem,
    shell_quote,
)
from pytest_synth_rl.reporting.render import table

__all__ = [
    "DEFAULT_TOLERANCE",
    "NOT_COMPARED",
    "WAIT_METRICS",
    "Baseline",
    "BaselineComparison",
    "BaselineError",
    "BaselineMismatch",
    "BaselineMissing",
    "BaselineStore",
    "ComparisonRow",
    "Direction",
    "Tolerance",
    "check_baseline",
    "compare",
    "summarize_job",
    "update_command",
]

Direction = Literal["two_sided", "higher_is_better", "lower_is_better"]
_DIRECTIONS: tuple[str, ...] = ("two_sided", "higher_is_better", "lower_is_better")
Verdict = Literal["ok", "drift", "missing", "new"]

FORMAT_VERSION = 1
UPDATE_FLAG = "--synth-update-baselines"


def update_command(test_id: str) -> str:
    """The exact command that writes or refreshes the baseline of *test_id*."""
    return f"pytest {UPDATE_FLAG} {shell_quote(test_id)}"


# -- errors --------------------------------------------------------------------------------------
class BaselineError(SynthError):
    """A baseline could not be used: unreadable file, bad metric value, bad tolerance."""


class BaselineMissing(BaselineError, AssertionError):
    """The test compares against a baseline that was never written.

    An ``AssertionError`` so pytest reports it as a failed test (like any other regression check),
    with the command that creates the baseline.
    """

    def __init__(self, test_id: str, path: Path) -> None:
        self.test_id = test_id
        self.path = path
        super().__init__(
            f"no metric baseline for {test_id} (expected file {path})",
            hint=f"create it by running: {update_command(test_id)}",
        )


class BaselineMismatch(BaselineError, AssertionError):
    """Metrics drifted beyond tolerance (or disappeared); the message is the comparison table."""

    def __init__(self, comparison: BaselineComparison) -> None:
        self.comparison = comparison
        where = f" for {comparison.test_id}" if comparison.test_id else ""
        file = f" (baseline file {comparison.path})" if comparison.path else ""
        problems = []
        if comparison.drifted:
            problems.append(f"{len(comparison.drifted)} drifted")
        if comparison.missing:
            problems.append(f"{len(comparison.missing)} missing")
        message = f"metrics differ from the baseline{where}{file}: {', '.join(problems)}\n"
        message += comparison.render()
        hint = None
        if comparison.test_id:
            command = update_command(comparison.test_id)
            hint = f"if the change is intended, refresh the baseline with: {command}"
        super().__init__(message, hint=hint)


# -- tolerance ---------------------------------------------------------------------------------------
# Tolerances this small only absorb float noise; tables call them "exact".
_NOISE = 1e-9
# Relative slack added to every allowance so float rounding never decides a boundary case.
_ROUNDING = 1e-12


def _fmt(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move from its baseline and still pass.

    A value passes when ``|now - base| <= max(abs, rel * |base|)``. With
    ``direction="higher_is_better"`` only a *drop* beyond that fails (any rise passes);
    ``"lower_is_better"`` is the mirror image (durations, losses). The default is two-sided.
    """

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
        if self.direction not in _DIRECTIONS:
            raise BaselineError(
                f"Tolerance(direction={self.direction!r}) is invalid: expected one of "
                f"{', '.join(_DIRECTIONS)}",
                hint='use direction="higher_is_better" for rewards, "lower_is_better" for durations',
            )

    def allowed(self, base: float) -> float:
        """The largest allowed deviation from *base*."""
        return max(self.abs, self.rel * abs(base))

    def accepts(self, base: float, now: float) -> bool:
        """Whether *now* is within tolerance of *base* (the boundary itself passes)."""
        if math.isnan(now) or math.isnan(base):
            return False
        if now == base:  # also covers equal infinities
            return True
        delta = now - base
        if math.isnan(delta):
            return False
        # ``0.75 - 0.8`` is ``-0.05000000000000004``: without a little slack a value exactly on the
        # boundary the user wrote (abs=0.05) would fail on float rounding.
        # The slack scales with the finite values only: an infinite one would make it infinite
        # and let ``inf`` pass against ``-inf``.
        scale = max([1.0] + [abs(v) for v in (base, now) if math.isfinite(v)])
        limit = self.allowed(base) + _ROUNDING * scale
        if self.direction == "higher_is_better":
            return delta >= -limit
        if self.direction == "lower_is_better":
            return delta <= limit
        return abs(delta) <= limit

    def render(self) -> str:
        """Compact text for tables: ``±0.05``, ``±10%``, ``±max(0.05, 10%)``, ``exact``.

        The sign shows the direction: ``-0.05`` may drop by 0.05 (higher is better), ``+0.05`` may
        rise by 0.05 (lower is better).
        """
        parts = []
        if self.abs:
            parts.append(_fmt(self.abs))
        if self.rel:
            parts.append(f"{_fmt(self.rel * 100)}%")
        if not parts:
            body = "0"
        elif len(parts) == 1:
            body = parts[0]
        else:
            body = f"max({parts[0]}, {parts[1]})"
        if math.isinf(self.abs) or math.isinf(self.rel):
            return "not compared"
        sign = {"two_sided": "±", "higher_is_better": "-", "lower_is_better": "+"}[self.direction]
        if self.direction == "two_sided" and max(self.abs, self.rel) <= _NOISE:
            return "exact"
        return f"{sign}{body}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"abs": self.abs, "rel": self.rel}
        if self.direction != "two_sided":
            data["direction"] = self.direction
        return data

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> Tolerance:
        if not isinstance(data, Mapping):
            raise BaselineError(f'{where}: expected a tolerance object like {{"abs": 0.05}}, got {data!r}')
        unknown = set(data) - {"abs", "rel", "direction"}
        if unknown:
            raise BaselineError(
                f"{where}: unknown tolerance keys {sorted(unknown)}; expected abs, rel, direction"
            )
        for name in ("abs", "rel"):
            number = _as_number(data.get(name))
            if number is not None and not math.isfinite(number):
                # Only a hand-edited file holds one (1e999, NaN, Infinity): the file could not be
                # written back (JSON has no such numbers) when its baseline is refreshed.
                raise BaselineError(
                    f"{where}: {name} is {number!r}: expected a finite number >= 0",
                    hint='write a number such as {"abs": 0.05}, or leave the key out for 0',
                )
        try:
            return cls(
                abs=data.get("abs", 0.0),
                rel=data.get("rel", 0.0),
                direction=data.get("direction", "two_sided"),
            )
        except BaselineError as error:
            raise BaselineError(f"{where}: {error.message}", hint=error.hint) from None


#: Used for metrics without an explicit tolerance: offline runs are deterministic (virtual clock,
#: scripted fake), so anything beyond float noise is a real change.
DEFAULT_TOLERANCE = Tolerance(abs=1e-9, rel=1e-9)
#: What a metric of :data:`WAIT_METRICS` gets unless a tolerance names it: any value passes.
NOT_COMPARED = Tolerance(abs=math.inf)
#: Metrics of how the test waited (see the module docstring): not compared by default.
WAIT_METRICS = frozenset({"polls", "elapsed_s"})


# -- metrics -----------------------------------------------------------------------------------------
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
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten_numbers(value, name + "."))
            continue
        number = _as_number(value)
        if number is not None and math.isfinite(number):
            out[name] = number
    return out


def _payload_of(record: Any) -> Mapping[str, Any] | None:
    payload = record if isinstance(record, Mapping) else getattr(record, "payload", None)
    return payload if isinstance(payload, Mapping) else None


def _reward_curve(history: Iterable[Any]) -> tuple[list[float], float | None]:
    """One reward per training step, in step order; plus the highest step reported.

    Polls are more frequent than steps, so the same step is usually reported several times; those
    collapse into one point (the latest report wins) so the curve does not depend on the poll
    interval. If any reward comes without a step, steps cannot be told apart and every reported
    reward is a point, in poll order.
    """
    by_step: dict[float, float] = {}
    in_order: list[float] = []
    every_point_has_step = True
    max_step: float | None = None
    for record in history:
        payload = _payload_of(record)
        if payload is None:
            continue
        step = number_at(payload, STEP_PATHS)
        if step is not None:
            max_step = step if max_step is None else max(max_step, step)
        reward = number_at(payload, REWARD_PATHS)
        if reward is None:
            continue
        in_order.append(reward)
        if step is None:
            every_point_has_step = False
        else:
            by_step[step] = reward
    if every_point_has_step:
        return [by_step[k] for k in sorted(by_step)], max_step
    return in_order, max_step


def summarize_job(result_or_mapping: Any, *, extra: Mapping[str, float] | None = None) -> dict[str, float]:
    """The numbers that describe a finished job, named as in this module's docstring.

    Accepts a JobResult-like object (duck-typed: ``final_reward``, ``history`` of records with a
    ``payload`` mapping, ``elapsed``, ``raw`` final payload; each optional) or a plain mapping,
    whose numeric leaves are flattened with dots (so a raw status payload and a dict of your own
    metrics both work). *extra* adds or overrides named metrics.
    """
    metrics: dict[str, float] = {}
    if isinstance(result_or_mapping, Mapping) and not hasattr(result_or_mapping, "history"):
        metrics.update(_flatten_numbers(result_or_mapping))
    else:
        obj = result_or_mapping
        raw = getattr(obj, "raw", None)
        if isinstance(raw, Mapping):
            metrics.update(_flatten_numbers(raw))
        history = getattr(obj, "history", None) or []
        curve, max_step = _reward_curve(history)
        if curve:
            metrics["reward.first"] = curve[0]
            metrics["reward.last"] = curve[-1]
            metrics["reward.max"] = max(curve)
            metrics["reward.min"] = min(curve)
            metrics["reward.mean"] = sum(curve) / len(curve)
            metrics["reward.points"] = float(len(curve))
        if max_step is not None:
            metrics["steps"] = max_step
        elif curve:
            metrics["steps"] = float(len(curve))
        if history:
            metrics["polls"] = float(len(history))
        final = _as_number(getattr(obj, "final_reward", None))
        if final is not None and math.isfinite(final):
            metrics["final_reward"] = final
        elapsed = _as_number(getattr(obj, "elapsed", None))
        if elapsed is not None and math.isfinite(elapsed):
            metrics["elapsed_s"] = elapsed
        if not any(hasattr(obj, name) for name in ("raw", "history", "final_reward", "elapsed")):
            raise BaselineError(
                f"cannot summarise {type(obj).__name__}: expected a job result (with final_reward, "
                "history, elapsed, raw) or a mapping of metric name -> number",
                hint="pass the JobResult returned by poll_until_complete(), or a dict of metrics",
            )
    if extra:
        metrics.update(_validated_metrics(extra))
    return metrics


def _metrics_of(value: Any) -> dict[str, float]:
    """A plain metrics mapping as is; anything job-like (a JobResult is also a Mapping over its
    raw payload, so test for ``history`` first) goes through :func:`summarize_job`."""
    if isinstance(value, Mapping) and not hasattr(value, "history"):
        return _validated_metrics(value)
    return summarize_job(value)


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


# -- stored baselines --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """One test's stored metrics and the tolerances saved with them."""

    test_id: str
    metrics: dict[str, float]
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    path: Path | None = None
    #: The reward curve of the run that wrote the baseline: drawn next to later runs' curves.
    reward_curve: list[float] = field(default_factory=list)

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "test_id": self.test_id,
            "metrics": self.metrics,
            "tolerances": {name: tol.to_json() for name, tol in self.tolerances.items()},
        }
        if self.reward_curve:
            document["reward_curve"] = self.reward_curve
        return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, path: Path) -> Baseline:
        fix = "fix the file by hand, or delete it and re-run with --synth-update-baselines"
        try:
            data = parse_json_document(text)
        except UnreadableDocument as error:
            raise BaselineError(f"baseline file {path} {error}", hint=fix) from None
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
            raise BaselineError(f'baseline file {path}: expected an object with a "metrics" object', hint=fix)
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise BaselineError(
                f"baseline file {path} has format version {version!r}; this plugin reads "
                f"version {FORMAT_VERSION}",
                hint=fix,
            )
        try:
            metrics = _validated_metrics(data["metrics"])
        except BaselineError as error:
            raise BaselineError(f"baseline file {path}: {error.message}", hint=fix) from None
        raw_tolerances = data.get("tolerances") or {}
        if not isinstance(raw_tolerances, dict):
            raise BaselineError(f'baseline file {path}: "tolerances" must be an object', hint=fix)
        tolerances = {
            str(name): Tolerance.from_json(value, where=f"baseline file {path}, tolerances.{name}")
            for name, value in raw_tolerances.items()
        }
        raw_curve = data.get("reward_curve") or []
        curve = [_as_number(v) for v in raw_curve] if isinstance(raw_curve, list) else [None]
        numbers = [v for v in curve if v is not None]
        if len(numbers) < len(curve):
            raise BaselineError(f'baseline file {path}: "reward_curve" must be a list of numbers', hint=fix)
        for index, value in enumerate(numbers):
            if not math.isfinite(value):  # 1e999, NaN or Infinity (Python's JSON reads them)
                raise BaselineError(
                    f'baseline file {path}: "reward_curve"[{index}] is {value!r}: expected a finite number',
                    hint=fix,
                )
        return cls(
            test_id=str(data.get("test_id", "")),
            metrics=metrics,
            tolerances=tolerances,
            path=path,
            reward_curve=numbers,
        )


class BaselineStore:
    """A directory of baselines, one JSON file per test id.

    File names come from :func:`~pytest_synth_rl.reporting.files.safe_file_stem` (readable node
    id + short hash), contents are sorted, indented and newline-terminated so they diff well in
    review. Writes are atomic, so concurrent xdist workers never leave a torn file.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"BaselineStore({str(self.directory)!r})"

    def path_for(self, test_id: str) -> Path:
        return self.directory / f"{safe_file_stem(test_id)}.json"

    def exists(self, test_id: str) -> bool:
        return self.path_for(test_id).is_file()

    def load(self, test_id: str) -> Baseline | None:
        """The stored baseline of *test_id*, or ``None`` if it was never written."""
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
        """Write (or replace) the baseline of *test_id* atomically; returns its path."""
        baseline = Baseline(
            test_id=test_id,
            metrics=_validated_metrics(metrics),
            tolerances=_validated_tolerances(tolerances),
            reward_curve=[float(v) for v in reward_curve],
        )
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


def _check_tolerance_names(tolerances: Mapping[str, Tolerance], metrics: Sequence[str]) -> None:
    """A tolerance whose name or pattern matches no metric is a typo that would pass silently."""
    for name in tolerances:
        if name in metrics or any(fnmatch.fnmatchcase(metric, name) for metric in metrics):
            continue
        near = difflib.get_close_matches(name, sorted(set(metrics)), n=1)
        guess = f"did you mean {near[0]!r}? " if near else ""
        raise BaselineError(
            f"the tolerance for {name!r} matches no metric of this job "
            f"(its metrics: {', '.join(sorted(set(metrics))) or 'none'})",
            hint=f"{guess}name a metric, or a pattern such as 'reward.*'",
        )


# -- comparison --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ComparisonRow:
    metric: str
    baseline: float | None
    now: float | None
    tolerance: Tolerance
    verdict: Verdict

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.now is None:
            return None
        return self.now - self.baseline


@dataclass(frozen=True)
class BaselineComparison:
    """The result of comparing a run's metrics with its baseline.

    ``ok`` is false when a metric drifted beyond tolerance or a baseline metric is missing from
    the run; metrics that are new in the run are shown but do not fail (refresh to adopt them).
    ``updated`` is true when :func:`check_baseline` wrote the baseline instead of checking it.
    """

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
        """An aligned table: metric, baseline, now, tolerance, verdict."""
        body = []
        for row in self.rows:
            verdict: str = row.verdict
            if row.verdict == "drift" and row.delta is not None:
                sign = "+" if row.delta >= 0 else ""
                verdict = f"DRIFT ({sign}{_fmt(row.delta)})"
            elif row.verdict == "missing":
                verdict = "MISSING"
            body.append(
                [
                    row.metric,
                    "-" if row.baseline is None else _fmt(row.baseline),
                    "-" if row.now is None else _fmt(row.now),
                    row.tolerance.render(),
                    verdict,
                ]
            )
        return table(["metric", "baseline", "now", "tolerance", "verdict"], body)

    def raise_for_drift(self) -> BaselineComparison:
        """Raise :class:`BaselineMismatch` unless :attr:`ok`; returns self for chaining."""
        if not self.ok:
            raise BaselineMismatch(self)
        return self


def _tolerance_for(
    name: str,
    explicit: Mapping[str, Tolerance],
    stored: Mapping[str, Tolerance],
    default: Tolerance,
) -> Tolerance:
    """Exact name first, then glob patterns (``"reward.*"``); explicit beats stored beats default.
    A metric of :data:`WAIT_METRICS` is compared only when a tolerance names it (a pattern counts)."""
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
    """Compare *metrics* (a mapping, or a job result to summarise) with *baseline*, metric by metric.

    Tolerances are looked up per metric: *tolerances* (exact name, then glob patterns such as
    ``"reward.*"``), then the tolerances stored with the baseline, then *default*.
    """
    now = _metrics_of(metrics)
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
        verdict: Verdict
        if b is None:
            verdict = "new"
        elif n is None:
            verdict = "missing"
        else:
            verdict = "ok" if tol.accepts(b, n) else "drift"
        rows.append(ComparisonRow(name, b, n, tol, verdict))
    return BaselineComparison(rows=rows, test_id=test_id, path=path)


def check_baseline(
    store: BaselineStore,
    test_id: str,
    metrics: Any,
    *,
    tolerances: Mapping[str, Tolerance] | None = None,
    update: bool = False,
    default: Tolerance = DEFAULT_TOLERANCE,
) -> BaselineComparison:
    """Compare *metrics* with the stored baseline of *test_id*, or (``update=True``) refresh it.

    *metrics* is a mapping of name -> number or a job result (summarised with
    :func:`summarize_job`). Raises :class:`BaselineMissing` when there is no baseline and
    :class:`BaselineMismatch` when metrics drifted; with ``update=True`` it writes the baseline
    (keeping tolerances stored earlier unless overridden) and returns a passing comparison whose
    rows still show what changed.
    """
    values = _metrics_of(metrics)
    explicit = _validated_tolerances(tolerances)  # before the baseline is read: a first run checks too
    existing = store.load(test_id)
    _check_tolerance_names(explicit, [*values, *(existing.metrics if existing else ())])
    if update:
        kept = dict(existing.tolerances) if existing else {}
        kept.update(_validated_tolerances(tolerances))
        history = getattr(metrics, "history", None)  # a job result, not a plain metrics mapping
        curve = _reward_curve(history)[0] if history is not None else []
        path = store.save(test_id, values, kept, reward_curve=curve)
        before: Baseline | Mapping[str, float] = existing if existing is not None else {}
        comparison = compare(values, before, tolerances, default, test_id=test_id)
        return BaselineComparison(rows=comparison.rows, test_id=test_id, path=path, updated=True)
    if existing is None:
        raise BaselineMissing(test_id, store.path_for(test_id))
    return compare(values, existing, tolerances, default, test_id=test_id).raise_for_drift()
