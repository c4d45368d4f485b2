"""A wrongly written expectation is a usage error naming the call, never a silent pass.

Every ``JobExpectation`` method checks its own arguments before it polls anything: a wrong type
(bools are not numbers), a NaN or infinite number, a ``within`` that is not > 0, a call with no
bound, a misspelled keyword (with a "did you mean"). The job here is the one the outside tester
used: ``synth_scenario(steps=3, reward_curve=[0.9, 0.5, 0.1])`` on the fake, a falling reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fake_support import job_on

from pytest_synth_rl.assertions import JobExpectation, expect_job
from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend

START = 500.0
HEAD = "invalid expectation arguments: "


@pytest.fixture
def job() -> Iterator[RLJob]:
    """A submitted job of 3 steps whose reward falls 0.9 -> 0.5 -> 0.1, not yet polled."""
    clock = VirtualClock(START)
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(steps=3, reward_curve=[0.9, 0.5, 0.1])
        made = job_on(fake, clock)
        made.submit()
        yield made
        made.close()


def usage_error(call: Callable[[], object]) -> SynthUsageError:
    with pytest.raises(SynthUsageError) as info:
        call()
    return info.value


def assert_not_polled(job: RLJob) -> None:
    """A usage error is raised before the job is waited for: no poll, no virtual time spent."""
    assert job.last_result is None
    assert job.clock.now() == START


# -- 1. NaN / inf bounds and a call that would check nothing ----------------------------------
def test_nan_bounds_of_the_final_reward_are_usage_errors(job: RLJob) -> None:
    error = usage_error(
        lambda: expect_job(job).to_have_final_reward(at_least=float("nan"), at_most=float("nan"))
    )
    assert error.keys == ["to_have_final_reward.at_least", "to_have_final_reward.at_most"]
    text = str(error)
    assert text.startswith("2 problems with expectation arguments:\n")
    assert (
        "  - to_have_final_reward.at_least: got to_have_final_reward(at_least=nan); "
        "expected a finite number (the reward bound, inclusive)"
    ) in text
    assert "to_have_final_reward.at_most: got to_have_final_reward(at_most=nan);" in text
    assert_not_polled(job)


def test_nan_bounds_fail_even_after_to_succeed(job: RLJob) -> None:
    expectation = expect_job(job).to_succeed()
    error = usage_error(lambda: expectation.to_have_final_reward(at_least=float("nan")))
    assert error.keys == ["to_have_final_reward.at_least"]


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinite_bounds_are_usage_errors(job: RLJob, value: float) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward(at_most=value))
    assert str(error).startswith(
        f"{HEAD}to_have_final_reward.at_most: got to_have_final_reward(at_most={value!r}); "
        "expected a finite number"
    )


def test_a_nan_improvement_is_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_improve_reward(by=float("nan")))
    assert str(error) == (
        f"{HEAD}to_improve_reward.by: got to_improve_reward(by=nan); expected a finite number: the "
        "least rise from the start of the reward curve to its end (hint: e.g. "
        "to_improve_reward(by=0.2); a negative by tolerates a drop that small)"
    )
    assert_not_polled(job)


def test_a_final_reward_check_with_no_bound_is_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward())
    assert error.keys == ["to_have_final_reward"]
    assert str(error) == (
        f"{HEAD}to_have_final_reward: got to_have_final_reward() with no bound: it would check "
        "nothing (hint: pass at_least=, at_most= or both, e.g. to_have_final_reward(at_least=0.6) "
        "or to_have_final_reward(at_least=0.2, at_most=0.9))"
    )
    assert_not_polled(job)


def test_bounds_that_no_reward_can_meet_are_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward(at_least=0.9, at_most=0.1))
    assert str(error) == (
        f"{HEAD}to_have_final_reward: got to_have_final_reward(at_least=0.9, at_most=0.1): no reward "
        "is both >= 0.9 and <= 0.1 (hint: swap them: to_have_final_reward(at_least=0.1, at_most=0.9))"
    )


# -- 2. wrong types and misspelled keywords ---------------------------------------------------
def test_a_quoted_number_is_named_with_its_type_and_the_fix(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward(at_least="0.5"))  # type: ignore[arg-type]
    assert str(error).startswith(
        f"{HEAD}to_have_final_reward.at_least: got to_have_final_reward(at_least='0.5'), a str; "
        "expected a finite number (the reward bound, inclusive) (hint: write the number without "
        "quotes: to_have_final_reward(at_least=0.5); "
    )
    assert_not_polled(job)


@pytest.mark.parametrize(
    ("call", "key", "written"),
    [
        (
            lambda e: e.to_have_final_reward(at_least=True),
            "to_have_final_reward.at_least",
            "at_least=True), a bool",
        ),
        (lambda e: e.to_improve_reward(by=False), "to_improve_reward.by", "by=False), a bool"),
        (lambda e: e.to_improve_reward(window=True), "to_improve_reward.window", "window=True), a bool"),
        (lambda e: e.to_succeed(within=True), "to_succeed.within", "within=True), a bool"),
    ],
)
def test_bools_are_not_numbers(
    job: RLJob, call: Callable[[JobExpectation], object], key: str, written: str
) -> None:
    error = usage_error(lambda: call(expect_job(job)))
    assert error.keys == [key]
    method = key.split(".")[0]
    assert f"got {method}({written};" in str(error)


def test_a_non_text_error_fragment_is_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_fail(error_contains=5))  # type: ignore[arg-type]
    assert str(error) == (
        f"{HEAD}to_fail.error_contains: got to_fail(error_contains=5), an int; expected non-blank "
        "text the job's error must contain (hint: write it as text: to_fail(error_contains='5'))"
    )
    assert_not_polled(job)


def test_an_empty_error_fragment_would_match_anything(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_fail(error_contains=""))
    assert str(error) == (
        f"{HEAD}to_fail.error_contains: got to_fail(error_contains=''); expected non-blank text the "
        "job's error must contain (hint: e.g. to_fail(error_contains='CUDA out of memory'))"
    )


def test_a_misspelled_keyword_gets_a_did_you_mean(job: RLJob) -> None:
    expectation = expect_job(job)
    error = usage_error(lambda: expectation.to_fail(error_contain="x"))  # type: ignore[call-arg]
    assert not isinstance(error, TypeError)
    assert error.keys == ["to_fail.error_contain"]
    assert str(error) == (
        f"{HEAD}to_fail.error_contain: got to_fail(error_contain=...); to_fail() has no argument "
        "'error_contain' (hint: did you mean to_fail(error_contains=...)? it takes "
        "to_fail(within=None, *, error_contains=None))"
    )
    assert_not_polled(job)


@pytest.mark.parametrize(
    ("call", "key", "guess"),
    [
        (lambda e: e.to_have_final_reward(atleast=0.5), "to_have_final_reward.atleast", "at_least"),
        (lambda e: e.to_improve_reward(bye=0.1), "to_improve_reward.bye", "by"),
        (lambda e: e.to_succeed(whithin=10), "to_succeed.whithin", "within"),
        (lambda e: e.to_reach_status("running", withn=10), "to_reach_status.withn", "within"),
        (lambda e: e.to_emit_events(type=["a"]), "to_emit_events.type", "types"),
    ],
)
def test_every_method_suggests_the_keyword_meant(
    job: RLJob, call: Callable[[JobExpectation], object], key: str, guess: str
) -> None:
    error = usage_error(lambda: call(expect_job(job)))
    assert error.keys[0] == key  # to_emit_events(type=...) also misses its types
    method = key.split(".")[0]
    assert f"(hint: did you mean {method}({guess}=...)? it takes {method}(" in str(error)


def test_an_unknown_keyword_with_no_near_miss_lists_the_signature(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward(zzz=1))  # type: ignore[call-arg]
    assert str(error).endswith("(hint: it takes to_have_final_reward(*, at_least=None, at_most=None))")


def test_a_bound_given_by_position_is_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_have_final_reward(0.5))  # type: ignore[call-arg]
    assert str(error) == (
        f"{HEAD}to_have_final_reward: to_have_final_reward() takes 0 positional argument(s), got 1: "
        "the extra 0.5 has no parameter (hint: pass the others by keyword; e.g. "
        "to_have_final_reward(at_least=...); it takes to_have_final_reward(*, at_least=None, at_most=None))"
    )


def test_a_missing_status_is_a_usage_error(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_reach_status())  # type: ignore[call-arg]
    assert str(error) == (
        f"{HEAD}to_reach_status.status: to_reach_status() is missing its argument status "
        "(hint: it takes to_reach_status(status, within=None))"
    )


@pytest.mark.parametrize("status", [5, "", "  ", None])
def test_a_status_must_be_text(job: RLJob, status: Any) -> None:
    error = usage_error(lambda: expect_job(job).to_reach_status(status))
    assert error.keys == ["to_reach_status.status"]
    assert f"got to_reach_status(status={status!r})" in str(error)


def test_a_misspelled_status_would_wait_forever_so_it_is_refused(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_reach_status("suceeded", within=60))
    assert str(error).startswith(
        f"{HEAD}to_reach_status.status: got to_reach_status(status='suceeded'), a near miss of the "
        "known status 'succeeded': the job would never reach it"
    )
    assert "(hint: did you mean to_reach_status('succeeded')? known statuses: " in str(error)
    assert_not_polled(job)


@pytest.mark.parametrize("status", ["validating", "training", "created", "scheduled"])
def test_a_status_of_the_backends_own_is_still_accepted(job: RLJob, status: str) -> None:
    with pytest.raises(AssertionError, match=rf"to reach status '{status}' within 10\.0s"):
        expect_job(job, interval=5).to_reach_status(status, within=10)


@pytest.mark.parametrize(
    ("typo", "meant"), [("runing", "running"), ("cancled", "canceled"), ("validatin", "validating")]
)
def test_a_slip_of_any_known_status_is_refused(job: RLJob, typo: str, meant: str) -> None:
    error = usage_error(lambda: expect_job(job).to_reach_status(typo))
    assert f"did you mean to_reach_status({meant!r})?" in str(error)
    assert_not_polled(job)


@pytest.mark.parametrize("window", [-1, 1.5, "2"])
def test_a_window_is_a_whole_number_of_points(job: RLJob, window: Any) -> None:
    error = usage_error(lambda: expect_job(job).to_improve_reward(by=0.1, window=window))
    assert error.keys == ["to_improve_reward.window"]
    assert f"got to_improve_reward(window={window!r})" in str(error)
    assert "expected a whole number of reward points >= 0" in str(error)


def test_event_types_must_be_a_list_of_names_not_one_string(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_emit_events("rl.train.started"))
    assert str(error) == (
        f"{HEAD}to_emit_events.types: got to_emit_events(types='rl.train.started'), a str; expected a "
        "list of event type names (hint: e.g. to_emit_events(['rl.train.started', "
        "'rl.train.completed']); for one type write to_emit_events(['rl.train.started']))"
    )
    error = usage_error(lambda: expect_job(job).to_emit_events(["rl.train.started", 3]))  # type: ignore[list-item]
    assert "got to_emit_events(types=['rl.train.started', 3]): item 1 is 3, an int;" in str(error)


def test_every_problem_of_one_call_is_listed(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_fail(within=-1, error_contains=b"x"))  # type: ignore[arg-type]
    assert error.keys == ["to_fail.within", "to_fail.error_contains"]


# -- 3. within: the user's call is named, not the poller's ------------------------------------
def test_an_infinite_within_names_the_call_the_user_wrote(job: RLJob) -> None:
    error = usage_error(lambda: expect_job(job).to_succeed(within=math.inf))
    text = str(error)
    assert text == (
        f"{HEAD}to_succeed.within: got to_succeed(within=inf); expected a finite number of seconds > 0 "
        "(measured on the job's clock) (hint: e.g. to_succeed(within=7200) waits up to two hours; "
        "leave within out to use the test's timeout (--synth-timeout))"
    )
    assert "poll_until_complete" not in text
    assert_not_polled(job)


@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("to_finish", 0),
        ("to_succeed", -5),
        ("to_fail", math.nan),
        ("to_be_cancelled", math.inf),
        ("to_reach_status", "60"),
    ],
)
def test_every_within_must_be_a_finite_positive_number(job: RLJob, method: str, value: Any) -> None:
    expectation = expect_job(job)
    args = ("running",) if method == "to_reach_status" else ()
    error = usage_error(lambda: getattr(expectation, method)(*args, within=value))
    assert error.keys == [f"{method}.within"]
    assert f"got {method}(within={value!r})" in str(error)
    assert f"e.g. {method}(within=7200) waits up to two hours;" in str(error)
    assert "poll_until_complete" not in str(error)


@pytest.mark.parametrize(("name", "value"), [("interval", 0), ("timeout", math.inf), ("interval", "10")])
def test_expect_job_checks_its_interval_and_timeout(job: RLJob, name: str, value: Any) -> None:
    error = usage_error(lambda: expect_job(job, **{name: value}))
    assert error.keys == [f"expect_job.{name}"]
    assert f"got expect_job({name}={value!r})" in str(error)
    error = usage_error(lambda: JobExpectation(job, **{name: value}))
    assert error.keys == [f"JobExpectation.{name}"]


def test_expect_job_refuses_a_result_instead_of_the_job(job: RLJob) -> None:
    result = job.poll_until_complete(timeout=600, interval=10)
    error = usage_error(lambda: expect_job(result))  # type: ignore[arg-type]
    assert error.keys == ["expect_job.job"]
    assert "a JobResult; expected the RLJob itself" in str(error)


def test_an_async_job_is_refused_naming_the_call_the_user_wrote() -> None:
    # Before: a TypeError naming expect_job() even when the test wrote synth_expect(job).
    from pytest_synth_rl.client import AsyncRLJob
    from pytest_synth_rl.plugin.session import ExpectJob

    clock = VirtualClock()
    job = AsyncRLJob.from_job_id(
        "job_rl_000001", backend_url="https://api.usesynth.ai", api_key="sk_test_0123456789"
    )
    direct = usage_error(lambda: expect_job(job))  # type: ignore[arg-type]
    fixture = usage_error(lambda: ExpectJob(clock=clock, interval=10.0, timeout=60.0)(job))  # type: ignore[arg-type]
    assert direct.keys == ["expect_job.job"]
    assert fixture.keys == ["synth_expect.job"]
    assert (
        "synth_expect.job: got synth_expect(<AsyncRLJob>); "
        "expectations wait by blocking, so they take an RLJob "
        "(hint: await the async job's own methods (result = await job.poll_until_complete(); "
        "assert result.status == 'succeeded'), or make a blocking job with synth_rl_job())"
    ) in str(fixture)


# -- the valid calls still work on this job ---------------------------------------------------
def test_valid_arguments_still_check_the_job(job: RLJob) -> None:
    expectation = expect_job(job, interval=10).to_succeed(within=600)
    expectation.to_have_final_reward(at_most=0.1).to_have_final_reward(at_least=0, at_most=1)
    expectation.to_improve_reward(by=-0.8, window=0).to_emit_events(["rl.train.started"])
    with pytest.raises(AssertionError, match=r"^expected final reward >= 0\.5, got 0\.1000\n"):
        expectation.to_have_final_reward(at_least=0.5)
    with pytest.raises(AssertionError, match=r"went 0\.9000 -> 0\.1000 \(change -0\.8000\)"):
        expectation.to_improve_reward(by=0.0)


# -- an expectation that checks nothing --------------------------------------------------------
NO_CHECK_SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
    pytest.mark.synth_scenario(steps=2, reward_curve=[0.1, 0.2]),
]


def test_parentheses_forgotten(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed


def test_checked(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed()


def test_failing_for_its_own_reason(synth_rl_job, synth_expect):
    synth_expect(synth_rl_job())
    assert 1 == 2
"""


def test_a_passing_test_whose_expectation_checked_nothing_errors_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    # Before: synth_expect(job).to_succeed (no parentheses) passed, having checked nothing.
    examples = Path(__file__).resolve().parents[2] / "examples"
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        (pytester.path / name).write_text((examples / name).read_text())
    pytester.makepyfile(test_no_check=NO_CHECK_SUITE)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_parentheses_forgotten*",
            "*SynthError: synth_expect(job) at test_no_check.py:13 checked nothing",
            "  hint: call an expectation on it, e.g. synth_expect(job).to_succeed(within=7200); a method "
            "named without its parentheses checks nothing",
        ]
    )
    assert "ERROR at teardown of test_failing_for_its_own_reason" not in result.stdout.str()
