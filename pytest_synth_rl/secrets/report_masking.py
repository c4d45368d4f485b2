"""The last guard for keys: every test report is masked before pytest, JUnit XML or pytest-html
sees it, covering what we did not make (the user's chained exceptions, ``--showlocals``, captured
output). Only the text changes; the report keeps its structure."""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_synth_rl.secrets.masking import redact


def _masked(value: Any, seen: set[int]) -> Any:
    """*value* with every string redacted; pytest's repr dataclasses are changed in place."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_masked(item, seen) for item in value]
    if isinstance(value, tuple):
        return tuple(_masked(item, seen) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and id(value) not in seen:
        seen.add(id(value))  # ExceptionChainRepr, ReprEntry, ReprFileLocation (reprcrash)...
        for field in dataclasses.fields(value):
            object.__setattr__(value, field.name, _masked(getattr(value, field.name), seen))
    return value


def mask_test_report(report: Any) -> None:
    """Replace any known secret in *report*'s failure text and captured sections, in place."""
    longrepr = report.longrepr
    if longrepr is not None:
        text = str(longrepr)
        if redact(text) != text:
            report.longrepr = _masked(longrepr, set())
            if redact(str(report.longrepr)) != str(report.longrepr):  # a form we cannot walk
                report.longrepr = redact(str(report.longrepr))
    if report.sections:
        report.sections = [(title, redact(content)) for title, content in report.sections]
