"""eventually(): retries on the injected clock, returns the passing value, explains a timeout."""

from __future__ import annotations

import time

import pytest

from pytest_synth_rl.assertions import EventuallyTimeout, eventually
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.reporting.render import format_duration, sparkline, status_timeline, table


def test_returns_the_first_truthy_value_and_sleeps_on_the_clock() -> None:
    clock = VirtualClock()
    answers = iter([None, 0, "ready"])
    assert eventually(lambda: next(answers), timeout=60, interval=5, clock=clock) == "ready"
    assert clock.sleeps == [5, 5]


def test_assertion_errors_are_retried_other_errors_are_not() -> None:
    clock = VirtualClock()
    calls = {"n": 0}

    def flaky() -> bool:
        calls["n"] += 1
        assert calls["n"] >= 3, f"attempt {calls['n']} not yet"
        return True

    assert eventually(flaky, timeout=60, interval=1, clock=clock) is True
    assert calls["n"] == 3

    def broken() -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        eventually(broken, timeout=60, interval=1, clock=clock)


def test_timeout_is_exact_on_a_virtual_clock_and_lists_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    real_sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", real_sleeps.append)

    def never() -> bool:
        raise AssertionError("reward still 0.1")

    with pytest.raises(EventuallyTimeout) as info:
        eventually(never, timeout=7200, interval=10, clock=clock, description="reward above 0.5")
    assert real_sleeps == []
    assert clock.elapsed == pytest.approx(7200)
    assert len(clock.sleeps) == 720
    text = str(info.value)
    assert "reward above 0.5 did not pass within 2h00m (721 attempts" in text
    assert "reward still 0.1" in text
    assert "earlier attempts" in text


def test_last_sleep_is_shortened_to_the_deadline() -> None:
    clock = VirtualClock()
    with pytest.raises(EventuallyTimeout):
        eventually(lambda: False, timeout=25, interval=10, clock=clock)
    assert clock.sleeps == [10, 10, 5]


def test_rejects_nonsense_arguments() -> None:
    with pytest.raises(ValueError, match="interval"):
        eventually(lambda: True, timeout=1, interval=0)


def test_renderers() -> None:
    assert sparkline([0, 1, 2, 3]) == "▁▃▆█"
    assert sparkline([]) == ""
    assert len(sparkline(list(range(100)), width=10)) == 10
    assert format_duration(7200) == "2h00m"
    assert format_duration(75.5) == "1m16s"
    assert format_duration(0.0123) == "12.3ms"
    samples = [
        (0, "queued", 1),
        (10, "queued", 1),
        (20, "running", 1),
        (50, "running", 3),
        (60, "succeeded", 1),
    ]
    assert (
        status_timeline(samples) == "queued x2 (0s-10.0s) -> running x4 (20.0s-50.0s) -> succeeded x1 (1m00s)"
    )
    rendered = table(["metric", "value"], [["reward", 0.5], ["steps", None]])
    assert rendered.splitlines()[0] == "metric  value"
    assert rendered.splitlines()[3] == "steps   -"
