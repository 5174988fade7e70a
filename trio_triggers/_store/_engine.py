"""The store methods, written once over a tiny synchronous transaction interface.

Every store runs each method as one transaction and hands the method body a :class:`StoreTx`:
a handful of row reads and the writes of :mod:`._decision`. The bodies here read the snapshot,
call the pure decision and apply the writes it returns. A new backend (PostgreSQL) implements
:class:`StoreTx` (locking the trigger row on :meth:`StoreTx.state`) and a ``_run`` that opens
the transaction, and inherits every rule of the contract unchanged.

Row decoding (``could not decode trigger row <id>``) and argument checks live here too, so the
stores cannot disagree about them either.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal, Protocol, TypeAlias, TypeVar

import msgspec
import trio

from .._clock import WallClock
from .._constants import MAX_OCCURRENCES, is_safe_integer
from .._cron import Cron
from .._declarations import CatchUp, Overlap, RegisteredTrigger, Trigger
from .._errors import TriggerError
from .._identities import is_reservation, mint_reservation_id, reservation_occurrence
from .._json import decode_json, encode_input
from .._wake import notify_registered
from ._attention import UNKNOWN, AttentionInputs, DueRow, attention_at
from ._decision import (
    ClaimSnapshot,
    ClearPendingIf,
    FireState,
    LeaseExpired,
    LeaseHeld,
    LeaseIdle,
    ReplaceHolder,
    SetPending,
    TriggerWrite,
    check_history_limit,
    check_prune_cutoff,
    decide,
    lease,
    page,
    plan_restore,
    plan_result,
    refuse_claim,
)
from ._models import (
    OUTCOMES,
    Claim,
    FireRecord,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    Outcome,
    PendingClaim,
    Result,
    SchedulerHeartbeat,
    is_unfinished,
)

__all__ = [
    "ATTENTION_COLUMNS",
    "TRIGGER_COLUMNS",
    "BatchItemFailed",
    "EncodedTrigger",
    "EngineStore",
    "RawAttention",
    "RawDue",
    "RawFireRecord",
    "RawState",
    "RawTrigger",
    "StoreTx",
    "attending",
    "read_failed",
    "run_bodies",
    "write_failed",
]

T = TypeVar("T")

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
)
#: The columns of ``tt_triggers`` a claim or a holder method reads (:class:`RawState`).
STATE_COLUMNS: Final = (
    "revision",
    "enabled",
    "overlap",
    "active_run_id",
    "active_claimed_at_ms",
    "pending_at_ms",
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
    "attention_at_ms",
)

RawTrigger: TypeAlias = tuple[object, ...]
"""A ``tt_triggers`` row as read, in :data:`TRIGGER_COLUMNS` order (values not yet checked)."""
RawState: TypeAlias = tuple[object, ...]
"""The :data:`STATE_COLUMNS` of one ``tt_triggers`` row, as read."""
RawAttention: TypeAlias = tuple[object, ...]
"""The :data:`ATTENTION_COLUMNS` of one ``tt_triggers`` row, as read."""
RawDue: TypeAlias = tuple[object, ...]
"""A ``due`` row: the :data:`TRIGGER_COLUMNS`, then ``registered_at_ms``, ``attention_at_ms``."""
RawFireRecord: TypeAlias = tuple[object, object, object, object, object]
"""A ledger row as read: ``(trigger_id, occurrence_at_ms, outcome, run_id, error)``."""

Method = Literal[
    "register",
    "register_many",
    "get",
    "list",
    "due",
    "next_attention",
    "holding",
    "list_enabled",
    "claim_fire",
    "claim_pending",
    "record_result",
    "restore_pending",
    "set_pending",
    "active_run",
    "active_occurrence",
    "clear_active",
    "history",
    "prune_fires",
    "inspect",
    "heartbeat",
    "last_heartbeat",
]
READ_ONLY_METHODS: Final[frozenset[str]] = frozenset(
    {
        "get",
        "list",
        "list_enabled",
        "active_occurrence",
        "history",
        "inspect",
        "last_heartbeat",
        "next_attention",
        "holding",
    }
)


def read_failed() -> TriggerError:
    return TriggerError("store", "trigger store read failed")


def write_failed() -> TriggerError:
    return TriggerError("store", "trigger store write failed")


def failure_for(method: str) -> TriggerError:
    """The ``store`` error a failing database operation raises in ``method`` (§9.2)."""
    return read_failed() if method in READ_ONLY_METHODS else write_failed()


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


class StoreTx(Protocol):
    """What a method body needs from one open transaction of a backend."""

    def trigger(self, trigger_id: str) -> RawTrigger | None:
        """The whole row of ``trigger_id``."""
        ...

    def triggers(self, *, enabled_only: bool) -> builtins.list[RawTrigger]:
        """Every row (or those with ``enabled = 1``), ordered by ``trigger_id`` (code points)."""
        ...

    def state(self, trigger_id: str) -> RawState | None:
        """The :data:`STATE_COLUMNS` of ``trigger_id`` (a SQL server locks the row here)."""
        ...

    def fire(self, trigger_id: str, occurrence: int) -> tuple[object, object] | None:
        """``(outcome, run_id)`` of the ledger row, if it exists."""
        ...

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[RawState, tuple[object, object] | None] | None:
        """:meth:`state` and :meth:`fire` in one read (``None`` when the trigger is absent)."""
        ...

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        """Insert the ledger row ``(trigger_id, occurrence, outcome NULL)`` (known absent)."""
        ...

    def apply(self, trigger_id: str, write: TriggerWrite) -> None:
        """Apply one decision write (§10.3) to ``trigger_id``'s rows."""
        ...

    def apply_all(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> None:
        """Apply ``writes`` in order (a backend may merge writes to disjoint columns)."""
        ...

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        """The greatest occurrence whose row has ``run_id`` and outcome ``launched``."""
        ...

    def upsert(self, trigger: EncodedTrigger, registered_at: int) -> None:
        """Insert with revision 1 (and ``registered_at_ms``), or overwrite the declared columns
        and add 1 to revision (``registered_at_ms`` kept)."""
        ...

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[RawAttention]:
        """The :data:`ATTENTION_COLUMNS` of the named rows (any order; absent ids omitted)."""
        ...

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        """Write ``attention_at_ms`` (and nothing else)."""
        ...

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        """Write ``registered_at_ms`` where it is NULL (rows from before the index)."""
        ...

    def due(self, now: int, limit: int) -> builtins.list[RawDue]:
        """Rows with ``attention_at_ms <= now``, earliest first (ties by id), at most
        ``limit``: the :data:`TRIGGER_COLUMNS` then ``registered_at_ms``, ``attention_at_ms``.
        A server backend locks them, skipping rows another transaction has locked."""
        ...

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        """Set ``attention_at_ms = until`` on the named rows (a ``due`` read's take)."""
        ...

    def next_attention(self) -> object:
        """The smallest non-NULL ``attention_at_ms`` (``None`` when there is none)."""
        ...

    def holding(self) -> builtins.list[RawDue]:
        """Rows with a holder (``active_run_id`` not NULL), by id, shaped as :meth:`due` rows."""
        ...

    def history(self, query: HistoryQuery, fetch: int | None) -> builtins.list[RawFireRecord]:
        """Filtered rows after ``query.cursor``, newest first, at most ``fetch`` of them."""
        ...

    def prune(self, older_than: int) -> int:
        """Delete the rows :func:`._decision.is_prunable` selects; answer how many."""
        ...

    def heartbeat(self, host: str, at: int) -> None:
        """Upsert ``(host, at)``."""
        ...

    def last_heartbeat(self) -> tuple[object, object] | None:
        """``(host, ticked_at_ms)`` with the greatest time, ties to the lowest host."""
        ...


# --- decoding ------------------------------------------------------------------------------

_OVERLAPS: Final = ("skip", "buffer-one", "supersede")
_CATCH_UPS: Final = ("none", "one", "all")


class RowDecodeError(ValueError):
    """Why a stored row could not be decoded (the ``__cause__`` of the ``store`` error)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_int(value: object, column: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
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
    if not _is_int(value) or value not in (0, 1):
        raise RowDecodeError("column enabled must be 0 or 1")
    return value == 1


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
    ) = raw
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


class _State(msgspec.Struct, frozen=True, kw_only=True):
    revision: int
    enabled: bool
    overlap: Overlap
    active: str | None
    claimed_at: int | None
    pending: int | None


def _decode_state(trigger_id: str, raw: RawState) -> _State:
    revision, enabled, overlap, active, claimed_at, pending = raw
    try:
        rev = _opt_int(revision, "revision")
        if rev is None:
            raise RowDecodeError("column revision must be an integer")
        return _State(
            revision=rev,
            enabled=_enabled(enabled),
            overlap=_overlap(overlap),
            active=_opt_text(active, "active_run_id"),
            claimed_at=_opt_int(claimed_at, "active_claimed_at_ms"),
            pending=_opt_int(pending, "pending_at_ms"),
        )
    except RowDecodeError as exc:
        raise decode_error(trigger_id, exc) from exc


def _outcome(value: object) -> Outcome | None:
    if value is None:
        return None
    for choice in OUTCOMES:
        if value == choice:
            return choice
    raise read_failed()


def _fire_state(raw: tuple[object, object] | None) -> FireState | None:
    if raw is None:
        return None
    outcome, run_id = raw
    return FireState(outcome=_outcome(outcome), run_id=run_id if isinstance(run_id, str) else None)


# --- argument checks -----------------------------------------------------------------------


def unknown_trigger(trigger_id: str) -> TriggerError:
    return TriggerError("unknown_trigger", f"unknown trigger {trigger_id}")


def _storable(value: str) -> bool:
    """Text every backend can hold (PostgreSQL text has no NUL; UTF-8 has no lone surrogate)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(value: object, name: str) -> None:
    if value is not None and isinstance(value, str) and not _storable(value):
        raise TriggerError(
            "invalid_options", f"{name} must be storable text (no NUL characters)", path=name
        )


def _check_occurrence(value: object) -> int:
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
    if not all(_storable(text) for text in (checked.id, checked.flow_id, checked.cron)):
        raise TriggerError(
            "invalid_trigger", "Trigger declaration is invalid: text must be valid Unicode"
        )
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
    )


# --- method bodies -------------------------------------------------------------------------


def _state(tx: StoreTx, trigger_id: str) -> _State:
    raw = tx.state(trigger_id) if _storable(trigger_id) else None
    if raw is None:
        raise unknown_trigger(trigger_id)
    return _decode_state(trigger_id, raw)


def _exists(tx: StoreTx, trigger_id: str) -> bool:
    return _storable(trigger_id) and tx.state(trigger_id) is not None


def _state_with_fire(
    tx: StoreTx, trigger_id: str, occurrence: int
) -> tuple[_State, tuple[object, object] | None]:
    found = tx.state_with_fire(trigger_id, occurrence) if _storable(trigger_id) else None
    if found is None:
        raise unknown_trigger(trigger_id)
    return _decode_state(trigger_id, found[0]), found[1]


def _get(tx: StoreTx, trigger_id: str) -> RegisteredTrigger | None:
    raw = tx.trigger(trigger_id) if _storable(trigger_id) else None
    return None if raw is None else decode_trigger(raw)[0]


def _claim(
    tx: StoreTx,
    trigger_id: str,
    state: _State,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
    existing: tuple[object, object] | None,
) -> Claim:
    if existing is None:
        tx.insert_fire(trigger_id, occurrence)
    active_fire: FireState | None = None
    active_occurrence = reservation_occurrence(state.active)
    if active_occurrence is not None:
        if active_occurrence == occurrence:
            active_fire = _fire_state(existing) if existing is not None else FireState()
        else:
            active_fire = _fire_state(tx.fire(trigger_id, active_occurrence))
    decision = decide(
        _snapshot(
            trigger_id,
            state,
            occurrence,
            expected_revision,
            resume_buffered,
            now,
            existing_fire=_fire_state(existing),
            active_fire=active_fire,
        )
    )
    tx.apply_all(trigger_id, decision.writes)
    return decision.claim


def _refuse(trigger_id: str, state: _State, expected_revision: int) -> None:
    # Refusals come before any write (no ledger row for a fenced claim).
    refuse_claim(
        trigger_id,
        revision=state.revision,
        enabled=state.enabled,
        expected_revision=expected_revision,
    )


def _snapshot(
    trigger_id: str,
    state: _State,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
    *,
    existing_fire: FireState | None = None,
    active_fire: FireState | None = None,
) -> ClaimSnapshot:
    return ClaimSnapshot(
        trigger_id=trigger_id,
        occurrence=occurrence,
        expected_revision=expected_revision,
        resume_buffered=resume_buffered,
        revision=state.revision,
        enabled=state.enabled,
        overlap=state.overlap,
        active=state.active,
        active_claimed_at=state.claimed_at,
        pending=state.pending,
        existing_fire=existing_fire,
        active_fire=active_fire,
        reservation_id=mint_reservation_id(trigger_id, occurrence),
        claimed_at=now,
    )


def body_claim_fire(
    tx: StoreTx,
    trigger_id: str,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
) -> Claim:
    occurrence = _check_occurrence(occurrence)
    state, existing = _state_with_fire(tx, trigger_id, occurrence)
    _refuse(trigger_id, state, expected_revision)
    return _claim(
        tx, trigger_id, state, occurrence, expected_revision, resume_buffered, now, existing
    )


def body_claim_pending(
    tx: StoreTx, trigger_id: str, expected_revision: int, now: int
) -> PendingClaim | None:
    state = _state(tx, trigger_id)
    pending = state.pending
    if pending is None:
        return None
    _refuse(trigger_id, state, expected_revision)
    existing = tx.fire(trigger_id, pending)
    claim = _claim(tx, trigger_id, state, pending, expected_revision, True, now, existing)
    if claim.claimed and claim.action != "buffer":
        tx.apply(trigger_id, ClearPendingIf(occurrence=pending))
    return PendingClaim(occurrence=pending, claim=claim)


def body_record_result(tx: StoreTx, result: Result) -> None:
    _check_occurrence(result.occurrence)
    for name in ("run_id", "reservation_id", "error"):
        _check_text(getattr(result, name), name)
    state, raw_fire = _state_with_fire(tx, result.trigger_id, result.occurrence)
    fire = _fire_state(raw_fire)
    tx.apply_all(result.trigger_id, plan_result(result, fire, state.active))


def body_restore_pending(
    tx: StoreTx, trigger_id: str, occurrence: int, reservation_id: str
) -> None:
    _check_occurrence(occurrence)
    state = _state(tx, trigger_id)
    fire: FireState | None = None
    launched = False
    if state.active == reservation_id:
        fire = _fire_state(tx.fire(trigger_id, occurrence))
        run_id = fire.run_id if fire is not None else None
        if run_id is not None and not is_reservation(run_id):
            launched = tx.launched_occurrence(trigger_id, run_id) is not None
    write = plan_restore(occurrence, reservation_id, state.active, state.pending, fire, launched)
    tx.apply(trigger_id, write)


def body_set_pending(tx: StoreTx, trigger_id: str, occurrence: int) -> None:
    _check_occurrence(occurrence)
    state = _state(tx, trigger_id)
    pending = occurrence if state.pending is None else max(state.pending, occurrence)
    if pending != state.pending:
        tx.apply(trigger_id, SetPending(pending=pending))


def body_active_run(tx: StoreTx, trigger_id: str, now: int) -> str | None:
    state = _state(tx, trigger_id)
    unfinished: FireState | None = None
    occurrence = reservation_occurrence(state.active)
    if occurrence is not None:
        fire = _fire_state(tx.fire(trigger_id, occurrence))
        if fire is not None and is_unfinished(fire.outcome):
            unfinished = fire
    verdict = lease(state.active, state.claimed_at, state.pending, now, unfinished)
    if isinstance(verdict, LeaseIdle):
        return None
    if isinstance(verdict, LeaseHeld):
        return verdict.holder
    assert isinstance(verdict, LeaseExpired)
    tx.apply(trigger_id, verdict.write)
    return verdict.holder


def body_active_occurrence(tx: StoreTx, trigger_id: str, run_id: str) -> int | None:
    if not _exists(tx, trigger_id):
        raise unknown_trigger(trigger_id)
    if is_reservation(run_id):
        return reservation_occurrence(run_id)
    if not _storable(run_id):
        return None
    return tx.launched_occurrence(trigger_id, run_id)


def body_clear_active(tx: StoreTx, trigger_id: str, run_id: str) -> None:
    if not _storable(trigger_id) or not _storable(run_id):
        return
    tx.apply(trigger_id, ReplaceHolder(expected=run_id, holder=None))


def body_history(tx: StoreTx, query: HistoryQuery) -> HistoryPage:
    for name in ("trigger_id", "run_id"):
        value = getattr(query, name)
        if value is not None and not _storable(value):
            return HistoryPage(items=[])
    cursor = query.cursor
    if cursor is not None and not _storable(cursor.trigger_id):
        raise TriggerError(
            "invalid_options", "history cursor must name a storable trigger id", path="cursor"
        )
    fetch = None if query.limit is None else query.limit + 1
    rows = tx.history(query, fetch)
    records: list[FireRecord] = []
    for trigger_id, occurrence, outcome, run_id, error in rows:
        if not isinstance(trigger_id, str) or not _is_int(occurrence):
            raise read_failed()
        records.append(
            FireRecord(
                trigger_id=trigger_id,
                occurrence=int(occurrence),  # type: ignore[call-overload]
                outcome=_outcome(outcome),
                run_id=run_id if isinstance(run_id, str) else None,
                error=error if isinstance(error, str) else None,
            )
        )
    return page(records, query)


def _listed_row(raw: RawTrigger) -> Listed:
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
            pending_at=pending if _is_int(pending) else None,  # type: ignore[arg-type]
        )
    return Listed(
        trigger_id=trigger_id,
        trigger=registered,
        error=None,
        active_run_id=held.active_run_id,
        pending_at=held.pending_at,
    )


def body_list(tx: StoreTx) -> builtins.list[Listed]:
    return [_listed_row(raw) for raw in tx.triggers(enabled_only=False)]


def body_list_enabled(tx: StoreTx) -> builtins.list[RegisteredTrigger]:
    return [decode_trigger(raw)[0] for raw in tx.triggers(enabled_only=True)]


def body_inspect(tx: StoreTx, trigger_id: str) -> Held:
    state = _state(tx, trigger_id)
    return Held(active_run_id=state.active, pending_at=state.pending)


def body_register(tx: StoreTx, encoded: EncodedTrigger, now: int) -> RegisteredTrigger:
    # §9.4 step 2: the cron must have a next occurrence from the store's now.
    Cron.parse(encoded.cron, encoded.timezone, now=now)
    tx.upsert(encoded, now)
    registered = _get(tx, encoded.trigger_id)
    if registered is None:
        raise TriggerError("store", "registered trigger disappeared")
    return registered


def _encoded_columns(encoded: EncodedTrigger) -> tuple[object, ...]:
    """The declared columns of ``encoded`` in :data:`TRIGGER_COLUMNS` order (the first nine)."""
    return (
        encoded.trigger_id,
        encoded.flow_id,
        encoded.input_json,
        encoded.cron,
        encoded.timezone,
        encoded.overlap,
        encoded.catch_up,
        encoded.max_catch_up,
        encoded.enabled,
    )


def body_register_many(
    tx: StoreTx,
    encoded: Sequence[tuple[EncodedTrigger, Cron]],
    now: int,
) -> builtins.list[RegisteredTrigger]:
    """``register`` of each declaration in one transaction; an unchanged one is left alone.

    Each declaration comes with its parsed expression, so a registration of many distinct
    schedules parses each once.
    """
    answers: list[RegisteredTrigger] = []
    inner = tx.tx if isinstance(tx, _Attending) else tx
    for one, cron in encoded:
        # §9.4 step 2 (the cron must have a next occurrence from the store's now), and for a
        # new row its attention instant: the same search.
        upcoming = cron.next(now)
        current = tx.trigger(one.trigger_id)
        if current is not None:
            if tuple(current[:9]) != _encoded_columns(one):
                answers.append(body_register(tx, one, now))  # refreshed with the transaction
            else:
                answers.append(decode_trigger(current)[0])
            continue
        # A new row: its instant is known without reading it back (never fired, nothing held,
        # registered now), so it is written here, with the expression already parsed.
        inner.upsert(one, now)
        inner.set_attention(one.trigger_id, upcoming if one.enabled == 1 else None)
        registered = _get(inner, one.trigger_id)
        if registered is None:
            raise TriggerError("store", "registered trigger disappeared")
        answers.append(registered)
    return answers


_REGISTERED_AT = len(TRIGGER_COLUMNS)
_ATTENTION_AT = len(TRIGGER_COLUMNS) + 1


def _due_row(raw: RawDue) -> DueRow:
    registered_at = raw[_REGISTERED_AT]
    attention = raw[_ATTENTION_AT]
    return DueRow(
        row=_listed_row(raw[:_REGISTERED_AT]),
        registered_at=registered_at if _is_int(registered_at) else None,  # type: ignore[arg-type]
        attention_at=attention if _is_int(attention) else None,  # type: ignore[arg-type]
    )


def body_due(tx: StoreTx, now: int, limit: int, hold_ms: int) -> builtins.list[DueRow]:
    """The rows whose attention instant has come (``due``); see :mod:`._attention`."""
    answer: list[DueRow] = []
    for raw in tx.due(now, limit):
        trigger_id = raw[0]
        if raw[_ATTENTION_AT] == UNKNOWN and isinstance(trigger_id, str):
            # A row from before the index: compute its instant now (a row that never went
            # through an indexed register counts as registered now).
            registered_at = raw[_REGISTERED_AT]
            if registered_at is None:
                tx.set_registered_at(trigger_id, now)
                registered_at = now
            computed = refresh(tx, (trigger_id,)).get(trigger_id)
            if computed is None or computed > now:
                continue
            raw = (*raw[:_REGISTERED_AT], registered_at, computed)
        answer.append(_due_row(raw))
    if hold_ms > 0 and answer:
        tx.hold([due.row.trigger_id for due in answer], now + hold_ms)
    return answer


def body_holding(tx: StoreTx) -> builtins.list[DueRow]:
    return [_due_row(raw) for raw in tx.holding()]


def body_next_attention(tx: StoreTx) -> int | None:
    value = tx.next_attention()
    return value if _is_int(value) else None  # type: ignore[return-value]


def _attention_inputs(raw: RawAttention) -> AttentionInputs | None:
    (
        _trigger_id,
        cron,
        timezone,
        enabled,
        overlap,
        last_fired_at,
        pending_at,
        active,
        claimed_at,
        registered_at,
        _attention,
    ) = raw
    if not isinstance(cron, str) or not isinstance(overlap, str):
        return None
    return AttentionInputs(
        cron=cron,
        timezone=timezone if isinstance(timezone, str) else None,
        enabled=enabled == 1,
        overlap=overlap,
        last_fired_at=last_fired_at if _is_int(last_fired_at) else None,  # type: ignore[arg-type]
        pending_at=pending_at if _is_int(pending_at) else None,  # type: ignore[arg-type]
        active=active if isinstance(active, str) else None,
        claimed_at=claimed_at if _is_int(claimed_at) else None,  # type: ignore[arg-type]
        registered_at=registered_at if _is_int(registered_at) else None,  # type: ignore[arg-type]
    )


def refresh(tx: StoreTx, trigger_ids: Iterable[str]) -> dict[str, int | None]:
    """Re-compute and write the attention instant of each named row, in the same transaction.

    Answers the instants now stored. A row whose columns cannot be read as inputs (a corrupt
    row) is made due at once, so every tick looks at it and logs why, as a listing tick did.
    """
    ids = sorted(set(trigger_ids))
    found: dict[str, int | None] = {}
    if not ids:
        return found
    for raw in tx.attention_inputs(ids):
        trigger_id = raw[0]
        if not isinstance(trigger_id, str):
            continue
        inputs = _attention_inputs(raw)
        value = UNKNOWN + 1 if inputs is None else attention_at(inputs)
        if value != raw[-1]:
            tx.set_attention(trigger_id, value)
        found[trigger_id] = value
    return found


class _Attending:
    """A :class:`StoreTx` that remembers which triggers a body wrote (see :func:`attending`)."""

    __slots__ = ("touched", "tx")

    def __init__(self, tx: StoreTx) -> None:
        self.tx = tx
        self.touched: set[str] = set()

    def trigger(self, trigger_id: str) -> RawTrigger | None:
        return self.tx.trigger(trigger_id)

    def triggers(self, *, enabled_only: bool) -> builtins.list[RawTrigger]:
        return self.tx.triggers(enabled_only=enabled_only)

    def state(self, trigger_id: str) -> RawState | None:
        return self.tx.state(trigger_id)

    def fire(self, trigger_id: str, occurrence: int) -> tuple[object, object] | None:
        return self.tx.fire(trigger_id, occurrence)

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[RawState, tuple[object, object] | None] | None:
        return self.tx.state_with_fire(trigger_id, occurrence)

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        self.tx.insert_fire(trigger_id, occurrence)

    def apply(self, trigger_id: str, write: TriggerWrite) -> None:
        self.touched.add(trigger_id)
        self.tx.apply(trigger_id, write)

    def apply_all(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> None:
        if writes:
            self.touched.add(trigger_id)
            self.tx.apply_all(trigger_id, writes)

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        return self.tx.launched_occurrence(trigger_id, run_id)

    def upsert(self, trigger: EncodedTrigger, registered_at: int) -> None:
        self.touched.add(trigger.trigger_id)
        self.tx.upsert(trigger, registered_at)

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[RawAttention]:
        return self.tx.attention_inputs(trigger_ids)

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        self.tx.set_attention(trigger_id, attention_at)

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        self.touched.add(trigger_id)
        self.tx.set_registered_at(trigger_id, registered_at)

    def due(self, now: int, limit: int) -> builtins.list[RawDue]:
        return self.tx.due(now, limit)

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        self.tx.hold(trigger_ids, until)

    def next_attention(self) -> object:
        return self.tx.next_attention()

    def holding(self) -> builtins.list[RawDue]:
        return self.tx.holding()

    def history(self, query: HistoryQuery, fetch: int | None) -> builtins.list[RawFireRecord]:
        return self.tx.history(query, fetch)

    def prune(self, older_than: int) -> int:
        return self.tx.prune(older_than)

    def heartbeat(self, host: str, at: int) -> None:
        self.tx.heartbeat(host, at)

    def last_heartbeat(self) -> tuple[object, object] | None:
        return self.tx.last_heartbeat()


def attending(body: Callable[[StoreTx, int], T]) -> Callable[[StoreTx, int], T]:
    """``body`` followed, in its transaction, by :func:`refresh` of every trigger it wrote.

    Inside a batch (:func:`run_bodies`, whose transaction is already attended) the refresh is
    left to the batch, which does it once for all its bodies.
    """

    def attended(tx: StoreTx, now: int) -> T:
        if isinstance(tx, _Attending):
            return body(tx, now)
        wrapped = _Attending(tx)
        value = body(wrapped, now)
        refresh(tx, wrapped.touched)
        return value

    return attended


def body_last_heartbeat(tx: StoreTx) -> SchedulerHeartbeat | None:
    row = tx.last_heartbeat()
    if row is None:
        return None
    host, at = row
    if not isinstance(host, str) or not _is_int(at):
        raise read_failed()
    return SchedulerHeartbeat(host=host, ticked_at=int(at))  # type: ignore[call-overload]


# --- group commit --------------------------------------------------------------------------

Body: TypeAlias = Callable[[StoreTx, int], Any]
"""A method body: ``body(tx, now)``."""
Hint: TypeAlias = tuple[str, int] | None
"""The ``(trigger_id, occurrence)`` a batched body reads first (a backend may prefetch it)."""


class BatchItemFailed(Exception):
    """A body of a batch raised (``__cause__``); the batch's transaction was rolled back.

    Backends raise it for every exception of a body except their driver's errors, which fail
    the whole batch as the store's write error.
    """


def run_bodies(
    tx: StoreTx,
    bodies: Sequence[Body],
    now: int,
    database_errors: type[BaseException] | tuple[type[BaseException], ...],
) -> builtins.list[Any]:
    """Run a batch's bodies in order on one open transaction (a backend's ``_run_batch``).

    The driver's ``database_errors`` propagate (the whole batch fails as a store error); any
    other exception of a body becomes :class:`BatchItemFailed` (each call then runs alone).
    """
    values: builtins.list[Any] = []
    attended = _Attending(tx)
    for body in bodies:
        try:
            values.append(body(attended, now))
        except database_errors:
            raise
        except Exception as exc:
            raise BatchItemFailed() from exc
    try:
        refresh(tx, attended.touched)  # once for the whole batch (one read on a server)
    except database_errors:
        raise
    except Exception as exc:
        raise BatchItemFailed() from exc
    return values


class _Queued:
    """One call waiting for (or carried by) a group transaction."""

    __slots__ = (
        "body",
        "error",
        "finished",
        "hint",
        "key",
        "method",
        "promoted",
        "taken",
        "value",
        "wake",
    )

    def __init__(self, method: Method, key: str, body: Body, hint: Hint) -> None:
        self.method: Method = method
        self.key = key
        self.body = body
        self.hint = hint
        self.taken = False  # carried by a transaction (its answer will come)
        self.finished = False  # answered
        self.promoted = False  # asked to lead the next transaction
        self.wake = trio.Event()  # set when answered or promoted
        self.value: object = None
        self.error: BaseException | None = None


class _GroupCommit:
    """Coalesces concurrent single-trigger writes of one store into shared transactions.

    A caller queues its call. If no transaction is being led, it becomes the *leader*: it yields
    once (so the calls made by the tasks running alongside it join), takes every queued call,
    runs them in one transaction ordered by trigger id (stable, so one trigger's calls keep
    their order, and two processes lock rows in the same order, so their batches cannot
    deadlock) and wakes every caller with its own answer at once. Calls that arrive meanwhile
    wait; when the transaction ends, the first of them is promoted to lead the next one with
    all of them. So the batch is exactly the calls that arrived while the previous one ran: one
    call alone is a transaction of one, and a thousand launch tasks settling at once share a
    handful.

    Semantics are those of the calls run one transaction each, in the batch's order:

    * if a body raises anything but a database error (a refusal such as ``stale_owner``, a
      corrupt row, a bad argument), the batch is rolled back *before commit* and every call
      runs again in its own transaction, so one call's refusal never changes another call's
      answer;
    * if the database fails (a lost connection, a failed commit), every call of the batch
      raises the store's write error, as each would have alone: nothing of a rolled-back
      batch is durable, and a failed commit leaves the outcome unknown exactly as it does for
      a single call. (Retrying each call alone would make every caller wait out the outage.)

    A caller cancelled while still queued leaves the queue untouched by its write (passing the
    lead on if it had been promoted); once its call is carried by a transaction it waits for
    the answer (like a call in a worker thread, which cannot be abandoned) and then sees the
    cancellation.
    """

    def __init__(self, store: EngineStore) -> None:
        self._store = store
        self._queue: list[_Queued] = []
        self._leading = False

    async def call(self, method: Method, key: str, body: Body, hint: Hint) -> Any:
        item = _Queued(method, key, body, hint)
        self._queue.append(item)
        try:
            if not self._leading:
                self._leading = True
                item.promoted = True
                await trio.lowlevel.checkpoint()  # let the calls of runnable peers join
            else:
                await item.wake.wait()
            if not item.finished:
                assert item.promoted
                assert not item.taken
                await self._lead()
        except trio.Cancelled:
            if not item.taken:
                self._queue.remove(item)
                if item.promoted:
                    self._hand_off()
                raise
            with trio.CancelScope(shield=True):
                while not item.finished:
                    item.wake = trio.Event()  # (a promotion may have set the old one)
                    await item.wake.wait()
            raise
        # A leader cancelled while its transaction ran sees the cancellation now, like a caller
        # of a worker-thread transaction (the write committed whole; its outcome is unknown).
        await trio.lowlevel.checkpoint_if_cancelled()
        if item.error is not None:
            raise item.error
        return item.value

    def _hand_off(self) -> None:
        """End the current lead; promote the first queued call to lead the next batch."""
        self._leading = False
        if self._queue:
            first = self._queue[0]
            self._leading = True
            first.promoted = True
            first.wake.set()

    async def _lead(self) -> None:
        batch = sorted(self._queue, key=lambda queued: queued.key)
        self._queue = []
        for item in batch:
            item.taken = True
        # The calls are taken: their answers must be delivered even if the leader is cancelled.
        with trio.CancelScope(shield=True):
            try:
                await self._execute(batch)
            finally:
                for item in batch:
                    item.finished = True
                    item.wake.set()
                self._hand_off()

    async def _execute(self, batch: builtins.list[_Queued]) -> None:
        store = self._store
        if len(batch) > 1:
            try:
                values = await store._run_batch(
                    [item.body for item in batch], hints=[item.hint for item in batch]
                )
            except BatchItemFailed:
                pass  # a refusal, rolled back before commit: run each call on its own, below
            except BaseException as exc:
                for item in batch:
                    item.error = _copy_failure(exc, item.method)
                return
            else:
                for item, value in zip(batch, values, strict=True):
                    item.value = value
                return
        for item in batch:
            try:
                item.value = await store._run_alone(item.method, item.body)
            except BaseException as exc:
                item.error = exc


def _copy_failure(exc: BaseException, method: str) -> BaseException:
    """A fresh error per caller for a whole-batch failure (each raise gets its own traceback)."""
    if isinstance(exc, TriggerError):
        error = TriggerError(exc.code, exc.message, path=exc.path)
        error.__cause__ = exc.__cause__
        return error
    if isinstance(exc, Exception):
        error = failure_for(method)
        error.__cause__ = exc
        return error
    return exc


# --- the store front -----------------------------------------------------------------------


class EngineStore:
    """The public methods of every store; a backend supplies :meth:`_run`.

    ``_run(method, body, now=...)`` runs ``body(tx, now)`` as one transaction of ``method``:
    read-only methods may use a read transaction. ``now`` says whether the body needs the
    store's clock (read once, when the transaction starts); otherwise the body gets ``0``.
    Failures of the backend become ``failure_for(method)`` with the driver error as cause;
    ``TriggerError``\\ s pass through unchanged.
    """

    _clock: WallClock
    #: Whether the backend implements :meth:`_run_batch` (group commit of hot writes).
    _batching: bool = False
    _group: _GroupCommit | None = None

    async def _run(
        self, method: Method, body: Callable[[StoreTx, int], T], *, now: bool = False
    ) -> T:
        raise NotImplementedError

    async def _run_alone(self, method: Method, body: Body) -> Any:
        """``_run(method, body, now=True)`` for a call of a group transaction of one.

        The group has already yielded (its cancellation point), so a backend may skip the
        checkpoint its ``_run`` takes first.
        """
        return await self._run(method, body, now=True)

    async def _run_batch(
        self, bodies: Sequence[Body], *, hints: Sequence[Hint] = ()
    ) -> builtins.list[Any]:
        """Run ``bodies`` in order in ONE write transaction (``now`` read once, at its start).

        ``hints[i]`` names the ``(trigger_id, occurrence)`` body ``i`` reads first, when known:
        a server backend reads (and locks) them all in one round trip before the bodies run.

        If a body raises, roll back and raise :class:`BatchItemFailed` from it; a failure of
        the transaction itself (begin, commit) raises the store's write error.
        """
        raise NotImplementedError

    async def _write(
        self,
        method: Method,
        key: str,
        body: Callable[[StoreTx, int], T],
        occurrence: object = None,
    ) -> T:
        """Run a single-trigger write, sharing a transaction with concurrent ones if batching."""
        body = attending(body)
        if not self._batching:
            return await self._run(method, body, now=True)
        group = self._group
        if group is None:
            group = self._group = _GroupCommit(self)
        safe = isinstance(key, str) and _storable(key)
        hint: Hint = (key, occurrence) if safe and is_safe_integer(occurrence) else None
        value: T = await group.call(method, key if safe else "", body, hint)
        return value

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        encoded = encode_trigger(trigger)  # the snapshot, before the first checkpoint
        registered = await self._run(
            "register", attending(lambda tx, now: body_register(tx, encoded, now)), now=True
        )
        notify_registered(self)  # wake this process's schedulers of this store (serve's sleep)
        return registered

    async def register_many(self, triggers: Iterable[Trigger]) -> builtins.list[RegisteredTrigger]:
        """Register every declaration in ONE transaction, in order.

        Each is validated and snapshotted first (a bad one refuses the whole call, which then
        writes nothing). A declaration equal to the stored one is left alone: no revision bump,
        so a scheduler's claims are not fenced by re-applying an unchanged config. The others
        are registered as :meth:`register` would. Answers the registered rows, in order.
        """
        encoded: list[tuple[EncodedTrigger, Cron]] = []
        for trigger in triggers:
            one = encode_trigger(trigger)
            # (The declaration's own check has just parsed this expression: a cache hit.)
            encoded.append((one, Cron.parse(one.cron, one.timezone)))
        seen: set[str] = set()
        for one, _ in encoded:
            if one.trigger_id in seen:
                raise TriggerError(
                    "invalid_trigger",
                    f"trigger {one.trigger_id} is declared twice in one registration",
                    path="id",
                )
            seen.add(one.trigger_id)
        registered = await self._run(
            "register_many",
            attending(lambda tx, now: body_register_many(tx, encoded, now)),
            now=True,
        )
        notify_registered(self)
        return registered

    # --- the attention index (docs/store.md, "The attention index") ---------------------

    async def due(self, now: int, *, limit: int = 1024, hold_ms: int = 0) -> builtins.list[DueRow]:
        """The rows whose attention instant is at or before ``now``, earliest first.

        At most ``limit`` rows. With ``hold_ms`` the rows answered are *taken*: their instant
        moves to ``now + hold_ms`` in the same transaction, so a concurrent scheduler's ``due``
        does not answer them again; the taker's next write to a row re-computes its instant,
        and a row the taker writes nothing to comes back after ``hold_ms``. On PostgreSQL the
        read skips rows another transaction has locked (``FOR UPDATE SKIP LOCKED``), so
        concurrent schedulers take disjoint rows.
        """
        if not is_safe_integer(now):
            raise TriggerError(
                "invalid_options", f"now must be a safe integer, received {now!r}", path="now"
            )
        for name, value in (("limit", limit), ("hold_ms", hold_ms)):
            if not is_safe_integer(value) or value < (1 if name == "limit" else 0):
                raise TriggerError(
                    "invalid_options",
                    f"{name} must be a {'positive' if name == 'limit' else 'non-negative'} "
                    f"safe integer, received {value!r}",
                    path=name,
                )
        return await self._run("due", lambda tx, _: body_due(tx, now, limit, hold_ms))

    async def next_attention(self) -> int | None:
        """The earliest attention instant of any row (``None`` when no row needs any)."""
        return await self._run("next_attention", lambda tx, _: body_next_attention(tx))

    async def holding(self) -> builtins.list[DueRow]:
        """Every row with a holder (a reservation or a run), by id: the recovery sweep's read."""
        return await self._run("holding", lambda tx, _: body_holding(tx))

    async def get(self, trigger_id: str) -> RegisteredTrigger | None:
        return await self._run("get", lambda tx, _: _get(tx, trigger_id))

    async def list(self) -> builtins.list[Listed]:
        return await self._run("list", lambda tx, _: body_list(tx))

    async def list_enabled(self) -> builtins.list[RegisteredTrigger]:
        return await self._run("list_enabled", lambda tx, _: body_list_enabled(tx))

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
    ) -> Claim:
        return await self._write(
            "claim_fire",
            trigger_id,
            lambda tx, now: body_claim_fire(
                tx, trigger_id, occurrence, expected_revision, resume_buffered, now
            ),
            occurrence,
        )

    async def claim_pending(
        self, trigger_id: str, *, expected_revision: int
    ) -> PendingClaim | None:
        return await self._run(
            "claim_pending",
            attending(lambda tx, now: body_claim_pending(tx, trigger_id, expected_revision, now)),
            now=True,
        )

    async def record_result(self, result: Result) -> None:
        await self._write(
            "record_result",
            getattr(result, "trigger_id", ""),
            lambda tx, _: body_record_result(tx, result),
            getattr(result, "occurrence", None),
        )

    async def restore_pending(self, trigger_id: str, occurrence: int, reservation_id: str) -> None:
        await self._run(
            "restore_pending",
            attending(
                lambda tx, _: body_restore_pending(tx, trigger_id, occurrence, reservation_id)
            ),
        )

    async def set_pending(self, trigger_id: str, occurrence: int) -> None:
        await self._run(
            "set_pending", attending(lambda tx, _: body_set_pending(tx, trigger_id, occurrence))
        )

    async def active_run(self, trigger_id: str) -> str | None:
        return await self._run(
            "active_run", attending(lambda tx, now: body_active_run(tx, trigger_id, now)), now=True
        )

    async def active_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        return await self._run(
            "active_occurrence", lambda tx, _: body_active_occurrence(tx, trigger_id, run_id)
        )

    async def clear_active(self, trigger_id: str, run_id: str) -> None:
        await self._run(
            "clear_active", attending(lambda tx, _: body_clear_active(tx, trigger_id, run_id))
        )

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        chosen = query if query is not None else HistoryQuery()
        check_history_limit(chosen.limit)
        return await self._run("history", lambda tx, _: body_history(tx, chosen))

    async def prune_fires(self, older_than: int) -> int:
        cutoff = check_prune_cutoff(older_than)
        return await self._run("prune_fires", lambda tx, _: tx.prune(cutoff))

    async def inspect(self, trigger_id: str) -> Held:
        return await self._run("inspect", lambda tx, _: body_inspect(tx, trigger_id))

    async def heartbeat(self, host: str) -> None:
        _check_text(host, "host")
        await self._run("heartbeat", lambda tx, now: tx.heartbeat(host, now), now=True)

    async def last_heartbeat(self) -> SchedulerHeartbeat | None:
        return await self._run("last_heartbeat", lambda tx, _: body_last_heartbeat(tx))
