"""Job lifecycles under injected faults: how many complete, and whether any job is duplicated.

Submit, poll, events and metrics against the fake (real rollouts to the example task app), every
route failing at the given rate (503, 429 + Retry-After, dropped connections), seeds 0..N-1.
Target: at 30% faults >= 99 of 100 complete, 0 duplicates (50% is reported).
Run alone: ``python bench/bench_faults.py [--quick]`` (30 seeds).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, report, run_alone  # noqa: E402
from pytest_synth_rl.client import RetryPolicy, RLJob  # noqa: E402
from pytest_synth_rl.clock import VirtualClock  # noqa: E402
from pytest_synth_rl.errors import SynthError  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402
from pytest_synth_rl.taskapp import InProcessTaskApp  # noqa: E402

EXAMPLES = ROOT / "examples"
CONFIG = EXAMPLES / "arithmetic.toml"
TASK_KEY = "bench-faults-task-key-31c9d2"
SEEDS = 100
QUICK_SEEDS = 30
TARGET = 99


@dataclass
class Outcome:
    """What one seeded lifecycle came to."""

    seed: int
    completed: bool
    jobs: int
    error: str | None = None


@dataclass
class Tally:
    rate: float
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(o.completed for o in self.outcomes)

    @property
    def duplicates(self) -> int:
        return sum(max(0, o.jobs - 1) for o in self.outcomes)


def load_example_app(api_key: str = TASK_KEY) -> object:
    name = "bench_faults_arithmetic_task_app"
    module: ModuleType | None = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "arithmetic_task_app.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module.create_app(api_key=api_key)


def inject_faults(fake: FakeSynthBackend, rate: float, seed: int) -> None:
    """503, 429 + Retry-After and dropped connections on every route, together failing *rate*."""
    p = 1.0 - (1.0 - rate) ** (1.0 / 3.0)
    base = seed * 7
    fake.fault("*", status=503, probability=p, seed=base)
    fake.fault("*", status=429, retry_after=2, probability=p, seed=base + 1)
    fake.fault("*", connect_error=True, probability=p, seed=base + 2)


def run_lifecycle(task_app: InProcessTaskApp, rate: float, seed: int, steps: int = 4) -> Outcome:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY) as fake:
        fake.scenario(steps=steps, duration=600.0)
        inject_faults(fake, rate, seed)
        job = RLJob.from_config(
            CONFIG,
            backend_url=fake.base_url,
            api_key=fake.api_key,
            task_app_url=task_app.url,
            task_app_api_key=TASK_KEY,
            clock=clock,
            retry=RetryPolicy(seed=seed),
        )
        error = None
        completed = False
        try:
            with job:
                job.submit()
                result = job.poll_until_complete(timeout=7200.0, interval=10.0)
                events = job.events()
                points = job.metrics()
            completed = result.status == "succeeded" and "rl.train.completed" in events.types and bool(points)
            if not completed:
                error = f"job ended {result.status!r} without its events/metrics"
        except SynthError as exc:
            error = f"{type(exc).__name__}: {exc}"
        jobs = len(fake.jobs)
    fake.close()
    return Outcome(seed=seed, completed=completed, jobs=jobs, error=error)


def run_rate(task_app: InProcessTaskApp, rate: float, seeds: int = SEEDS, steps: int = 4) -> Tally:
    tally = Tally(rate)
    for seed in range(seeds):
        tally.outcomes.append(run_lifecycle(task_app, rate, seed, steps))
    return tally


def main(seeds: int | None = None) -> list[str]:
    seeds = SETTINGS.pick(SEEDS, QUICK_SEEDS) if seeds is None else seeds
    lines = []
    with InProcessTaskApp(load_example_app(), api_key=TASK_KEY, export_api_key=False) as task_app:
        for rate, target in ((0.3, TARGET * seeds / SEEDS), (0.5, None)):
            tally = run_rate(task_app, rate, seeds)
            met = target is None or (tally.completed >= target and tally.duplicates == 0)
            lines.append(
                report(
                    f"lifecycles complete at {rate:.0%} faults on every route "
                    f"(duplicate jobs: {tally.duplicates})",
                    ours=tally.completed,
                    baseline_name="lifecycles run",
                    baseline=seeds,
                    unit="",
                    ratio=tally.completed / seeds,
                    target_text=(f">= {target:g}/{seeds}, 0 duplicates" if target is not None else "none"),
                    met=met,
                )
            )
            for outcome in tally.outcomes:
                if not outcome.completed:
                    first = (outcome.error or "").splitlines()[0][:160]
                    print(f"    seed {outcome.seed}: {first}", flush=True)
    return lines


if __name__ == "__main__":
    run_alone(main)
