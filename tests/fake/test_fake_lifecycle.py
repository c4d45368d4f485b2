"""Scripted lifecycles on a virtual clock: timing modes, outcomes, rewards, and pushing jobs."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest
from test_fake_support import API, auth, no_real_sleep, poll_to_end, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError, SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend, Scenario
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
    class ManualClock:
        """A real-time-like clock (no subscribe) that the test moves by hand."""

        is_virtual = False

        def __init__(self) -> None:
            self.t = 100.0

        def now(self) -> float:
            return self.t

        def time(self) -> float:
            return 1_700_000_000.0 + self.t

        def sleep(self, seconds: float) -> None:
            self.t += seconds

        async def async_sleep(self, seconds: float) -> None:
            self.t += seconds

    manual = ManualClock()
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
