"""The clock abstraction: virtual time moves only when asked, and tells its listeners."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pytest_synth_rl.clock import Clock, RealClock, ScaledClock, VirtualClock


def test_virtual_sleep_advances_instantly_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    real_sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", real_sleeps.append)
    for _ in range(720):
        clock.sleep(10.0)
    assert real_sleeps == []
    assert clock.now() == pytest.approx(7200.0)
    assert clock.elapsed == pytest.approx(7200.0)
    assert clock.sleeps == [10.0] * 720
    assert clock.total_slept == pytest.approx(7200.0)


def test_virtual_time_maps_to_a_reproducible_epoch() -> None:
    clock = VirtualClock(start=100.0, epoch=1_000.0)
    assert clock.time() == 1_000.0
    clock.advance(5)
    assert clock.now() == 105.0
    assert clock.time() == 1_005.0


def test_negative_sleep_is_a_zero_sleep_but_negative_advance_is_an_error() -> None:
    clock = VirtualClock()
    clock.sleep(-3)
    assert clock.now() == 0.0
    assert clock.sleeps == [0.0]
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_listeners_see_each_step_and_can_unsubscribe() -> None:
    clock = VirtualClock()
    seen: list[tuple[float, float]] = []
    unsubscribe = clock.subscribe(lambda before, after: seen.append((before, after)))
    clock.sleep(2)
    clock.advance(0)  # no movement, no notification
    clock.advance(3)
    unsubscribe()
    clock.advance(4)
    assert seen == [(0.0, 2.0), (2.0, 5.0)]


def test_listener_may_read_the_clock_without_deadlock() -> None:
    clock = VirtualClock()
    readings: list[float] = []
    clock.subscribe(lambda _b, _a: readings.append(clock.now()))
    clock.advance(1)
    assert readings == [1.0]


def test_concurrent_sleepers_sum_up() -> None:
    clock = VirtualClock()

    def worker() -> None:
        for _ in range(1000):
            clock.sleep(0.5)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.now() == pytest.approx(2000.0)
    assert len(clock.sleeps) == 4000


def test_async_sleep_advances_and_yields() -> None:
    clock = VirtualClock()
    order: list[str] = []

    async def sleeper() -> None:
        await clock.async_sleep(60)
        order.append("sleeper")

    async def other() -> None:
        order.append("other")

    async def main() -> None:
        await asyncio.gather(sleeper(), other())

    asyncio.run(main())
    assert clock.now() == 60.0
    assert order == ["other", "sleeper"]


def test_all_clocks_satisfy_the_protocol() -> None:
    for clock in (RealClock(), ScaledClock(10), VirtualClock()):
        assert isinstance(clock, Clock)


def test_real_clock_is_monotonic_and_tells_epoch_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = RealClock()
    first = clock.now()
    assert clock.now() >= first
    monkeypatch.setattr(time, "time", lambda: 1_700_000_123.5)
    assert clock.time() == 1_700_000_123.5


def test_scaled_clock_runs_faster_than_wall_time() -> None:
    clock = ScaledClock(speed=1000.0)
    start = clock.now()
    clock.sleep(1.0)  # really sleeps 1 ms
    assert clock.now() - start >= 1.0
    with pytest.raises(ValueError, match="speed"):
        ScaledClock(0)
