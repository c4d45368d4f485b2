"""Metric baselines: tolerances, comparison tables, storage and concurrent writers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.baselines import (
    DEFAULT_TOLERANCE,
    BaselineComparison,
    BaselineError,
    BaselineMismatch,
    BaselineMissing,
    BaselineStore,
    Tolerance,
    check_baseline,
    compare,
    summarize_job,
)
from pytest_synth_rl.client import RLJob
from pytest_synth_rl.client.results import JobResult, PollRecord
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import FakeSynthBackend

NODE = "tests/test_train.py::test_reward[qwen-0.6b]"
CONFIG = Path(__file__).resolve().parents[1] / "examples" / "rl_minimal.toml"


# -- tolerance -------------------------------------------------------------------------------------
def test_absolute_and_relative_tolerance_take_the_larger_allowance() -> None:
    tol = Tolerance(abs=0.05, rel=0.1)
    assert tol.allowed(0.2) == pytest.approx(0.05)  # 10% of 0.2 = 0.02 < 0.05
    assert tol.allowed(2.0) == pytest.approx(0.2)  # 10% of 2.0 = 0.2 > 0.05
    assert tol.accepts(0.2, 0.25)
    assert not tol.accepts(0.2, 0.2501)
    assert tol.accepts(2.0, 1.8)
    assert not tol.accepts(2.0, 1.79)
    assert Tolerance().accepts(1.5, 1.5)
    assert not Tolerance().accepts(1.5, 1.5000001)


def test_directions() -> None:
    higher = Tolerance(abs=0.05, direction="higher_is_better")
    assert higher.accepts(0.8, 0.99)  # any rise passes
    assert higher.accepts(0.8, 0.75)
    assert not higher.accepts(0.8, 0.74)
    lower = Tolerance(rel=0.1, direction="lower_is_better")
    assert lower.accepts(100.0, 10.0)  # getting faster always passes
    assert lower.accepts(100.0, 110.0)
    assert not lower.accepts(100.0, 110.5)
    two_sided = Tolerance(abs=0.05)
    assert not two_sided.accepts(0.8, 0.86)
    assert not two_sided.accepts(0.8, 0.74)


def test_nan_never_passes() -> None:
    assert not Tolerance(abs=1e9).accepts(1.0, math.nan)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"abs": -0.1}, "Tolerance(abs=-0.1) is invalid: expected a number >= 0"),
        ({"rel": math.nan}, "Tolerance(rel=nan) is invalid"),
        ({"direction": "up"}, "Tolerance(direction='up') is invalid: expected one of two_sided"),
    ],
)
def test_invalid_tolerances_are_rejected_clearly(kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(BaselineError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        Tolerance(**kwargs)  # type: ignore[arg-type]


def test_tolerance_rendering() -> None:
    assert Tolerance(abs=0.05).render() == "±0.05"
    assert Tolerance(rel=0.1).render() == "±10%"
    assert Tolerance(abs=0.05, rel=0.1).render() == "±max(0.05, 10%)"
    assert Tolerance(abs=0.05, direction="higher_is_better").render() == "-0.05"
    assert Tolerance(rel=0.2, direction="lower_is_better").render() == "+20%"
    assert Tolerance().render() == "exact"
    assert DEFAULT_TOLERANCE.render() == "exact"


# -- comparison ------------------------------------------------------------------------------------
BASE = {"final_reward": 0.8, "reward.max": 0.9, "elapsed_s": 7200.0, "polls": 720.0}


def test_within_tolerance_passes() -> None:
    now = {"final_reward": 0.78, "reward.max": 0.9, "elapsed_s": 7000.0, "polls": 720.0}
    result = compare(
        now,
        BASE,
        {"final_reward": Tolerance(abs=0.05), "elapsed_s": Tolerance(rel=0.1, direction="lower_is_better")},
    )
    assert result.ok
    assert [r.verdict for r in result.rows] == ["ok", "ok", "ok", "ok"]
    assert result.raise_for_drift() is result


def test_drift_beyond_tolerance_fails_with_an_aligned_table() -> None:
    now = {"final_reward": 0.61, "reward.max": 0.9, "elapsed_s": 7200.0, "polls": 720.0, "steps": 3.0}
    result = compare(
        now, BASE, {"final_reward": Tolerance(abs=0.05, direction="higher_is_better")}, test_id=NODE
    )
    assert not result.ok
    assert [r.metric for r in result.drifted] == ["final_reward"]
    assert [r.metric for r in result.new] == ["steps"]
    assert result.render().splitlines() == [
        "metric        baseline  now   tolerance     verdict",
        "------------  --------  ----  ------------  -------------",
        "elapsed_s     7200      7200  not compared  ok",
        "final_reward  0.8       0.61  -0.05         DRIFT (-0.19)",
        "polls         720       720   not compared  ok",
        "reward.max    0.9       0.9   exact         ok",
        "steps         -         3     exact         new",
    ]
    with pytest.raises(BaselineMismatch) as caught:
        result.raise_for_drift()
    message = str(caught.value)
    assert f"metrics differ from the baseline for {NODE}: 1 drifted" in message
    assert result.render() in message
    assert f'pytest --synth-update-baselines "{NODE}"' in message
    assert isinstance(caught.value, AssertionError)
    assert isinstance(caught.value, SynthError)


def test_missing_metric_fails_and_new_metric_does_not() -> None:
    missing = compare({"final_reward": 0.8}, {"final_reward": 0.8, "reward.max": 0.9})
    assert not missing.ok
    assert [(r.metric, r.verdict) for r in missing.rows] == [
        ("final_reward", "ok"),
        ("reward.max", "missing"),
    ]
    assert "MISSING" in missing.render()
    new = compare({"final_reward": 0.8, "steps": 3.0}, {"final_reward": 0.8})
    assert new.ok
    assert bool(new)


def test_tolerance_lookup_explicit_then_pattern_then_stored_then_default(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(NODE, {"reward.max": 1.0, "reward.mean": 1.0, "polls": 10.0}, {"polls": Tolerance(abs=5)})
    baseline = store.load(NODE)
    assert baseline is not None
    result = compare(
        {"reward.max": 1.2, "reward.mean": 1.05, "polls": 14.0},
        baseline,
        {"reward.*": Tolerance(abs=0.1), "reward.max": Tolerance(abs=0.3)},
    )
    tolerances = {r.metric: r.tolerance for r in result.rows}
    assert tolerances == {
        "polls": Tolerance(abs=5),  # stored with the baseline
        "reward.max": Tolerance(abs=0.3),  # exact name beats the pattern
        "reward.mean": Tolerance(abs=0.1),  # pattern
    }
    assert result.ok
    assert compare({"x": 1.0 + 1e-12}, {"x": 1.0}).ok  # default absorbs float noise only
    assert not compare({"x": 1.001}, {"x": 1.0}).ok


# -- storage -----------------------------------------------------------------------------------
def test_store_writes_one_readable_file_per_test(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    path = store.save(NODE, {"final_reward": 0.75, "b": 2}, {"final_reward": Tolerance(abs=0.05)})
    assert path.parent == tmp_path / "baselines"
    assert path.name.startswith("tests.test_train.py__test_reward[qwen-0.6b]-")
    text = path.read_text(encoding="utf-8")
    assert text == textwrap.dedent(
        f"""\
        {{
          "metrics": {{
            "b": 2.0,
            "final_reward": 0.75
          }},
          "test_id": "{NODE}",
          "tolerances": {{
            "final_reward": {{
              "abs": 0.05,
              "rel": 0.0
            }}
          }},
          "version": 1
        }}
        """
    )
    loaded = store.load(NODE)
    assert loaded is not None
    assert loaded.metrics == {"b": 2.0, "final_reward": 0.75}
    assert loaded.tolerances == {"final_reward": Tolerance(abs=0.05)}
    assert store.load("tests/test_train.py::other") is None
    assert store.path_for("tests/a.py::t") != store.path_for("tests.a.py::t")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{broken", "is not valid JSON (line 1, column 2"),
        ('{"version": 1}', 'expected an object with a "metrics" object'),
        ('{"version": 7, "metrics": {}}', "has format version 7"),
        ('{"metrics": {"r": "high"}}', "metric 'r' has value 'high': expected a finite number"),
        ('{"metrics": {}, "tolerances": {"r": {"abs": -1}}}', "tolerances.r: Tolerance(abs=-1) is invalid"),
        ('{"metrics": {}, "tolerances": {"r": {"absolute": 1}}}', "unknown tolerance keys ['absolute']"),
    ],
)
def test_corrupt_baseline_files_name_the_file_and_the_fix(
    tmp_path: Path, content: str, expected: str
) -> None:
    store = BaselineStore(tmp_path)
    store.path_for(NODE).write_text(content, encoding="utf-8")
    with pytest.raises(BaselineError) as caught:
        store.load(NODE)
    assert str(store.path_for(NODE)) in str(caught.value)
    assert expected in str(caught.value)


HUGE = "1" + "0" * 400  # a JSON integer too large for a float


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"metrics": {}, "reward_curve": [0.5, "high"]}', '"reward_curve" must be a list of numbers'),
        (
            '{"metrics": {}, "reward_curve": [0.5, 1e999]}',
            "at reward_curve[1]: must be a finite number, got inf",
        ),
        ('{"metrics": {}, "reward_curve": [NaN]}', "at reward_curve[0]: must be a finite number, got nan"),
        ('{"metrics": {}, "reward_curve": [0, -Infinity]}', "at reward_curve[1]: must be a finite number"),
        (f'{{"metrics": {{}}, "reward_curve": [{HUGE}]}}', '"reward_curve"[0] is inf: expected a finite'),
        (f'{{"metrics": {{"r": {HUGE}}}}}', "metric 'r' has value inf: expected a finite number"),
        ('{"metrics": {"r": -1e999}}', "at metrics.r: must be a finite number, got -inf"),
        (
            '{"metrics": {}, "tolerances": {"r": {"abs": 1e999}}}',
            "at tolerances.r.abs: must be a finite number, got inf",
        ),
        ('{"metrics": {}, "tolerances": {"r": {"rel": NaN}}}', "at tolerances.r.rel: must be a finite"),
    ],
    ids=["string", "1e999", "NaN", "-Infinity", "huge-integer", "huge-metric", "metric", "abs", "rel"],
)
def test_a_baseline_file_holding_infinity_or_nan_is_refused_naming_file_and_key(
    tmp_path: Path, content: str, expected: str
) -> None:
    # JSON reads 1e999 as infinity, and Python's reads NaN and Infinity: before, such a reward
    # curve was accepted and its baseline line vanished from the HTML report's chart (a curve of
    # strings was refused); a huge integer raised OverflowError; an infinite tolerance was kept,
    # and refreshing the baseline then failed to write it back.
    store = BaselineStore(tmp_path)
    path = store.path_for(NODE)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BaselineError) as caught:
        store.load(NODE)
    assert caught.value.message.startswith(f"baseline file {path}")
    assert expected in caught.value.message
    assert caught.value.hint


def test_non_finite_metrics_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"metric 'final_reward' has value nan: expected a finite number"):
        BaselineStore(tmp_path).save(NODE, {"final_reward": math.nan})
    with pytest.raises(BaselineError, match="expected a finite number"):
        compare({"ok": True}, {"ok": 1.0})


# -- check_baseline --------------------------------------------------------------------------------
def test_missing_baseline_says_how_to_create_it(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineMissing) as caught:
        check_baseline(store, NODE, {"final_reward": 0.8})
    message = str(caught.value)
    assert f"no metric baseline for {NODE}" in message
    assert str(store.path_for(NODE)) in message
    assert f'create it by running: pytest --synth-update-baselines "{NODE}"' in message
    assert isinstance(caught.value, AssertionError)


@pytest.mark.parametrize("update", [False, True])
def test_a_tolerance_naming_no_metric_is_a_typo_caught_on_any_run(tmp_path: Path, update: bool) -> None:
    # Before: final_rewrd=... and "rewrd.*" matched nothing and the check passed.
    store = BaselineStore(tmp_path)
    metrics = {"final_reward": 0.8, "reward.max": 0.9}
    with pytest.raises(BaselineError) as typo:
        check_baseline(store, NODE, metrics, tolerances={"final_rewrd": Tolerance(abs=0.05)}, update=update)
    assert str(typo.value) == (
        "the tolerance for 'final_rewrd' matches no metric of this job (its metrics: final_reward, "
        "reward.max)\n  hint: did you mean 'final_reward'? name a metric, or a pattern such as 'reward.*'"
    )
    with pytest.raises(BaselineError, match=r"^the tolerance for 'rewrd\.\*' matches no metric"):
        check_baseline(store, NODE, metrics, tolerances={"rewrd.*": Tolerance(abs=0.05)}, update=update)
    assert not store.path_for(NODE).exists()


def test_a_tolerance_that_is_not_one_is_refused_before_the_baseline_exists(tmp_path: Path) -> None:
    # Before: a first run said "no metric baseline" and only a later run named the bad tolerance.
    with pytest.raises(BaselineError) as caught:
        check_baseline(
            BaselineStore(tmp_path), NODE, {"final_reward": 0.8}, tolerances={"final_reward": "5%"}
        )  # type: ignore[dict-item]
    assert not isinstance(caught.value, BaselineMissing)
    assert "tolerance for 'final_reward' must be a Tolerance, got '5%'" in str(caught.value)


def test_a_tolerance_for_a_metric_only_the_baseline_has_is_allowed(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(NODE, {"final_reward": 0.8, "polls": 10.0}, {})
    with pytest.raises(BaselineMismatch, match=r"polls\s+10\s+-\s+±1\s+MISSING"):
        check_baseline(store, NODE, {"final_reward": 0.8}, tolerances={"polls": Tolerance(abs=1)})


def test_update_writes_then_checks_pass_then_drift_fails(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    first = check_baseline(store, NODE, {"final_reward": 0.8}, update=True)
    assert first.updated
    assert first.ok
    assert [(r.metric, r.verdict) for r in first.rows] == [("final_reward", "new")]
    assert check_baseline(store, NODE, {"final_reward": 0.8}).ok
    with pytest.raises(BaselineMismatch, match=r"final_reward\s+0\.8\s+0\.5\s+exact\s+DRIFT \(-0\.3\)"):
        check_baseline(store, NODE, {"final_reward": 0.5})


def test_update_refreshes_a_drifted_baseline_and_keeps_its_tolerances(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(NODE, {"final_reward": 0.8, "polls": 10.0}, {"final_reward": Tolerance(abs=0.01)})
    refreshed = check_baseline(store, NODE, {"final_reward": 0.5, "polls": 10.0}, update=True)
    assert refreshed.ok
    assert [r.metric for r in refreshed.drifted] == ["final_reward"]  # what changed is still reported
    refreshed.raise_for_drift()  # an update never fails
    stored = store.load(NODE)
    assert stored is not None
    assert stored.metrics == {"final_reward": 0.5, "polls": 10.0}
    assert stored.tolerances == {"final_reward": Tolerance(abs=0.01)}
    assert check_baseline(store, NODE, {"final_reward": 0.505, "polls": 10.0}).ok
    assert not compare({"final_reward": 0.52, "polls": 10.0}, stored).ok


# -- summarising jobs ------------------------------------------------------------------------------
def _job() -> JobResult:
    payloads: list[dict[str, Any]] = [
        {"status": "queued"},
        {"status": "running", "progress": {"completed": 1, "total": 3}, "metrics": {"reward": 0.2}},
        {"status": "running", "progress": {"completed": 1, "total": 3}, "metrics": {"reward": 0.25}},
        {"status": "running", "progress": {"completed": 2, "total": 3}, "metrics": {"reward": 0.5}},
        {
            "status": "succeeded",
            "progress": {"completed": 3, "total": 3},
            "metrics": {"reward": 0.7},
            "final_reward": 0.7,
            "results": {"metrics": {"accuracy": 0.9}, "model_id": "ft:x"},
            "checkpoints": [{"step": 3, "path": "s3://x"}],
        },
    ]
    history = [
        PollRecord(at=i * 10.0, elapsed=i * 10.0, status=p["status"], payload=p)
        for i, p in enumerate(payloads)
    ]
    return JobResult.from_payload("job-1", payloads[-1], history=history, elapsed=40.0)


def test_summarize_job_result() -> None:
    metrics = summarize_job(_job())
    # No reward curve: the polls only sample it; the job's metrics have one reward per step.
    assert metrics == {
        "final_reward": 0.7,
        "steps": 3.0,
        "polls": 5.0,
        "elapsed_s": 40.0,
        "metrics.reward": 0.7,
        "progress.completed": 3.0,
        "progress.total": 3.0,
        "results.metrics.accuracy": 0.9,
    }


@pytest.mark.parametrize("interval", [10, 150, 7])
def test_summary_of_a_fake_job_agrees_with_the_fakes_own_results_at_any_poll_interval(interval: int) -> None:
    # 5 training steps in 600 s: polls every 150 s see only some of them, polls every 7 s repeat
    # them. The curve has one point per step, its mean and max what the backend itself reports.
    clock = VirtualClock()
    key = "sk_fake_backend_key_8c1d2e3f4a5b"
    with FakeSynthBackend(api_key=key, rollouts=False, clock=clock) as fake:
        fake.scenario(steps=5, duration=600)
        with RLJob.from_config(
            CONFIG,
            backend_url=fake.base_url,
            api_key=key,
            task_app_url="http://127.0.0.1:8114",
            skip_health_check=True,
            clock=clock,
        ) as job:
            job.submit()
            result = job.poll_until_complete(timeout=7200, interval=interval)
            metrics = summarize_job(job)
    reported = result.results["metrics"]
    assert metrics["polls"] == result.polls  # a wait metric: it follows the interval
    assert metrics["reward.points"] == metrics["steps"] == 5
    assert metrics["reward.mean"] == pytest.approx(reported["mean_reward"], abs=1e-6)
    assert metrics["reward.max"] == pytest.approx(reported["best_reward"])
    assert metrics["reward.last"] == metrics["final_reward"] == pytest.approx(reported["final_reward"])


def test_summarize_mapping_and_extra() -> None:
    payload = {"status": "succeeded", "final_reward": 0.7, "metrics": {"reward": 0.7, "ok": True}, "tag": "x"}
    assert summarize_job(payload, extra={"custom.score": 3}) == {
        "final_reward": 0.7,
        "metrics.reward": 0.7,
        "custom.score": 3.0,
    }


def test_summarize_rejects_things_that_are_not_jobs() -> None:
    with pytest.raises(BaselineError, match="cannot summarise int: expected a job after its wait"):
        summarize_job(42)
    unsent = {"backend_url": "http://127.0.0.1:9", "api_key": "sk_unused_key_123456"}
    with (
        RLJob.from_config(CONFIG, task_app_url="http://127.0.0.1:8114", **unsent) as job,
        pytest.raises(BaselineError, match="before its wait") as caught,
    ):
        summarize_job(job)
    assert "synth_expect(job).to_succeed()" in str(caught.value)


def test_check_baseline_accepts_a_job_result(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    check_baseline(store, NODE, _job(), update=True)
    result = check_baseline(store, NODE, _job(), tolerances={"final_reward": Tolerance(abs=0.05)})
    assert isinstance(result, BaselineComparison)
    assert result.ok
    assert len(result.rows) == 8


# -- concurrency -----------------------------------------------------------------------------------
def _payload(writer: int, n: int) -> dict[str, float]:
    # Large enough that a torn write would be visible; every value identifies the writer.
    return {f"m{i:03d}": float(writer * 1_000_000 + n) for i in range(200)}


def _assert_whole(store: BaselineStore, test_id: str, writers: set[int]) -> None:
    baseline = store.load(test_id)  # raises BaselineError on torn JSON
    assert baseline is not None
    values = set(baseline.metrics.values())
    assert len(values) == 1, "metrics from two different writes were mixed"
    assert int(values.pop()) // 1_000_000 in writers


def test_concurrent_threads_never_tear_a_baseline(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(index: int, test_id: str) -> None:
        try:
            for n in range(40):
                store.save(test_id, _payload(index, n))
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    def reader() -> None:
        try:
            while not stop.is_set():
                if store.exists("shared"):
                    _assert_whole(store, "shared", {0, 1, 2, 3})
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i, "shared")) for i in range(4)]
    threads += [threading.Thread(target=writer, args=(10 + i, f"own-{i}")) for i in range(4)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    assert errors == []
    _assert_whole(store, "shared", {0, 1, 2, 3})
    for i in range(4):
        _assert_whole(store, f"own-{i}", {10 + i})
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


WRITER = textwrap.dedent(
    """
    import sys
    from pytest_synth_rl.baselines import BaselineStore
    directory, writer, own = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = BaselineStore(directory)
    for n in range(80):
        payload = {f"m{i:03d}": float(writer * 1_000_000 + n) for i in range(200)}
        store.save("shared", payload)
        store.save(own, payload)
    """
)


def test_concurrent_processes_never_tear_a_baseline(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), f"proc-{w}"]) for w in (1, 2)
    ]
    reads = 0
    while any(p.poll() is None for p in procs):
        if store.exists("shared"):
            _assert_whole(store, "shared", {1, 2})
            reads += 1
    assert [p.wait() for p in procs] == [0, 0]
    assert reads > 0
    _assert_whole(store, "shared", {1, 2})
    _assert_whole(store, "proc-1", {1})
    _assert_whole(store, "proc-2", {2})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 3
    assert all(name.endswith(".json") for name in files)
    assert json.loads(store.path_for("proc-1").read_text())["test_id"] == "proc-1"


def test_how_the_test_waited_is_shown_but_not_compared_unless_a_tolerance_names_it() -> None:
    # Before, a baseline written offline failed online (elapsed_s 60 -> 20.86, polls 7 -> 19), and
    # offline with another --synth-poll-interval: both follow the wait, not the training.
    base = {"final_reward": 0.8, "elapsed_s": 60.0, "polls": 7.0}
    now = {"final_reward": 0.8, "elapsed_s": 20.86, "polls": 19.0}
    assert compare(now, base).ok
    assert [(r.metric, r.tolerance.render(), r.verdict) for r in compare(now, base).rows] == [
        ("elapsed_s", "not compared", "ok"),
        ("final_reward", "exact", "ok"),
        ("polls", "not compared", "ok"),
    ]
    named = compare(now, base, {"polls": Tolerance(abs=2)})
    assert [r.metric for r in named.drifted] == ["polls"]
    pattern = compare(now, base, {"*": Tolerance(abs=1)})  # a pattern naming them counts too
    assert [r.metric for r in pattern.drifted] == ["elapsed_s", "polls"]
    assert compare({**now, "final_reward": 0.7}, base).drifted[0].metric == "final_reward"
