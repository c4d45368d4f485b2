"""``synth_rl_job(...)`` and ``synth_rl_job.async_job(...)`` written wrong: one usage error naming
the call and the argument, with a "did you mean" for a misspelled keyword, never a raw
``TypeError`` from pathlib, a mapping merge, or ``JobBase.from_config``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.session import RLConfigRef, SynthJobFactory
from pytest_synth_rl.plugin.settings import resolve_settings
from pytest_synth_rl.secrets.masking import Secret

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = EXAMPLES / "arithmetic.toml"
TASK_KEY = "task_app_key_for_factory_tests"


@pytest.fixture
def factory() -> Iterator[tuple[SynthJobFactory, list[object]]]:
    """A factory on the fake, as the fixture builds it offline; the list records every
    ``prepare_submit`` call (a wrong call must not reach it)."""
    clock = VirtualClock(250.0)
    prepared: list[object] = []
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(steps=3, reward_curve=[0.9, 0.5, 0.1])
        jobs = SynthJobFactory(
            test_id="tests/x.py::test_it",
            settings=resolve_settings(cli={}, env={}, ini={}),
            clock=clock,
            config=RLConfigRef(CONFIG),
            task_app_url="https://task-app.example.com",
            task_app_api_key=TASK_KEY,
            api_key=fake.api_key,
            skip_health_check=True,
            transport=fake.transport(),
            prepare_submit=lambda *args: prepared.append(args),
        )
        yield jobs, prepared
        jobs.finish(cancel_running=False)


def usage_error(call: Callable[[], object]) -> SynthUsageError:
    with pytest.raises(SynthUsageError) as info:
        call()
    return info.value


def test_a_config_that_is_not_a_path_names_the_argument(
    factory: tuple[SynthJobFactory, list[object]],
) -> None:
    jobs, prepared = factory
    error = usage_error(lambda: jobs(config=5))  # type: ignore[arg-type]
    assert not isinstance(error, TypeError)
    assert error.keys == ["synth_rl_job.config"]
    assert str(error) == (
        "invalid synth_rl_job() arguments: synth_rl_job.config: got synth_rl_job(config=5), an int; "
        "expected the path of an RL TOML file (a non-empty str or a pathlib.Path) (hint: e.g. "
        "synth_rl_job(config='rl.toml') (relative to the test's synth_rl config, the test file or "
        "the rootdir), or leave it out for the test's synth_rl marker config)"
    )
    assert prepared == []
    assert jobs.jobs == []


def test_overrides_passed_as_the_config_get_pointed_at_overrides(
    factory: tuple[SynthJobFactory, list[object]],
) -> None:
    jobs, _ = factory
    error = usage_error(lambda: jobs({"training.batch_size": 2}))  # type: ignore[arg-type]
    assert str(error).endswith(
        "(hint: to change keys of the test's config pass them by keyword: synth_rl_job(overrides={...}))"
    )


@pytest.mark.parametrize("config", ["", "   ", b"rl.toml"])
def test_an_empty_or_bytes_config_is_refused(
    factory: tuple[SynthJobFactory, list[object]], config: Any
) -> None:
    jobs, _ = factory
    error = usage_error(lambda: jobs(config=config))
    assert f"got synth_rl_job(config={config!r}), a" in str(error)


def test_overrides_written_as_a_string_name_the_argument(
    factory: tuple[SynthJobFactory, list[object]],
) -> None:
    jobs, prepared = factory
    error = usage_error(lambda: jobs(overrides="training.batch_size=2"))  # type: ignore[arg-type]
    assert str(error) == (
        "invalid synth_rl_job() arguments: synth_rl_job.overrides: got "
        "synth_rl_job(overrides='training.batch_size=2'), a str; expected a mapping of dotted config "
        "keys to values (hint: e.g. synth_rl_job(overrides={'training.batch_size': 2}))"
    )
    assert prepared == []


def test_override_keys_must_be_strings(factory: tuple[SynthJobFactory, list[object]]) -> None:
    jobs, _ = factory
    error = usage_error(lambda: jobs(overrides={3: 1, "": 2}))  # type: ignore[dict-item]
    assert error.keys == ["synth_rl_job.overrides", "synth_rl_job.overrides"]
    assert "got synth_rl_job(overrides={3: ...}): the key is an int;" in str(error)
    assert "got synth_rl_job(overrides={'': ...}): the key is blank;" in str(error)


def test_a_misspelled_keyword_gets_a_did_you_mean_not_an_internal_name(
    factory: tuple[SynthJobFactory, list[object]],
) -> None:
    jobs, prepared = factory
    error = usage_error(lambda: jobs(overide={"training.batch_size": 2}))
    text = str(error)
    assert error.keys == ["synth_rl_job.overide"]
    assert text.startswith(
        "invalid synth_rl_job() arguments: synth_rl_job.overide: got synth_rl_job(overide=...); "
        "synth_rl_job() has no argument 'overide' (hint: did you mean synth_rl_job(overrides=...)? "
        "it takes config=, overrides= and backend_url=, api_key=, task_app_url=, task_app_api_key=, "
    )
    assert "from_config" not in text
    assert "JobBase" not in text
    assert prepared == []


@pytest.mark.parametrize(
    ("written", "guess"),
    [("config_path", "config"), ("task_app_ur", "task_app_url"), ("skip_healthcheck", "skip_health_check")],
)
def test_near_misses_of_every_accepted_keyword(
    factory: tuple[SynthJobFactory, list[object]], written: str, guess: str
) -> None:
    jobs, _ = factory
    options: dict[str, Any] = {written: "x"}
    error = usage_error(lambda: jobs(**options))
    assert f"(hint: did you mean synth_rl_job({guess}=...)? it takes " in str(error)


def test_a_misspelled_key_argument_does_not_show_its_value(
    factory: tuple[SynthJobFactory, list[object]],
) -> None:
    jobs, _ = factory
    error = usage_error(lambda: jobs(api_kye="sk_live_do_not_print_me_0123"))
    assert "got synth_rl_job(api_kye=...);" in str(error)
    assert "did you mean synth_rl_job(api_key=...)?" in str(error)
    assert "do_not_print" not in str(error)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("backend_url", 5, "got synth_rl_job(backend_url=5), an int; expected an http(s) URL string or None"),
        ("tags", "x", "got synth_rl_job(tags='x'), a str; expected a mapping of str to str or None"),
        (
            "skip_health_check",
            "no",
            "got synth_rl_job(skip_health_check='no'), a str; expected True or False",
        ),
        ("allow_new_keys", 1, "got synth_rl_job(allow_new_keys=1), an int; expected True or False"),
        (
            "request_timeout",
            float("inf"),
            "got synth_rl_job(request_timeout=inf), a float; expected a finite",
        ),
        ("request_timeout", True, "got synth_rl_job(request_timeout=True), a bool; expected a finite"),
        ("clock", 5, "got synth_rl_job(clock=5), an int; expected a Clock or None"),
        ("task_app_api_key", 5, "got synth_rl_job(task_app_api_key=...), an int; expected a key string"),
    ],
)
def test_values_forwarded_to_the_job_are_checked(
    factory: tuple[SynthJobFactory, list[object]], name: str, value: object, expected: str
) -> None:
    jobs, prepared = factory
    options: dict[str, Any] = {name: value}
    error = usage_error(lambda: jobs(**options))
    assert error.keys == [f"synth_rl_job.{name}"]
    assert expected in str(error)
    assert prepared == []


def test_every_problem_is_listed_at_once(factory: tuple[SynthJobFactory, list[object]]) -> None:
    jobs, _ = factory
    error = usage_error(lambda: jobs(config=5, overrides="x", overide={}))  # type: ignore[arg-type]
    assert error.keys == ["synth_rl_job.overide", "synth_rl_job.config", "synth_rl_job.overrides"]
    assert str(error).startswith("3 problems with synth_rl_job() arguments:\n")


def test_async_job_names_itself(factory: tuple[SynthJobFactory, list[object]]) -> None:
    jobs, prepared = factory
    error = usage_error(lambda: jobs.async_job(overide={"training.batch_size": 2}))
    assert str(error).startswith(
        "invalid synth_rl_job.async_job() arguments: synth_rl_job.async_job.overide: got "
        "synth_rl_job.async_job(overide=...); synth_rl_job.async_job() has no argument 'overide' "
        "(hint: did you mean synth_rl_job.async_job(overrides=...)? "
    )
    error = usage_error(lambda: jobs.async_job(config=5))  # type: ignore[arg-type]
    assert error.keys == ["synth_rl_job.async_job.config"]
    error = usage_error(lambda: jobs.async_job(overrides="training.batch_size=2"))  # type: ignore[arg-type]
    assert error.keys == ["synth_rl_job.async_job.overrides"]
    assert prepared == []
    assert jobs.async_jobs == []


def test_valid_arguments_still_build_jobs(factory: tuple[SynthJobFactory, list[object]]) -> None:
    jobs, prepared = factory
    job = jobs(
        CONFIG,
        overrides={"training.batch_size": 2},
        idempotency_key="factory-args-1",
        tags={"team": "rl"},
        task_app_api_key=Secret(TASK_KEY),
        skip_health_check=True,  # a job given its own task app key probes its app, unless told not to
        request_timeout=30,
    )
    job.submit()
    assert job.poll_until_complete(timeout=600, interval=10).final_reward == pytest.approx(0.1)
    assert jobs.async_job(Path("arithmetic.toml"), allow_new_keys=False, clock=None) in jobs.async_jobs
    assert len(prepared) == 2


# -- through the fixtures ------------------------------------------------------------------------
FIXTURE_SUITE = """
import pytest

from pytest_synth_rl.errors import SynthUsageError

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
    pytest.mark.synth_scenario(steps=3, reward_curve=[0.9, 0.5, 0.1]),
]


def test_config_not_a_path(synth_rl_job):
    with pytest.raises(SynthUsageError) as info:
        synth_rl_job(config=5)
    assert str(info.value).startswith(
        "invalid synth_rl_job() arguments: synth_rl_job.config: got synth_rl_job(config=5), an int; "
        "expected the path of an RL TOML file"
    )


def test_overrides_as_text(synth_rl_job):
    with pytest.raises(SynthUsageError) as info:
        synth_rl_job(overrides="training.batch_size=2")
    assert info.value.keys == ["synth_rl_job.overrides"]
    assert "got synth_rl_job(overrides='training.batch_size=2'), a str;" in str(info.value)


def test_async_misspelled(synth_rl_job):
    with pytest.raises(SynthUsageError) as info:
        synth_rl_job.async_job(overide={"training.batch_size": 2})
    assert "did you mean synth_rl_job.async_job(overrides=...)?" in str(info.value)


def test_still_works(synth_rl_job, synth_expect):
    job = synth_rl_job(overrides={"training.batch_size": 2})
    job.submit()
    synth_expect(job).to_succeed(within=600).to_have_final_reward(at_most=0.1)


def test_misspelled_reaches_the_report(synth_rl_job):
    synth_rl_job(overide={"training.batch_size": 2})
"""


def test_the_fixture_reports_wrong_arguments_as_usage_errors(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_factory_args=FIXTURE_SUITE)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E *.SynthUsageError: invalid synth_rl_job() arguments: synth_rl_job.overide: got "
            "synth_rl_job(overide=...); synth_rl_job() has no argument 'overide' (hint: did you mean "
            "synth_rl_job(overrides=...)? it takes config=, overrides= and *",
        ]
    )
    assert "from_config() got an unexpected keyword argument" not in result.stdout.str()


CONFIG_LOOKUP_SUITE = """
import pytest

from pytest_synth_rl.errors import SynthUsageError

pytestmark = [pytest.mark.synth_task_app("arithmetic_task_app.py")]


def test_next_to_the_test_file(synth_rl_job):
    assert str(synth_rl_job(config="sibling.toml").config.config_path) == {sibling!r}


@pytest.mark.synth_rl(config="configs/base.toml")
def test_next_to_the_marker_config_first(synth_rl_job):
    assert str(synth_rl_job(config="variant.toml").config.config_path) == {variant!r}


def test_missing_names_every_folder_looked_in(synth_rl_job):
    with pytest.raises(SynthUsageError) as info:
        synth_rl_job(config="nope.toml")
    assert str(info.value) == (
        "invalid arguments: synth_rl_job.config: RL config file nope.toml does not exist (looked in: "
        "{here}/nope.toml, {root}/nope.toml) (hint: give a path relative to the test file (or to the "
        "test's synth_rl config, or the rootdir), or an absolute path)"
    )


def test_a_near_miss_gets_a_did_you_mean(synth_rl_job):
    with pytest.raises(SynthUsageError, match="did you mean 'sibling.toml'"):
        synth_rl_job(config="sibling.tom")


def test_a_directory_is_named_as_one(synth_rl_job):
    # Before, a folder of that name was reported as not existing.
    with pytest.raises(SynthUsageError, match="RL config file configs is a directory"):
        synth_rl_job(config="configs")
"""


def test_a_relative_config_is_found_like_the_markers_and_named_where_it_was_looked_for(
    pytester: pytest.Pytester,
) -> None:
    # Before: relative to the working directory without a marker config, so a file next to the
    # test was "not found" when pytest started from the repository root.
    tests = pytester.mkdir("suite")
    (pytester.path / "configs").mkdir()
    shutil.copy(EXAMPLES / "arithmetic_task_app.py", tests / "arithmetic_task_app.py")
    for target in (
        tests / "sibling.toml",
        pytester.path / "configs/base.toml",
        pytester.path / "configs/variant.toml",
    ):
        shutil.copy(EXAMPLES / "arithmetic.toml", target)
    shutil.copy(EXAMPLES / "arithmetic.toml", tests / "variant.toml")  # the marker config's folder wins
    (tests / "test_lookup.py").write_text(
        CONFIG_LOOKUP_SUITE.format(
            sibling=str(tests / "sibling.toml"),
            variant=str(pytester.path / "configs/variant.toml"),
            here=tests,
            root=pytester.path,
        )
    )
    result = pytester.runpytest("-p", "no:randomly", "--rootdir", str(pytester.path), "suite")
    result.assert_outcomes(passed=5)


def test_a_test_serving_no_task_app_is_told_to_add_the_marker(pytester: pytest.Pytester) -> None:
    # Before: the config's own hint (task_url=, TASK_APP_URL, ...), never the marker.
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "arithmetic.toml")
    pytester.makepyfile(
        test_no_app="""
import pytest

@pytest.mark.synth_rl(config="arithmetic.toml")
def test_job(synth_rl_job):
    synth_rl_job()
"""
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E   * services.task_url: is empty and no other task app URL was given; expected the URL of a "
            "running task app (hint: this test serves no task app: add "
            "@pytest.mark.synth_task_app('my_task_app.py') (or set the ini option synth_task_app, or pass "
            "--synth-task-app-url), or give synth_rl_job(task_app_url=...))",
        ]
    )
    assert "contextlib" not in result.stdout.str()
