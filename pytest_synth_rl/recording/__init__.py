"""Record a test's backend traffic once (redacted, one JSON cassette per test) and replay it
offline, in order, through respx; record modes follow pytest-recording / VCR.py."""

from __future__ import annotations

from pytest_synth_rl.recording.cassette import (
    Cassette,
    CassetteError,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    cassette_path,
)
from pytest_synth_rl.recording.matching import (
    DEFAULT_IGNORED_PATHS,
    DEFAULT_MATCH_ON,
    MatchConfig,
    RequestKey,
    request_key,
)
from pytest_synth_rl.recording.redaction import REDACTED, Redactor, SecretLeakError, find_leaks
from pytest_synth_rl.recording.replayer import (
    AsyncRecordingTransport,
    CassetteMismatchError,
    Recorder,
    RecordingTransport,
    RecordMode,
    RecordModeError,
    Replayer,
    use_cassette,
)

__all__ = [
    "DEFAULT_IGNORED_PATHS",
    "DEFAULT_MATCH_ON",
    "REDACTED",
    "AsyncRecordingTransport",
    "Cassette",
    "CassetteError",
    "CassetteMismatchError",
    "Interaction",
    "MatchConfig",
    "RecordMode",
    "RecordModeError",
    "RecordedRequest",
    "RecordedResponse",
    "Recorder",
    "RecordingTransport",
    "Redactor",
    "Replayer",
    "RequestKey",
    "SecretLeakError",
    "cassette_path",
    "find_leaks",
    "request_key",
    "use_cassette",
]
