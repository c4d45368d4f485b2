"""Baseline tolerances and comparison: the boundaries, the directions, and what survives a file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_synth_rl.baselines import (
    DEFAULT_TOLERANCE,
    Baseline,
    BaselineError,
    BaselineMismatch,
    BaselineStore,
    ComparisonRow,
    Tolerance,
    compare,
)


# -- Tolerance ----------------------------------------------------------------------------------
def test_defaults_are_exact_and_two_sided() -> None:
    assert Tolerance() == Tolerance(abs=0.0, rel=0.0, direction="two_sided")
    assert Tolerance(abs=1e-9, rel=1e-9) == DEFAULT_TOLERANCE


def test_allowed_is_the_larger_of_abs_and_rel_of_the_base() -> None:
    assert Tolerance(abs=0.05).allowed(10.0) == 0.05
    assert Tolerance(rel=0.1).allowed(-10.0) == 1.0
    assert Tolerance(abs=0.5, rel=0.1).allowed(2.0) == 0.5
    assert Tolerance(abs=0.5, rel=0.1).allowed(20.0) == 2.0


@pytest.mark.parametrize(
    ("tol", "base", "now", "accepted"),
    [
        (Tolerance(abs=0.05), 0.8, 0.75, True),  # the boundary the user wrote passes despite float noise
        (Tolerance(abs=0.05), 0.8, 0.85, True),
        (Tolerance(abs=0.05), 0.8, 0.7499, False),
        (Tolerance(abs=0.05), 0.8, 0.8501, False),
        (Tolerance(rel=0.1), 200.0, 180.0, True),
        (Tolerance(rel=0.1), 200.0, 179.9, False),
        (Tolerance(rel=0.1), -200.0, -220.0, True),
        (Tolerance(abs=0.05, direction="higher_is_better"), 0.8, 5.0, True),
        (Tolerance(abs=0.05, direction="higher_is_better"), 0.8, 0.75, True),
        (Tolerance(abs=0.05, direction="higher_is_better"), 0.8, 0.7499, False),
        (Tolerance(abs=1.0, direction="lower_is_better"), 10.0, 0.0, True),
        (Tolerance(abs=1.0, direction="lower_is_better"), 10.0, 11.0, True),
        (Tolerance(abs=1.0, direction="lower_is_better"), 10.0, 11.001, False),
        (Tolerance(), 3.0, 3.0, True),
        (Tolerance(), 3.0, 3.0000001, False),
        (Tolerance(), 1e15, 1e15 + 0.5, True),  # float rounding scales with the magnitude
        (Tolerance(), math.inf, math.inf, True),
        (Tolerance(abs=1.0), math.inf, -math.inf, False),
        (Tolerance(abs=1.0, direction="higher_is_better"), -math.inf, math.inf, True),
        (Tolerance(abs=1e9), math.nan, 1.0, False),
        (Tolerance(abs=1e9), 1.0, math.nan, False),
        (Tolerance(abs=1e9), math.inf, 1.0, False),
    ],
)
def test_accepts(tol: Tolerance, base: float, now: float, accepted: bool) -> None:
    assert tol.accepts(base, now) is accepted


def test_a_tolerance_of_infinity_with_infinite_values_is_not_confused_by_nan() -> None:
    assert Tolerance(abs=math.inf).accepts(math.inf, math.inf) is True
    assert Tolerance(abs=math.inf, direction="lower_is_better").accepts(math.inf, -math.inf) is True


@pytest.mark.parametrize(
    ("tol", "shown"),
    [
        (Tolerance(), "exact"),
        (DEFAULT_TOLERANCE, "exact"),
        (Tolerance(abs=0.05), "±0.05"),
        (Tolerance(rel=0.1), "±10%"),
        (Tolerance(abs=0.05, rel=0.1), "±max(0.05, 10%)"),
        (Tolerance(abs=0.05, direction="higher_is_better"), "-0.05"),
        (Tolerance(rel=0.25, direction="lower_is_better"), "+25%"),
        (Tolerance(direction="higher_is_better"), "-0"),
        (Tolerance(abs=2e-9), "±2e-09"),
        (Tolerance(abs=1.0 / 3.0), "±0.333333"),
    ],
)
def test_render(tol: Tolerance, shown: str) -> None:
    assert tol.render() == shown


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"abs": -0.1}, "Tolerance(abs=-0.1) is invalid: expected a number >= 0"),
        ({"rel": math.nan}, "Tolerance(rel=nan) is invalid: expected a number >= 0"),
        ({"abs": True}, "Tolerance(abs=True) is invalid: expected a number >= 0"),
        ({"rel": "0.1"}, "Tolerance(rel='0.1') is invalid: expected a number >= 0"),
        (
            {"direction": "up"},
            "Tolerance(direction='up') is invalid: expected one of "
            "two_sided, higher_is_better, lower_is_better",
        ),
    ],
)
def test_invalid_tolerances_say_what_was_written(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(BaselineError) as info:
        Tolerance(**kwargs)  # type: ignore[arg-type]
    assert info.value.message == message
    assert info.value.hint


def test_zero_and_integer_tolerances_are_valid() -> None:
    assert Tolerance(abs=0, rel=0).accepts(1, 1)
    assert Tolerance(abs=1).accepts(1, 2)


# -- Tolerance JSON ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tol",
    [
        Tolerance(),
        Tolerance(abs=0.05),
        Tolerance(rel=0.1),
        Tolerance(abs=0.05, rel=0.1, direction="higher_is_better"),
        Tolerance(rel=0.2, direction="lower_is_better"),
    ],
)
def test_tolerance_json_round_trip(tol: Tolerance) -> None:
    assert Tolerance.from_json(tol.to_json(), where="w") == tol


def test_tolerance_json_shape() -> None:
    assert Tolerance(abs=0.05).to_json() == {"abs": 0.05, "rel": 0.0}
    assert Tolerance(rel=0.1, direction="lower_is_better").to_json() == {
        "abs": 0.0,
        "rel": 0.1,
        "direction": "lower_is_better",
    }
    assert Tolerance.from_json({}, where="w") == Tolerance()
    assert Tolerance.from_json({"rel": 0.5}, where="w") == Tolerance(rel=0.5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([0.05], 'f.json: expected a tolerance object like {"abs": 0.05}, got [0.05]'),
        (
            {"abs": 1, "relative": 2, "x": 0},
            "f.json: unknown tolerance keys ['relative', 'x']; expected abs, rel, direction",
        ),
        ({"abs": -1}, "f.json: Tolerance(abs=-1) is invalid: expected a number >= 0"),
    ],
)
def test_tolerance_json_errors_name_the_file(data: object, message: str) -> None:
    with pytest.raises(BaselineError) as info:
        Tolerance.from_json(data, where="f.json")
    assert info.value.message == message


def test_relative_and_directional_tolerances_survive_a_baseline_file(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    tolerances = {
        "reward.mean": Tolerance(rel=0.1, direction="higher_is_better"),
        "elapsed_s": Tolerance(abs=5, rel=0.2, direction="lower_is_better"),
        "steps": Tolerance(),
    }
    path = store.save(
        "tests/test_x.py::test_y", {"reward.mean": 0.5, "elapsed_s": 100, "steps": 3}, tolerances
    )
    loaded = store.load("tests/test_x.py::test_y")
    assert loaded is not None
    assert loaded.tolerances == tolerances
    assert loaded.metrics == {"reward.mean": 0.5, "elapsed_s": 100.0, "steps": 3.0}
    assert (loaded.test_id, loaded.path) == ("tests/test_x.py::test_y", path)
    again = Baseline.from_json(loaded.to_json(), path=path)
    assert again == loaded
    # and the stored tolerance is the one that judges: 10% below 0.5 is 0.45
    assert compare({"reward.mean": 0.45, "elapsed_s": 119, "steps": 3}, loaded).ok
    assert not compare({"reward.mean": 0.449, "elapsed_s": 100, "steps": 3}, loaded).ok


# -- compare ----------------------------------------------------------------------------------
def test_compare_gives_one_row_per_metric_in_name_order() -> None:
    result = compare({"b": 2.0, "a": 1.0, "new": 5.0}, {"a": 1.0, "b": 2.5, "gone": 3.0})
    assert [(r.metric, r.baseline, r.now, r.verdict) for r in result.rows] == [
        ("a", 1.0, 1.0, "ok"),
        ("b", 2.5, 2.0, "drift"),
        ("gone", 3.0, None, "missing"),
        ("new", None, 5.0, "new"),
    ]
    assert [r.metric for r in result.drifted] == ["b"]
    assert [r.metric for r in result.missing] == ["gone"]
    assert [r.metric for r in result.new] == ["new"]
    assert result.ok is False
    assert bool(result) is False
    assert (result.test_id, result.path, result.updated) == (None, None, False)


def test_new_metrics_do_not_fail_but_missing_ones_do() -> None:
    assert compare({"a": 1.0, "extra": 2.0}, {"a": 1.0}).ok is True
    assert compare({}, {"a": 1.0}).ok is False
    assert compare({"a": 1.0}, {"a": 1.0}).raise_for_drift().ok


def test_delta_is_now_minus_baseline_and_none_when_either_is_absent() -> None:
    rows = {
        r.metric: r
        for r in compare({"up": 3.0, "down": 1.0, "new": 1.0}, {"up": 1.0, "down": 3.0, "gone": 1.0}).rows
    }
    assert rows["up"].delta == 2.0
    assert rows["down"].delta == -2.0
    assert rows["new"].delta is None
    assert rows["gone"].delta is None
    assert ComparisonRow("m", None, None, Tolerance(), "new").delta is None


def test_the_table_shows_the_drift_with_its_sign() -> None:
    result = compare(
        {"fell": 0.5, "rose": 0.75, "same": 1.0, "new": 2.0},
        {"fell": 0.75, "rose": 0.5, "same": 1.0, "gone": 3.0},
        tolerances={"same": Tolerance(abs=0.1)},
    )
    assert result.render().splitlines() == [
        "metric  baseline  now   tolerance  verdict",
        "------  --------  ----  ---------  -------------",
        "fell    0.75      0.5   exact      DRIFT (-0.25)",
        "gone    3         -     exact      MISSING",
        "new     -         2     exact      new",
        "rose    0.5       0.75  exact      DRIFT (+0.25)",
        "same    1         1     ±0.1       ok",
    ]
    with pytest.raises(BaselineMismatch):
        result.raise_for_drift()


def test_tolerances_explicit_then_stored_then_default_exact_name_before_pattern() -> None:
    baseline = Baseline(
        "t",
        metrics={"reward.mean": 1.0, "reward.max": 1.0, "loss": 1.0, "steps": 10.0},
        tolerances={"reward.*": Tolerance(abs=0.3), "loss": Tolerance(abs=0.5)},
    )
    now = {"reward.mean": 0.8, "reward.max": 0.6, "loss": 1.4, "steps": 11.0}
    result = compare(
        now,
        baseline,
        tolerances={"reward.max": Tolerance(abs=0.5), "reward.m?an": Tolerance(abs=0.1)},
        default=Tolerance(abs=1.0),
    )
    rows = {r.metric: r for r in result.rows}
    assert rows["reward.max"].tolerance == Tolerance(abs=0.5)
    assert rows["reward.mean"].tolerance == Tolerance(abs=0.1)
    assert rows["loss"].tolerance == Tolerance(abs=0.5)
    assert rows["steps"].tolerance == Tolerance(abs=1.0)
    assert {name: r.verdict for name, r in rows.items()} == {
        "reward.max": "ok",
        "reward.mean": "drift",
        "loss": "ok",
        "steps": "ok",
    }
    assert compare(now, baseline).rows[0].tolerance == Tolerance(abs=0.5)  # "loss", stored


def test_a_stored_baseline_brings_its_test_id_and_path(tmp_path: Path) -> None:
    baseline = Baseline("tests/t.py::x", {"a": 1.0}, path=tmp_path / "x.json")
    result = compare({"a": 1.0}, baseline)
    assert (result.test_id, result.path) == ("tests/t.py::x", tmp_path / "x.json")
    assert compare({"a": 1.0}, baseline, test_id="other").test_id == "other"
    assert compare({"a": 1.0}, Baseline("", {"a": 1.0})).test_id is None


def test_compare_refuses_a_tolerance_that_is_not_a_tolerance() -> None:
    with pytest.raises(BaselineError, match=r"tolerance for 'a' must be a Tolerance, got 0\.1"):
        compare({"a": 1.0}, {"a": 1.0}, tolerances={"a": 0.1})  # type: ignore[dict-item]


def test_exactly_on_the_boundary_passes_in_every_direction() -> None:
    edge = 0.5 + 1e-12  # the tolerance plus its float-rounding slack, as a float
    assert Tolerance(abs=0.5).accepts(0.0, edge) is True
    assert Tolerance(abs=0.5).accepts(0.0, -edge) is True
    assert Tolerance(abs=0.5, direction="higher_is_better").accepts(0.0, -edge) is True
    assert Tolerance(abs=0.5, direction="lower_is_better").accepts(0.0, edge) is True


def test_invalid_tolerances_say_how_to_fix_them() -> None:
    with pytest.raises(BaselineError) as info:
        Tolerance(abs=-1)
    assert info.value.hint == "pass e.g. Tolerance(abs=0.05) or Tolerance(rel=0.1) (10%)"
    with pytest.raises(BaselineError) as info:
        Tolerance(direction="up")  # type: ignore[arg-type]
    assert info.value.hint == 'use direction="higher_is_better" for rewards, "lower_is_better" for durations'
