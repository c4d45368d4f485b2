"""Settings precedence: marker > CLI > env > ini > default, with sources remembered."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.plugin.settings import DEFAULT_BACKEND_URL, OPTIONS, resolve_settings


def test_defaults_are_offline_with_the_sdk_poll_cadence() -> None:
    settings = resolve_settings(cli={}, env={}, ini={})
    assert settings.mode == "offline"
    assert settings.backend_url == DEFAULT_BACKEND_URL
    assert settings.timeout == 7200.0
    assert settings.poll_interval == 10.0
    assert settings.record == "none"
    assert settings.update_baselines is False
    assert settings.sources["backend"] == "default"
    assert settings.api_key is None


@pytest.mark.parametrize(
    ("cli", "env", "ini", "expected", "source"),
    [
        ({}, {}, {"backend": "https://ini.example"}, "https://ini.example", "ini"),
        (
            {},
            {"BACKEND_BASE_URL": "https://env2.example"},
            {"backend": "x"},
            "https://env2.example",
            "env:BACKEND_BASE_URL",
        ),
        (
            {},
            {"SYNTH_BACKEND_URL": "https://env1.example", "BACKEND_BASE_URL": "https://env2.example"},
            {},
            "https://env1.example",
            "env:SYNTH_BACKEND_URL",
        ),
        (
            {"backend": "https://cli.example"},
            {"SYNTH_BACKEND_URL": "https://env1.example"},
            {"backend": "https://ini.example"},
            "https://cli.example",
            "cli",
        ),
        ({}, {"SYNTH_BACKEND_URL": "   "}, {}, "mock", "default"),
    ],
)
def test_backend_precedence(
    cli: dict[str, str], env: dict[str, str], ini: dict[str, str], expected: str, source: str
) -> None:
    settings = resolve_settings(cli=cli, env=env, ini=ini)
    assert settings.backend == expected
    assert settings.sources["backend"] == source


def test_online_mode_uses_the_given_url_without_trailing_slash() -> None:
    settings = resolve_settings(cli={"backend": "https://staging.example/"}, env={}, ini={})
    assert settings.mode == "online"
    assert settings.backend_url == "https://staging.example"
    assert resolve_settings(cli={"backend": "MOCK"}, env={}, ini={}).mode == "offline"


def test_marker_overrides_beat_the_command_line() -> None:
    settings = resolve_settings(cli={"timeout": "60"}, env={"SYNTH_TIMEOUT": "30"}, ini={})
    assert settings.timeout == 60.0
    assert settings.sources["timeout"] == "cli"
    per_test = settings.with_overrides({"timeout": 5})
    assert per_test.timeout == 5.0
    assert per_test.sources["timeout"] == "marker"
    assert settings.timeout == 60.0  # the session settings are untouched


def test_every_bad_value_is_reported_at_once_with_where_it_came_from() -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(
            cli={"timeout": "soon"},
            env={"SYNTH_POLL_INTERVAL": "-1"},
            ini={"record": "sometimes"},
        )
    text = str(info.value)
    assert "--synth-timeout" in text
    assert "environment variable SYNTH_POLL_INTERVAL: " in text
    assert "(hint: e.g. SYNTH_POLL_INTERVAL=10)" in text
    assert "ini option synth_record" in text
    assert sorted(info.value.keys) == ["poll_interval", "record", "timeout"]


def test_unknown_marker_setting_names_the_known_ones() -> None:
    settings = resolve_settings(cli={}, env={}, ini={})
    with pytest.raises(SynthUsageError, match=r"known settings: .*timeout") as info:
        settings.with_overrides({"timeuot": 3})
    assert "timeuot" in str(info.value)
    assert "did you mean 'timeout'?" in str(info.value)


def test_record_mode_aliases_follow_pytest_recording() -> None:
    assert resolve_settings(cli={"record": "new_episodes"}, env={}, ini={}).record == "new"
    assert resolve_settings(cli={"record": "all"}, env={}, ini={}).record == "rewrite"


def test_flags_are_only_set_when_given() -> None:
    assert resolve_settings(
        cli={"update_baselines": False}, env={}, ini={"update_baselines": "true"}
    ).update_baselines
    assert resolve_settings(cli={"update_baselines": True}, env={}, ini={}).update_baselines


def test_header_masks_keys() -> None:
    key = "sk_live_abcdefghijklmnop42"
    settings = resolve_settings(
        cli={}, env={"SYNTH_API_KEY": key, "ENVIRONMENT_API_KEY": "env_key_0123456789"}, ini={}
    )
    header = "\n".join(settings.describe())
    assert key not in header
    assert "env_key_0123456789" not in header
    assert "sk_l…42" in header
    assert "mode=offline" in header


def test_option_table_has_unique_flags_and_ini_keys() -> None:
    flags = [o.flag for o in OPTIONS if o.flag]
    inis = [o.ini for o in OPTIONS if o.ini]
    assert len(flags) == len(set(flags))
    assert len(inis) == len(set(inis))
    assert all(flag.startswith("--synth-") for flag in flags)
    assert all(ini.startswith("synth_") for ini in inis)


def test_a_misspelt_record_mode_names_the_choices_and_the_near_miss() -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={"record": "onse"}, env={}, ini={})
    text = str(info.value)
    assert "--synth-record: " in text
    assert "must be one of none, once, new, rewrite, got 'onse' (did you mean 'once'?)" in text
    assert resolve_settings(cli={"record": "ALL"}, env={}, ini={}).record == "rewrite"


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("name", ["timeout", "poll_interval", "heartbeat_interval"])
def test_seconds_must_be_finite(name: str, raw: str) -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={name: raw}, env={}, ini={})
    assert info.value.keys == [name]
    assert f"must be a finite number of seconds > 0, got {raw!r}" in str(info.value)


@pytest.mark.parametrize(
    ("layer", "where"),
    [
        ({"cli": {"poll_interval": "1e-9"}}, "--synth-poll-interval"),
        ({"env": {"SYNTH_POLL_INTERVAL": "1e-9"}}, "environment variable SYNTH_POLL_INTERVAL"),
        ({"ini": {"poll_interval": "1e-9"}}, "ini option synth_poll_interval"),
        ({"marker": 1e-9}, "marker argument poll_interval"),
    ],
)
def test_a_poll_interval_below_the_minimum_is_refused_where_it_was_given(
    layer: dict[str, Any], where: str
) -> None:
    def resolve() -> object:
        if "marker" in layer:
            return resolve_settings(env={}).with_overrides({"poll_interval": layer["marker"]})
        return resolve_settings(**{"env": {}, **layer})

    with pytest.raises(SynthUsageError) as info:
        resolve()
    assert info.value.keys == ["poll_interval"]
    assert f"{where}: must be at least 0.01 seconds" in str(info.value)
    assert "got 1e-09" in str(info.value)
    # The examples poll a served fake every 0.1 s, and the minimum itself is a poll interval.
    for accepted in ("0.1", "0.01"):
        assert resolve_settings(cli={"poll_interval": accepted}, env={}).poll_interval == float(accepted)


@pytest.mark.parametrize(
    ("source", "layer", "where"),
    [
        ("cli", {"cli": {"backend": "mok"}}, "--synth-backend"),
        ("env", {"env": {"SYNTH_BACKEND_URL": "mok"}}, "environment variable SYNTH_BACKEND_URL"),
        ("ini", {"ini": {"backend": "mok"}}, "ini option synth_backend"),
    ],
)
def test_a_backend_that_is_neither_mock_nor_a_url_is_refused_where_it_was_given(
    source: str, layer: dict[str, Any], where: str
) -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(**{"cli": {}, "env": {}, "ini": {}, **layer})
    assert (
        f"{where}: expected 'mock' or an http(s) URL such as https://api.usesynth.ai, got 'mok' "
        "(did you mean 'mock'?)" in str(info.value)
    )


@pytest.mark.parametrize(
    "raw", ["mock", "MOCK", "fake", "offline", "http://127.0.0.1:8000", "https://x.test/"]
)
def test_mock_words_and_http_urls_are_backends(raw: str) -> None:
    settings = resolve_settings(cli={"backend": raw}, env={}, ini={})
    assert settings.is_offline is (not raw.startswith("http"))


@pytest.mark.parametrize("raw", ["api.usesynth.ai", "ftp://x.test", "http://", "localhost:8000"])
def test_a_backend_url_without_an_http_scheme_is_refused(raw: str) -> None:
    with pytest.raises(SynthUsageError, match="expected 'mock' or an http\\(s\\) URL"):
        resolve_settings(cli={"backend": raw}, env={}, ini={})


def test_a_misspelt_task_app_scope_names_the_ini_key_and_the_near_miss() -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={}, ini={"task_app_scope": "sesion"})
    assert (
        "ini option synth_task_app_scope: task_app_scope must be one of session, test, got 'sesion' "
        "(did you mean 'session'?)" in str(info.value)
    )


def test_a_task_app_url_must_be_an_http_url() -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={"TASK_APP_URL": "notaurl"}, ini={})
    assert str(info.value) == (
        "invalid pytest-synth-rl settings: task_app_url: environment variable TASK_APP_URL: expected an "
        "http(s) URL such as http://127.0.0.1:8001, got 'notaurl' (hint: e.g. TASK_APP_URL=URL)"
    )
    assert resolve_settings(cli={"task_app_url": "http://127.0.0.1:9"}, env={}, ini={}).task_app_url == (
        "http://127.0.0.1:9"
    )


@pytest.mark.parametrize(
    ("option", "raw", "guess"),
    [
        ("backend", "htps://api.usesynth.ai", "https://api.usesynth.ai"),
        ("backend", "htp://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("backend", "https:/api.usesynth.ai", "https://api.usesynth.ai"),
        ("task_app_url", "http:127.0.0.1:9", "http://127.0.0.1:9"),
        ("task_app_url", "HTTPS//host.test", None),
        ("task_app_url", "hxxp://host.test", None),
    ],
)
def test_a_misspelt_url_scheme_gets_a_did_you_mean(option: str, raw: str, guess: str | None) -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={option: raw}, env={}, ini={})
    message = str(info.value)
    assert f"got {raw!r}" in message
    if guess is None:
        assert "did you mean" not in message
    else:
        assert f"got {raw!r} (did you mean {guess!r}?)" in message


@pytest.mark.parametrize(
    ("name", "key", "problem"),
    [
        ("SYNTH_API_KEY", "sk_live\nsecond_line", "contains a line break (character 8 of 19)"),
        ("ENVIRONMENT_API_KEY", "ключ_0123456789", "contains 'к' (character 1 of 15)"),
        ("ENVIRONMENT_API_KEY", "env_key\x00tail_123", "contains '\\x00' (character 8 of 16)"),
    ],
)
def test_a_key_no_http_header_can_carry_is_refused_without_showing_it(
    name: str, key: str, problem: str
) -> None:
    # Before: a raw ValueError / UnicodeEncodeError from deep in http.client at the first request.
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={name: key}, ini={})
    assert f"env:{name}: {problem}" in str(info.value)
    assert f"(hint: set {name} to the key itself)" in str(info.value)
    assert key not in str(info.value)


def test_an_empty_command_line_value_is_refused_not_taken_as_the_default() -> None:
    # Before: --synth-backend= (an unset $URL) quietly ran offline.
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={"backend": "", "timeout": " "}, env={}, ini={})
    assert info.value.keys == ["backend", "timeout"]
    assert (
        "backend: --synth-backend= is empty (hint: give a value, or leave the option out for the default "
        "(an unset shell variable?))"
    ) in str(info.value)
    assert resolve_settings(cli={}, env={"SYNTH_TIMEOUT": ""}, ini={}).timeout == 7200.0  # empty env: unset


def test_a_list_in_the_ini_is_refused_with_the_one_value_form() -> None:
    # Before (pyproject.toml: synth_backend = ["mock"]): "got ['mock'] (did you mean 'mock'?)".
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={}, ini={"backend": ["mock"]})
    assert (
        "backend: ini option synth_backend: is a list ['mock']; it takes one value "
        '(hint: write it as synth_backend = "mock")'
    ) in str(info.value)


def test_a_misspelled_boolean_gets_a_did_you_mean() -> None:
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={"SYNTH_VERIFY_TASK_APP": "ture"}, ini={})
    assert "expected a boolean (true/false/1/0), got 'ture' (did you mean 'true'?)" in str(info.value)
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={}, ini={"update_baselines": "flase"})
    assert "got 'flase' (did you mean 'false'?)" in str(info.value)
    with pytest.raises(SynthUsageError) as info:
        resolve_settings(cli={}, env={}, ini={"update_baselines": "maybe"})
    assert str(info.value).count("did you mean") == 0


@pytest.mark.parametrize(
    ("env", "ini"),
    [({"SYNTH_REPORT": "~/out/r.json"}, {}), ({}, {"report": "~/out/r.json"})],
    ids=["env", "ini"],
)
def test_a_report_path_from_the_environment_or_ini_expands_a_leading_tilde(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], ini: dict[str, Any]
) -> None:
    # Before, "~" was a folder name under the rootdir.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settings = resolve_settings(cli={}, env=env, ini=ini)
    assert settings.report_file(tmp_path / "root") == str(tmp_path / "home" / "out" / "r.json")
    assert settings.report == "~/out/r.json"  # messages name the path as it was written


def test_a_report_path_keeps_variables_and_a_trailing_slash_as_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OUT", "elsewhere")
    settings = resolve_settings(cli={}, env={}, ini={"report": "$OUT/r.json"})
    assert settings.report_file(tmp_path) == os.path.join(tmp_path, "$OUT/r.json")
    settings = resolve_settings(cli={"report": "newdir/"}, env={}, ini={})
    assert settings.report_file(tmp_path) == os.path.join(tmp_path, "newdir/")
    assert resolve_settings(cli={}, env={}, ini={}).report_file(tmp_path) is None
