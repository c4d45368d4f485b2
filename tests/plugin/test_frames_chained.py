"""Our errors raised ``from`` another of ours (or during its handling) still point at the user's
line alone: the chained cause is our internal detail, and what it says is in our message.

Before: a poll failing under an outage (``BackendError`` from the last poll's ``BackendError``)
printed our frames (``client/sync.py``, ``client/calls.py``) and "The above exception was the
direct cause of the following exception", because the cause's own traceback has no frame of the
user's, so nothing hid it and pytest printed the whole chain.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.errors import BackendError, SynthError
from pytest_synth_rl.plugin.frames import message_only

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

from pytest_synth_rl import InProcessTaskApp

pytestmark = [pytest.mark.synth_task_app("my_task_app.py"), pytest.mark.synth_rl(config="rl.toml")]


def test_expect_under_outage(synth_fake, synth_rl_job, synth_expect):
    job = synth_rl_job(); job.submit()
    synth_fake.fault("status", status=503)
    synth_expect(job).to_succeed(within=7200)


def test_poll_under_outage(synth_fake, synth_rl_job):
    job = synth_rl_job(); job.submit()
    synth_fake.fault("status", status=503)
    job.poll_until_complete()


def test_poll_unreachable(synth_fake, synth_rl_job):
    job = synth_rl_job(); job.submit()
    synth_fake.fault("status", connect_error=True)
    job.poll_until_complete(max_failed_polls=2)


def test_timeout_under_outage(synth_fake, synth_rl_job):
    job = synth_rl_job(); job.submit()
    synth_fake.fault("status", status=503)
    job.poll_until_complete(timeout=1)


def test_submit_unreachable(synth_fake, synth_rl_job):
    job = synth_rl_job()
    synth_fake.fault("submit", connect_error=True)
    job.submit()


def test_submit_failing(synth_fake, synth_rl_job):
    job = synth_rl_job()
    synth_fake.fault("submit", status=500)
    job.submit()


def broken_factory():
    raise ValueError("the user's factory is broken")


def test_users_own_cause():
    InProcessTaskApp(factory=broken_factory).start()
"""

# Per test: its failing line, then what the message and hint must say (fnmatch patterns, in order).
EXPECTED = {
    "test_expect_under_outage": [
        "*synth_expect(job).to_succeed(within=7200)",
        "E * pytest_synth_rl.errors.BackendError: polling RL job job_rl_* failed: 5 consecutive poll(s) "
        "failed after their retries*; last: reading the status of job 'job_rl_*' failed: HTTP 503 *",
        "E * request: GET https://api.usesynth.ai/api/rl/jobs/job_rl_* -> HTTP 503",
        "E * response: *injected_fault*",
        "E * hint: the backend kept failing; check its status*",
    ],
    "test_poll_under_outage": [
        "*job.poll_until_complete()",
        "E * pytest_synth_rl.errors.BackendError: polling RL job job_rl_* failed: 5 consecutive poll(s)*",
        "E * request: GET https://api.usesynth.ai/api/rl/jobs/job_rl_* -> HTTP 503",
        "E * hint: the backend kept failing*",
    ],
    "test_poll_unreachable": [
        "*job.poll_until_complete(max_failed_polls=2)",
        "E * pytest_synth_rl.errors.BackendError: polling RL job job_rl_* failed: 2 consecutive poll(s)*"
        "could not reach the backend: GET https://api.usesynth.ai/api/rl/jobs/job_rl_* failed after "
        "6 attempts: ConnectError: *injected connection error*",
        "E * hint: the backend kept failing*",
    ],
    "test_timeout_under_outage": [
        "*job.poll_until_complete(timeout=1)",
        "E * pytest_synth_rl.errors.JobTimeoutError: RL job job_rl_* did not finish within 1s *; "
        "1 poll(s) failed after their retries, the last one in a row: reading the status of job "
        "'job_rl_*' failed: HTTP 503 *",
        "E * hint: if the job is just slow*",
    ],
    "test_submit_unreachable": [
        "*job.submit()",
        "E * pytest_synth_rl.errors.JobSubmitError: could not reach the backend: POST "
        "https://api.usesynth.ai/api/rl/jobs failed after 6 attempts: ConnectError: *",
        "E * hint: check that the backend URL*",
    ],
    "test_submit_failing": [
        "*job.submit()",
        "E * pytest_synth_rl.errors.JobSubmitError: submitting the RL job failed: HTTP 500 after 6 attempts*",
        "E * request: POST https://api.usesynth.ai/api/rl/jobs -> HTTP 500",
        "E * hint: the backend kept failing*",
    ],
}


@pytest.fixture
def chained(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(EXAMPLES / "arithmetic_task_app.py", pytester.path / "my_task_app.py")
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "rl.toml")
    pytester.makepyfile(test_chained_suite=SUITE)
    return pytester


def _last_line(function: str) -> int:
    """The number of *function*'s last line (where each of the suite's functions raises)."""
    lines = SUITE.strip().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if line.startswith(f"def {function}("))
    while number < len(lines) and lines[number].startswith("    "):
        number += 1
    return number


def _sections(text: str) -> dict[str, str]:
    """Each failing test's report, by test name (from its ``___ name ___`` header)."""
    sections: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("_") and line.endswith("_") and " test_" in line:
            name = line.strip("_ ")
            sections[name] = ""
        elif line.startswith("="):  # the summaries after the failures
            name = None
        elif name is not None:
            sections[name] += line + "\n"
    return sections


@pytest.mark.parametrize("style", [[], ["--tb=long"], ["--tb=short"]], ids=["default", "long", "short"])
def test_our_chained_errors_show_the_users_line_and_the_message_alone(
    chained: pytest.Pytester, style: list[str]
) -> None:
    result = chained.runpytest("-p", "no:randomly", *style)
    result.assert_outcomes(failed=len(EXPECTED) + 1)
    sections = _sections(result.stdout.str())
    assert set(sections) == {*EXPECTED, "test_users_own_cause"}
    for name, lines in EXPECTED.items():
        where = f"test_chained_suite.py:{_last_line(name)}: *"
        report = pytest.LineMatcher(sections[name].splitlines())
        report.fnmatch_lines(lines)
        report.fnmatch_lines([where])  # after the message (long), before the line (short)
        for internal in (
            "pytest_synth_rl/",
            "The above exception was the direct cause",
            "During handling of the above exception",
        ):
            assert internal not in sections[name], f"{name} shows {internal!r}:\n{sections[name]}"
    # The user's own exception under ours is theirs to read: the chain stays, their line in it.
    pytest.LineMatcher(sections["test_users_own_cause"].splitlines()).fnmatch_lines(
        [
            '*raise ValueError("the user\'s factory is broken")',
            "E * ValueError: the user's factory is broken",
            "The above exception was the direct cause of the following exception:",
            "*InProcessTaskApp(factory=broken_factory).start()",
            "E * pytest_synth_rl.errors.TaskAppError: *",
        ]
    )
    assert f"test_chained_suite.py:{_last_line('broken_factory')}: " in sections["test_users_own_cause"]


UNSAID = """
import sys
import types

from pytest_synth_rl.errors import SynthError

# A module of ours, standing in for the client raising its error from another of its own.
probe = sys.modules["pytest_synth_rl._probe"] = types.ModuleType("pytest_synth_rl._probe")
ours = vars(probe)
ours["Error"] = SynthError
exec(
    compile(
        "def explicit():\\n"
        "    try:\\n"
        "        {}['weights']\\n"
        "    except KeyError as exc:\\n"
        "        raise Error('the job could not start', hint='check the weights') from exc\\n"
        "def implicit():\\n"
        "    try:\\n"
        "        int('seven')\\n"
        "    except ValueError:\\n"
        "        raise Error('the count is not a number', hint='give a number')\\n",
        "<pytest_synth_rl._probe>",
        "exec",
    ),
    ours,
)


def test_explicit():
    ours["explicit"]()


def test_implicit():
    ours["implicit"]()
"""


def test_a_cause_our_message_does_not_say_is_kept_as_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unsaid_suite=UNSAID)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            '>       ours["explicit"]()',
            "E       pytest_synth_rl.errors.SynthError: the job could not start",
            "E         hint: check the weights",
            "E         caused by KeyError: 'weights'",
            "test_unsaid_suite.py:*: SynthError",
            '>       ours["implicit"]()',
            "E       pytest_synth_rl.errors.SynthError: the count is not a number",
            "E         hint: give a number",
            "E         while handling ValueError: invalid literal for int() with base 10: 'seven'",
            "test_unsaid_suite.py:*: SynthError",
        ]
    )
    text = result.stdout.str()
    assert "The above exception" not in text
    assert "During handling" not in text
    assert "_probe>:" not in text
    # --full-trace is pytest's own view: every frame, the whole chain, nothing added.
    full = pytester.runpytest("-p", "no:randomly", "--full-trace")
    full.stdout.fnmatch_lines(
        [
            "E * KeyError: 'weights'",
            "The above exception was the direct cause of the following exception:",
            "E * pytest_synth_rl.errors.SynthError: the job could not start",
            "E * ValueError: invalid literal for int() with base 10: 'seven'",
            "During handling of the above exception, another exception occurred:",
            "E * pytest_synth_rl.errors.SynthError: the count is not a number",
        ]
    )
    assert "caused by" not in full.stdout.str()
    assert "<pytest_synth_rl._probe>:5: SynthError" in full.stdout.str()


def _run_as(module: str, source: str, **names: Any) -> Callable[[], object]:
    """A function whose frame belongs to *module* (to stand in for ours or pytest's)."""
    namespace: dict[str, Any] = {"__name__": module, **names}
    exec(compile(f"def probe():\n    {source}\n", f"<{module}>", "exec"), namespace)
    probe: Callable[[], object] = namespace["probe"]
    return probe


def _raised_by_our_hook(source: str, **names: Any) -> pytest.ExceptionInfo[BaseException]:
    """What a hook of ours raising from *source* leaves: no frame of the user's."""
    ours = _run_as("pytest_synth_rl._probe", source, **names)
    hook = _run_as("_pytest.runner", "ours()", ours=ours)
    with pytest.raises(SynthError) as info:
        hook()
    return pytest.ExceptionInfo.from_exc_info((info.type, info.value, info.tb.tb_next))


def test_the_message_alone_keeps_what_it_was_raised_while_handling() -> None:
    # Before: only a non-SynthError ``__cause__`` was kept; an implicit context, or an error of
    # ours whose first line the message does not repeat, was dropped without a word.
    handling = "try: int('seven')\n    except ValueError: raise Error('the count is not a number')"
    assert message_only(_raised_by_our_hook(handling, Error=SynthError)) == (
        "pytest_synth_rl.errors.SynthError: the count is not a number\n"
        "  while handling ValueError: invalid literal for int() with base 10: 'seven'"
    )
    inner = BackendError("reading the status of job 'j' failed: HTTP 503", hint="retry later")
    wrapping = "raise Error('polling failed') from inner"
    assert message_only(_raised_by_our_hook(wrapping, Error=SynthError, inner=inner)) == (
        "pytest_synth_rl.errors.SynthError: polling failed\n"
        "  caused by BackendError: reading the status of job 'j' failed: HTTP 503\n"
        "    hint: retry later"
    )
    repeated = "raise Error(f'polling failed; last: {inner.message}') from inner"
    assert message_only(_raised_by_our_hook(repeated, Error=SynthError, inner=inner)) == (
        "pytest_synth_rl.errors.SynthError: polling failed; last: reading the status of job 'j' "
        "failed: HTTP 503"
    )
