"""pytest-synth-rl: put Synth RL training jobs under test.

Every capability is a plain library first (usable without pytest); :mod:`pytest_synth_rl.plugin`
wires them into fixtures, options and markers.
"""

from __future__ import annotations

from .assertions import EventuallyTimeout, JobExpectation, eventually, expect_job
from .baselines import (
    BaselineMismatch,
    BaselineMissing,
    BaselineStore,
    Tolerance,
    check_baseline,
    summarize_job,
)
from .client import (
    AsyncRLJob,
    EventPage,
    JobResult,
    PollRecord,
    RetryPolicy,
    RLJob,
    RLJobConfig,
    SynthCallbackWarning,
    async_list_rl_jobs,
    list_rl_jobs,
)
from .clock import Clock, RealClock, ScaledClock, VirtualClock
from .config import (
    EXPERIMENTAL_MODELS,
    SUPPORTED_RL_MODELS,
    RLBuildResult,
    build_rl_payload,
    build_rl_payload_from_mapping,
    collect_config_problems,
    load_rl_config,
    normalize_backend_url,
    validate_rl_config,
    validate_rl_payload,
)
from .errors import (
    BackendError,
    ConfigError,
    ConfigProblem,
    JobFailedError,
    JobSubmitError,
    JobTimeoutError,
    SynthError,
    TaskAppError,
)
from .fake import FakeJob, FakeSynthBackend, Scenario
from .inference import StubInference
from .masking import Secret, mask_secret, redact
from .policies import (
    ChatRequest,
    LearningPolicy,
    Policy,
    PolicyError,
    Progress,
    ReplayPolicy,
    Reply,
    RolloutIdentity,
    ScriptedPolicy,
    ToolCall,
    linear,
)
from .recording import (
    CassetteMismatchError,
    RecordingTransport,
    Replayer,
    SecretLeakError,
    use_cassette,
)
from .report import JobRecord, RunReport
from .settings import SynthSettings, resolve_settings
from .taskapp import (
    ContractReport,
    InProcessTaskApp,
    TaskAppContractError,
    assert_task_app_contract,
    check_task_app_contract,
    check_task_app_health,
)

__version__ = "0.1.0"

__all__ = [
    "EXPERIMENTAL_MODELS",
    "SUPPORTED_RL_MODELS",
    "AsyncRLJob",
    "BackendError",
    "BaselineMismatch",
    "BaselineMissing",
    "BaselineStore",
    "CassetteMismatchError",
    "ChatRequest",
    "Clock",
    "ConfigError",
    "ConfigProblem",
    "ContractReport",
    "EventPage",
    "EventuallyTimeout",
    "FakeJob",
    "FakeSynthBackend",
    "InProcessTaskApp",
    "JobExpectation",
    "JobFailedError",
    "JobRecord",
    "JobResult",
    "JobSubmitError",
    "JobTimeoutError",
    "LearningPolicy",
    "Policy",
    "PolicyError",
    "PollRecord",
    "Progress",
    "RLBuildResult",
    "RLJob",
    "RLJobConfig",
    "RealClock",
    "RecordingTransport",
    "ReplayPolicy",
    "Replayer",
    "Reply",
    "RetryPolicy",
    "RolloutIdentity",
    "RunReport",
    "ScaledClock",
    "Scenario",
    "ScriptedPolicy",
    "Secret",
    "SecretLeakError",
    "StubInference",
    "SynthCallbackWarning",
    "SynthError",
    "SynthSettings",
    "TaskAppContractError",
    "TaskAppError",
    "Tolerance",
    "ToolCall",
    "VirtualClock",
    "__version__",
    "assert_task_app_contract",
    "async_list_rl_jobs",
    "build_rl_payload",
    "build_rl_payload_from_mapping",
    "check_baseline",
    "check_task_app_contract",
    "check_task_app_health",
    "collect_config_problems",
    "eventually",
    "expect_job",
    "linear",
    "list_rl_jobs",
    "load_rl_config",
    "mask_secret",
    "normalize_backend_url",
    "redact",
    "resolve_settings",
    "summarize_job",
    "use_cassette",
    "validate_rl_config",
    "validate_rl_payload",
]
