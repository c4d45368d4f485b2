"""A misspelt keyword in the library's constructors and methods is a usage error naming the
argument, what the call takes and the near miss (it was Python's bare ``TypeError``)."""

from __future__ import annotations

import pytest

from pytest_synth_rl import FakeSynthBackend, Scenario, SynthUsageError
from pytest_synth_rl.client import RetryPolicy


@pytest.mark.parametrize(
    ("call", "message", "guess"),
    [
        (
            lambda: Scenario(outcom="failed"),
            "got Scenario(outcom=...); Scenario() has no argument 'outcom'",
            "outcome",
        ),
        (
            lambda: RetryPolicy(max_attemps=3),
            "got RetryPolicy(max_attemps=...); RetryPolicy() has no argument 'max_attemps'",
            "max_attempts",
        ),
        (
            lambda: FakeSynthBackend(polcy=None),
            "got FakeSynthBackend(polcy=...); FakeSynthBackend() has no argument 'polcy'",
            "policy",
        ),
        (
            lambda: FakeSynthBackend().fault("status", stauts=503),
            "got FakeSynthBackend.fault(stauts=...); FakeSynthBackend.fault() has no argument 'stauts'",
            "status",
        ),
    ],
)
def test_a_misspelt_keyword_is_a_usage_error_with_a_did_you_mean(
    call: object, message: str, guess: str
) -> None:
    with pytest.raises(SynthUsageError) as info:
        call()  # type: ignore[operator]
    text = str(info.value)
    assert message in text
    call_name = message.split("(")[0].removeprefix("got ")
    assert f"did you mean {call_name}({guess}=...)?" in text


def test_a_keyword_near_nothing_lists_what_the_call_takes() -> None:
    with pytest.raises(SynthUsageError) as info:
        RetryPolicy(zzz=1)  # type: ignore[call-arg]
    assert "did you mean" not in str(info.value)
    assert "RetryPolicy() takes max_attempts=" in str(info.value)


def test_a_type_error_of_the_body_itself_is_not_called_a_misspelling() -> None:
    with pytest.raises(TypeError) as info:
        Scenario(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)  # type: ignore[misc]
    assert not isinstance(info.value, SynthUsageError)


@pytest.mark.parametrize("speed", [-1, 0, float("nan"), float("inf"), True, "fast"])
def test_serve_refuses_a_speed_that_is_not_a_finite_positive_number(speed: object) -> None:
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as info, fake.serve(speed=speed):  # type: ignore[arg-type]
        pass
    assert "FakeSynthBackend.serve.speed: must be a finite number > 0" in str(info.value)
    assert f"got {speed!r}" in str(info.value)
