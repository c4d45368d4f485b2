"""Re-make the docs' pictures from real runs of the tutorial's own files.

    python tools/docs_pictures.py

* ``docs/images/reward-failure.txt``: the tutorial's failing reward assertion
  (``tests/test_plateau.py``), as a terminal shows it, captured with ``tmux capture-pane``;
* ``docs/images/html-report.png``: the pytest-html report of the tutorial's baseline test, its row
  open on the reward curve drawn over the baseline's and the drift table, screenshot by headless
  Chromium.

The tutorial's files (its code blocks that start with a file name comment) are written to a
temporary project with the arithmetic example; nothing else is made up. The baseline is written
by a run whose policy has another seed, so its curve differs from the one it is compared with.
Needs tmux, Chromium (``CHROMIUM``, default ``chromium``) and pytest-html.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
FILE_BLOCK = re.compile(r"^```(?:python|toml)\n# (?P<path>[\w./-]+)\n(?P<body>.*?)^```", re.S | re.M)
#: The baseline run's policy: the tutorial's, with another seed.
BASELINE_CONFTEST = """
import pytest
from pytest_synth_rl import LearningPolicy, linear
from team_policy import solve, wrong


@pytest.fixture
def synth_policy():
    return LearningPolicy(solve, wrong=wrong, curve=linear(0.1, 0.9), seed={seed})
"""
WIDTH, HEIGHT = 1280, 795


def tutorial_project(folder: Path) -> None:
    """Write the tutorial's files into *folder*, next to the arithmetic example."""
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(ROOT / "examples" / name, folder / name)
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    for block in FILE_BLOCK.finditer(text):
        path = folder / block["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {block['path']}\n{block['body']}", encoding="utf-8")


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


def terminal_failure(project: Path) -> str:
    """The failure section of the plateau test's run, as a 100-column terminal shows it."""
    session = f"docs-pictures-{os.getpid()}"
    command = " ".join(pytest_command("tests/test_plateau.py"))
    shell = f"cd {project} && PYTHONPATH={ROOT} {command}; tmux wait-for -S {session}-done"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "50"], check=True)
    try:
        subprocess.run(["tmux", "send-keys", "-t", session, shell, "Enter"], check=True)
        subprocess.run(["tmux", "wait-for", f"{session}-done"], check=True, timeout=300)
        pane = subprocess.run(
            ["tmux", "capture-pane", "-p", "-J", "-S", "-", "-t", session],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    lines = pane.splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.match(r"_+ test_a_model_that_does_not_learn _+", line)
    )
    end = next(
        i
        for i in range(start, len(lines))
        if re.match(r"tests/test_plateau\.py:\d+: AssertionError", lines[i])
    )
    captured = "\n".join(line.rstrip() for line in lines[start : end + 1]) + "\n"
    assert str(project) not in captured, "the capture names the temporary folder"
    return captured


def html_report(project: Path, seed: int = 11) -> Path:
    """The pytest-html report of the baseline test, compared with a baseline of another seed."""
    conftest = project / "tests" / "conftest.py"
    tutorial_conftest = conftest.read_text(encoding="utf-8")
    conftest.write_text(BASELINE_CONFTEST.format(seed=seed), encoding="utf-8")
    run = subprocess.run(
        pytest_command("tests/test_baseline.py", "--synth-update-baselines", "-q"),
        cwd=project,
        env=environment(),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    conftest.write_text(tutorial_conftest, encoding="utf-8")
    report = project / "report.html"
    run = subprocess.run(
        pytest_command(
            "tests/test_baseline.py",
            f"--html={report}",
            "--self-contained-html",
            "-o",
            "render_collapsed=",
            "-o",
            "environment_table_redact_list=^Platform$",
        ),
        cwd=project,
        env=environment(),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "BaselineMismatch" in run.stdout, run.stdout
    assert "data-values" in report.read_text(encoding="utf-8"), "the report has no reward chart"
    return report


def screenshot(page: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                os.environ.get("CHROMIUM", "chromium"),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--screenshot={out}",
                f"--window-size={WIDTH},{HEIGHT}",
                "--virtual-time-budget=5000",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )


def main() -> int:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        project = Path(temporary)
        tutorial_project(project)
        (IMAGES / "reward-failure.txt").write_text(terminal_failure(project), encoding="utf-8")
        (project / "tests" / "test_plateau.py").unlink()
        screenshot(html_report(project), IMAGES / "html-report.png")
    for name in ("reward-failure.txt", "html-report.png"):
        print(f"wrote docs/images/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
