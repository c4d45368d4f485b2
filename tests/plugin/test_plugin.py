"""The pytest plugin, tested as users meet it: through pytester runs of small suites."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.plugin.session import ServedFake, offline_job_id_prefix

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_succeeds(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200).to_have_final_reward(at_least=0.1)
"""


@pytest.fixture
def example_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding the example task app and its TOML."""
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    return pytester


def test_markers_and_options_are_registered_and_documented(pytester: pytest.Pytester) -> None:
    markers = pytester.runpytest("--markers")
    for name in ("synth_rl(", "synth_task_app(", "synth_scenario(", "synth_online:", "synth_offline:"):
        markers.stdout.fnmatch_lines([f"*@pytest.mark.{name}*"])
    helptext = pytester.runpytest("--help")
    helptext.stdout.fnmatch_lines(
        [
            "*--synth-backend=URL|mock*",
            "*--synth-timeout=SECONDS*",
            "*--synth-record=MODE*",
            "*synth_task_app *",
        ]
    )
    fixtures = pytester.runpytest("--fixtures")
    for name in (
        "synth_settings",
        "synth_backend",
        "synth_fake",
        "synth_task_app",
        "synth_rl_config",
        "synth_rl_job",
        "synth_fake_server",
        "synth_clock",
        "synth_expect",
    ):
        fixtures.stdout.fnmatch_lines([f"{name}*"])


def test_report_header_shows_mode_backend_and_masked_keys(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_live_header_secret_0042")
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--synth-timeout=90")
    result.stdout.fnmatch_lines(
        [
            "synth-rl: mode=offline backend=a fake standing in for https://api.usesynth.ai (default)",
            "*timeout=90s poll=10s*",
            "*SYNTH_API_KEY=sk_l…42*",
        ]
    )
    assert "sk_live_header_secret_0042" not in result.stdout.str()


def test_precedence_marker_over_cli_over_env_over_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nsynth_poll_interval = 7\nsynth_timeout = 100\n")
    monkeypatch.setenv("SYNTH_TIMEOUT", "200")
    pytester.makepyfile(
        """
        import pytest

        def test_session(synth_settings):
            assert synth_settings.poll_interval == 7.0
            assert synth_settings.sources["poll_interval"] == "ini"
            assert synth_settings.timeout == 300.0
            assert synth_settings.sources["timeout"] == "cli"

        @pytest.mark.synth_rl(timeout=5)
        def test_marker(_synth_test):
            assert _synth_test.settings.timeout == 5.0
            assert _synth_test.settings.sources["timeout"] == "marker"
        """
    )
    pytester.runpytest("--synth-timeout=300").assert_outcomes(passed=2)
    pytester.makepyfile(
        """
        def test_env(synth_settings):
            assert synth_settings.timeout == 200.0
            assert synth_settings.sources["timeout"] == "env:SYNTH_TIMEOUT"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_bad_option_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--synth-timeout=soon", "--synth-record=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--synth-timeout*soon*", "*record*maybe*"])


def test_online_without_api_key_is_one_clear_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    pytester.makepyfile("def test_a(): pass\ndef test_b(): pass")
    result = pytester.runpytest("--synth-backend=https://backend.invalid")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs an API key: set SYNTH_API_KEY*"])
    assert "Traceback" not in result.stderr.str()


def test_online_without_api_key_names_where_the_backend_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    monkeypatch.setenv("SYNTH_BACKEND_URL", "https://backend.invalid")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: SYNTH_BACKEND_URL=https://backend.invalid runs RL jobs against*"])


def test_a_misspelt_ini_key_is_a_usage_error_with_a_did_you_mean(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsynth_timout = 5\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini option synth_timout is not a pytest-synth-rl setting: did you mean synth_timeout? *"]
    )


def test_a_report_path_that_is_a_directory_is_refused_before_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(): pass")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("--synth-report=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --synth-report=out: *{pytester.path / 'out'} is a directory. Point it at a JSON file "
            f"path*--synth-report={os.path.join('out', 'synth-report.json')}"
        ]
    )
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.endswith(".tmp")) == []


def test_online_and_offline_markers_skip_with_reasons(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.synth_online
        def test_online(): pass

        @pytest.mark.synth_offline
        def test_offline(): pass
        """
    )
    offline = pytester.runpytest("-rs")
    offline.assert_outcomes(passed=1, skipped=1)
    offline.stdout.fnmatch_lines(["*synth_online: needs --synth-backend=URL*"])
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_online_marker_key")
    online = pytester.runpytest("-rs", "--synth-backend=https://backend.invalid", "--collect-only", "-q")
    assert online.ret == 0
    ran = pytester.runpytest("-rs", "--synth-backend=https://backend.invalid", "-k", "offline")
    ran.stdout.fnmatch_lines(["*synth_offline: scripted for the offline fake*"])


def test_markers_merge_module_class_function(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_synth_rl.plugin.markers import parse_test_spec

        pytestmark = pytest.mark.synth_rl(config="a.toml", overrides={"x": 1}, timeout=10)

        @pytest.mark.synth_rl(timeout=20)
        class TestMerge:
            @pytest.mark.synth_rl(overrides={"y": 2})
            def test_function_wins(self, request):
                rl = parse_test_spec(request.node).rl
                # overrides merge key by key: the module's x stays beside the function's y
                assert (rl.config, rl.overrides, rl.timeout) == ("a.toml", {"x": 1, "y": 2}, 20)

            def test_class_over_module(self, request):
                rl = parse_test_spec(request.node).rl
                assert rl.timeout == 20
                assert rl.overrides == {"x": 1}
        """
    )
    pytester.runpytest().assert_outcomes(passed=2)


def test_missing_config_and_task_app_give_actionable_errors(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(
        """
        import pytest

        @pytest.mark.synth_task_app("arithmetic_task_app.py")
        def test_no_config(synth_rl_job):
            synth_rl_job()

        @pytest.mark.synth_rl(config="missing.toml")
        def test_missing_file(synth_rl_job):
            pass

        @pytest.mark.synth_task_app("nope_app.py")
        def test_missing_app(synth_task_app):
            pass
        """
    )
    result = example_dir.runpytest()
    result.assert_outcomes(failed=1, errors=2)
    text = result.stdout.str()
    assert "no RL config for this test" in text
    assert "@pytest.mark.synth_rl(config='path/to/rl.toml')" in text
    assert "missing.toml does not exist" in text
    assert "nope_app.py does not exist" in text
    # the test file sits in the rootdir: one place was looked in, and it is named once
    assert f"missing.toml does not exist (looked in: {example_dir.path / 'missing.toml'})" in text


def test_a_missing_ini_path_names_its_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsynth_rl_config = nope.toml\nsynth_task_app = nope_app.py\n")
    pytester.makepyfile(
        test_ini_paths="""
        def test_config(synth_rl_config):
            pass

        def test_app(synth_task_app):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*SynthUsageError: invalid ini option: synth_rl_config: nope.toml does not exist*"
            "(hint: set synth_rl_config to a path relative to the test file or the rootdir)",
            "*SynthUsageError: invalid ini option: synth_task_app: nope_app.py does not exist*",
        ]
    )
    assert "ini: " not in result.stdout.str()


def test_a_config_path_that_is_a_directory_is_named_as_one(example_dir: pytest.Pytester) -> None:
    (example_dir.path / "configs").mkdir()
    example_dir.makepyfile(
        test_dir_config="""
        import pytest

        @pytest.mark.synth_rl(config="configs")
        def test_dir(synth_rl_config):
            pass
        """
    )
    result = example_dir.runpytest()
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    folder = example_dir.path / "configs"
    assert f"synth_rl on test_dir_config.py::test_dir: configs is a directory ({folder}), not a file" in text
    assert "give a path relative to the test file or the rootdir" in text


def test_scenario_marker_scripts_the_offline_backend(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(
        SUITE
        + """

@pytest.mark.synth_scenario(outcome="failed", fail_at_step=2, error="disk full")
def test_fails(synth_rl_job, synth_expect, synth_fake, synth_clock):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_fail(error_contains="disk full")
    assert synth_fake.job(job.job_id).status == "failed"
    assert synth_clock.elapsed > 0  # virtual time passed, on this test's own clock
"""
    )
    example_dir.runpytest().assert_outcomes(passed=2)


def test_job_table_json_report_and_junit_properties(
    example_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = example_dir.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    example_dir.makepyfile(SUITE)
    result = example_dir.runpytest("--synth-report=out/report.json", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*synth-rl jobs (offline, fake of https://api.usesynth.ai)*",
            "*test_succeeds*job_rl_*succeeded*virtual*",
            "*JSON report written to*report.json*",
        ]
    )
    report = json.loads((example_dir.path / "out" / "report.json").read_text())
    assert report["mode"] == "offline"
    assert report["summary"] == {"jobs": 1, "by_status": {"succeeded": 1}}
    job = report["jobs"][0]
    assert job["status"] == "succeeded"
    assert job["clock_seconds"] > 0
    assert len(job["rewards"]) >= 2
    junit = (example_dir.path / "junit.xml").read_text()
    assert 'name="synth_job_status" value="succeeded"' in junit
    assert 'name="synth_job_id"' in junit
    markdown = summary.read_text()
    assert "| test | job | status |" in markdown
    assert "succeeded" in markdown


def test_job_ids_are_each_tests_own_on_one_process_or_two_workers(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(
        test_one=SUITE,
        test_two=SUITE.replace("def test_succeeds", "def test_succeeds_too"),
        **{f"test_part{index}": SUITE for index in range(2)},
    )
    tests = ["test_one.py::test_succeeds", "test_part0.py::test_succeeds", "test_part1.py::test_succeeds"]
    tests.append("test_two.py::test_succeeds_too")
    report = example_dir.path / "jobs.json"
    # The example suite passes under xdist, its table on the controller's output.
    workers = example_dir.runpytest_subprocess("-n", "2", "-p", "xdist", f"--synth-report={report}")
    workers.assert_outcomes(passed=4)
    workers.stdout.fnmatch_lines(["*synth-rl jobs*"])
    rows = [line for line in workers.outlines if "succeeded" in line and "virtual" in line]
    assert sorted(row.split()[0] for row in rows) == sorted(tests)
    # each test's fake ids come from its test id, whichever worker ran it
    table = {row.split()[0]: row.split()[1] for row in rows}
    assert table["test_one.py::test_succeeds"] == "job_rl_5170627886_000001"
    assert table["test_two.py::test_succeeds_too"] == "job_rl_c02bc9c77c_000001"
    ids = [{job["test_id"]: job["job_id"] for job in json.loads(report.read_text())["jobs"]}]
    assert ids[0] == table
    # On one process (this one: the run patches nothing global) each test gets the same id.
    serial = example_dir.runpytest("-p", "no:randomly", f"--synth-report={report}")
    serial.assert_outcomes(passed=4)
    ids.append({job["test_id"]: job["job_id"] for job in json.loads(report.read_text())["jobs"]})
    assert ids[0] == ids[1]
    assert ids[0] == {test: offline_job_id_prefix(test) + "000001" for test in tests}
    assert len(set(ids[0].values())) == 4


@pytest.mark.slow
def test_online_mode_against_the_served_fake(
    example_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    example_dir.makepyfile(
        SUITE
        + """

def test_left_running(synth_rl_job):
    job = synth_rl_job()
    job.submit()   # never polled: the plugin must cancel it at teardown
"""
    )
    # A real backend learns the task app's key from the key upload; here both processes share it.
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env_key_shared_with_served_fake_01")
    with ServedFake.start(polls_to_finish=4) as served:
        monkeypatch.setenv("SYNTH_API_KEY", served.api_key.value)
        result = example_dir.runpytest_subprocess(
            f"--synth-backend={served.url}", "--synth-poll-interval=0.01", "--synth-timeout=60"
        )
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(
            [
                "*synth-rl jobs (online, http://127.0.0.1:*",
                "*test_left_running*cancelled (cancelled by plugin)*",
            ]
        )
        statuses = sorted(job.status for job in served.fake.jobs)
        assert statuses == ["cancelled", "succeeded"]
        tags = [job.payload["tags"] for job in served.fake.jobs]
        assert all(tag["source"] == "pytest-synth-rl" and "::test_" in tag["test"] for tag in tags)


def test_async_jobs_under_pytest_asyncio_and_anyio(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(
        """
        import pytest

        pytestmark = [
            pytest.mark.synth_task_app("arithmetic_task_app.py"),
            pytest.mark.synth_rl(config="arithmetic.toml"),
        ]

        async def run(synth_rl_job):
            async with synth_rl_job.async_job() as job:
                await job.submit()
                result = await job.poll_until_complete(timeout=7200, interval=10)
            assert result.succeeded, result.error
            assert len(result.history) > 2

        @pytest.mark.asyncio
        async def test_with_pytest_asyncio(synth_rl_job, synth_clock):
            await run(synth_rl_job)
            assert synth_clock.elapsed >= 10  # virtual time, advanced by the async polls

        @pytest.mark.anyio
        async def test_with_anyio(synth_rl_job):
            await run(synth_rl_job)
        """
    )
    result = example_dir.runpytest("-p", "asyncio", "-p", "anyio", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    # One line each, in whatever order the run chose (pytest-randomly shuffles nested runs too).
    result.stdout.fnmatch_lines(["*test_with_pytest_asyncio*succeeded*"])
    result.stdout.fnmatch_lines(["*test_with_anyio*succeeded*"])


def test_the_fake_is_mounted_only_in_tests_that_use_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import httpx
        from respx.mocks import Mocker

        def _routers():
            return sum(len(m.routers) for m in Mocker.registry.values())

        def test_first_uses_the_fake(synth_fake):
            assert synth_fake.mounted
            assert _routers() == 1

        def test_then_plain_httpx(tmp_path):
            assert _routers() == 0  # nothing of ours intercepts this test's traffic
            assert not hasattr(httpx.Client._transport_for_url, "mock_calls")

        def test_fake_again(synth_fake):
            assert synth_fake.mounted
            assert synth_fake.jobs == []  # reset for this test

        def test_jobs_alone_patch_nothing(synth_rl_job, synth_backend):
            assert _routers() == 0  # the plugin's jobs get the fake as their transport
            assert synth_backend.mode == "offline"
            assert synth_backend.url == "https://api.usesynth.ai"
        """
    )
    pytester.runpytest().assert_outcomes(passed=4)


def test_recording_offline_is_rejected_at_configure_time(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--synth-record=new")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--synth-record=new needs a backend to record from: add --synth-backend=URL "
            "(a real backend or a served fake)*"
        ]
    )
    # Named the way it was given: an environment variable, with its alias resolved.
    monkeypatch.setenv("SYNTH_RECORD", "all")
    from_env = pytester.runpytest()
    assert from_env.ret == pytest.ExitCode.USAGE_ERROR
    from_env.stderr.fnmatch_lines(["*SYNTH_RECORD=rewrite needs a backend to record from*"])


INTERRUPTED_SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_done(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)


@pytest.mark.synth_scenario(duration=3600)
def test_interrupted(synth_rl_job):
    job = synth_rl_job()
    job.submit()
    raise KeyboardInterrupt  # the worker stops; its report never reaches the controller
"""


def test_an_interrupted_xdist_workers_jobs_still_reach_the_table_and_report(
    example_dir: pytest.Pytester,
) -> None:
    example_dir.makepyfile(test_jobs=INTERRUPTED_SUITE)
    result = example_dir.runpytest_subprocess("-n", "2", "-p", "xdist", "--synth-report=r.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    rows = json.loads((example_dir.path / "r.json").read_text())["jobs"]
    # each job once: the finished test's row came on its report, the interrupted one's from the spool
    tests = sorted(row["test_id"] for row in rows)
    assert tests == ["test_jobs.py::test_done", "test_jobs.py::test_interrupted"]
    jobs = {row["test_id"]: row for row in rows}
    assert jobs["test_jobs.py::test_interrupted"]["status"] == "running"
    job_id = offline_job_id_prefix("test_jobs.py::test_interrupted") + "000001"
    assert jobs["test_jobs.py::test_interrupted"]["job_id"] == job_id
    assert jobs["test_jobs.py::test_done"]["status"] == "succeeded"
    result.stdout.fnmatch_lines([f"test_jobs.py::test_interrupted *{job_id}*running*"])


def test_a_misspelt_path_gets_a_did_you_mean(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsynth_task_app = my_task_ap.py\n")
    (pytester.path / "my_task_app.py").write_text("app = None\n")
    (pytester.path / "configs").mkdir()
    (pytester.path / "configs" / "rl.toml").write_text("")
    pytester.makepyfile(
        test_typos="""
        import pytest

        def test_ini_app(synth_task_app):
            pass

        @pytest.mark.synth_rl(config="configs/rl.tmol")
        def test_marker_config(synth_rl_config):
            pass

        @pytest.mark.synth_rl(config="nothing_like_it.toml")
        def test_far_off(synth_rl_config):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=3)
    text = result.stdout.str()
    assert "invalid ini option: synth_task_app: my_task_ap.py does not exist" in text
    assert "hint: did you mean 'my_task_app.py'? set synth_task_app to a path" in text
    assert "did you mean 'configs/rl.toml'? give a path relative to the test file or the rootdir" in text
    # nothing is close to nothing_like_it.toml: its hint has no guess
    result.stdout.fnmatch_lines(
        [
            "*test_far_off: nothing_like_it.toml does not exist*",
            "  hint: give a path relative to the test file or the rootdir",
        ]
    )
