"""A policy per env: ``FakeSynthBackend(policy={"alpha": p})`` answers alpha's rollouts with *p*
and every other env's with the built-in; ``use_policy`` takes the same forms; bad mappings are named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_process_support import HANG_TIMEOUT, serve_command
from test_fake_support import EXAMPLES, TASK_KEY, rl_payload, submit

from pytest_synth_rl import Reply, ScriptedPolicy
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.model import ArithmeticPolicy
from pytest_synth_rl.taskapp import InProcessTaskApp
from pytest_synth_rl.taskapp.loading import load_module_from_path, unload_module

ENVS = ("alpha", "beta", "gamma")
SYNTH_KEY = "sk_policy_per_env_0123456789"
ALPHA = ScriptedPolicy(Reply.tool("submit_answer", answer=424242))
BETA = ScriptedPolicy("beta says 777")


@pytest.fixture(scope="module")
def apps() -> Iterator[dict[str, InProcessTaskApp]]:
    """The arithmetic example app three times, each serving one env name."""
    served: dict[str, InProcessTaskApp] = {}
    modules = []
    try:
        for env in ENVS:
            module = load_module_from_path(EXAMPLES / "arithmetic_task_app.py", fresh=True)
            modules.append(module)
            module.ENV_NAME = env  # the app refuses rollouts of any other env
            app = InProcessTaskApp(
                module.create_app(api_key=TASK_KEY), api_key=TASK_KEY, export_api_key=False
            )
            served[env] = app.start()
        yield served
    finally:
        for app in served.values():
            app.stop()
        for module in modules:
            unload_module(module)


def env_payload(url: str, env: str) -> dict[str, Any]:
    rollout = {**rl_payload()["data"]["config"]["rollout"], "env_name": env}
    return rl_payload(url, rollout=rollout)


def answers(
    fake: FakeSynthBackend, client: httpx.Client, apps: dict[str, InProcessTaskApp]
) -> dict[str, Any]:
    """Per env, one job's ``(answer, expected)`` pairs as its task app graded them."""
    fake.scenario(immediate=True, steps=2)
    graded: dict[str, Any] = {}
    for env, app in apps.items():
        job = fake.job(submit(client, fake, env_payload(app.url, env)))
        assert job.status == "succeeded", job.error
        details = [rollout.response["metrics"]["details"] for rollout in job.rollouts]
        graded[env] = {(d["answer"], d["expected"]) for d in details}
        assert graded[env]
    return graded


def built_in(pairs: set[tuple[int, int]]) -> bool:
    """The built-in arithmetic policy's answers: the sum, or off by at most 3."""
    return all(abs(answer - expected) <= 3 for answer, expected in pairs)


def test_each_env_is_answered_by_its_own_policy_and_the_others_by_the_built_in(
    apps: dict[str, InProcessTaskApp], client: httpx.Client
) -> None:
    fake = FakeSynthBackend(
        clock=VirtualClock(), task_app_api_key=TASK_KEY, policy={"alpha": ALPHA, "beta": BETA}
    )
    with fake:
        graded = answers(fake, client, apps)
        calls = [
            fake.inference.calls(r.request["trace_correlation_id"]) for job in fake.jobs for r in job.rollouts
        ]
    fake.close()
    assert {answer for answer, _ in graded["alpha"]} == {424242}
    assert {answer for answer, _ in graded["beta"]} == {777}
    assert built_in(graded["gamma"])
    assert {call.rollout.env_name for rollout in calls for call in rollout} == set(ENVS)


def test_a_star_key_answers_every_env_not_named(
    apps: dict[str, InProcessTaskApp], client: httpx.Client
) -> None:
    fake = FakeSynthBackend(
        clock=VirtualClock(), task_app_api_key=TASK_KEY, policy={"alpha": ALPHA, "*": BETA}
    )
    with fake:
        graded = answers(fake, client, apps)
    fake.close()
    assert {answer for answer, _ in graded["alpha"]} == {424242}
    assert {answer for answer, _ in graded["beta"] | graded["gamma"]} == {777}


def test_a_misspelt_env_name_fails_the_job_naming_both_spellings(
    apps: dict[str, InProcessTaskApp], client: httpx.Client
) -> None:
    fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy={"alpah": ALPHA})
    with fake:
        fake.scenario(immediate=True, steps=2)
        misspelt = fake.job(submit(client, fake, env_payload(apps["alpha"].url, "alpha")))
        other = fake.job(submit(client, fake, env_payload(apps["gamma"].url, "gamma")))
    fake.close()
    assert misspelt.status == "failed"
    for fragment in ("policy['alpah']", "this rollout's env is 'alpha'", "did you mean 'alpha'?"):
        assert fragment in (misspelt.error or "")
    assert other.status == "succeeded", other.error  # not near any named env: the built-in answers


def test_use_policy_takes_a_mapping_and_reset_brings_back_the_constructors(
    apps: dict[str, InProcessTaskApp], client: httpx.Client
) -> None:
    fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy={"alpha": ALPHA})
    with fake:
        fake.use_policy({"beta": BETA})
        switched = answers(fake, client, apps)
        fake.reset()
        restored = answers(fake, client, apps)
    fake.close()
    assert built_in(switched["alpha"])
    assert {answer for answer, _ in switched["beta"]} == {777}
    assert {answer for answer, _ in restored["alpha"]} == {424242}
    assert built_in(restored["beta"])


@pytest.mark.parametrize(
    ("policies", "fragments"),
    [
        ({"": ALPHA}, ["has the key ''", "env names (non-empty strings)"]),
        ({7: ALPHA}, ["has the key 7"]),
        ({"alpha": 3}, ["['alpha']: 3 is not callable"]),
        ({"alpha": ArithmeticPolicy}, ["['alpha']: ArithmeticPolicy is a class", "ArithmeticPolicy(...)"]),
        ({"alpha": lambda: "x"}, ["['alpha']", "a policy takes one argument"]),
    ],
)
def test_a_bad_mapping_names_the_env_and_the_problem(policies: Any, fragments: list[str]) -> None:
    with pytest.raises(SynthUsageError) as made:
        FakeSynthBackend(policy=policies)
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as used:
        fake.use_policy(policies)
    fake.close()
    for caught, key in ((made, "FakeSynthBackend.policy"), (used, "FakeSynthBackend.use_policy")):
        assert caught.value.keys == [key]
        for fragment in fragments:
            assert fragment in str(caught.value)
        assert "{'unscramble': policy}" in str(caught.value)  # the hint shows the mapping form


def test_serve_gives_each_env_its_policy_and_the_others_the_built_in(
    apps: dict[str, InProcessTaskApp], tmp_path: Path
) -> None:
    (tmp_path / "policies.py").write_text(
        "from pytest_synth_rl import ScriptedPolicy\nnever_right = ScriptedPolicy('no idea')\n"
    )
    always_right = "alpha=pytest_synth_rl.fake.model:ArithmeticPolicy"  # a class: a factory of no arguments
    never_right = "beta=policies.py:never_right"
    options = (
        "--api-key",
        SYNTH_KEY,
        "--task-app-key",
        TASK_KEY,
        "--policy",
        always_right,
        "--policy",
        never_right,
    )
    rewards: dict[str, set[float]] = {}
    with (
        serve_command(tmp_path, *options) as served,
        httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {SYNTH_KEY}"}, timeout=HANG_TIMEOUT
        ) as client,
    ):
        assert client.post("/_fake/scenario", json={"immediate": True, "steps": 4}).status_code == 200
        for env, app in apps.items():
            created = client.post("/api/rl/jobs", json=env_payload(app.url, env))
            assert created.status_code == 201, created.text
            job = client.get(f"/_fake/jobs/{created.json()['id']}").json()
            assert job["status"] == "succeeded", job
            rewards[env] = {rollout["reward"] for rollout in job["rollouts"]}
        assert served.stop() == 0
    assert rewards["alpha"] == {1.0}
    assert rewards["beta"] == {0.0}
    assert rewards["gamma"] == {0.0, 1.0}  # the built-in: wrong early in training, right later
