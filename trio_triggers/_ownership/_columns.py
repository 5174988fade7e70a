"""``tt_runs`` columns <-> :class:`RunRow`, with the decode checks of ``ownership.md`` §6.4.

Shared by the SQL stores (SQLite here; the PostgreSQL store uses the same mapping): a stored
row that breaks a column rule or a row invariant raises ``RunStoreError("decode_failed")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from .._errors import RunStoreError
from ._models import (
    RUN_STATUSES,
    TERMINAL_STATUSES,
    AttemptRecord,
    CancelAcknowledgement,
    RunRow,
)
from ._owner import MAX_INSTANT, OwnerId, owner_problem

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "COLUMNS",
    "SELECT_LIST",
    "decode_row",
    "encode_ack",
    "first_table_columns",
    "row_columns",
]

COLUMNS: Final = (
    "run_id",
    "status",
    "created_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "owner_host_id",
    "owner_pid",
    "owner_nonce",
    "heartbeat_at_ms",
    "claim_host_id",
    "claim_pid",
    "claim_nonce",
    "claimed_at_ms",
    "cancel_requested_at_ms",
    "cancel_acknowledgement_json",
    "state_json",
    "flow_id",
    "input_json",
    "result_json",
    "error",
    "idempotency_key",
    "attempts",
    "output_json",
    "retry_at_ms",
    "attempt_log_json",
)
SELECT_LIST: Final = ", ".join(COLUMNS)

# The columns ``runs_0001_tt_runs`` creates (``attempts`` came with ``runs_0002``), in
# COLUMNS order: name, whether it holds an integer (else text), and its column constraint.
_FIRST_COLUMNS: Final = (
    ("run_id", False, "NOT NULL PRIMARY KEY"),
    ("status", False, "NOT NULL"),
    ("created_at_ms", True, "NOT NULL"),
    ("started_at_ms", True, ""),
    ("finished_at_ms", True, ""),
    ("owner_host_id", False, ""),
    ("owner_pid", True, ""),
    ("owner_nonce", False, ""),
    ("heartbeat_at_ms", True, ""),
    ("claim_host_id", False, ""),
    ("claim_pid", True, ""),
    ("claim_nonce", False, ""),
    ("claimed_at_ms", True, ""),
    ("cancel_requested_at_ms", True, ""),
    ("cancel_acknowledgement_json", False, ""),
    ("state_json", False, "NOT NULL"),
    ("flow_id", False, ""),
    ("input_json", False, ""),
    ("result_json", False, ""),
    ("error", False, ""),
    ("idempotency_key", False, "UNIQUE"),
)


def first_table_columns(integer: str) -> str:
    """The column definitions of the first migration's ``CREATE TABLE tt_runs``, one a line
    (each dialect writes the table constraints after them): every dialect has the same columns,
    and only the name of the 64-bit integer type differs (``integer``: SQLite's ``INTEGER``,
    PostgreSQL's ``BIGINT``)."""
    return ",\n".join(
        f"    {name} {integer if whole else 'TEXT'} {constraint}".rstrip()
        for name, whole, constraint in _FIRST_COLUMNS
    )


_ack_encoder = msgspec.json.Encoder()
_ack_decoder = msgspec.json.Decoder(CancelAcknowledgement)
_any_decoder = msgspec.json.Decoder()
_log_decoder = msgspec.json.Decoder(list[AttemptRecord])


def encode_ack(ack: CancelAcknowledgement | None) -> str | None:
    return None if ack is None else _ack_encoder.encode(ack).decode("utf-8")


def row_columns(row: RunRow) -> dict[str, object]:
    """The column values that store ``row``."""
    owner, claim = row.owner, row.claim
    return {
        "run_id": row.run_id,
        "status": row.status,
        "created_at_ms": row.created_at_ms,
        "started_at_ms": row.started_at_ms,
        "finished_at_ms": row.finished_at_ms,
        "owner_host_id": None if owner is None else owner.host_id,
        "owner_pid": None if owner is None else owner.pid,
        "owner_nonce": None if owner is None else owner.nonce,
        "heartbeat_at_ms": row.heartbeat_at_ms,
        "claim_host_id": None if claim is None else claim.host_id,
        "claim_pid": None if claim is None else claim.pid,
        "claim_nonce": None if claim is None else claim.nonce,
        "claimed_at_ms": row.claimed_at_ms,
        "cancel_requested_at_ms": row.cancel_requested_at_ms,
        "cancel_acknowledgement_json": encode_ack(row.cancel_acknowledgement),
        "state_json": row.state_json,
        "flow_id": row.flow_id,
        "input_json": row.input_json,
        "result_json": row.result_json,
        "error": row.error,
        "idempotency_key": row.idempotency_key,
        "attempts": row.attempts,
        "output_json": row.output_json,
        "retry_at_ms": row.retry_at_ms,
        "attempt_log_json": row.attempt_log_json,
    }


class _Bad(Exception):
    pass


def _instant(value: Any, name: str, *, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INSTANT:
        raise _Bad(f"column {name} is not a valid instant")
    return value


def _text(value: Any, name: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _Bad(f"column {name} is not non-empty text")
    return value


def _json(value: Any, name: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _Bad(f"column {name} is not text")
    try:
        _any_decoder.decode(value)
    except msgspec.DecodeError:
        raise _Bad(f"column {name} is not valid JSON") from None
    return value


def _identity(values: Sequence[Any], name: str) -> OwnerId | None:
    host, pid, nonce = values
    if host is None and pid is None and nonce is None:
        return None
    identity = OwnerId(host_id=host, pid=pid, nonce=nonce)
    if owner_problem(identity, name) is not None:
        raise _Bad(f"columns {name}_* do not describe a valid owner")
    return identity


def decode_row(values: Sequence[Any], method: str) -> RunRow:
    """Decode one ``SELECT_LIST`` tuple; ``RunStoreError("decode_failed")`` if it is corrupt."""
    try:
        return _decode(values)
    except _Bad as exc:
        raise RunStoreError("decode_failed", method, str(exc)) from None


def _acknowledgement(ack_text: object, requested: int | None) -> CancelAcknowledgement | None:
    """The decoded ``cancel_acknowledgement_json`` column, which exists only after a request."""
    if ack_text is None:
        return None
    if requested is None:
        raise _Bad("a cancel acknowledgement exists without a request")
    try:
        ack = _ack_decoder.decode(ack_text)  # type: ignore[arg-type]
    except (msgspec.DecodeError, TypeError):
        raise _Bad("column cancel_acknowledgement_json is not an acknowledgement") from None
    if (
        owner_problem(ack.owner, "ack.owner") is not None
        or _instant(ack.observed_at_ms, "observed_at_ms", optional=False) is None
    ):
        raise _Bad("column cancel_acknowledgement_json is not an acknowledgement")
    return ack


def _additions(v: Sequence[Any], status: str) -> tuple[int, str | None, int | None, str | None]:
    """Our columns beyond the contract's: ``attempts``, ``output_json``, ``retry_at_ms`` and
    ``attempt_log_json``."""
    attempts = v[21]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise _Bad("column attempts is not a non-negative integer")
    output_json = _json(v[22], "output_json")
    if output_json is not None and status not in TERMINAL_STATUSES:
        raise _Bad("output_json is present on a row that is not terminal")
    retry_at = _instant(v[23], "retry_at_ms")
    if retry_at is not None and status != "suspended":
        raise _Bad("retry_at_ms is present on a row that is not suspended")
    log = v[24]
    if log is not None:
        if not isinstance(log, str):
            raise _Bad("column attempt_log_json is not text")
        try:
            _log_decoder.decode(log)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _Bad("column attempt_log_json is not a list of attempts") from None
    return attempts, output_json, retry_at, log


def _decode(v: Sequence[Any]) -> RunRow:
    if len(v) != len(COLUMNS):
        raise _Bad("unexpected column count")
    run_id = _text(v[0], "run_id", optional=False)
    status = v[1]
    if not isinstance(status, str) or status not in RUN_STATUSES:
        raise _Bad("column status is not a run status")
    created = _instant(v[2], "created_at_ms", optional=False)
    started = _instant(v[3], "started_at_ms")
    finished = _instant(v[4], "finished_at_ms")
    owner = _identity(v[5:8], "owner")
    heartbeat = _instant(v[8], "heartbeat_at_ms")
    claim = _identity(v[9:12], "claim")
    claimed_at = _instant(v[12], "claimed_at_ms")
    requested = _instant(v[13], "cancel_requested_at_ms")
    ack_text = v[14]
    state = _json(v[15], "state_json", optional=False)
    flow_id = _text(v[16], "flow_id")
    input_json = _json(v[17], "input_json")
    result_json = _json(v[18], "result_json")
    error = v[19]
    key = _text(v[20], "idempotency_key")
    attempts, output_json, retry_at, attempt_log = _additions(v, status)
    if error is not None and not isinstance(error, str):
        raise _Bad("column error is not text")
    if any(x is None for x in v[5:8]) != all(x is None for x in v[5:8]):
        raise _Bad("owner columns are partly null")
    if (status == "running") != (owner is not None and heartbeat is not None):
        raise _Bad("owner and heartbeat must be set exactly while running")
    if status != "running" and (owner is not None or heartbeat is not None):
        raise _Bad("owner and heartbeat must be set exactly while running")
    claim_cols = (*v[9:12], v[12])
    if any(x is None for x in claim_cols) != all(x is None for x in claim_cols):
        raise _Bad("claim columns are partly null")
    if claim is not None and status not in ("pending", "suspended", "running"):
        raise _Bad("a claim exists on a row that cannot be claimed")
    if (finished is not None) != (status in TERMINAL_STATUSES):
        raise _Bad("finished_at_ms must be set exactly for terminal rows")
    if (started is None) != (status == "pending"):
        raise _Bad("started_at_ms must be null exactly while pending")
    ack = _acknowledgement(ack_text, requested)
    if result_json is not None and status != "completed":
        raise _Bad("result_json is present on a row that is not completed")
    if error is not None and status not in ("failed", "cancelled"):
        raise _Bad("error is present on a row that is not failed or cancelled")
    assert run_id is not None
    assert created is not None
    assert state is not None
    return RunRow(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        created_at_ms=created,
        started_at_ms=started,
        finished_at_ms=finished,
        owner=owner,
        heartbeat_at_ms=heartbeat,
        claim=claim,
        claimed_at_ms=claimed_at,
        cancel_requested_at_ms=requested,
        cancel_acknowledgement=ack,
        state_json=state,
        flow_id=flow_id,
        input_json=input_json,
        result_json=result_json,
        error=error,
        idempotency_key=key,
        attempts=attempts,
        output_json=output_json,
        retry_at_ms=retry_at,
        attempt_log_json=attempt_log,
    )
