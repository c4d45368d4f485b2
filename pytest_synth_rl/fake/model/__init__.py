"""Policies: how the offline stand-in model answers the task app's chat-completions calls.

The protocol is :mod:`.policy`'s; LearningPolicy, ScriptedPolicy and ReplayPolicy are ready-made.
"""

from pytest_synth_rl.fake.model.learning import (
    SUBMIT_ANSWER_TOOL,
    ArithmeticPolicy,
    Curve,
    LearningPolicy,
    linear,
    parse_arithmetic,
    solve_arithmetic,
)
from pytest_synth_rl.fake.model.policy import (
    ChatRequest,
    Policy,
    PolicyError,
    PolicyReply,
    Progress,
    ReplayError,
    ReplayPolicy,
    Reply,
    RolloutIdentity,
    ScriptedPolicy,
    ToolCall,
    answer_with,
    last_user_text,
    offered_tools,
    tool_call,
)

__all__ = [
    "SUBMIT_ANSWER_TOOL",
    "ArithmeticPolicy",
    "ChatRequest",
    "Curve",
    "LearningPolicy",
    "Policy",
    "PolicyError",
    "PolicyReply",
    "Progress",
    "ReplayError",
    "ReplayPolicy",
    "Reply",
    "RolloutIdentity",
    "ScriptedPolicy",
    "ToolCall",
    "answer_with",
    "last_user_text",
    "linear",
    "offered_tools",
    "parse_arithmetic",
    "solve_arithmetic",
    "tool_call",
]
