"""Our errors and expectations point at the user's line; everything else keeps its frames."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config.loader import parse_toml
from pytest_synth_rl.errors import ConfigError
from pytest_synth_rl.plugin.frames import hidden_from_users, mark_package_modules

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _caught(call: Callable[[], object]) -> pytest.ExceptionInfo[BaseException]:
    try:
        call()
    except BaseException:
        return pytest.ExceptionInfo.from_current()
    raise AssertionError("expected the call to raise")


def _run_as(module: str, source: str, **names: Any) -> Callable[[], object]:
    """A function whose frame belongs to *module* (to stand in for ours or pytest's)."""
    namespace: dict[str, Any] = {"__name__": module, **names}
    exec(compile(f"def probe():\n    {source}\n", f"<{module}>", "exec"), namespace)
    probe: Callable[[], object] = namespace["probe"]
    return probe


def test_our_error_raised_for_the_users_call_is_hidden() -> None:
    info = _caught(lambda: parse_toml("x = = 1", source="rl.toml"))
    assert info.errisinstance(ConfigError)
    assert hidden_from_users(info) is True


@pytest.mark.parametrize("error", [ValueError("the user's own bug"), AssertionError("the user's own check")])
def test_the_users_own_errors_called_through_us_keep_their_frames(error: Exception) -> None:
    def users_callback() -> None:
        raise error

    through_us = _run_as("pytest_synth_rl._probe", "callback()", callback=users_callback)
    assert hidden_from_users(_caught(through_us)) is False
    assert hidden_from_users(_caught(lambda: int("not a number"))) is False
    assert hidden_from_users(None) is False


def test_an_assertion_raised_by_us_is_hidden() -> None:
    raised_here = _run_as("pytest_synth_rl._probe", "raise AssertionError('expected job to succeed')")
    assert hidden_from_users(_caught(raised_here)) is True


def test_an_error_with_no_user_frame_is_left_to_pytest() -> None:
    ours = _run_as("pytest_synth_rl._probe", "parse('x = = 1')", parse=parse_toml)
    machinery = _run_as("_pytest.runner", "ours()", ours=ours)
    info = _caught(machinery)
    # The test's own frame is a user frame; cut the traceback to what a hook would see.
    assert info.tb.tb_next is not None
    only_hook = pytest.ExceptionInfo.from_exc_info((info.type, info.value, info.tb.tb_next))
    assert hidden_from_users(only_hook) is False


def test_the_message_alone_keeps_what_it_wraps_when_it_does_not_say_it() -> None:
    from pytest_synth_rl.errors import TaskAppError
    from pytest_synth_rl.plugin.frames import message_only

    raising = "raise ValueError('weights file is truncated')"
    cause = _run_as("pytest_synth_rl._probe", raising)
    wrapping = (
        "try: cause()\n    except ValueError as exc: raise Error('the task app could not start') from exc"
    )
    ours = _run_as("pytest_synth_rl._probe", wrapping, cause=cause, Error=TaskAppError)
    hook = _run_as("_pytest.runner", "ours()", ours=ours)
    info = _caught(hook)
    only_hook = pytest.ExceptionInfo.from_exc_info((info.type, info.value, info.tb.tb_next))
    assert message_only(only_hook) == (
        "pytest_synth_rl.errors.TaskAppError: the task app could not start\n"
        "  caused by ValueError: weights file is truncated"
    )
    assert message_only(info) is None  # the test's own frame is a user frame
    # Anything but our own errors keeps pytest's full view, even with no frame of the user's.
    bare = _caught(_run_as("_pytest.runner", "cause()", cause=cause))
    assert message_only(pytest.ExceptionInfo.from_exc_info((bare.type, bare.value, bare.tb.tb_next))) is None


def test_every_loaded_module_of_ours_answers_and_others_are_untouched() -> None:
    import sys

    import pytest_synth_rl.config.loader as loader

    mark_package_modules()
    assert loader.__tracebackhide__ is hidden_from_users  # type: ignore[attr-defined]
    assert "__tracebackhide__" not in vars(sys.modules["json"])


SUITE = """
import pytest

pytestmark = [pytest.mark.synth_task_app("arithmetic_task_app.py")]


@pytest.mark.synth_rl(config="broken.toml")
def test_broken_config(synth_rl_job):
    synth_rl_job().submit()


@pytest.mark.synth_rl(config="arithmetic.toml")
@pytest.mark.synth_scenario(outcome="failed")
def test_failed_job(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    (pytester.path / "broken.toml").write_text('[algorithm]\ntype = "online"\nmethod = "policy_gradient\n')
    pytester.makepyfile(test_frames_suite=SUITE)
    return pytester


def test_failures_show_the_users_line_then_the_message(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:randomly", "-l")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            ">       synth_rl_job().submit()",
            "E       pytest_synth_rl.errors.ConfigError: RL config *broken.toml is invalid: "
            "line 3, column 26:*",
            "test_frames_suite.py:8: ConfigError",
            ">       synth_expect(job).to_succeed(within=7200)",
            "E       AssertionError: expected job job_rl_* to succeed, but it ended 'failed'",
            "test_frames_suite.py:16: AssertionError",
        ]
    )
    text = result.stdout.str()
    for internal in ("config/loader.py", "session.py", "assertions.py", "self = <pytest_synth_rl"):
        assert internal not in text


def test_full_trace_still_shows_every_frame(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:randomly", "--full-trace", "-k", "broken")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*pytest_synth_rl/config/loader.py:*: ConfigError"])


MARKER_SUITE = """
import pytest


@pytest.mark.synth_rl(confg="arithmetic.toml")
def test_marker_typo(synth_rl_job):
    pass


@pytest.mark.synth_rl(config="missing.toml")
def test_missing_config(synth_rl_job):
    pass


@pytest.mark.synth_task_app("no_such_package.server:app")
def test_app_not_importable(synth_task_app):
    pass
"""


def test_errors_raised_before_the_test_runs_are_the_message_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_markers_suite=MARKER_SUITE)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_marker_typo*",
            "pytest_synth_rl.errors.MarkerError: @pytest.mark.synth_rl on "
            "test_markers_suite.py::test_marker_typo: unknown argument confg=",
            "  hint: did you mean config=?*",
            "*ERROR at setup of test_missing_config*",
            "pytest_synth_rl.errors.MarkerError: @pytest.mark.synth_rl on "
            "test_markers_suite.py::test_missing_config: missing.toml does not exist*",
            "*ERROR at setup of test_app_not_importable*",
            "pytest_synth_rl.errors.TaskAppError: cannot import module 'no_such_package.server'*"
            "No module named 'no_such_package'",
            "  hint: *importable*",
        ]
    )
    text = result.stdout.str()
    assert "caused by" not in text  # the message already says what it wraps
    assert "markers.py" not in text
    assert "plugin.py" not in text
    assert "All traceback entries are hidden" not in text
    full = pytester.runpytest("-p", "no:randomly", "--full-trace", "-k", "typo")
    full.stdout.fnmatch_lines(["*pytest_synth_rl/plugin/markers.py:*: MarkerError"])


# -- warnings point at the user's line too -------------------------------------------------------
def test_a_config_warning_points_at_the_callers_line_however_deep_it_is_raised(tmp_path: Path) -> None:
    # Before: client/base.py (through RLJob) or a fixed depth that was wrong for other callers.
    from pytest_synth_rl.client import RLJob
    from pytest_synth_rl.config import SynthConfigWarning, build_rl_payload

    config = tmp_path / "rl.toml"
    config.write_text((EXAMPLES / "arithmetic.toml").read_text() + "\n[trainingg]\nx = 1\n")
    with pytest.warns(SynthConfigWarning) as direct:
        build_rl_payload(config, task_url="http://127.0.0.1:9")
    with pytest.warns(SynthConfigWarning) as through_the_job:
        RLJob.from_config(config, api_key="sk_test_0123456789", task_app_url="http://127.0.0.1:9")
    for record in (*direct, *through_the_job):
        assert record.filename == __file__
        assert "unknown section [trainingg]" in str(record.message)
