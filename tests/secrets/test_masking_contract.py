"""The masking contract: what is a secret, how it is shown, and that it never leaks into text."""

from __future__ import annotations

import logging
import sys
from typing import Any

import httpx
import pytest

from pytest_synth_rl.secrets.masking import (
    SECRET_ENV_VARS,
    RedactingFilter,
    Secret,
    get_logger,
    known_secrets,
    mask_secret,
    redact,
    register_secret,
    registered_secrets,
    restore_registered_secrets,
)


@pytest.fixture(autouse=True)
def _no_known_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from nothing known; the suite's registry fixture puts the old secrets back after."""
    for name in SECRET_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    restore_registered_secrets(())


def test_the_secret_environment_variables_are_the_ones_the_backend_and_task_apps_read() -> None:
    assert set(SECRET_ENV_VARS) == {
        "SYNTH_API_KEY",
        "ENVIRONMENT_API_KEY",
        "DEV_ENVIRONMENT_API_KEY",
        "ENVIRONMENT_API_KEY_ALIASES",
        "OPENAI_API_KEY",
        "GROQ_API_KEY",
    }


@pytest.mark.parametrize("name", SECRET_ENV_VARS)
def test_each_secret_environment_variable_is_scrubbed(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "envsecret-0123456789")
    assert known_secrets() == ["envsecret-0123456789"]
    assert redact("key=envsecret-0123456789.") == "key=envs…89."


def test_an_alias_list_is_scrubbed_whole_and_part_by_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY_ALIASES", "alias-one-111, alias-two-2222,abc")
    assert known_secrets() == ["alias-one-111, alias-two-2222,abc", "alias-two-2222", "alias-one-111"]
    assert redact("a alias-one-111 b alias-two-2222") == "a alia…11 b alia…22"


def test_a_value_without_commas_is_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk-one two-three")
    assert known_secrets() == ["sk-one two-three"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "<none>"),
        ("", "<none>"),
        ("a", "…"),
        ("123456789", "…"),
        ("1234567890", "1234…90"),
        ("sk_live_0123456789abcd23", "sk_l…23"),
    ],
)
def test_mask_secret_reveals_only_a_prefix_and_suffix_of_long_values(value: str | None, shown: str) -> None:
    assert mask_secret(value) == shown


def test_values_shorter_than_six_characters_are_not_treated_as_secrets() -> None:
    register_secret("abcde")
    register_secret("abcdef")
    register_secret(None)
    register_secret("")
    assert registered_secrets() >= {"abcdef"}
    assert "abcde" not in registered_secrets()
    assert redact("abcde abcdef") == "abcde …"
    assert known_secrets(["xyz12", "xyz1234", None, ""]) == ["xyz1234", "abcdef"]


def test_known_secrets_lists_longest_first_so_a_secret_containing_another_is_replaced_whole() -> None:
    register_secret("abcdefgh")
    register_secret("abcdefgh-ijklmnop")
    register_secret("abcdefgh-ij")
    assert known_secrets() == ["abcdefgh-ijklmnop", "abcdefgh-ij", "abcdefgh"]
    assert redact("x abcdefgh-ijklmnop y abcdefgh") == "x abcd…op y …"


def test_redact_scrubs_extra_secrets_and_every_occurrence() -> None:
    assert redact("t0ken-12345 and t0ken-12345", extra=["t0ken-12345"]) == "t0ke…45 and t0ke…45"
    assert redact("") == ""
    assert redact("nothing to hide", extra=["t0ken-12345"]) == "nothing to hide"


def test_restoring_a_snapshot_forgets_later_registrations() -> None:
    register_secret("earlier-secret-1")
    before = registered_secrets()
    register_secret("later-secret-1")
    assert "later-secret-1" in registered_secrets()
    restore_registered_secrets(before)
    assert registered_secrets() == before
    assert "earlier-secret-1" in registered_secrets()
    assert redact("later-secret-1") == "later-secret-1"


def test_secrets_registered_by_a_test_do_not_reach_the_next_one_first() -> None:
    register_secret("neighbor-secret-1")


def test_secrets_registered_by_a_test_do_not_reach_the_next_one_second() -> None:
    # Runs in either order: whichever runs second must not see the other's secret.
    assert "neighbor-secret-1" not in registered_secrets()
    register_secret("neighbor-secret-1")


def test_secret_hides_its_value_in_repr_and_str_and_registers_it() -> None:
    key = Secret("sk_live_0123456789abcd23")
    assert repr(key) == "Secret('sk_l…23')"
    assert str(key) == "Secret('sk_l…23')"
    assert f"{key}" == "Secret('sk_l…23')"
    assert key.value == "sk_live_0123456789abcd23"
    assert key.masked == "sk_l…23"
    assert "sk_live_0123456789abcd23" in registered_secrets()
    assert redact("Bearer sk_live_0123456789abcd23") == "Bearer sk_l…23"


def test_secret_truthiness_equality_and_hash_follow_the_value() -> None:
    assert bool(Secret("")) is False
    assert bool(Secret("k")) is True
    assert Secret("same-value-1") == Secret("same-value-1")
    assert Secret("same-value-1") != Secret("other-value-1")
    assert Secret("same-value-1") != "same-value-1"
    assert Secret("same-value-1").__eq__("same-value-1") is NotImplemented
    assert hash(Secret("same-value-1")) == hash("same-value-1")
    assert len({Secret("same-value-1"), Secret("same-value-1")}) == 1


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("pytest_synth_rl.t", logging.INFO, __file__, 1, msg, args, None)


def test_the_logging_filter_masks_secrets_passed_as_format_arguments() -> None:
    register_secret("logged-secret-99")
    record = _record("calling with %s", "logged-secret-99")
    assert RedactingFilter().filter(record) is True
    assert record.msg == "calling with logg…99"
    assert record.args is None
    assert record.getMessage() == "calling with logg…99"


def test_the_logging_filter_leaves_clean_records_alone() -> None:
    record = _record("count %d", 3)
    assert RedactingFilter().filter(record) is True
    assert record.msg == "count %d"
    assert record.args == (3,)


def test_the_logging_filter_keeps_records_whose_format_is_broken() -> None:
    record = _record("needs %d", "text")
    assert RedactingFilter().filter(record) is True
    assert record.msg == "needs %d"
    assert record.args == ("text",)


def test_get_logger_installs_one_redacting_filter() -> None:
    logger = get_logger("pytest_synth_rl.masking_contract")
    again = get_logger("pytest_synth_rl.masking_contract")
    assert logger is again
    assert sum(isinstance(f, RedactingFilter) for f in logger.filters) == 1


def test_the_logging_filter_masks_secrets_in_tracebacks_and_stacks() -> None:
    register_secret("trace-secret-4242")
    try:
        raise RuntimeError("boom with trace-secret-4242")
    except RuntimeError:
        record = logging.LogRecord(
            "uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application", (), sys.exc_info()
        )
    record.stack_info = "Stack (most recent call last):\n  key=trace-secret-4242"
    assert RedactingFilter().filter(record) is True
    rendered = logging.Formatter().format(record)
    assert "trace-secret-4242" not in rendered
    assert "RuntimeError: boom with trac…42" in rendered
    assert "key=trac…42" in rendered


def test_a_served_apps_exception_reaches_the_captured_log_masked(caplog: pytest.LogCaptureFixture) -> None:
    from pytest_synth_rl.taskapp.serving import serve_asgi

    register_secret("served-secret-7171")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raise RuntimeError("task app broke, key=served-secret-7171")

    with caplog.at_level(logging.ERROR), serve_asgi(app, lifespan="off") as server:
        assert httpx.get(server.url + "/rollout").status_code == 500
    assert "Exception in ASGI application" in caplog.text
    assert "RuntimeError: task app broke, key=serv…71" in caplog.text
    assert "served-secret-7171" not in caplog.text


KEY_IN_HEADER = "sk_live_header_key_0123456789"


@pytest.mark.parametrize(
    "name", ["Authorization", "proxy-authorization", "X-API-Key", "x-api-keys", "Cookie", "set-cookie"]
)
def test_secret_headers_mask_every_credential_header_in_their_repr(name: str) -> None:
    from pytest_synth_rl.secrets.masking import SecretHeaders

    shown = repr(SecretHeaders({name: KEY_IN_HEADER, "accept": "application/json"}))
    assert KEY_IN_HEADER not in shown
    assert shown.startswith("SecretHeaders({")
    assert shown.endswith("})")
    assert f"'{name}': 'sk_l…89'" in shown
    assert "'accept': 'application/json'" in shown  # other headers are shown as they are
    assert str(SecretHeaders({name: KEY_IN_HEADER})) == repr(SecretHeaders({name: KEY_IN_HEADER}))


def test_secret_headers_keep_the_scheme_of_a_credential() -> None:
    from pytest_synth_rl.secrets.masking import SecretHeaders

    shown = repr(
        SecretHeaders({"authorization": f"Bearer {KEY_IN_HEADER}", "x-api-key": f"a b{KEY_IN_HEADER}"})
    )
    assert "'authorization': 'Bearer sk_l…89'" in shown
    assert "'x-api-key': 'a bsk_…89'" in shown  # "a" is a scheme: the rest is the token
    assert (
        repr(SecretHeaders({"authorization": f"9x {KEY_IN_HEADER}"}))
        == "SecretHeaders({'authorization': '9x s…89'})"
    )


def test_a_missing_or_empty_secret_is_none_and_a_secret_stays_itself() -> None:
    from pytest_synth_rl.secrets.masking import Secret, secret_or_none

    assert secret_or_none(None) is None
    assert secret_or_none("") is None
    assert secret_or_none(Secret("")) is None
    kept = Secret(KEY_IN_HEADER)
    assert secret_or_none(kept) is kept
    made = secret_or_none(KEY_IN_HEADER)
    assert isinstance(made, Secret)
    assert made.value == KEY_IN_HEADER


def test_a_key_of_exactly_the_masking_length_earns_no_short_key_warning() -> None:
    from pytest_synth_rl.secrets.masking import short_key_warning

    assert short_key_warning("abcdef") is None  # six characters: masked, no warning
    assert short_key_warning("q7z9w") is not None  # five: too short, warned (once)


@pytest.mark.parametrize(("char", "said"), [("\r", "a line break"), ("\n", "a line break"), ("\t", "'\\t'")])
def test_a_key_no_header_can_carry_names_the_character(char: str, said: str) -> None:
    from pytest_synth_rl.secrets.masking import key_problem

    problem = key_problem(f"sk{char}x")
    assert problem is not None
    assert said in problem
    assert "character 3 of 4" in problem


def test_a_secret_known_later_is_masked_in_text_already_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "GET https://api.example/jobs?key=sk_first_0123456789&other=sk_later_0123456789"
    register_secret("sk_first_0123456789")
    assert "sk_later_0123456789" in redact(text)  # not known yet
    assert redact(text) == redact(text)  # remembered, and the same
    register_secret("sk_later_0123456789")
    assert "sk_later_0123456789" not in redact(text)
    monkeypatch.setenv("OPENAI_API_KEY", "sk_env_0123456789")
    assert "sk_env_0123456789" not in redact("a reply quoting sk_env_0123456789")


def test_what_redact_remembers_is_bounded_in_count_and_in_text_length() -> None:
    from pytest_synth_rl.secrets import masking

    register_secret("sk_bounded_0123456789")
    size = masking._scrub_memo.cache_info().maxsize or 0
    for n in range(size + 1):  # a new secret: new entries, one past the memo's size
        redact(f"text {n} with sk_bounded_0123456789")
    assert 0 < masking._scrub_memo.cache_info().currsize <= size
    longest = "x" * (masking._MEMO_TEXT - 1) + "!"
    for text, remembered in ((longest, 1), (longest + "!", 0)):
        redact(text)
        hits = masking._scrub_memo.cache_info().hits
        redact(text)
        assert masking._scrub_memo.cache_info().hits - hits == remembered


@pytest.mark.parametrize(
    "wrap", [lambda v: [v], lambda v: (v,), lambda v: {"k": v}], ids=["list", "tuple", "dict"]
)
def test_redact_value_masks_eight_levels_down_and_leaves_deeper_values_alone(wrap: Any) -> None:
    from pytest_synth_rl.secrets.masking import redact_value

    register_secret("sk_nested_0123456789")
    eight: Any = "sk_nested_0123456789"
    for _ in range(8):
        eight = wrap(eight)
    nine = wrap(eight)
    assert "sk_nested_0123456789" not in repr(redact_value(eight))
    assert redact_value(nine) is nine  # below the bound: given back as it is


@pytest.mark.parametrize("breaking", ["\r", "\n"])
def test_a_key_with_a_line_break_is_refused_as_one(breaking: str) -> None:
    from pytest_synth_rl.secrets.masking import key_problem

    assert "contains a line break (character 3 of 5)" in (key_problem(f"ab{breaking}cd") or "")
    assert "printable ASCII only" in (key_problem("ab\tcd") or "")


def test_each_key_of_a_comma_list_is_masked_in_headers_and_in_the_fakes_request_log() -> None:
    from pytest_synth_rl.fake import FakeSynthBackend
    from pytest_synth_rl.secrets.masking import SecretHeaders

    other = "sk_live_second_key_9876543210"
    keys = {"x-api-keys": f"{KEY_IN_HEADER}, {other}", "set-cookie": f"session={KEY_IN_HEADER}"}
    assert "'x-api-keys': 'sk_l…89, sk_l…10'" in repr(SecretHeaders(keys))
    with FakeSynthBackend() as fake, httpx.Client(transport=fake.transport()) as client:
        client.get(f"{fake.base_url}/api/rl/jobs", headers=keys)
        logged = fake.requests[-1].headers
    assert logged["x-api-keys"] == "sk_l…89, sk_l…10"
    assert logged["set-cookie"] == "sess…89"
    assert KEY_IN_HEADER not in repr(logged)
