"""Record modes, with the meaning pytest-recording and VCR.py give them.

=========  ===================================================================================
``none``   replay only: every request must be in the cassette, anything else is an error; no
           request ever reaches the recorded hosts (VCR's ``none``, pytest-recording's default)
``once``   no cassette file yet: record everything; cassette exists: behave like ``none``
``new``    replay what the cassette knows, forward and record requests it does not know
           (VCR's ``new_episodes``)
``rewrite``  never replay: forward and record everything, replacing the cassette (VCR's
           ``all``; pytest-recording's ``rewrite``, which deletes the old cassette first)
=========  ===================================================================================

VCR's spellings ``new_episodes`` and ``all`` are accepted as aliases.
"""

from __future__ import annotations

from enum import Enum

from pytest_synth_rl.errors import SynthError

__all__ = ["RecordMode", "RecordModeError"]


class RecordModeError(SynthError):
    """An unknown record mode was asked for."""


class RecordMode(str, Enum):
    NONE = "none"
    ONCE = "once"
    NEW = "new"
    REWRITE = "rewrite"

    @classmethod
    def parse(cls, value: str | RecordMode) -> RecordMode:
        if isinstance(value, RecordMode):
            return value
        text = str(value).strip().lower()
        text = {"new_episodes": "new", "all": "rewrite"}.get(text, text)
        for mode in cls:
            if mode.value == text:
                return mode
        raise RecordModeError(
            f"unknown record mode {value!r}: expected one of none, once, new, rewrite",
            hint="e.g. --synth-record=once to record missing cassettes and replay existing ones",
        )

    def __str__(self) -> str:
        return self.value
