"""The store methods' bodies, written once over :class:`~._backend.StoreTx`.

Every store runs each method as one transaction and hands its body a :class:`StoreTx`: a handful
of row reads and the writes of :mod:`._decision`. A body reads the snapshot, calls the pure
decision and applies the writes it returns, so every backend inherits every rule of the contract
unchanged. (The attention index's bodies and the refresh that follows every write are in
:mod:`._index`.)
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

import msgspec

from .._cron import Cron
from .._declarations import RegisteredTrigger
from .._errors import TriggerError
from .._identities import (
    is_manual_reservation,
    is_reservation,
    mint_reservation_id,
    reservation_occurrence,
)
from .._json import decode_json
from ._backfill import (
    SetBackfill,
    cancel_backfill,
    check_backfill_arguments,
    may_step,
    plan_backfill,
    plan_step,
)
from ._codec import (
    ATTENTION_COLUMNS,
    EXTRA_AT,
    EXTRA_COLUMNS,
    EncodedTrigger,
    TriggerState,
    check_occurrence,
    check_text,
    decode_outcome,
    decode_state,
    decode_trigger,
    encode_trigger,
    fire_state,
    is_int,
    listed_row,
    read_failed,
    storable,
    unknown_trigger,
)
from ._decision import (
    ClaimSnapshot,
    ClearPendingIf,
    CountMissed,
    FireState,
    LeaseExpired,
    LeaseHeld,
    LeaseIdle,
    ReplaceHolder,
    SetFailures,
    SetPause,
    SetPending,
    SetRemoved,
    decide,
    lease,
    off_grid,
    on_grid,
    page,
    plan_failures,
    plan_restore,
    plan_result,
    refuse_claim,
    refuse_manual,
    slot_displaced,
)
from ._index import Attending
from ._models import (
    SKIPPED_COUNT_LIMIT,
    Claim,
    Dropped,
    FireRecord,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    ManualFire,
    ManualRequest,
    Outcome,
    PendingClaim,
    Result,
    Resumed,
    ResumePoint,
    SchedulerHeartbeat,
    is_unfinished,
)

if TYPE_CHECKING:
    import builtins
    from collections.abc import Sequence

    from .._declarations import CatchUp, Overlap
    from ._backend import RawFire, RawManualFire, StoreTx

__all__ = [
    "body_active_occurrence",
    "body_active_run",
    "body_backfill_step",
    "body_cancel_backfill",
    "body_claim_fire",
    "body_claim_manual",
    "body_claim_pending",
    "body_clear_active",
    "body_get",
    "body_history",
    "body_inspect",
    "body_last_heartbeat",
    "body_list",
    "body_list_enabled",
    "body_pause",
    "body_record_result",
    "body_register",
    "body_register_many",
    "body_remove",
    "body_restore_pending",
    "body_resume",
    "body_set_pending",
    "body_start_backfill",
    "missed_of",
]

T = TypeVar("T")

Counted: TypeAlias = tuple[T, CountMissed | None]
"""A body's answer and the occurrences its transaction gave up (reported once it commits)."""


def missed_of(writes: Sequence[object]) -> CountMissed | None:
    """The :class:`CountMissed` among a decision's ``writes`` (it pushes at most one)."""
    for write in writes:
        if isinstance(write, CountMissed):
            return write
    return None


def _state(tx: StoreTx, trigger_id: str) -> TriggerState:
    raw = tx.state(trigger_id) if storable(trigger_id) else None
    if raw is None:
        raise unknown_trigger(trigger_id)
    return decode_state(trigger_id, raw)


def _exists(tx: StoreTx, trigger_id: str) -> bool:
    return storable(trigger_id) and tx.state(trigger_id) is not None


def _state_with_fire(
    tx: StoreTx, trigger_id: str, occurrence: int
) -> tuple[TriggerState, RawFire | None]:
    found = tx.state_with_fire(trigger_id, occurrence) if storable(trigger_id) else None
    if found is None:
        raise unknown_trigger(trigger_id)
    return decode_state(trigger_id, found[0]), found[1]


def body_get(tx: StoreTx, trigger_id: str) -> RegisteredTrigger | None:
    raw = tx.trigger(trigger_id) if storable(trigger_id) else None
    return None if raw is None else decode_trigger(raw)[0]


def _claim(
    tx: StoreTx,
    trigger_id: str,
    state: TriggerState,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
    existing: RawFire | None,
    dropped: Dropped | None = None,
    *,
    new_manual: tuple[str, str, str | None] | None = None,
    overlap_override: Overlap | None = None,
) -> Counted[Claim]:
    """The claim decision of ``occurrence`` (§10.2), its ledger row inserted when absent.

    ``new_manual`` (key, input JSON, by) makes the inserted row a manual fire's; a manual
    fire's row, new or pending, is decided like a boundary's, with its own reservation mark and
    never a cursor write.
    """
    existing_fire = fire_state(existing)
    if existing is None:
        if new_manual is None:
            tx.insert_fire(trigger_id, occurrence)
        else:
            tx.insert_manual_fire(trigger_id, occurrence, *new_manual)
    manual = new_manual is not None or (existing_fire is not None and existing_fire.manual)
    active_fire: FireState | None = None
    active_occurrence = reservation_occurrence(state.active)
    if active_occurrence is not None:
        if active_occurrence == occurrence:
            active_fire = fire_state(existing) if existing is not None else FireState()
        else:
            active_fire = fire_state(tx.fire(trigger_id, active_occurrence))
    decision = decide(
        _snapshot(
            trigger_id,
            state,
            occurrence,
            expected_revision,
            resume_buffered,
            now,
            existing_fire=existing_fire,
            active_fire=active_fire,
            dropped=dropped,
            manual=manual,
            overlap_override=overlap_override,
        )
    )
    tx.apply_all(trigger_id, decision.writes)
    return decision.claim, missed_of(decision.writes)


def _refuse(trigger_id: str, state: TriggerState, expected_revision: int) -> None:
    # Refusals come before any write (no ledger row for a fenced claim).
    refuse_claim(
        trigger_id,
        revision=state.revision,
        enabled=state.enabled,
        expected_revision=expected_revision,
    )


def _snapshot(
    trigger_id: str,
    state: TriggerState,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
    *,
    existing_fire: FireState | None = None,
    active_fire: FireState | None = None,
    dropped: Dropped | None = None,
    manual: bool = False,
    overlap_override: Overlap | None = None,
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
        reservation_id=mint_reservation_id(trigger_id, occurrence, manual=manual),
        claimed_at=now,
        cursor=state.cursor,
        dropped=dropped,
        manual=manual,
        overlap_override=overlap_override,
    )


def body_claim_fire(
    tx: StoreTx,
    trigger_id: str,
    occurrence: int,
    expected_revision: int,
    resume_buffered: bool,
    now: int,
    dropped: Dropped | None = None,
) -> Counted[Claim]:
    occurrence = check_occurrence(occurrence)
    state, existing = _state_with_fire(tx, trigger_id, occurrence)
    _refuse(trigger_id, state, expected_revision)
    return _claim(
        tx,
        trigger_id,
        state,
        occurrence,
        expected_revision,
        resume_buffered,
        now,
        existing,
        dropped,
    )


def body_claim_pending(
    tx: StoreTx, trigger_id: str, expected_revision: int, now: int
) -> Counted[PendingClaim | None]:
    state = _state(tx, trigger_id)
    pending = state.pending
    if pending is None:
        return None, None
    _refuse(trigger_id, state, expected_revision)
    existing = tx.fire(trigger_id, pending)
    claim, missed = _claim(tx, trigger_id, state, pending, expected_revision, True, now, existing)
    if claim.claimed and claim.action != "buffer":
        tx.apply(trigger_id, ClearPendingIf(occurrence=pending))
    manual: ManualRequest | None = None
    key = existing[2] if existing is not None else None
    if isinstance(key, str):
        found = tx.manual_fire(key)
        if found is not None:
            manual = _manual_request(key, found)
    return PendingClaim(occurrence=pending, claim=claim, manual=manual), missed


# --- manual fires ("run now", docs/operations.md) ------------------------------------------


def _manual_request(key: str, found: RawManualFire) -> ManualRequest:
    input_json, by = found[4], found[5]
    if not isinstance(input_json, str):
        raise read_failed()
    try:
        value = decode_json(input_json)
    except msgspec.DecodeError as exc:
        raise read_failed() from exc
    return ManualRequest(key=key, input=value, by=by if isinstance(by, str) else None)


def _repeated(trigger: RegisteredTrigger, key: str, found: RawManualFire) -> ManualFire:
    """The answer to a key used before: the earlier fire, or ``key_conflict`` (another
    trigger's key: keys name one fire in the whole store)."""
    trigger_id = trigger.id
    owner, occurrence = found[0], found[1]
    if owner != trigger_id:
        raise TriggerError(
            "key_conflict",
            f"key {key!r} already names a manual fire of another trigger ({owner})",
            path="key",
        )
    if not is_int(occurrence):
        raise read_failed()
    run_id = found[3]
    return ManualFire(
        trigger_id=trigger_id,
        occurrence=int(occurrence),  # type: ignore[call-overload]
        request=_manual_request(key, found),
        claim=Claim(claimed=False),
        trigger=trigger,
        repeated=True,
        outcome=decode_outcome(found[2]),
        run_id=run_id if isinstance(run_id, str) else None,
    )


def body_claim_manual(
    tx: StoreTx,
    trigger_id: str,
    key: str | None,
    input_json: str | None,
    by: str | None,
    overlap: Overlap | None,
    now: int,
) -> Counted[ManualFire]:
    """Fire ``trigger_id`` now: a manual ledger row at an off-grid instant, claimed like a
    boundary (the overlap policy, or ``overlap`` for this fire only), never moving the cursor.

    A ``key`` used before for this trigger answers that fire and writes nothing; used for
    another trigger, ``key_conflict``. A disabled or paused trigger is refused.
    """
    state = _state(tx, trigger_id)  # first read: locks the trigger row on a server
    raw = tx.trigger(trigger_id)
    if raw is None:
        raise unknown_trigger(trigger_id)
    current = decode_trigger(raw)[0]
    if key is not None:
        found = tx.manual_fire(key)
        if found is not None:
            return _repeated(current, key, found), None
    refuse_manual(trigger_id, enabled=current.enabled, paused=current.paused is not None)
    chosen_key = key if key is not None else f"manual-{uuid.uuid4()}"
    # Without an input of its own the run gets the trigger's input as it is now.
    chosen_input = input_json if input_json is not None else raw[2]
    if not isinstance(chosen_input, str):
        raise read_failed()
    # The request's instant, off the grid of whole seconds (so never a boundary's row), moved
    # back by a millisecond while another fire of this trigger has that instant.
    occurrence = off_grid(now)
    while tx.fire(trigger_id, occurrence) is not None:
        occurrence = off_grid(occurrence - 1)
    claim, missed = _claim(
        tx,
        trigger_id,
        state,
        occurrence,
        state.revision,
        False,
        now,
        None,
        new_manual=(chosen_key, chosen_input, by),
        overlap_override=overlap,
    )
    request = ManualRequest(key=chosen_key, input=decode_json(chosen_input), by=by)
    outcome: Outcome | None = None
    if claim.action == "skip":
        outcome = "skipped"
    elif claim.action == "buffer":
        outcome = "buffered"
    return ManualFire(
        trigger_id=trigger_id,
        occurrence=occurrence,
        request=request,
        claim=claim,
        trigger=current,
        outcome=outcome,
    ), missed


def body_record_result(tx: StoreTx, result: Result, at: int) -> None:
    """``record_result``; ``at`` is the store's clock when ``result`` is a failure (the time
    of the pause it may cause), else unused."""
    check_occurrence(result.occurrence)
    for name in ("run_id", "reservation_id", "error", "by"):
        check_text(getattr(result, name), name)
    state, raw_fire = _state_with_fire(tx, result.trigger_id, result.occurrence)
    fire = fire_state(raw_fire)
    writes = plan_result(result, fire, state.active)
    if writes:
        # pause_after_failures: counted, and the pause taken, with the result that decides it.
        writes += plan_failures(
            result,
            fire.outcome if fire is not None else None,
            consecutive=state.consecutive_failures,
            threshold=state.pause_after_failures,
            at=at,
            by=result.by,
        )
    tx.apply_all(result.trigger_id, writes)


def body_restore_pending(
    tx: StoreTx, trigger_id: str, occurrence: int, reservation_id: str
) -> Counted[None]:
    check_occurrence(occurrence)
    state = _state(tx, trigger_id)
    fire: FireState | None = None
    launched = False
    if state.active == reservation_id:
        fire = fire_state(tx.fire(trigger_id, occurrence))
        run_id = fire.run_id if fire is not None else None
        if run_id is not None and not is_reservation(run_id):
            launched = tx.launched_occurrence(trigger_id, run_id) is not None
    write = plan_restore(occurrence, reservation_id, state.active, state.pending, fire, launched)
    tx.apply(trigger_id, write)
    return None, _apply_missed(tx, trigger_id, slot_displaced(state.pending, occurrence))


def body_set_pending(tx: StoreTx, trigger_id: str, occurrence: int) -> Counted[None]:
    check_occurrence(occurrence)
    state = _state(tx, trigger_id)
    pending = occurrence if state.pending is None else max(state.pending, occurrence)
    if pending != state.pending:
        tx.apply(trigger_id, SetPending(pending=pending))
    return None, _apply_missed(tx, trigger_id, slot_displaced(state.pending, occurrence))


def _apply_missed(tx: StoreTx, trigger_id: str, missed: CountMissed | None) -> CountMissed | None:
    if missed is not None:
        tx.apply(trigger_id, missed)
    return missed


def body_active_run(tx: StoreTx, trigger_id: str, now: int) -> Counted[str | None]:
    state = _state(tx, trigger_id)
    unfinished: FireState | None = None
    occurrence = reservation_occurrence(state.active)
    if occurrence is not None:
        fire = fire_state(tx.fire(trigger_id, occurrence))
        if fire is not None and is_unfinished(fire.outcome):
            unfinished = fire
    verdict = lease(state.active, state.claimed_at, state.pending, now, unfinished)
    if isinstance(verdict, LeaseIdle):
        return None, None
    if isinstance(verdict, LeaseHeld):
        return verdict.holder, None
    assert isinstance(verdict, LeaseExpired)
    tx.apply(trigger_id, verdict.write)
    return verdict.holder, _apply_missed(tx, trigger_id, verdict.missed)


def body_active_occurrence(tx: StoreTx, trigger_id: str, run_id: str) -> int | None:
    if not _exists(tx, trigger_id):
        raise unknown_trigger(trigger_id)
    if is_reservation(run_id):
        return reservation_occurrence(run_id)
    if not storable(run_id):
        return None
    return tx.launched_occurrence(trigger_id, run_id)


def body_clear_active(tx: StoreTx, trigger_id: str, run_id: str) -> None:
    if not storable(trigger_id) or not storable(run_id):
        return
    tx.apply(trigger_id, ReplaceHolder(expected=run_id, holder=None))


def body_history(tx: StoreTx, query: HistoryQuery) -> HistoryPage:
    for name in ("trigger_id", "run_id"):
        value = getattr(query, name)
        if value is not None and not storable(value):
            return HistoryPage(items=[])
    cursor = query.cursor
    if cursor is not None and not storable(cursor.trigger_id):
        raise TriggerError(
            "invalid_options", "history cursor must name a storable trigger id", path="cursor"
        )
    fetch = None if query.limit is None else query.limit + 1
    rows = tx.history(query, fetch)
    records: list[FireRecord] = []
    for trigger_id, occurrence, outcome, run_id, error, manual_key in rows:
        if not isinstance(trigger_id, str) or not is_int(occurrence):
            raise read_failed()
        records.append(
            FireRecord(
                trigger_id=trigger_id,
                occurrence=int(occurrence),  # type: ignore[call-overload]
                outcome=decode_outcome(outcome),
                run_id=run_id if isinstance(run_id, str) else None,
                error=error if isinstance(error, str) else None,
                manual_key=manual_key if isinstance(manual_key, str) else None,
            )
        )
    return page(records, query)


def body_list(tx: StoreTx) -> builtins.list[Listed]:
    return [listed_row(raw) for raw in tx.triggers(enabled_only=False)]


def body_list_enabled(tx: StoreTx) -> builtins.list[RegisteredTrigger]:
    return [decode_trigger(raw)[0] for raw in tx.triggers(enabled_only=True)]


def body_inspect(tx: StoreTx, trigger_id: str) -> Held:
    state = _state(tx, trigger_id)
    return Held(active_run_id=state.active, pending_at=state.pending)


def body_register(tx: StoreTx, encoded: EncodedTrigger, now: int) -> RegisteredTrigger:
    # §9.4 step 2: the cron must have a next occurrence from the store's now.
    Cron.parse(encoded.cron, encoded.timezone, now=now)
    tx.upsert(encoded, now)
    registered = body_get(tx, encoded.trigger_id)
    if registered is None:
        raise TriggerError("store", "registered trigger disappeared")
    return registered


def _declared_columns(raw: tuple[object, ...]) -> tuple[object, ...]:
    """A row's declared columns, as :func:`_encoded_columns` gives them (a NULL ``jitter_ms``
    of a row from before the column reads as its default)."""
    extra = list(raw[EXTRA_AT : EXTRA_AT + len(EXTRA_COLUMNS)])
    if extra[0] is None:
        extra[0] = 0
    return (*raw[:9], *extra)


def _encoded_columns(encoded: EncodedTrigger) -> tuple[object, ...]:
    """The declared columns of ``encoded``: the first nine of :data:`TRIGGER_COLUMNS`, then
    :data:`EXTRA_COLUMNS`."""
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
        *encoded.extra(),
    )


def body_register_many(
    tx: StoreTx,
    encoded: Sequence[tuple[EncodedTrigger, Cron]],
    now: int,
) -> builtins.list[RegisteredTrigger]:
    """``register`` of each declaration in one transaction; an unchanged one is left alone.

    Built for a config of a million triggers (docs/store.md, "Registering many"): one read of
    the rows that exist (a few statements), the new rows written by multi-row inserts with
    their attention instants, and each distinct expression's next occurrence computed once.
    A new row's answer is made from its declaration (revision 1, never fired, nothing held:
    what reading it back would give); a changed one is registered as :func:`body_register`
    does, an unchanged one answered from its row. Each declaration comes with its parsed
    expression, so a registration of many distinct schedules parses each once.
    """
    inner = tx.tx if isinstance(tx, Attending) else tx
    existing = {raw[0]: raw for raw in inner.triggers_named([one.trigger_id for one, _ in encoded])}
    answers: list[RegisteredTrigger | None] = []
    fresh: list[tuple[EncodedTrigger, int | None]] = []
    upcoming: dict[int, int] = {}  # id(cron) -> its next occurrence after now
    for one, cron in encoded:
        # §9.4 step 2 (the cron must have a next occurrence from the store's now), and for a
        # new row its attention instant: the same search, once per distinct expression.
        following = upcoming.get(id(cron))
        if following is None:
            following = upcoming[id(cron)] = cron.next(now)
        current = existing.get(one.trigger_id)
        if current is None:
            fresh.append((one, following if one.enabled == 1 else None))
            answers.append(None)
        elif _declared_columns(current) != _encoded_columns(one):
            answers.append(body_register(tx, one, now))  # refreshed with the transaction
        else:
            answers.append(decode_trigger(current)[0])
    inserted = inner.insert_new(fresh, now) if fresh else set()
    made = iter(fresh)
    done: list[RegisteredTrigger] = []
    for answer in answers:
        if answer is None:
            one = next(made)[0]
            # Not inserted: registered meanwhile by a concurrent transaction (a server
            # database); then registered here the ordinary way.
            inserted_here = one.trigger_id in inserted
            answer = _new_row(one) if inserted_here else body_register(tx, one, now)
        done.append(answer)
    return done


def _new_row(encoded: EncodedTrigger) -> RegisteredTrigger:
    """The trigger a new row of ``encoded`` decodes to (revision 1, nothing else set)."""
    return RegisteredTrigger(
        id=encoded.trigger_id,
        flow_id=encoded.flow_id,
        input=decode_json(encoded.input_json),
        cron=encoded.cron,
        timezone=encoded.timezone,
        overlap=cast("Overlap", encoded.overlap),  # (validated by Trigger.make before encoding)
        catch_up=cast("CatchUp", encoded.catch_up),
        max_catch_up=encoded.max_catch_up,
        enabled=encoded.enabled == 1,
        jitter=encoded.jitter_ms / 1000,
        start_at=encoded.start_at_ms,
        end_at=encoded.end_at_ms,
        pause_after_failures=encoded.pause_after_failures,
        revision=1,
    )


def body_last_heartbeat(tx: StoreTx) -> SchedulerHeartbeat | None:
    row = tx.last_heartbeat()
    if row is None:
        return None
    host, at = row
    if not isinstance(host, str) or not is_int(at):
        raise read_failed()
    return SchedulerHeartbeat(host=host, ticked_at=int(at))  # type: ignore[call-overload]


# --- operator state: pause and resume ------------------------------------------------------


def _registered(tx: StoreTx, trigger_id: str) -> RegisteredTrigger:
    found = body_get(tx, trigger_id)
    if found is None:
        raise unknown_trigger(trigger_id)
    return found


def body_pause(
    tx: StoreTx, trigger_id: str, note: str | None, by: str | None, now: int
) -> RegisteredTrigger:
    """Pause ``trigger_id`` from ``now``; a paused one keeps its time (a new note replaces)."""
    check_text(note, "note")
    check_text(by, "by")
    current = _registered(tx, trigger_id)
    pause = current.paused
    if pause is not None:
        if note is None or (note == pause.note and by == pause.by):
            return current  # already paused, nothing to change: no write, no revision bump
        write = SetPause(paused_at=pause.at, note=note, by=by, resume_after=current.resume_after)
    else:
        write = SetPause(paused_at=now, note=note, by=by, resume_after=current.resume_after)
    tx.apply(trigger_id, write)
    return _registered(tx, trigger_id)


def count_skipped(trigger: RegisteredTrigger, since: int, until: int) -> tuple[int, bool]:
    """The occurrences in ``(since, until]`` (at most ``SKIPPED_COUNT_LIMIT``, and whether
    there were more)."""
    cron = Cron.parse(trigger.cron, trigger.timezone, now=until)
    count = 0
    # Only the window's boundaries were ever owed (docs/declarations.md, "Jitter, windows and
    # pausing after failures"), so only they can be given up.
    if trigger.start_at is not None:
        since = max(since, trigger.start_at - 1)
    if trigger.end_at is not None:
        until = min(until, trigger.end_at)
    cursor = since
    while True:
        cursor = cron.next(cursor)
        if cursor > until:
            return count, False
        if count == SKIPPED_COUNT_LIMIT:
            return count, True
        count += 1


def body_resume(tx: StoreTx, trigger_id: str, point: ResumePoint, now: int) -> Resumed:
    """End ``trigger_id``'s pause; from ``"now"``, nothing at or before ``now`` is owed."""
    if point not in ("now", "policy"):
        raise TriggerError(
            "invalid_options", "resume point must be 'now' or 'policy'", path="point"
        )
    state = _state(tx, trigger_id)  # first read: locks the trigger row on a server
    current = _registered(tx, trigger_id)
    pause = current.paused
    if pause is None:
        return Resumed(trigger=current, point=point, was_paused=False)
    resume_after = current.resume_after
    skipped, more = 0, False
    if point == "now":
        # Counted after the last boundary taken care of: fired (the cursor), floored by an
        # earlier resume, claimed (a reservation's boundary, before its launch moves the
        # cursor) or buffered. A manual fire's instant is no boundary and marks nothing.
        held = None if is_manual_reservation(state.active) else reservation_occurrence(state.active)
        pending = state.pending
        buffered = pending if pending is not None and on_grid(pending) else None
        marks = [m for m in (current.last_fired_at, resume_after, held, buffered) if m is not None]
        since = max(marks) if marks else pause.at - 1
        skipped, more = count_skipped(current, since, now)
        resume_after = now if resume_after is None else max(resume_after, now)
    tx.apply(trigger_id, SetPause(paused_at=None, note=None, by=None, resume_after=resume_after))
    if current.consecutive_failures:
        tx.apply(trigger_id, SetFailures(count=0))  # a resume starts the run of failures over
    if skipped:
        tx.apply(trigger_id, CountMissed(paused=skipped))  # counted where they are given up
    return Resumed(
        trigger=_registered(tx, trigger_id),
        point=point,
        was_paused=True,
        skipped=skipped,
        skipped_more=more,
    )


def body_remove(tx: StoreTx, trigger_id: str, now: int) -> RegisteredTrigger:
    """Retire ``trigger_id``: register its declaration disabled and mark it removed at ``now``.

    The store has no delete (a trigger's ledger, cursor and holder are what make restarts
    exact); removing keeps all of them and is undone by a registration that enables it.
    """
    current = _registered(tx, trigger_id)
    if current.enabled:
        disabled = encode_trigger(msgspec.structs.replace(current.declaration, enabled=False))
        tx.upsert(disabled, now)
    if current.removed_at is None:
        tx.apply(trigger_id, SetRemoved(at=now))
    return _registered(tx, trigger_id)


# --- operator state: backfill (docs/operations.md, "Backfill") --------------------------------

_REGISTERED_AT = ATTENTION_COLUMNS.index("registered_at_ms")


def _registered_at(tx: StoreTx, trigger_id: str) -> int | None:
    rows = tx.attention_inputs([trigger_id])
    value = rows[0][_REGISTERED_AT] if rows else None
    return int(value) if is_int(value) else None  # type: ignore[call-overload]


def body_start_backfill(
    tx: StoreTx,
    trigger_id: str,
    arguments: tuple[object, object, object, object],
    by: str | None,
    now: int,
) -> RegisteredTrigger:
    """Start a backfill of ``trigger_id``: refused (nothing written) or written whole."""
    start, end, bound, overlap = check_backfill_arguments(*arguments)
    check_text(by, "by")
    state = _state(tx, trigger_id)  # (locks the row on a server)
    current = _registered(tx, trigger_id)
    plan = plan_backfill(
        current,
        active=state.active,
        registered_at=_registered_at(tx, trigger_id),
        start=start,
        end=end,
        bound=bound,
        overlap=overlap,
        by=by,
        now=now,
    )
    tx.apply(trigger_id, SetBackfill(backfill=plan.backfill))
    if plan.floor is not None:
        tx.apply(trigger_id, plan.floor)
    return _registered(tx, trigger_id)


def body_cancel_backfill(tx: StoreTx, trigger_id: str) -> RegisteredTrigger:
    """Cancel ``trigger_id``'s running backfill; without one, change nothing."""
    _state(tx, trigger_id)  # (locks the row on a server)
    current = _registered(tx, trigger_id)
    backfill = current.backfill
    if backfill is None or not backfill.running:
        return current
    tx.apply(trigger_id, cancel_backfill(backfill))
    return _registered(tx, trigger_id)


def body_backfill_step(
    tx: StoreTx, trigger_id: str, occurrence: int, expected_revision: int, now: int
) -> Counted[Claim]:
    """One step of ``trigger_id``'s backfill: claim ``occurrence`` and move the progress on.

    The claim is the ordinary one (``decide``) under the backfill's overlap policy, so a
    boundary already in the ledger is passed over (answered not claimed, the progress still
    moves). A step whose boundary is not the backfill's progress (another scheduler took it),
    or that may not run now (paused, an occurrence buffered), writes nothing; one whose
    progress is no boundary of the current schedule (the cron was edited) re-aligns it.
    """
    occurrence = check_occurrence(occurrence)
    state, existing = _state_with_fire(tx, trigger_id, occurrence)
    _refuse(trigger_id, state, expected_revision)
    current = _registered(tx, trigger_id)
    backfill = may_step(current, occurrence, pending=state.pending)
    if backfill is None:
        return Claim(claimed=False), None
    boundary, advance = plan_step(backfill, Cron.parse(current.cron, current.timezone, now=now))
    counted: Counted[Claim] = (
        _claim(
            tx,
            trigger_id,
            state,
            occurrence,
            expected_revision,
            False,
            now,
            existing,
            # the backfill's policy decides the overlap of this claim only (step 4)
            overlap_override=backfill.overlap,
        )
        if boundary
        else (Claim(claimed=False), None)
    )
    tx.apply(trigger_id, advance)
    return counted
