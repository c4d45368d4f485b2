"""A per-test task app (``scope="test"``) is its own app, whatever ran before or runs alongside.

The example task app, like real ones, opens an HTTP client in its FastAPI lifespan and keeps it
on ``app.state``. If the per-test server served the session server's app object, its startup
would replace that client and its shutdown close it, and the next test using the session app
would fail its rollouts (``Cannot send a request, as the client has been closed``), or not,
depending on test order. Each suite runs real rollouts through both servers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

JOB = """
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""

HEADER = """
import pytest

pytestmark = [pytest.mark.synth_task_app("my_task_app.py"), pytest.mark.synth_rl(config="rl.toml")]
"""

PER_TEST = '@pytest.mark.synth_task_app("my_task_app.py", scope="test")\n'


def suite(*scopes: str) -> str:
    """A module of tests in this order, each running a job: "session" or "test" task app."""
    tests = [
        (PER_TEST if scope == "test" else "") + f"def test_{index}_{scope}(synth_rl_job, synth_expect):" + JOB
        for index, scope in enumerate(scopes, start=1)
    ]
    return HEADER + "\n\n" + "\n\n".join(tests)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(EXAMPLES / "arithmetic_task_app.py", pytester.path / "my_task_app.py")
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "rl.toml")
    return pytester


def assert_all_pass(result: pytest.RunResult, count: int) -> None:
    text = result.stdout.str()
    assert "client has been closed" not in text
    assert "task app rollout failed" not in text
    result.assert_outcomes(passed=count)


def test_a_per_test_app_between_session_tests(project: pytest.Pytester) -> None:
    """The tester's report: session, per-test, session (the third used to fail)."""
    project.makepyfile(test_scopes=suite("session", "test", "session"))
    assert_all_pass(project.runpytest("-p", "no:randomly", "-q"), 3)


@pytest.mark.parametrize(
    "scopes",
    [
        pytest.param(("test", "session", "test", "session"), id="per-test-first"),
        pytest.param(("session", "test", "test", "session"), id="two-per-test-in-a-row"),
    ],
)
def test_other_orders(project: pytest.Pytester, scopes: tuple[str, ...]) -> None:
    project.makepyfile(test_scopes=suite(*scopes))
    assert_all_pass(project.runpytest("-p", "no:randomly", "-q"), len(scopes))


def test_in_random_order(project: pytest.Pytester) -> None:
    """Under pytest-randomly (a seed that runs a session test after a per-test one)."""
    project.makepyfile(test_scopes=suite("session", "test", "session", "test", "session"))
    assert_all_pass(project.runpytest("-p", "randomly", "-p", "no:cacheprovider", "--randomly-seed=2"), 5)
