"""Record and replay backend traffic: cassettes, redaction, recording transports, replay.

A test's conversation with the Synth backend is captured once (redacted, into one JSON cassette
per test) and replayed offline afterwards, in order, through respx. Record modes follow
pytest-recording / VCR.py; see :mod:`.modes`.
"""

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
from pytest_synth_rl.recording.modes import RecordMode, RecordModeError
from pytest_synth_rl.recording.recorder import AsyncRecordingTransport, Recorder, RecordingTransport
from pytest_synth_rl.recording.redaction import REDACTED, Redactor, SecretLeakError, find_leaks
from pytest_synth_rl.recording.replayer import CassetteMismatchError, Replayer, use_cassette

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
