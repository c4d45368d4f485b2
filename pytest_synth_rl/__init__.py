"""pytest-synth-rl: put Synth RL training jobs under test; each capability is a plain library first.

``__all__`` is what a test or a conftest writes; names load on first access (a cheap plugin import).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the table below, for type checkers
    from pytest_synth_rl.assertions import JobExpectation as JobExpectation
    from pytest_synth_rl.assertions import eventually as eventually
    from pytest_synth_rl.assertions import expect_job as expect_job
    from pytest_synth_rl.baselines import Tolerance as Tolerance
    from pytest_synth_rl.client import AsyncRLJob as AsyncRLJob
    from pytest_synth_rl.client import JobResult as JobResult
    from pytest_synth_rl.client import RLJob as RLJob
    from pytest_synth_rl.clock import Clock as Clock
    from pytest_synth_rl.clock import VirtualClock as VirtualClock
    from pytest_synth_rl.errors import ConfigError as ConfigError
    from pytest_synth_rl.errors import JobFailedError as JobFailedError
    from pytest_synth_rl.errors import JobTimeoutError as JobTimeoutError
    from pytest_synth_rl.errors import SynthError as SynthError
    from pytest_synth_rl.errors import SynthUsageError as SynthUsageError
    from pytest_synth_rl.fake import FakeSynthBackend as FakeSynthBackend
    from pytest_synth_rl.fake import Scenario as Scenario
    from pytest_synth_rl.fake.contract import check_task_app_contract as check_task_app_contract
    from pytest_synth_rl.fake.model import ChatRequest as ChatRequest
    from pytest_synth_rl.fake.model import LearningPolicy as LearningPolicy
    from pytest_synth_rl.fake.model import Policy as Policy
    from pytest_synth_rl.fake.model import ReplayPolicy as ReplayPolicy
    from pytest_synth_rl.fake.model import Reply as Reply
    from pytest_synth_rl.fake.model import ScriptedPolicy as ScriptedPolicy
    from pytest_synth_rl.fake.model import linear as linear
    from pytest_synth_rl.plugin.session import BaselineCheck as BaselineCheck
    from pytest_synth_rl.plugin.session import ExpectJob as ExpectJob
    from pytest_synth_rl.plugin.session import RLConfigRef as RLConfigRef
    from pytest_synth_rl.plugin.session import ServedFake as ServedFake
    from pytest_synth_rl.plugin.session import SynthBackend as SynthBackend
    from pytest_synth_rl.plugin.session import SynthJobFactory as SynthJobFactory
    from pytest_synth_rl.plugin.session import TaskAppHandle as TaskAppHandle
    from pytest_synth_rl.plugin.settings import SynthSettings as SynthSettings
    from pytest_synth_rl.recording import Cassette as Cassette
    from pytest_synth_rl.recording import Replayer as Replayer
    from pytest_synth_rl.secrets.masking import Secret as Secret
    from pytest_synth_rl.taskapp import InProcessTaskApp as InProcessTaskApp

__version__ = "0.1.0"

#: Where each name lives: module -> its names (space-separated).
_HOMES = {
    name: home
    for home, names in {
        "assertions": "JobExpectation eventually expect_job",
        "baselines": "Tolerance",
        "client": "AsyncRLJob JobResult RLJob",
        "clock": "Clock VirtualClock",
        "errors": "ConfigError JobFailedError JobTimeoutError SynthError SynthUsageError",
        "fake": "FakeSynthBackend Scenario",
        "fake.contract": "check_task_app_contract",
        "fake.model": "ChatRequest LearningPolicy Policy ReplayPolicy Reply ScriptedPolicy linear",
        "plugin.session": "BaselineCheck ExpectJob RLConfigRef ServedFake SynthBackend SynthJobFactory"
        " TaskAppHandle",
        "plugin.settings": "SynthSettings",
        "recording": "Cassette Replayer",
        "secrets.masking": "Secret",
        "taskapp": "InProcessTaskApp",
    }.items()
    for name in names.split()
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first access (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_synth_rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    if name in __all__:  # a former name stays out of dir(), however often it is used
        globals()[name] = value
    return value


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Modules that moved keep importing from their documented place."""

    MOVED: ClassVar[dict[str, str]] = {f"{__name__}.policies": f"{__name__}.fake.model"}

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in self.MOVED else None

    def exec_module(self, module: types.ModuleType) -> None:
        home = importlib.import_module(self.MOVED[module.__name__])
        module.__dict__.update({name: getattr(home, name) for name in home.__all__}, __all__=home.__all__)


sys.meta_path.append(_MovedModules())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


#: Exported here by earlier releases: still resolved, kept out of ``__all__`` and ``dir()``.
_FORMER = {"Cassette", "JobExpectation", "JobResult", "ReplayPolicy", "Reply", "eventually", "expect_job"}
__all__ = sorted({*_HOMES, "__version__"} - _FORMER)
