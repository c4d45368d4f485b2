"""Scripted lifecycles on a virtual clock: timing modes, outcomes, rewards, and pushing jobs."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest
from test_fake_support import API, SteppedClock, auth, no_real_sleep, poll_to_end, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError, SynthUsageError
from pytest_synth_rl.fake import FakeJob, FakeSynthBackend, Scenario
from pytest_synth_rl.fake.backend import argument_problem
from pytest_synth_rl.fake.scenario import DEFAULT_DURATION


def _status(client: httpx.Client, fake: FakeSynthBackend, job_id: str) -> str:
    status = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()["status"]
    assert isinstance(status, str)
    return status


def _clock(fake: FakeSynthBackend) -> VirtualClock:
    clock = fake.clock
    assert isinstance(clock, VirtualClock)
    return clock


# -- timing modes ------------------------------------------------
def test_duration_mode_follows_the_clock_exactly(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(duration=1000.0, steps=4, queue_time=50.0)
    job_id = submit(client, fake)
    clock = _clock(fake)
    assert _status(client, fake, job_id) == "queued"
    clock.advance(49.9)
    assert _status(client, fake, job_id) == "queued"
    clock.advance(0.1)
    assert _status(client, fake, job_id) == "running"
    assert fake.job(job_id).rewards == []
    clock.advance(400.0)  # slots every 200 s after the queue: steps 1 and 2 are due at 250 and 450
    assert len(fake.job(job_id).rewards) == 2
    clock.advance(599.9)
    assert _status(client, fake, job_id) == "running"
    clock.advance(0.1)
    assert _status(client, fake, job_id) == "succeeded"
    events = fake.job(job_id).events
    created = datetime.fromisoformat(events[0]["created_at"])
    offsets = [(datetime.fromisoformat(e["created_at"]) - created).total_seconds() for e in events]
    # scheduled times, not observation times: start 50, steps 250/450/650/850, end 1050
    assert offsets == [0.0, 50.0, 250.0, 450.0, 650.0, 850.0, 1050.0, 1050.0]


def test_two_hour_job_polled_every_10s_takes_721_polls_and_no_real_time(
    fake: FakeSynthBackend, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.scenario(duration=7200.0)
    job_id = submit(client, fake)
    with no_real_sleep(monkeypatch) as slept:
        body, polls = poll_to_end(client, fake, job_id, interval=10.0)
    assert slept == []
    assert body["status"] == "succeeded"
    assert polls == 721  # t = 0, 10, ..., 7200
    assert _clock(fake).elapsed == 7200.0


def test_polls_mode_advances_one_stage_per_poll(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(steps=3, polls=5)  # N = steps + 2: start, step 1, 2, 3, end
    job_id = submit(client, fake)
    seen = [_status(client, fake, job_id) for _ in range(5)]
    assert seen == ["running", "running", "running", "running", "succeeded"]
    assert fake.job(job_id).event_types == [
        "rl.job.created",
        "rl.train.started",
        "rl.train.step",
        "rl.train.step",
        "rl.train.step",
        "rl.eval.summary",
        "rl.train.completed",
    ]
    assert _clock(fake).elapsed == 0.0  # no time needed at all


def test_polls_mode_ignores_the_clock(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(steps=2, polls=3)
    job_id = submit(client, fake)
    _clock(fake).advance(10_000)
    assert fake.job(job_id).status == "queued"  # only status polls move it
    assert [_status(client, fake, job_id) for _ in range(3)] == ["running", "running", "succeeded"]


def test_immediate_finishes_on_first_observation(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=3)
    job_id = submit(client, fake)
    assert fake.requests[-1].status == 201
    assert _status(client, fake, job_id) == "succeeded"
    assert len(fake.job(job_id).rewards) == 3


def test_clock_advance_alone_moves_jobs(fake: FakeSynthBackend, client: httpx.Client) -> None:
    # The fake subscribes to the VirtualClock: a job progresses without being polled.
    job_id = submit(client, fake)
    before = len(fake.store.get(job_id).events)
    _clock(fake).advance(DEFAULT_DURATION / 2)  # half-way through the default job
    record = fake.store.get(job_id)  # the raw record, read without the handle's own sync
    assert len(record.events) > before
    assert record.status == "running"


# -- outcomes ------------------------------------------------
def test_failed_at_step_stops_there_with_the_error(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(outcome="failed", steps=6, fail_at_step=4, error="CUDA out of memory")
    job_id = submit(client, fake)
    body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "failed"
    assert body["error"] == "CUDA out of memory"
    assert body["progress"]["completed"] == 3
    assert "model_id" not in body
    job = fake.job(job_id)
    assert job.event_types[-1] == "rl.train.failed"
    assert job.events[-1]["level"] == "error"
    assert job.events[-1]["data"]["step"] == 4


def test_failed_without_step_runs_everything_then_fails(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(outcome="failed", steps=3)
    job_id = submit(client, fake)
    body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "failed"
    assert body["progress"]["completed"] == 3
    assert "scripted" in body["error"]


def test_cancelled_outcome(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(outcome="cancelled", steps=5, fail_at_step=2)
    job_id = submit(client, fake)
    body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "cancelled"
    assert body["progress"]["completed"] == 1
    assert fake.job(job_id).event_types[-1] == "rl.job.cancelled"


# -- rewards and evaluation ------------------------------------------------
def test_reward_curve_callable_and_list(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.next_job(steps=3, immediate=True, reward_curve=lambda step: step / 10)
    fake.next_job(steps=3, immediate=True, reward_curve=[0.9, 0.5, 0.7])
    first, second = submit(client, fake), submit(client, fake)
    assert fake.job(first).rewards == [0.1, 0.2, 0.3]
    assert fake.job(first).final_reward == 0.3
    assert fake.job(second).rewards == [0.9, 0.5, 0.7]
    points = fake.job(second).metrics
    assert [p["value"] for p in points if p["name"] == "train.reward"] == [0.9, 0.5, 0.7]
    losses = [p["value"] for p in points if p["name"] == "train.loss"]
    assert len(losses) == 3
    assert all(v > 0 for v in losses)


def test_default_curve_rises(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True)
    rewards = fake.job(submit(client, fake)).rewards
    assert rewards == sorted(rewards)
    assert rewards[0] < rewards[-1]


def test_eval_every_emits_summaries_and_checkpoints(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(steps=6, eval_every=2, immediate=True, reward_curve=lambda s: s / 6)
    job_id = submit(client, fake)
    job = fake.job(job_id)
    summaries = [e for e in job.events if e["type"] == "rl.eval.summary"]
    assert [e["data"]["step"] for e in summaries] == [2, 4, 6]
    assert summaries[-1]["data"]["mean_reward"] == 1.0
    assert [c["step"] for c in job.status_payload()["checkpoints"]] == [2, 4, 6]


def test_eval_every_defaults_to_the_config(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(steps=4, immediate=True)
    payload = rl_payload(evaluation={"instances": 2, "every_n_iters": 2, "seeds": [7, 8]})
    job = fake.job(submit(client, fake, payload))
    summaries = [e["data"] for e in job.events if e["type"] == "rl.eval.summary"]
    assert [s["step"] for s in summaries] == [2, 4]
    assert summaries[0]["seeds"] == [7, 8]


def test_reward_curve_that_raises_fails_the_job_with_the_reason(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    def broken(step: int) -> float:
        raise ZeroDivisionError("curve bug")

    fake.scenario(immediate=True, reward_curve=broken)
    job = fake.job(submit(client, fake))
    assert job.status == "failed"
    assert job.error is not None
    assert "ZeroDivisionError: curve bug" in job.error


# -- scripting API ------------------------------------------------
def test_next_job_scripts_queue_up_then_default_applies(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=2)
    fake.scenario_for("next", immediate=True, outcome="failed", error="first")
    fake.next_job(immediate=True, outcome="cancelled")
    ids = [submit(client, fake) for _ in range(3)]
    assert [fake.job(i).status for i in ids] == ["failed", "cancelled", "succeeded"]


def test_scenario_for_an_existing_job_changes_its_future(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(steps=4, polls=6)
    job_id = submit(client, fake)
    _status(client, fake, job_id)
    _status(client, fake, job_id)
    fake.scenario_for(job_id, steps=4, outcome="failed", error="preempted", immediate=True)
    assert _status(client, fake, job_id) == "failed"
    assert fake.job(job_id).error == "preempted"
    with pytest.raises(SynthError, match="no job 'job_missing'"):
        fake.scenario_for("job_missing", steps=2)


def test_fake_job_pushes(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(duration=10_000.0, steps=5)
    a, b, c, d = (submit(client, fake) for _ in range(4))
    assert fake.job(a).advance_to("running").status == "running"
    assert fake.job(a).advance_to(3).rewards == pytest.approx(fake.job(a).rewards)
    assert len(fake.job(a).rewards) == 3
    assert fake.job(b).succeed().status == "succeeded"
    assert len(fake.job(b).rewards) == 5
    assert fake.job(c).fail("node lost").error == "node lost"
    assert fake.job(d).cancel().status == "cancelled"
    assert fake.job(a).advance_to("end").status == "succeeded"
    assert _status(client, fake, c) == "failed"
    assert fake.job().id == d  # the most recent by default
    with pytest.raises(SynthUsageError, match=r"advance_to"):
        fake.job(a).advance_to("sideways")


def test_succeed_overrides_a_scripted_failure(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(outcome="failed", fail_at_step=2, steps=4, duration=100.0)
    job = fake.job(submit(client, fake))
    assert job.succeed().status == "succeeded"
    assert len(job.rewards) == 4


def test_fake_job_reads_are_copies(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=2)
    job = fake.job(submit(client, fake))
    job.events.clear()
    job.payload.clear()
    assert job.events
    assert job.payload


def test_unknown_job_handle_is_a_clear_error(fake: FakeSynthBackend) -> None:
    with pytest.raises(SynthError, match="no job was submitted"):
        fake.job()
    with pytest.raises(SynthError, match="no job 'x'"):
        fake.job("x")


def test_reset_clears_jobs_log_scenarios_and_faults(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True)
    fake.next_job(outcome="failed", immediate=True)
    fake.fault("list", status=500)
    submit(client, fake)
    fake.reset()
    assert (fake.jobs, fake.requests, fake.faults) == ([], [], [])
    assert fake.default_scenario == Scenario()
    assert client.get(f"{API}/rl/jobs", headers=auth(fake)).status_code == 200  # fault gone
    job_id = submit(client, fake)
    assert fake.job(job_id).scenario == Scenario()  # the queued "next" script is gone too


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"outcome": "exploded"}, "Scenario.outcome"),
        ({"steps": 0}, "Scenario.steps"),
        ({"duration": 10.0, "polls": 3}, "Scenario.duration"),
        ({"polls": 0}, "Scenario.polls"),
        ({"duration": -1.0}, "Scenario.duration"),
        ({"fail_at_step": 2}, "Scenario.fail_at_step"),
        ({"outcome": "failed", "fail_at_step": 11}, "Scenario.fail_at_step"),
        ({"reward_curve": [0.1, 0.2]}, "Scenario.reward_curve"),
        ({"reward_curve": "magic"}, "Scenario.reward_curve"),
        ({"eval_every": 0}, "Scenario.eval_every"),
        ({"queue_time": -5}, "Scenario.queue_time"),
    ],
)
def test_bad_scenarios_name_the_field(fields: dict[str, object], key: str) -> None:
    with pytest.raises(SynthUsageError) as caught:
        Scenario(**fields)  # type: ignore[arg-type]
    assert key in caught.value.keys


@pytest.mark.parametrize(
    ("curve", "entry"),
    [
        ([1e308, -1e308], "entry [0] is 1e+308"),
        ([0.5, float("-inf")], "entry [1] is -inf"),
        ([0.5, 10**400], f"entry [1] is {'1' + '0' * 39}"),
        ([0.5, "high"], "entry [1] is 'high'"),
    ],
)
def test_a_reward_curve_entry_past_the_bound_is_named_with_the_bound(curve: list[object], entry: str) -> None:
    with pytest.raises(SynthUsageError) as caught:
        Scenario(steps=2, reward_curve=curve)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"invalid arguments: Scenario.reward_curve: {entry}; expected a finite number from -1e+12 to "
        "1e+12 (hint: give one number per step, e.g. [0.1, 0.4, 0.8])\n"
        "  hint: see the Scenario docstring in pytest_synth_rl.fake"
    )
    assert Scenario(steps=2, reward_curve=[1e12, -1e12]).reward_curve == [1e12, -1e12]  # inclusive


def test_scenario_and_fields_together_is_an_error(fake: FakeSynthBackend) -> None:
    with pytest.raises(SynthUsageError, match="either a Scenario or keyword fields"):
        fake.scenario(Scenario(), steps=3)


def test_fake_on_a_non_virtual_clock_derives_state_from_time() -> None:
    manual = SteppedClock()
    with FakeSynthBackend(clock=manual) as backend, httpx.Client() as http:
        backend.scenario(duration=60.0, steps=2)
        job_id = submit(http, backend)
        manual.t += 59.0
        assert _status(http, backend, job_id) == "running"
        manual.t += 1.0
        assert _status(http, backend, job_id) == "succeeded"


def test_an_unknown_scenario_field_is_a_usage_error_with_a_did_you_mean() -> None:
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as caught:
        fake.scenario(queue_tme=3, outcome="failed")
    assert caught.value.keys == ["Scenario.queue_tme"]
    assert "has no argument 'queue_tme' (hint: did you mean Scenario(queue_time=...)?" in str(caught.value)
    with pytest.raises(SynthUsageError) as caught:
        fake.scenario(queue_seconds=3)
    assert "did you mean" not in str(caught.value)  # too far from any field: they are listed
    assert "it takes Scenario(outcome='succeeded', steps=10, " in str(caught.value)
    assert "queue_time" in str(caught.value)
    with pytest.raises(SynthUsageError, match=r"did you mean Scenario\(steps=\.\.\.\)"):
        fake.scenario_for("next", stpes=3)


# -- pacing, stalls and clocks ------------------------------------------------
@pytest.mark.parametrize("pacing", ["clock", "observed", None])
def test_each_pacing_is_accepted(pacing: str | None) -> None:
    assert argument_problem("pacing", pacing) is None


def test_an_unknown_pacing_is_refused_naming_both() -> None:
    problem = argument_problem("pacing", "eager") or ""
    assert problem.startswith("must be one of clock, observed ('observed' by default")


def test_a_job_nobody_moves_says_why_on_the_fourth_look(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    bodies = [client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json() for _ in range(5)]
    assert ["hint" in body for body in bodies] == [False, False, False, True, True]
    assert bodies[3]["hint"].startswith(f"job {job_id} has not moved in 4 status polls: this fake")
    assert bodies[4]["hint"].startswith(f"job {job_id} has not moved in 5 status polls")
    _clock(fake).advance(1.0)
    assert "hint" not in client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()


def test_a_fake_reset_onto_a_new_virtual_clock_follows_that_clock(client: httpx.Client) -> None:
    old, new = VirtualClock(500.0), VirtualClock(9_000.0)
    with FakeSynthBackend(clock=old) as fake:
        fake.reset(clock=new)
        assert fake.clock is new
        job_id = submit(client, fake)
        record = fake.store.get(job_id)  # the raw record, read without the handle's own sync
        before = len(record.events)
        old.advance(DEFAULT_DURATION * 2)
        assert len(record.events) == before
        new.advance(DEFAULT_DURATION / 2)
        assert len(record.events) > before
        assert record.status == "running"


def test_a_fake_reset_off_a_virtual_clock_no_longer_follows_it(client: httpx.Client) -> None:
    old, manual = VirtualClock(500.0), SteppedClock()
    with FakeSynthBackend(clock=old) as fake:
        fake.reset(clock=manual)
        job_id = submit(client, fake)
        record = fake.store.get(job_id)
        before = len(record.events)
        manual.t += DEFAULT_DURATION * 2
        old.advance(1.0)  # the old clock moving does not make the fake catch up
        assert len(record.events) == before
        assert fake.job(job_id).status == "succeeded"  # a look does, on the new clock


def test_a_closed_fake_no_longer_follows_its_clock(client: httpx.Client) -> None:
    clock = VirtualClock(500.0)
    fake = FakeSynthBackend(clock=clock)
    with fake:
        job_id = submit(client, fake)
    record = fake.store.get(job_id)
    before = len(record.events)
    fake.close()
    clock.advance(DEFAULT_DURATION * 2)
    assert len(record.events) == before
    assert record.status == "queued"


def test_only_a_running_duration_job_has_a_next_due_time(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=2, queue_time=30.0)
    job_id = submit(client, fake)
    record = fake.store.get(job_id)
    created = _clock(fake).now()
    assert fake.lifecycle.next_due(record) == created + 30.0  # the start
    _clock(fake).advance(30.0)
    assert fake.lifecycle.next_due(record) == created + 130.0  # step 1
    _clock(fake).advance(300.0)
    assert fake.job(job_id).status == "succeeded"
    assert fake.lifecycle.next_due(record) is None
    for scenario in (Scenario(polls=4, steps=2), Scenario(immediate=True, steps=2)):
        fake.next_job(scenario)
        other = fake.store.get(submit(client, fake))
        assert fake.lifecycle.next_due(other) is None


def test_a_finished_job_or_one_on_a_real_time_clock_never_stalls(client: httpx.Client) -> None:
    with FakeSynthBackend(clock=VirtualClock(500.0)) as fake:
        fake.scenario(immediate=True, steps=2)
        job_id = submit(client, fake)
        bodies = [client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json() for _ in range(6)]
        assert [("hint" in body, body["status"]) for body in bodies] == [(False, "succeeded")] * 6
    with FakeSynthBackend(clock=SteppedClock()) as fake:
        job_id = submit(client, fake)
        bodies = [client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json() for _ in range(6)]
        assert ["hint" in body for body in bodies] == [False] * 6


def test_a_stalled_job_is_told_how_to_move_it(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    bodies = [client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json() for _ in range(4)]
    hint = bodies[-1]["hint"]
    assert "that nothing advances. Advance it (POST /_fake/clock/advance" in hint
    assert hint.endswith("or script the job with Scenario(polls=N) or Scenario(immediate=True)")


@pytest.mark.parametrize(
    ("scenario", "progress"),
    [
        # The first look starts the job (due at submit) and runs step 1; each later look one stage.
        (Scenario(steps=2), [("running", 1), ("running", 2), ("succeeded", 2)]),
        # A polls-mode job keeps its own pace: one slot per poll.
        (Scenario(polls=4, steps=2), [("running", 0), ("running", 1), ("running", 2), ("succeeded", 2)]),
    ],
)
def test_a_served_fake_moves_a_job_one_stage_per_look(scenario: Scenario, progress: list[object]) -> None:
    fake = FakeSynthBackend(clock=VirtualClock(500.0))
    fake.scenario(scenario)
    with (
        fake.serve() as url,
        httpx.Client(base_url=url + "/api", headers=auth(fake)) as http,
    ):
        job_id = http.post("/rl/jobs", json=rl_payload()).json()["id"]
        looks = [http.get(f"/rl/jobs/{job_id}").json() for _ in progress]
        assert [(b["status"], b["progress"]["completed"]) for b in looks] == progress
        again = http.get(f"/rl/jobs/{job_id}").json()
        assert (again["status"], again["progress"]["completed"]) == progress[-1]
    assert _clock(fake).now() == 500.0  # looks moved the job, not the clock
    fake.close()


def test_scripting_an_unknown_job_says_how_to_script_the_next_one(fake: FakeSynthBackend) -> None:
    with pytest.raises(SynthError, match="no job 'job_nope'") as caught:
        fake.scenario_for("job_nope", steps=2)
    assert (caught.value.hint or "").startswith("use scenario_for('next', ...) before submitting")
    assert (caught.value.hint or "").endswith("or an id from fake.jobs")


@pytest.mark.parametrize("message", ["x" * 100_000, 42])
def test_a_bad_failure_message_is_refused_naming_fake_job_fail(
    fake: FakeSynthBackend, client: httpx.Client, message: object
) -> None:
    job = fake.job(submit(client, fake))
    with pytest.raises(SynthUsageError) as caught:
        job.fail(message)  # type: ignore[arg-type]
    assert caught.value.keys == ["FakeJob.fail"]


def test_a_job_pushed_on_a_real_time_clock_catches_up_first(client: httpx.Client) -> None:
    manual = SteppedClock()
    with FakeSynthBackend(clock=manual) as fake:
        fake.scenario(duration=60.0, steps=2)  # slots every 20 s: steps at 20 and 40, the end at 60
        failed, cancelled = submit(client, fake), submit(client, fake)
        manual.t += 45.0
        fake.job(failed).fail("boom")
        fake.job(cancelled).cancel()
        assert fake.job(failed).rewards == fake.job(cancelled).rewards
        assert len(fake.job(failed).rewards) == 2
        assert data_of(fake.job(failed), "rl.train.failed") == [{"error": "boom", "step": 2}]
        assert data_of(fake.job(cancelled), "rl.job.cancelled") == [{"step": 2}]


def data_of(job: FakeJob, type_: str) -> list[dict[str, object]]:
    return [e["data"] for e in job.events if e["type"] == type_]


def test_every_event_of_a_successful_job_is_info(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=2)
    job = fake.job(submit(client, fake))
    assert job.status == "succeeded"
    assert [(e["type"], e["level"]) for e in job.events][-1] == ("rl.train.completed", "info")
    assert {e["level"] for e in job.events} == {"info"}
