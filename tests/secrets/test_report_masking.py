"""No test report leaves with a key in it, whatever put the key there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYNTH_KEY = "sk_live_QXJ7pLm9Zt4Wv2Rb8Nc6Hd1Fg5Ks3Ty0"
ENV_KEY = "envkey_Mq8Vz3Lp7Xw2Rt9Kb4Nc6Jd1Hf5Gs0Ya"

SUITE = """
import os
import pytest


@pytest.mark.synth_task_app("boom_import.py", scope="test")
def test_task_app_fails_on_import_quoting_its_keys(synth_rl_job):
    synth_rl_job().submit()


def test_prints_part_of_a_key():
    print("the key without its prefix:", os.environ["SYNTH_API_KEY"][8:])
    key = os.environ["ENVIRONMENT_API_KEY"]
    assert key[:15] == "no"


@pytest.mark.skip(reason="skipped for " + os.environ["SYNTH_API_KEY"])
def test_skipped_with_a_key_in_the_reason():
    pass
"""


def test_chained_errors_locals_output_and_skip_reasons_are_masked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "arithmetic.toml")
    (pytester.path / "boom_import.py").write_text(
        "import os\n"
        "env, synth = os.environ['ENVIRONMENT_API_KEY'], os.environ['SYNTH_API_KEY']\n"
        "raise RuntimeError(f'cannot start: {env} {synth}')\n"
    )
    pytester.makepyfile(test_leaky=SUITE)
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-l", "-vv", "-rA", "--tb=long", "--junitxml=junit.xml"
    )
    result.assert_outcomes(failed=1, errors=1, skipped=1)
    out = result.stdout.str() + result.stderr.str()
    junit = (pytester.path / "junit.xml").read_text()
    # The failures happened, for the intended reasons...
    assert "RuntimeError: cannot start: envk…Ya sk_l…y0" in out
    assert "the key without its prefix: sk_l…y0" in out
    assert "skipped for sk_l…y0" in out
    # Masking changed only the text: the summary line and JUnit message still name the error.
    result.stdout.fnmatch_lines(["FAILED test_leaky.py::test_prints_part_of_a_key - AssertionError: *"])
    assert 'message="AssertionError: assert' in junit
    assert "\n>       assert key[:15] ==" in out  # pytest's own layout, source line and all
    # ...and no part of either key is anywhere.
    for text in (out, junit):
        for fragment in (SYNTH_KEY[8:20], SYNTH_KEY[-12:], ENV_KEY[:12], ENV_KEY[-12:]):
            assert fragment not in text


def _failure_repr(secret: str) -> object:
    try:
        raise RuntimeError(f"the app quoted {secret}")
    except RuntimeError:
        return pytest.ExceptionInfo.from_current().getrepr(style="short")


def test_mask_test_report_masks_text_and_keeps_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from pytest_synth_rl.secrets.masking import mask_test_report

    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    structured = _failure_repr(SYNTH_KEY)
    report = SimpleNamespace(
        longrepr=structured, sections=[("Captured stdout call", f"key {SYNTH_KEY[8:]}\n")]
    )
    mask_test_report(report)
    assert report.longrepr is structured  # the same object, text changed in place
    assert report.longrepr.reprcrash.message == "RuntimeError: the app quoted sk_l…y0"  # type: ignore[attr-defined]
    assert SYNTH_KEY[-12:] not in str(report.longrepr)
    assert report.sections == [("Captured stdout call", "key sk_l…y0\n")]

    skipped = SimpleNamespace(longrepr=("t.py", 3, f"Skipped: needs {SYNTH_KEY}"), sections=[])
    mask_test_report(skipped)
    assert skipped.longrepr == ("t.py", 3, "Skipped: needs sk_l…y0")

    plain = SimpleNamespace(longrepr=f"collected with {SYNTH_KEY}", sections=[])
    mask_test_report(plain)
    assert plain.longrepr == "collected with sk_l…y0"

    clean = _failure_repr("nothing secret")
    untouched = SimpleNamespace(longrepr=clean, sections=[])
    mask_test_report(untouched)
    assert untouched.longrepr is clean
    assert "the app quoted nothing secret" in str(clean)
