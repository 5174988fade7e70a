"""The trigger store's rows as values, and its error vocabulary, written once for every backend.

The column constants say which columns a backend reads in which order (the ``Raw*`` rows of
:mod:`._backend`); :class:`EncodedTrigger` is ``register``'s snapshot of a declaration, as
columns. Row decoding (``could not decode trigger row <id>``), the argument checks and the
failures (``trigger store read failed`` / ``write failed``) live here so that no two stores can
disagree about them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from .._constants import MAX_OCCURRENCES, is_safe_integer
from .._declarations import (
    Backfill,
    BackfillState,
    CatchUp,
    Overlap,
    Pause,
    RegisteredTrigger,
    Trigger,
)
from .._errors import TriggerError
from .._json import decode_json, encode_input
from ._attention import DueRow
from ._decision import FireState
from ._models import MISSED_REASONS, OUTCOMES, Held, Listed, MissedCounts, Outcome
from ._protocol import READ_ONLY_METHODS

if TYPE_CHECKING:
    from ._backend import RawDue, RawState, RawTrigger

__all__ = [
    "ATTENTION_AT",
    "ATTENTION_COLUMNS",
    "BACKFILL_COLUMNS",
    "EXTRA_AT",
    "EXTRA_COLUMNS",
    "MISSED_COLUMNS",
    "REGISTERED_AT",
    "STATE_COLUMNS",
    "TRIGGER_COLUMNS",
    "EncodedTrigger",
    "RowDecodeError",
    "TriggerState",
    "check_occurrence",
    "check_text",
    "decode_error",
    "decode_outcome",
    "decode_state",
    "decode_trigger",
    "due_row",
    "encode_trigger",
    "failure_for",
    "fire_state",
    "is_int",
    "listed_row",
    "read_failed",
    "storable",
    "unknown_trigger",
    "write_failed",
]

#: The counter columns of ``tt_triggers``, in :data:`MISSED_REASONS` order (in
#: :data:`TRIGGER_COLUMNS` after the operator state); never reset by a registration.
MISSED_COLUMNS: Final = tuple(f"missed_{reason}" for reason in MISSED_REASONS)
#: The columns of a trigger's latest backfill, in :class:`~trio_triggers.Backfill` field order.
BACKFILL_COLUMNS: Final = (
    "backfill_start_ms",
    "backfill_end_ms",
    "backfill_next_ms",
    "backfill_total",
    "backfill_done",
    "backfill_bound",
    "backfill_overlap",
    "backfill_state",
    "backfill_created_at_ms",
    "backfill_by",
)

#: The declared columns of migration ``0010_trigger_failure_fields``, in
#: :class:`EncodedTrigger` order (in :data:`TRIGGER_COLUMNS` after the backfill's).
EXTRA_COLUMNS: Final = ("jitter_ms", "start_at_ms", "end_at_ms", "pause_after_failures")

#: The columns of ``tt_triggers`` in the order :class:`RawTrigger` carries them.
TRIGGER_COLUMNS: Final = (
    "trigger_id",
    "flow_id",
    "input_json",
    "cron",
    "timezone",
    "overlap",
    "catch_up",
    "max_catch_up",
    "enabled",
    "revision",
    "last_fired_at_ms",
    "pending_at_ms",
    "active_run_id",
    "active_claimed_at_ms",
    # operator state (pause and resume), not part of the declaration
    "paused_at_ms",
    "pause_note",
    "paused_by",
    "resume_after_ms",
    "removed_at_ms",
    # occurrences that will never run, by reason
    *MISSED_COLUMNS,
    # the trigger's latest backfill (migration 0008_backfills)
    *BACKFILL_COLUMNS,
    # jitter, the window and pausing after failures (migration 0010_trigger_failure_fields)
    *EXTRA_COLUMNS,
    "consecutive_failures",
)
#: Where :data:`EXTRA_COLUMNS` start in :data:`TRIGGER_COLUMNS`.
EXTRA_AT: Final = TRIGGER_COLUMNS.index(EXTRA_COLUMNS[0])
#: The columns of ``tt_triggers`` a claim or a holder method reads (:class:`RawState`).
STATE_COLUMNS: Final = (
    "revision",
    "enabled",
    "overlap",
    "active_run_id",
    "active_claimed_at_ms",
    "pending_at_ms",
    "last_fired_at_ms",
    "pause_after_failures",
    "consecutive_failures",
)

#: The columns :func:`._attention.attention_at` reads, in :data:`RawAttention` order.
ATTENTION_COLUMNS: Final = (
    "trigger_id",
    "cron",
    "timezone",
    "enabled",
    "overlap",
    "last_fired_at_ms",
    "pending_at_ms",
    "active_run_id",
    "active_claimed_at_ms",
    "registered_at_ms",
    "paused_at_ms",
    "resume_after_ms",
    "backfill_next_ms",
    "jitter_ms",
    "start_at_ms",
    "end_at_ms",
    "attention_at_ms",
)


class EncodedTrigger(msgspec.Struct, frozen=True, kw_only=True):
    """The declared columns of one ``tt_triggers`` row, snapshotted by ``register``."""

    trigger_id: str
    flow_id: str
    input_json: str
    cron: str
    timezone: str | None
    overlap: str
    catch_up: str
    max_catch_up: int
    enabled: int
    jitter_ms: int = 0
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    pause_after_failures: int | None = None

    def extra(self) -> tuple[object, ...]:
        """The :data:`EXTRA_COLUMNS` values."""
        return (self.jitter_ms, self.start_at_ms, self.end_at_ms, self.pause_after_failures)


# --- failures ------------------------------------------------------------------------------


def read_failed() -> TriggerError:
    return TriggerError("store", "trigger store read failed")


def write_failed() -> TriggerError:
    return TriggerError("store", "trigger store write failed")


def failure_for(method: str) -> TriggerError:
    """The ``store`` error a failing database operation raises in ``method`` (§9.2)."""
    return read_failed() if method in READ_ONLY_METHODS else write_failed()


# --- decoding ------------------------------------------------------------------------------

_OVERLAPS: Final = ("skip", "buffer-one", "supersede")
_CATCH_UPS: Final = ("none", "one", "all")


class RowDecodeError(ValueError):
    """Why a stored row could not be decoded (the ``__cause__`` of the ``store`` error)."""


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_int(value: object, column: str) -> int | None:
    if value is None:
        return None
    if not is_int(value):
        raise RowDecodeError(f"column {column} must be an integer or NULL")
    return int(value)  # type: ignore[call-overload, no-any-return]


def _opt_text(value: object, column: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RowDecodeError(f"column {column} must be text or NULL")
    return value


def _text(value: object, column: str) -> str:
    if not isinstance(value, str) or not value:
        raise RowDecodeError(f"column {column} must be non-empty text")
    return value


def _enabled(value: object) -> bool:
    if not is_int(value) or value not in (0, 1):
        raise RowDecodeError("column enabled must be 0 or 1")
    return value == 1


def _pause(at: object, note: object, by: object) -> Pause | None:
    since = _opt_int(at, "paused_at_ms")
    if since is None:
        return None
    return Pause(at=since, note=_opt_text(note, "pause_note"), by=_opt_text(by, "paused_by"))


_BACKFILL_STATES: Final = ("running", "done", "cancelled")


def _backfill_state(value: object) -> BackfillState:
    for choice in _BACKFILL_STATES:
        if value == choice:
            return choice
    raise RowDecodeError("column backfill_state must be running, done or cancelled")


def _backfill(raw: tuple[object, ...]) -> Backfill | None:
    (start, end, following, total, done, bound, overlap, state, created_at, by) = raw
    if state is None:
        return None

    def required(value: object, column: str) -> int:
        found = _opt_int(value, column)
        if found is None:
            raise RowDecodeError(f"column {column} must be an integer")
        return found

    return Backfill(
        start=required(start, "backfill_start_ms"),
        end=required(end, "backfill_end_ms"),
        next=_opt_int(following, "backfill_next_ms"),
        total=required(total, "backfill_total"),
        done=required(done, "backfill_done"),
        bound=required(bound, "backfill_bound"),
        overlap=None if overlap is None else _overlap(overlap),
        state=_backfill_state(state),
        created_at=required(created_at, "backfill_created_at_ms"),
        by=_opt_text(by, "backfill_by"),
    )


def _overlap(value: object) -> Overlap:
    for choice in _OVERLAPS:
        if value == choice:
            return choice
    raise RowDecodeError("column overlap must be skip, buffer-one or supersede")


def _catch_up(value: object) -> CatchUp:
    for choice in _CATCH_UPS:
        if value == choice:
            return choice
    raise RowDecodeError("column catch_up must be none, one or all")


def decode_error(trigger_id: object, cause: BaseException) -> TriggerError:
    error = TriggerError("store", f"could not decode trigger row {trigger_id}")
    error.__cause__ = cause
    return error


def _decode_trigger(raw: RawTrigger) -> tuple[RegisteredTrigger, Held]:
    (
        trigger_id,
        flow_id,
        input_json,
        cron,
        timezone,
        overlap,
        catch_up,
        max_catch_up,
        enabled,
        revision,
        last_fired_at,
        pending_at,
        active_run_id,
        _claimed_at,
        paused_at,
        pause_note,
        paused_by,
        resume_after,
        removed_at,
        *rest,
    ) = raw
    # after the counters (read by _missed)
    backfill = rest[len(MISSED_COLUMNS) : len(MISSED_COLUMNS) + len(BACKFILL_COLUMNS)]
    jitter_ms, start_at, end_at, pause_after, failures = rest[
        len(MISSED_COLUMNS) + len(BACKFILL_COLUMNS) :
    ]
    if not isinstance(input_json, str):
        raise RowDecodeError("column input_json must be text")
    try:
        value = decode_json(input_json)
    except msgspec.DecodeError as exc:
        raise RowDecodeError(f"column input_json is not JSON: {exc}") from None
    tz = _opt_text(timezone, "timezone")
    if tz == "":
        raise RowDecodeError("column timezone must be non-empty text or NULL")
    bound = _opt_int(max_catch_up, "max_catch_up")
    if bound is None or not 0 <= bound <= MAX_OCCURRENCES:
        raise RowDecodeError(f"column max_catch_up must be an integer from 0 to {MAX_OCCURRENCES}")
    rev = _opt_int(revision, "revision")
    if rev is None:
        raise RowDecodeError("column revision must be an integer")
    jitter = _opt_int(jitter_ms, "jitter_ms") or 0  # NULL: a row from before the column
    if jitter < 0:
        raise RowDecodeError("column jitter_ms must not be negative")
    threshold = _opt_int(pause_after, "pause_after_failures")
    if threshold is not None and threshold < 1:
        raise RowDecodeError("column pause_after_failures must be positive or NULL")
    registered = RegisteredTrigger(
        id=_text(trigger_id, "trigger_id"),
        flow_id=_text(flow_id, "flow_id"),
        input=value,
        cron=_text(cron, "cron"),
        timezone=tz,
        overlap=_overlap(overlap),
        catch_up=_catch_up(catch_up),
        max_catch_up=bound,
        enabled=_enabled(enabled),
        revision=rev,
        last_fired_at=_opt_int(last_fired_at, "last_fired_at_ms"),
        paused=_pause(paused_at, pause_note, paused_by),
        resume_after=_opt_int(resume_after, "resume_after_ms"),
        removed_at=_opt_int(removed_at, "removed_at_ms"),
        backfill=_backfill(tuple(backfill)),
        jitter=jitter / 1000,
        start_at=_opt_int(start_at, "start_at_ms"),
        end_at=_opt_int(end_at, "end_at_ms"),
        pause_after_failures=threshold,
        consecutive_failures=_opt_int(failures, "consecutive_failures") or 0,
    )
    held = Held(
        active_run_id=_opt_text(active_run_id, "active_run_id"),
        pending_at=_opt_int(pending_at, "pending_at_ms"),
    )
    return registered, held


def decode_trigger(raw: RawTrigger) -> tuple[RegisteredTrigger, Held]:
    """Decode a whole row, or raise ``store`` ``could not decode trigger row <id>``."""
    try:
        return _decode_trigger(raw)
    except RowDecodeError as exc:
        raise decode_error(raw[0], exc) from exc


class TriggerState(msgspec.Struct, frozen=True, kw_only=True):
    revision: int
    enabled: bool
    overlap: Overlap
    active: str | None
    claimed_at: int | None
    pending: int | None
    cursor: int | None = None
    pause_after_failures: int | None = None
    consecutive_failures: int = 0


def decode_state(trigger_id: str, raw: RawState) -> TriggerState:
    revision, enabled, overlap, active, claimed_at, pending, cursor, threshold, failures = raw
    try:
        rev = _opt_int(revision, "revision")
        if rev is None:
            raise RowDecodeError("column revision must be an integer")
        return TriggerState(
            revision=rev,
            enabled=_enabled(enabled),
            overlap=_overlap(overlap),
            active=_opt_text(active, "active_run_id"),
            claimed_at=_opt_int(claimed_at, "active_claimed_at_ms"),
            pending=_opt_int(pending, "pending_at_ms"),
            cursor=_opt_int(cursor, "last_fired_at_ms"),
            pause_after_failures=_opt_int(threshold, "pause_after_failures"),
            consecutive_failures=_opt_int(failures, "consecutive_failures") or 0,
        )
    except RowDecodeError as exc:
        raise decode_error(trigger_id, exc) from exc


def decode_outcome(value: object) -> Outcome | None:
    if value is None:
        return None
    for choice in OUTCOMES:
        if value == choice:
            return choice
    raise read_failed()


def fire_state(raw: tuple[object, object, object] | None) -> FireState | None:
    """A ledger row as read, ``(outcome, run_id, manual_key)``, as the decisions see it."""
    if raw is None:
        return None
    outcome, run_id, manual_key = raw
    return FireState(
        outcome=decode_outcome(outcome),
        run_id=run_id if isinstance(run_id, str) else None,
        manual=manual_key is not None,
    )


# --- argument checks -----------------------------------------------------------------------


def unknown_trigger(trigger_id: str) -> TriggerError:
    return TriggerError("unknown_trigger", f"unknown trigger {trigger_id}")


def storable(value: str) -> bool:
    """Text every backend can hold (PostgreSQL text has no NUL; UTF-8 has no lone surrogate)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: object, name: str) -> None:
    if value is not None and isinstance(value, str) and not storable(value):
        raise TriggerError(
            "invalid_options", f"{name} must be storable text (no NUL characters)", path=name
        )


def check_occurrence(value: object) -> int:
    if not is_safe_integer(value):
        raise TriggerError(
            "invalid_options",
            f"occurrence must be a safe integer, received {value!r}",
            path="occurrence",
        )
    return value


def encode_trigger(trigger: Trigger) -> EncodedTrigger:
    """``register``'s snapshot (§9.4 step 1): validate, deep-copy and encode the declaration."""
    checked = Trigger.make(trigger)
    try:
        input_json = encode_input(checked.input)
    except TriggerError:
        raise
    except Exception as exc:
        raise TriggerError("store", "trigger input is not JSON-serializable") from exc
    # (No second look at the text fields: ``Trigger.make`` has refused empty text, NUL and
    # lone surrogates in each, which is all ``storable`` asks.)
    return EncodedTrigger(
        trigger_id=checked.id,
        flow_id=checked.flow_id,
        input_json=input_json,
        cron=checked.cron,
        timezone=checked.timezone,
        overlap=checked.overlap,
        catch_up=checked.catch_up,
        max_catch_up=checked.max_catch_up,
        enabled=1 if checked.enabled else 0,
        jitter_ms=checked.jitter_ms,
        start_at_ms=checked.start_at,
        end_at_ms=checked.end_at,
        pause_after_failures=checked.pause_after_failures,
    )


# --- listing and due rows ------------------------------------------------------------------


_MISSED_AT = TRIGGER_COLUMNS.index(MISSED_COLUMNS[0])


def _missed(raw: RawTrigger) -> MissedCounts:
    """The counter columns of a row (NULL, as a row written before the migration reads in the
    memory store, is 0; anything else undecodable is 0 rather than failing the listing)."""
    columns = raw[_MISSED_AT : _MISSED_AT + len(MISSED_COLUMNS)]
    if not any(columns):
        return _NOTHING_MISSED  # the common row (each falsy column reads as 0 below too)
    values = [v if is_int(v) else 0 for v in columns]
    return MissedCounts(**dict(zip(MISSED_REASONS, values, strict=True)))  # type: ignore[arg-type]


_NOTHING_MISSED: Final = MissedCounts(**dict.fromkeys(MISSED_REASONS, 0))


def listed_row(raw: RawTrigger) -> Listed:
    trigger_id = raw[0] if isinstance(raw[0], str) else str(raw[0])
    try:
        registered, held = decode_trigger(raw)
    except TriggerError as error:
        active = raw[12]
        pending = raw[11]
        return Listed(
            trigger_id=trigger_id,
            trigger=None,
            error=error,
            active_run_id=active if isinstance(active, str) else None,
            pending_at=pending if is_int(pending) else None,  # type: ignore[arg-type]
            missed=_missed(raw),
        )
    return Listed(
        trigger_id=trigger_id,
        trigger=registered,
        error=None,
        active_run_id=held.active_run_id,
        pending_at=held.pending_at,
        missed=_missed(raw),
    )


REGISTERED_AT = len(TRIGGER_COLUMNS)
ATTENTION_AT = len(TRIGGER_COLUMNS) + 1


def due_row(raw: RawDue) -> DueRow:
    registered_at = raw[REGISTERED_AT]
    attention = raw[ATTENTION_AT]
    return DueRow(
        row=listed_row(raw[:REGISTERED_AT]),
        registered_at=registered_at if is_int(registered_at) else None,  # type: ignore[arg-type]
        attention_at=attention if is_int(attention) else None,  # type: ignore[arg-type]
    )
