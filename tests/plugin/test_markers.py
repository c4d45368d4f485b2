"""Every misuse of a ``synth_*`` marker fails its test with one MarkerError naming the marker,
the test and the fix, with the plugin's frames hidden."""

from __future__ import annotations

import pytest


def _run(pytester: pytest.Pytester, body: str) -> str:
    pytester.makepyfile(test_marks="import pytest\n\n" + body)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert "MarkerError" in text
    assert "raise MarkerError" not in text  # plugin frames hidden
    return text


def test_misspelled_synth_rl_argument_suggests_the_right_one(pytester: pytest.Pytester) -> None:
    text = _run(
        pytester,
        "@pytest.mark.synth_rl(config='rl.toml', timout=5)\ndef test_it(synth_rl_config):\n    pass\n",
    )
    assert "@pytest.mark.synth_rl on test_marks.py::test_it: unknown argument timout=" in text
    assert "did you mean timeout=?" in text


def test_misspelled_scenario_field_suggests_the_right_one(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_scenario(outcom='failed')\ndef test_it():\n    pass\n")
    assert "@pytest.mark.synth_scenario on test_marks.py::test_it: unknown argument outcom=" in text
    assert "did you mean outcome=?" in text
    assert "TypeError" not in text


def test_bad_scenario_value_names_the_field(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_scenario(outcome='exploded')\ndef test_it():\n    pass\n")
    assert "@pytest.mark.synth_scenario on test_marks.py::test_it: outcome:" in text
    assert "'exploded'" in text
    assert "use one of succeeded, failed, cancelled, error" in text


def test_near_miss_scenario_value_is_one_error_with_a_did_you_mean(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_scenario(outcome='faild')\ndef test_it():\n    pass\n")
    assert "outcome: unknown outcome 'faild'" in text
    assert "did you mean outcome='failed'? use one of succeeded, failed, cancelled, error" in text
    assert "During handling of the above exception" not in text
    assert "SynthUsageError" not in text


def test_short_reward_curve_says_which_steps_to_pass(pytester: pytest.Pytester) -> None:
    text = _run(
        pytester, "@pytest.mark.synth_scenario(reward_curve=[0.1, 0.2, 0.3])\ndef test_it():\n    pass\n"
    )
    assert "reward_curve: has 3 values but the scenario runs 10 steps (its steps=, 10 by default" in text
    assert "pass steps=3, or give one reward per step" in text


def test_a_reward_curve_past_the_bound_is_a_marker_error(pytester: pytest.Pytester) -> None:
    # Before, the test ran and its teardown errored: "Out of range float values are not JSON compliant".
    text = _run(
        pytester,
        "@pytest.mark.synth_scenario(steps=2, reward_curve=[1e308, -1e308])\ndef test_it():\n    pass\n",
    )
    assert (
        "@pytest.mark.synth_scenario on test_marks.py::test_it: reward_curve: entry [0] is 1e+308; "
        "expected a finite number from -1e+12 to 1e+12\n"
        "  hint: give one number per step, e.g. [0.1, 0.4, 0.8]"
    ) in text
    assert "JSON compliant" not in text


def test_config_of_the_wrong_type_is_named(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_rl(config=123)\ndef test_it(synth_rl_config):\n    pass\n")
    assert "@pytest.mark.synth_rl on test_marks.py::test_it: config=123 is not a path" in text
    assert "pass the RL TOML path as a string, relative to the test file" in text
    assert "TypeError" not in text


def test_positional_synth_rl_argument_is_rejected(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_rl('rl.toml')\ndef test_it():\n    pass\n")
    assert "@pytest.mark.synth_rl on test_marks.py::test_it: unexpected positional argument 'rl.toml'" in text
    assert "write it as synth_rl(config='rl.toml'" in text


def test_unknown_task_app_scope_is_rejected(pytester: pytest.Pytester) -> None:
    text = _run(
        pytester,
        "@pytest.mark.synth_task_app('app.py', scope='forever')\ndef test_it():\n    pass\n",
    )
    assert (
        "@pytest.mark.synth_task_app on test_marks.py::test_it: scope='forever' is not a task app scope"
        in text
    )
    assert "scope is 'session' (shared, the default) or 'test' (a fresh app per test)" in text


def test_close_task_app_scope_gets_a_suggestion(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_task_app('app.py', scope='tests')\ndef test_it():\n    pass\n")
    assert "did you mean scope='test'?" in text


def test_flag_markers_take_no_arguments(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_offline(True)\ndef test_it():\n    pass\n")
    assert "@pytest.mark.synth_offline on test_marks.py::test_it: unexpected positional argument True" in text


@pytest.mark.parametrize(
    ("argument", "shown"),
    [
        ("timeout=0", "timeout=0"),
        ("timeout=float('nan')", "timeout=nan"),
        ("poll_interval=float('inf')", "poll_interval=inf"),
        ("rollout_timeout=-1", "rollout_timeout=-1"),
        ("'app.py', startup_timeout=0", "startup_timeout=0"),
    ],
)
def test_seconds_must_be_finite_and_positive(pytester: pytest.Pytester, argument: str, shown: str) -> None:
    marker = "synth_task_app" if argument.startswith("'app.py'") else "synth_rl"
    text = _run(pytester, f"@pytest.mark.{marker}({argument})\ndef test_it():\n    pass\n")
    key, _, value = shown.partition("=")
    assert f"MarkerError: @pytest.mark.{marker} on test_marks.py::test_it: {key} " in text
    assert f"must be a finite number of seconds > 0, got {value}" in text


def test_an_empty_task_app_key_is_rejected(pytester: pytest.Pytester) -> None:
    text = _run(pytester, "@pytest.mark.synth_task_app('app.py', api_key='')\ndef test_it():\n    pass\n")
    assert "@pytest.mark.synth_task_app on test_marks.py::test_it: api_key is empty" in text
    assert "leave api_key out to use ENVIRONMENT_API_KEY" in text


def test_valid_markers_parse_into_the_spec(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_synth_rl.plugin.markers import parse_test_spec

        def policy(request):
            return "42"

        @pytest.mark.synth_rl(config="rl.toml", poll_interval=2, policy=policy, rollout_timeout=45)
        @pytest.mark.synth_task_app("pkg.mod:app", scope="test", api_key="k", startup_timeout=20)
        @pytest.mark.synth_scenario(outcome="failed", steps=3, fail_at_step=2)
        @pytest.mark.synth_offline
        def test_it(request):
            spec = parse_test_spec(request.node)
            assert spec.rl.policy is policy
            assert spec.rl.settings_overrides() == {"poll_interval": 2.0}
            app, scenario = spec.task_app, spec.scenario
            assert (app.source, app.scope, app.api_key.value) == ("pkg.mod:app", "test", "k")
            assert (spec.rl.rollout_timeout, app.startup_timeout) == (45.0, 20.0)
            assert (scenario.outcome, scenario.steps, scenario.fail_at_step) == ("failed", 3, 2)
            assert spec.offline and not spec.online
        """
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


def test_a_policy_that_is_not_callable_is_a_marker_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.synth_rl(policy="42")
        def test_it(synth_rl_job):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*MarkerError: @pytest.mark.synth_rl on test_a_policy_that_is_not_callable_is_a_marker_error.py"
            "::test_it: policy: '42' is not callable*",
            "*a callable taking the chat request*ScriptedPolicy('42')*",
        ]
    )


def test_a_synth_policy_fixture_that_is_not_callable_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef synth_policy():\n    return 42\n")
    pytester.makepyfile(test_p="def test_it(synth_fake):\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*synth_policy: the synth_policy fixture returned a policy that cannot work: 42 is not callable"
            " (hint: return policy(request) -> reply, a callable taking the chat request*or None for the "
            "built-in policy)",
        ]
    )


@pytest.mark.parametrize(
    ("written", "guess"),
    [
        ("synth_onlin", "synth_online"),
        ("synth_task_ap('app.py')", "synth_task_app"),
        ("sytnh_rl", "synth_rl"),
    ],
)
def test_a_misspelt_marker_name_fails_its_test_with_a_did_you_mean(
    pytester: pytest.Pytester, written: str, guess: str
) -> None:
    # Before: pytest's "unknown mark" warning only, and @synth_onlin quietly ran offline.
    text = _run(pytester, f"@pytest.mark.{written}\ndef test_it():\n    pass\n")
    name = written.split("(")[0]
    assert (
        f"@pytest.mark.{name} on test_marks.py::test_it: is not a pytest-synth-rl marker\n"
        f"  hint: did you mean @pytest.mark.{guess}? the markers are @pytest.mark.synth_rl, "
        "@pytest.mark.synth_task_app, @pytest.mark.synth_scenario, @pytest.mark.synth_online, "
        "@pytest.mark.synth_offline\n"
    ) in text


def test_an_unknown_synth_marker_lists_the_markers_and_other_markers_are_left_alone(
    pytester: pytest.Pytester,
) -> None:
    text = _run(
        pytester,
        "@pytest.mark.slow\n@pytest.mark.synthetic\n@pytest.mark.synth_nightly\ndef test_it():\n    pass\n",
    )
    assert (
        "@pytest.mark.synth_nightly on test_marks.py::test_it: is not a pytest-synth-rl marker\n"
        "  hint: the markers are @pytest.mark.synth_rl,"
    ) in text


def test_a_task_app_key_no_http_header_can_carry_is_a_marker_error(pytester: pytest.Pytester) -> None:
    text = _run(
        pytester,
        "@pytest.mark.synth_task_app('app.py', api_key='abc\\ndef')\n"
        "def test_it(synth_task_app):\n    pass\n",
    )
    assert (
        "@pytest.mark.synth_task_app on test_marks.py::test_it: api_key contains a line break "
        "(character 4 of 7); an HTTP header cannot carry it"
    ) in text


def test_an_empty_config_is_a_marker_error_at_setup(pytester: pytest.Pytester) -> None:
    # Before: "no RL config for this test (hint: add @pytest.mark.synth_rl(config=...))" at call time.
    text = _run(
        pytester, "@pytest.mark.synth_rl(config='')\ndef test_it(synth_rl_job):\n    synth_rl_job()\n"
    )
    assert "@pytest.mark.synth_rl on test_marks.py::test_it: config='' is empty" in text
    assert "leave config out to use the ini option synth_rl_config" in text


def test_online_and_offline_on_one_test_is_a_marker_error(pytester: pytest.Pytester) -> None:
    # Before: accepted, and the test was skipped whatever the mode.
    text = _run(pytester, "@pytest.mark.synth_online\n@pytest.mark.synth_offline\ndef test_it():\n    pass\n")
    assert (
        "@pytest.mark.synth_online on test_marks.py::test_it: and @pytest.mark.synth_offline are both on "
        "this test, so it is skipped in either mode"
    ) in text


@pytest.mark.parametrize(
    ("source", "problem", "hint"),
    [
        (
            "rl.toml",
            "'rl.toml' is not a task app: expected a .py file or a 'package.module:app' target",
            "the RL TOML goes in @pytest.mark.synth_rl(config=...)",
        ),
        (".", "'.' is not a task app: expected a .py file", "give the task app's .py file"),
        (
            "my_tasks.server",
            "'my_tasks.server' names a module but not its app",
            "did you mean 'my_tasks.server:app'?",
        ),
    ],
)
def test_a_task_app_source_that_cannot_be_one_is_a_marker_error(
    pytester: pytest.Pytester, source: str, problem: str, hint: str
) -> None:
    # Before: a TaskAppError "not of the form 'package.module:attribute'", not naming the marker.
    text = _run(
        pytester, f"@pytest.mark.synth_task_app({source!r})\ndef test_it(synth_task_app):\n    pass\n"
    )
    assert f"@pytest.mark.synth_task_app on test_marks.py::test_it: {problem}" in text
    assert f"hint: {hint}" in text


def test_overrides_merge_key_by_key_module_class_function(pytester: pytest.Pytester) -> None:
    # Before, a function's overrides replaced its module's: the module's batch size was dropped.
    pytester.makepyfile(
        """
        import pytest
        from pytest_synth_rl.plugin.markers import parse_test_spec

        pytestmark = pytest.mark.synth_rl(
            config="rl.toml", overrides={"training.batch_size": 2, "model.base": "a"}, timeout=100
        )

        @pytest.mark.synth_rl(overrides={"model.base": "b", "rollout.max_turns": 3})
        class TestIt:
            @pytest.mark.synth_rl(overrides={"rollout.episodes_per_batch": 2, "model.base": "c"})
            def test_all_three(self, request):
                rl = parse_test_spec(request.node).rl
                assert dict(rl.overrides) == {
                    "training.batch_size": 2,
                    "model.base": "c",
                    "rollout.max_turns": 3,
                    "rollout.episodes_per_batch": 2,
                }
                assert (rl.config, rl.timeout) == ("rl.toml", 100.0)

        @pytest.mark.synth_rl(overrides=["training.batch_size"])
        def test_bad_level(request):
            parse_test_spec(request.node)
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    assert (
        "test_bad_level: overrides=['training.batch_size'] is not a mapping of dotted keys"
        in result.stdout.str()
    )
