"""Argument validation for every run-store operation (``ownership.md`` §1.6, §10.2).

Each ``check_*`` raises ``RunStoreError(code="invalid_run", method=...)`` for the first rule an
argument breaks, in the contract's validation order, before any store is touched. Messages name
the field and the rule, never the value (state and input may hold secrets).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._jsontext import json_text_problem, message_text_problem
from ._liveness import EVIDENCE_KINDS, LivenessEvidence
from ._models import (
    OUTPUT_TAIL_BYTES,
    RUN_STATUSES,
    RunOutput,
    RunRow,
    RunSnapshot,
    RunStatus,
    TransitionGuard,
)
from ._owner import (
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    check_timestamp,
    durable_text_problem,
    invalid,
    owner_problem,
    timestamp_problem,
)

__all__ = [
    "check_durable_text",
    "check_evidence",
    "check_guard",
    "check_json_text",
    "check_message_text",
    "check_output_json",
    "check_reading",
    "check_run_id",
    "check_snapshot",
    "check_to_status",
    "snapshot_problem",
]


def check_run_id(method: str, run_id: Any) -> str:
    problem = durable_text_problem(run_id, "run_id")
    if problem is not None:
        raise invalid(method, problem)
    value: str = run_id
    return value


def check_durable_text(method: str, value: Any, field: str, *, optional: bool = False) -> Any:
    if optional and value is None:
        return None
    problem = durable_text_problem(value, field)
    if problem is not None:
        raise invalid(method, problem)
    return value


def check_json_text(method: str, value: Any, field: str, *, optional: bool = False) -> Any:
    if optional and value is None:
        return None
    problem = json_text_problem(value, field)
    if problem is not None:
        raise invalid(method, problem)
    return value


def check_message_text(method: str, value: Any, field: str) -> Any:
    problem = message_text_problem(value, field)
    if problem is not None:
        raise invalid(method, problem)
    return value


_output_decoder = msgspec.json.Decoder(RunOutput)


def output_problem(value: Any, field: str = "output_json") -> str | None:
    """Why ``value`` is not a run's recorded output (a :class:`RunOutput` as JSON text)."""
    problem = json_text_problem(value, field)
    if problem is not None:
        return problem
    try:
        output = _output_decoder.decode(value)
    except msgspec.ValidationError:
        return f"{field} must be an object with stdout, stderr, stdout_bytes and stderr_bytes"
    for stream in ("stdout", "stderr"):
        text: str = getattr(output, stream)
        total: int = getattr(output, f"{stream}_bytes")
        if len(text) > OUTPUT_TAIL_BYTES:
            return f"{field}.{stream} must keep at most {OUTPUT_TAIL_BYTES} characters"
        # One byte decodes to at most one character, so a stream's size is at least that.
        if total < len(text):
            return f"{field}.{stream}_bytes must be at least the kept text's size"
    return None


def check_output_json(method: str, value: Any) -> str:
    problem = output_problem(value)
    if problem is not None:
        raise invalid(method, problem)
    text: str = value
    return text


def snapshot_problem(value: Any, field: str = "expected") -> str | None:
    """Why ``value`` cannot serve as a snapshot (§6.3), or ``None`` if it can."""
    if type(value) is not RunSnapshot and type(value) is not RunRow:
        return f"{field} must be a RunSnapshot or a RunRow"
    status = value.status
    if not isinstance(status, str) or status not in RUN_STATUSES:
        return f"{field}.status must be one of the six run statuses"
    if status == "running":
        problem = owner_problem(value.owner, f"{field}.owner")
        if problem is not None:
            return problem
        return timestamp_problem(value.heartbeat_at_ms, f"{field}.heartbeat_at_ms")
    if value.owner is not None:
        return f"{field}.owner must be None unless the status is running"
    if value.heartbeat_at_ms is not None:
        return f"{field}.heartbeat_at_ms must be None unless the status is running"
    return None


def check_snapshot(method: str, value: Any) -> RunSnapshot:
    """Admit a snapshot or a row (reduced to its three guarded fields)."""
    problem = snapshot_problem(value)
    if problem is not None:
        raise invalid(method, problem)
    if type(value) is RunRow:
        return value.snapshot
    snapshot: RunSnapshot = value
    return snapshot


def check_reading(method: str, now_ms: Any, store_now_ms: int) -> int:
    """A lease reading: a valid timestamp at most the skew allowance ahead of the store clock."""
    now = check_timestamp(method, now_ms, "now_ms")
    if now > store_now_ms + HEARTBEAT_SKEW_ALLOWANCE_MS:
        raise invalid(method, "now_ms is more than the skew allowance ahead of the store clock")
    return now


def check_evidence(method: str, value: Any) -> LivenessEvidence:
    """Structural validation of evidence (§4.4); matching is a separate, later question."""
    if type(value) is not LivenessEvidence:
        raise invalid(method, "evidence must be a LivenessEvidence")
    problem = owner_problem(value.expected_owner, "evidence.expected_owner")
    if problem is None:
        problem = timestamp_problem(value.checked_at_ms, "evidence.checked_at_ms")
    if problem is None and (not isinstance(value.kind, str) or value.kind not in EVIDENCE_KINDS):
        problem = "evidence.kind must be one of the three evidence kinds"
    if problem is not None:
        raise invalid(method, problem)
    return value


def check_to_status(method: str, value: Any) -> RunStatus:
    if not isinstance(value, str) or value not in RUN_STATUSES:
        raise invalid(method, "to_status must be one of the six run statuses")
    if value == "pending":
        raise invalid(method, "to_status must not be pending")
    status: RunStatus = value  # type: ignore[assignment]
    return status


def check_guard(method: str, value: Any) -> TransitionGuard | None:
    if value is None:
        return None
    if type(value) is not TransitionGuard:
        raise invalid(method, "guard must be a TransitionGuard or None")
    if value.cancel_requested not in (None, "absent", "present"):
        raise invalid(method, "guard.cancel_requested must be None, 'absent' or 'present'")
    return value
