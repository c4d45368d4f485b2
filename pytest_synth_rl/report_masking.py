"""The last guard for keys: every test report is masked before pytest, JUnit XML or pytest-html
sees it.

Our own messages are redacted where they are made, but a report also carries what we do not
make: the user's exception chained under ours (a task app that failed on import, quoting its
environment), ``--showlocals`` values, captured output. Masking the finished report covers all
of them, in every output that reads reports, at any verbosity.
"""

from __future__ import annotations

from typing import Any

from .masking import redact

__all__ = ["mask_test_report"]


def mask_test_report(report: Any) -> None:
    """Replace any known secret in *report*'s failure text and captured sections, in place."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, message)
        path, line, message = longrepr
        report.longrepr = (path, line, redact(str(message)))
    elif longrepr is not None:
        text = str(longrepr)
        masked = redact(text)
        if masked != text:
            report.longrepr = masked  # plain text: what the structured form would have printed
    if report.sections:
        report.sections = [(title, redact(content)) for title, content in report.sections]
