"""API keys never appear in our reprs, messages or log lines."""

from __future__ import annotations

import logging

import pytest

from pytest_synth_rl.errors import BackendError, ConfigError, ConfigProblem, TaskAppError
from pytest_synth_rl.secrets.masking import Secret, get_logger, mask_secret, redact, register_secret

KEY = "sk_live_0123456789abcdef23"


def test_mask_keeps_a_recognisable_prefix_and_suffix_only() -> None:
    assert mask_secret(KEY) == "sk_l…23"
    assert mask_secret("short") == "…"
    assert mask_secret(None) == "<none>"
    assert mask_secret("") == "<none>"


def test_secret_repr_and_str_are_masked_but_value_is_available() -> None:
    secret = Secret(KEY)
    assert KEY not in repr(secret)
    assert KEY not in str(secret)
    assert KEY not in f"{secret}"
    assert "sk_l…23" in repr(secret)
    assert secret.value == KEY
    assert secret == Secret(KEY)
    assert bool(Secret("")) is False


def test_redact_removes_registered_and_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    register_secret("registered-secret-value-42")
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env-task-app-key-9876")
    text = "a=registered-secret-value-42 b=env-task-app-key-9876 c=Bearer extra-secret-xyz"
    cleaned = redact(text, extra=["extra-secret-xyz"])
    for secret in ("registered-secret-value-42", "env-task-app-key-9876", "extra-secret-xyz"):
        assert secret not in cleaned
    assert "regi…42" in cleaned


def test_errors_never_render_a_known_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", KEY)
    errors = [
        BackendError(
            f"boom {KEY}",
            method="GET",
            url=f"https://x/api?k={KEY}",
            status_code=500,
            response_text=f'{{"echo": "{KEY}"}}',
        ),
        ConfigError([ConfigProblem(key="services.task_url", message=f"bad {KEY}", hint=f"use {KEY}")]),
        TaskAppError(f"down {KEY}", url="http://127.0.0.1:1", hint=KEY),
    ]
    for error in errors:
        assert KEY not in str(error)
        assert KEY not in repr(error)


def test_logger_redacts_format_arguments(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", KEY)
    logger = get_logger("pytest_synth_rl.test_masking")
    with caplog.at_level(logging.INFO, logger="pytest_synth_rl.test_masking"):
        logger.info("calling with key %s", KEY)
    assert caplog.records
    assert KEY not in caplog.text
    assert "sk_l…23" in caplog.text


def test_config_error_lists_every_problem_with_its_key() -> None:
    error = ConfigError(
        [
            ConfigProblem(key="rollout.env_name", message="missing", hint="set it"),
            ConfigProblem(key="compute.gpu_count", message="must be > 0", line=3, column=1),
        ],
        path="rl.toml",
    )
    text = str(error)
    assert "rl.toml has 2 problems" in text
    assert "rollout.env_name: missing (hint: set it)" in text
    assert "compute.gpu_count (line 3, column 1): must be > 0" in text
    assert error.keys == ["rollout.env_name", "compute.gpu_count"]
    assert isinstance(error, ValueError)


def test_a_key_too_short_to_mask_is_warned_about_once_without_showing_it() -> None:
    # Before, a 5-character key (upstream's own default is "test") was silently never masked.
    import warnings

    from pytest_synth_rl.secrets.masking import Secret, SynthSecretWarning

    short = "ab1d9"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Secret(short)
        Secret(short)  # the same key again: no second warning
    (warning,) = [w for w in caught if w.category is SynthSecretWarning]
    assert str(warning.message) == (
        "a key of 5 character(s) cannot be masked in output: text shorter than 6 characters is too "
        "common to remove safely, so this key may show in reports and logs; use a key of 6 or more "
        "characters"
    )
    assert warning.filename == __file__  # the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Secret("long-enough-key-0123")  # masked: nothing to warn about


def test_a_short_key_in_the_environment_is_warned_about_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "q7z")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*SynthSecretWarning: ENVIRONMENT_API_KEY of 3 character(s) cannot be masked in output: text "
            "shorter than 6 characters is too common to remove safely, so this key may show in reports and "
            "logs; use a key of 6 or more characters"
        ]
    )
