"""The last guard for keys: every test report is masked before pytest, JUnit XML or pytest-html
sees it.

Our own messages are redacted where they are made, but a report also carries what we do not
make: the user's exception chained under ours (a task app that failed on import, quoting its
environment), ``--showlocals`` values, captured output. Masking the finished report covers all
of them, in every output that reads reports, at any verbosity. Only the text changes: the
report keeps its structure, so the summary line and JUnit message still name the error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_synth_rl.secrets.masking import redact

__all__ = ["mask_test_report"]


def _masked(value: Any, seen: set[int]) -> Any:
    """*value* with every string in it redacted; pytest's repr objects are changed in place."""
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
