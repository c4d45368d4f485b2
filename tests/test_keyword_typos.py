"""A misspelt keyword in the library's constructors and methods is a usage error naming the
argument, what the call takes and the near miss (it was Python's bare ``TypeError``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_synth_rl import FakeSynthBackend, Scenario, SynthUsageError
from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob
from pytest_synth_rl.config import build_rl_payload, load_rl_config
from pytest_synth_rl.errors import keywords_checked
from pytest_synth_rl.fake.contract import check_task_app_contract
from pytest_synth_rl.taskapp import InProcessTaskApp

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "arithmetic.toml"


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
        # Defined on a base class, named as the user called it.
        (
            lambda: RLJob.from_config(CONFIG, api_key="k" * 20, task_ap_url="http://127.0.0.1:1"),
            "got RLJob.from_config(task_ap_url=...); RLJob.from_config() has no argument 'task_ap_url'",
            "task_app_url",
        ),
        (
            lambda: AsyncRLJob.from_config(CONFIG, api_key="k" * 20, overides={}),
            "got AsyncRLJob.from_config(overides=...); AsyncRLJob.from_config() has no argument 'overides'",
            "overrides",
        ),
        (
            lambda: RLJob.from_job_id("job_1", api_key="k" * 20, backend="http://127.0.0.1:1"),
            "got RLJob.from_job_id(backend=...); RLJob.from_job_id() has no argument 'backend'",
            "backend_url",
        ),
        (
            lambda: RLJob.from_job_id("job_1", api_key="k" * 20).poll_until_complete(timout=10),
            "got RLJob.poll_until_complete(timout=...); RLJob.poll_until_complete() has no argument 'timout'",
            "timeout",
        ),
        (
            lambda: InProcessTaskApp(task_app_pth="app.py"),
            "got InProcessTaskApp(task_app_pth=...); InProcessTaskApp() has no argument 'task_app_pth'",
            "task_app_path",
        ),
        (
            lambda: build_rl_payload(CONFIG, task_ur="http://127.0.0.1:1"),
            "got build_rl_payload(task_ur=...); build_rl_payload() has no argument 'task_ur'",
            "task_url",
        ),
        (
            lambda: load_rl_config(CONFIG, overide={}),
            "got load_rl_config(overide=...); load_rl_config() has no argument 'overide'",
            "overrides",
        ),
        (
            lambda: check_task_app_contract("http://127.0.0.1:1", None, env_nam="math"),
            "got check_task_app_contract(env_nam=...); check_task_app_contract() has no argument 'env_nam'",
            "env_name",
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
    assert "it takes RetryPolicy(max_attempts=" in str(info.value)


def test_a_type_error_of_the_body_itself_is_not_called_a_misspelling() -> None:
    @keywords_checked
    def body(count: int) -> None:
        raise TypeError("the body's own")

    with pytest.raises(TypeError, match="the body's own") as info:
        body(1)
    assert not isinstance(info.value, SynthUsageError)


def test_too_many_positional_arguments_name_the_call() -> None:
    with pytest.raises(SynthUsageError) as info:
        Scenario(*range(20))  # type: ignore[misc]
    assert "Scenario() takes 11 positional argument(s), got 20" in str(info.value)
    assert "it takes Scenario(outcome=" in str(info.value)


@pytest.mark.parametrize("speed", [-1, 0, float("nan"), float("inf"), True, "fast"])
def test_serve_refuses_a_speed_that_is_not_a_finite_positive_number(speed: object) -> None:
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as info, fake.serve(speed=speed):  # type: ignore[arg-type]
        pass
    assert "FakeSynthBackend.serve.speed: must be a finite number > 0" in str(info.value)
    assert f"got {speed!r}" in str(info.value)


@pytest.mark.parametrize(
    ("replies", "got"),
    [((), "got no replies"), ((lambda request: "1", "2"), "got 1 function(s) among 2 replies")],
    ids=["none", "function and reply"],
)
def test_a_scripted_policy_without_a_usable_script_is_a_usage_error(
    replies: tuple[object, ...], got: str
) -> None:
    from pytest_synth_rl.fake.model import ScriptedPolicy

    with pytest.raises(SynthUsageError) as info:
        ScriptedPolicy(*replies)  # type: ignore[arg-type]
    assert info.value.keys == ["ScriptedPolicy"]
    assert (
        "takes at least one reply (the last one repeats) or one function of the request, not both; " + got
    ) in str(info.value)
    assert 'e.g. ScriptedPolicy("42")' in str(info.value)


def test_a_misspelt_keyword_to_an_async_wait_is_a_usage_error_when_awaited() -> None:
    import asyncio
    import inspect

    job = AsyncRLJob.from_job_id("job_1", api_key="k" * 20)
    assert inspect.iscoroutinefunction(AsyncRLJob.poll_until_complete)  # still awaitable as before
    with pytest.raises(SynthUsageError) as info:
        asyncio.run(job.poll_until_complete(timout=10))  # type: ignore[call-arg]
    assert (
        "got AsyncRLJob.poll_until_complete(timout=...); AsyncRLJob.poll_until_complete() has no "
        "argument 'timout'" in str(info.value)
    )
    assert "did you mean AsyncRLJob.poll_until_complete(timeout=...)?" in str(info.value)
    asyncio.run(job.close())
