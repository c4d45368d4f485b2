"""The README stays true: its Quickstart is two commands, CI runs the same test command, and it
teaches and links into the docs instead of holding the reference."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Quickstart\n.*?^```bash\n(.*?)^```", text, re.S | re.M)
    assert match, "README.md needs a '## Quickstart' section with a ```bash block"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_quickstart_has_exactly_two_commands_main_job_then_tests() -> None:
    commands = _quickstart_commands()
    assert len(commands) == 2
    assert commands[0].endswith("pytest examples")
    assert "pip install" in commands[0]
    assert "pip install" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    test_command = _quickstart_commands()[1].split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_the_readme_stays_short_and_links_into_pages_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert {"docs/tutorial.md", "docs/reference/options.md"} <= set(links)
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_the_served_fake_limits_are_stated_once_in_the_docs_not_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    limits = (ROOT / "docs" / "reference" / "served-fake.md").read_text(encoding="utf-8")
    assert "## Limits" in limits
    for limit in ("1,000 jobs", "64 MiB", "16 event streams"):
        assert limit in limits
        assert limit not in readme
