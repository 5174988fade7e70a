"""The pure decisions every trigger store shares (``triggers.md`` §9.8.1, §9.14-§9.15, §10).

Nothing here does I/O or reads a clock. A store reads a snapshot inside its transaction, calls
one of these functions, and applies the writes it returns, in order. The stores therefore differ
only in how they read and write rows; they cannot disagree about what a claim, a lease or a
result means.

Writes are small frozen values. Each one names the exact conditional update of §10.3 (or of the
method it comes from), so a SQL store maps it to one statement and the memory store to one
dictionary update:

* ledger writes: :class:`SetOutcome`, :class:`SetRunId`, :class:`WriteFire`;
* trigger writes: :class:`ReleaseReservation`, :class:`ReplaceHolder`, :class:`AdvanceCursor`,
  :class:`SetPending`, :class:`ClearPendingIf`, :class:`Reserve`; operator state:
  :class:`SetPause`, :class:`SetRemoved`, and a backfill's writes (:mod:`._backfill`);
* counter writes: :class:`CountMissed` (occurrences that will never run, by reason), pushed by
  the decision that gives them up (:func:`decide`, :func:`lease`, :func:`slot_displaced`).
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from .._constants import RESERVATION_LEASE_MS, is_safe_integer
from .._declarations import Overlap
from .._errors import TriggerError
from .._identities import is_reservation, reservation_occurrence
from .._policies import overlap_decision, pending_after
from ._backfill import FloorResumeAfter, SetBackfill, StepBackfill
from ._models import (
    TERMINAL_OUTCOMES,
    Claim,
    Dropped,
    Fire,
    FireRecord,
    HistoryPage,
    HistoryQuery,
    Outcome,
    Result,
    is_unfinished,
)

__all__ = [
    "AdvanceCursor",
    "ClaimDecision",
    "ClaimSnapshot",
    "ClearPendingIf",
    "CountMissed",
    "FireState",
    "LeaseExpired",
    "LeaseHeld",
    "LeaseIdle",
    "LeaseVerdict",
    "PauseIfRunning",
    "ReleaseReservation",
    "ReplaceHolder",
    "Reserve",
    "SetFailures",
    "SetOutcome",
    "SetPause",
    "SetPending",
    "SetRemoved",
    "SetRunId",
    "TriggerWrite",
    "WriteFire",
    "after_cursor",
    "check_history_limit",
    "check_manual_key",
    "check_prune_cutoff",
    "decide",
    "dropped_applies",
    "history_key",
    "is_prunable",
    "lease",
    "lease_expired",
    "off_grid",
    "on_grid",
    "page",
    "plan_failures",
    "plan_restore",
    "plan_result",
    "refuse_claim",
    "refuse_manual",
    "refuse_result",
    "slot_displaced",
    "stale_owner",
]


# --- snapshots ---------------------------------------------------------------------------


class FireState(msgspec.Struct, frozen=True, kw_only=True):
    """What a decision needs of one ledger row: its outcome, its run id, and whether it is a
    manual fire's (which never moves the cursor)."""

    outcome: Outcome | None = None
    run_id: str | None = None
    manual: bool = False


class ClaimSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The inputs of the claim decision (§10.1), read inside the claim's transaction."""

    trigger_id: str
    occurrence: int
    expected_revision: int
    resume_buffered: bool
    revision: int
    enabled: bool
    overlap: Overlap
    active: str | None
    active_claimed_at: int | None
    pending: int | None
    existing_fire: FireState | None
    active_fire: FireState | None
    reservation_id: str
    claimed_at: int
    #: The fire cursor (``last_fired_at_ms``): read only to fence ``dropped``.
    cursor: int | None = None
    #: What the claiming scheduler's catch-up gave up before ``occurrence`` (see
    #: :func:`dropped_applies`); ``None`` for every claim that carries nothing.
    dropped: Dropped | None = None
    #: The claimed occurrence is a manual fire's: decided like a boundary, never moving the
    #: cursor.
    manual: bool = False
    #: The overlap policy for this one claim (a manual fire's explicit override), in place of
    #: the stored ``overlap`` at step 4; ``None``: the stored policy.
    overlap_override: Overlap | None = None


# --- writes ------------------------------------------------------------------------------


class SetOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """Ledger row ``occurrence``: ``outcome = outcome``; with ``while_open`` only if unfinished."""

    occurrence: int
    outcome: Outcome
    while_open: bool


class SetRunId(msgspec.Struct, frozen=True, kw_only=True):
    """Ledger row ``occurrence``: ``run_id = run_id``."""

    occurrence: int
    run_id: str


class WriteFire(msgspec.Struct, frozen=True, kw_only=True):
    """Ledger row ``occurrence``: ``outcome``, ``error`` and (unless ``keep_run_id``) ``run_id``."""

    occurrence: int
    outcome: Outcome
    run_id: str | None
    error: str | None
    keep_run_id: bool


class ReleaseReservation(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``active_run_id = holder``, claim time NULL, ``pending_at = pending``, where
    ``active_run_id = expected``."""

    expected: str
    holder: str | None
    pending: int | None


class ReplaceHolder(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``active_run_id = holder``, claim time NULL, where ``active_run_id = expected``."""

    expected: str
    holder: str | None


class AdvanceCursor(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``last_fired_at = max(coalesce(last_fired_at, occurrence), occurrence)``."""

    occurrence: int


class SetPending(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``pending_at = pending``."""

    pending: int


class ClearPendingIf(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``pending_at = NULL`` where ``pending_at = occurrence``."""

    occurrence: int


class Reserve(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``active_run_id = reservation_id``, ``active_claimed_at = claimed_at``."""

    reservation_id: str
    claimed_at: int


class SetPause(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: the operator state (``paused_at``, ``note``, ``by``, ``resume_after``), and
    ``revision += 1`` so that a claim decided on the state before it is fenced (§10.2 step 0)."""

    paused_at: int | None
    note: str | None
    by: str | None
    resume_after: int | None


class SetFailures(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``consecutive_failures = count`` (the run of ``failed`` results so far)."""

    count: int


class PauseIfRunning(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: pause it (``paused_at``, ``note``, ``by``; ``revision += 1``) where it is not
    paused already. ``pause_after_failures``' pause: an operator's pause that came first is
    kept as it is (its time, note and author)."""

    paused_at: int
    note: str
    by: str | None


class SetRemoved(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``removed_at = at`` (``remove``'s mark; its disabling registration comes first
    and bumps the revision)."""

    at: int


class CountMissed(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``missed_<reason> += n`` for each reason (occurrences that will never run).

    Never a condition of its own: the decision that pushes it has already decided, inside
    its transaction, that these occurrences are given up, and by whom, so a counter moves
    exactly when that decision commits."""

    overlap: int = 0
    catch_up: int = 0
    catch_up_bound: int = 0
    paused: int = 0

    def __bool__(self) -> bool:
        return bool(self.overlap or self.catch_up or self.catch_up_bound or self.paused)


TriggerWrite: TypeAlias = (
    SetOutcome
    | SetRunId
    | WriteFire
    | ReleaseReservation
    | ReplaceHolder
    | AdvanceCursor
    | SetPending
    | ClearPendingIf
    | Reserve
    | SetPause
    | SetRemoved
    | SetFailures
    | PauseIfRunning
    | CountMissed
    | SetBackfill
    | StepBackfill
    | FloorResumeAfter
)
"""One write of a decision, applied in order inside the deciding transaction."""


class ClaimDecision(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of :func:`decide`: the claim to return and the writes to apply first."""

    claim: Claim
    writes: tuple[TriggerWrite, ...]


# --- the claim decision (§10.2) ----------------------------------------------------------

_NOT_CLAIMED = Claim(claimed=False)


def refuse_claim(trigger_id: str, *, revision: int, enabled: bool, expected_revision: int) -> None:
    """The fences of §10.2 step 0: the revision check first, then ``enabled``."""
    if revision != expected_revision:
        raise TriggerError(
            "revision_mismatch",
            f"trigger {trigger_id} is at revision {revision}, not the claimed {expected_revision}",
        )
    if not enabled:
        raise TriggerError("trigger_disabled", f"trigger {trigger_id} is disabled")


def lease_expired(active: str | None, active_claimed_at: int | None, now: int) -> bool:
    """Whether ``active`` is a reservation whose lease has run out at ``now`` (§10.2 step 1).

    A reservation exactly ``RESERVATION_LEASE_MS`` old is expired; one without a claim time is
    always expired; a holder that is not a reservation never expires.
    """
    if not is_reservation(active):
        return False
    return active_claimed_at is None or active_claimed_at <= now - RESERVATION_LEASE_MS


def decide(snapshot: ClaimSnapshot) -> ClaimDecision:
    """The claim decision of §10.2: refuse, gate, reclaim, decide, and the writes to apply.

    Raises ``revision_mismatch`` / ``trigger_disabled`` (step 0); never writes by itself.
    """
    refuse_claim(
        snapshot.trigger_id,
        revision=snapshot.revision,
        enabled=snapshot.enabled,
        expected_revision=snapshot.expected_revision,
    )
    occurrence = snapshot.occurrence
    active = snapshot.active
    # 1. an expired reservation
    expired = (
        active if lease_expired(active, snapshot.active_claimed_at, snapshot.claimed_at) else None
    )
    # 2. the existing-row gate
    if not _passes_gate(snapshot, expired):
        return ClaimDecision(claim=_NOT_CLAIMED, writes=())
    writes: list[TriggerWrite] = []
    pending = snapshot.pending
    overlap_missed = 0  # given up by the overlap policy (skipped, or out of the buffer slot)
    # 3. reclaim an expired reservation
    holder: str | None
    if expired is not None:
        holder = None
        expired_occurrence = reservation_occurrence(expired)
        expired_fire = snapshot.active_fire
        if (
            expired_occurrence is not None
            and expired_fire is not None
            and is_unfinished(expired_fire.outcome)
        ):
            # The expired reservation's row names the run it displaced (a supersede claimant
            # records it there). That run is still running and nobody else will ever settle it,
            # so it gets the holder slot back whatever the policy is now: a policy edited away
            # from ``supersede`` while the claimant was dead must not strand it (§10.4 gives it
            # back always; the contract's §10.2 step 3 only under supersede, which we go past).
            if expired_fire.run_id is not None and not is_reservation(expired_fire.run_id):
                holder = expired_fire.run_id
            if snapshot.overlap == "supersede":
                if expired_occurrence != occurrence:
                    writes.append(
                        SetOutcome(
                            occurrence=expired_occurrence, outcome="superseded", while_open=False
                        )
                    )
            elif expired_occurrence != occurrence:
                pending, overlap_missed = _into_slot(pending, expired_occurrence)
        writes.append(ReleaseReservation(expected=expired, holder=holder, pending=pending))
    else:
        holder = active
    # 4. the overlap decision
    policy = snapshot.overlap_override or snapshot.overlap
    action = overlap_decision(policy, running=holder is not None, pending=pending, due=occurrence)
    # 5. skip / buffer
    if action == "skip" or action == "buffer":
        writes.append(
            SetOutcome(
                occurrence=occurrence,
                outcome="skipped" if action == "skip" else "buffered",
                while_open=False,
            )
        )
        if not snapshot.manual:
            writes.append(AdvanceCursor(occurrence=occurrence))
        # A skip gives up this occurrence (a manual fire's skip is its caller's answer, not a
        # boundary lost); a buffer gives up what the slot held, if anything.
        lost = 0 if snapshot.manual else 1
        if action == "buffer":
            pending, lost = _into_slot(pending, occurrence)
            writes.append(SetPending(pending=pending))
        return _decided(snapshot, Claim(claimed=True, action=action), writes, overlap_missed + lost)
    # 6. fire / supersede
    displaced = holder
    if action == "supersede" and is_reservation(holder):
        held_occurrence = reservation_occurrence(holder)
        if held_occurrence is not None:
            held_fire = snapshot.active_fire
            if (
                held_fire is not None
                and held_fire.run_id is not None
                and not is_reservation(held_fire.run_id)
            ):
                displaced = held_fire.run_id
            writes.append(
                SetOutcome(occurrence=held_occurrence, outcome="superseded", while_open=True)
            )
    if displaced is not None and not is_reservation(displaced):
        writes.append(SetRunId(occurrence=occurrence, run_id=displaced))
    writes.append(Reserve(reservation_id=snapshot.reservation_id, claimed_at=snapshot.claimed_at))
    claim = Claim(
        claimed=True,
        action=action,
        reservation_id=snapshot.reservation_id,
        active_run_id=displaced,
    )
    return _decided(snapshot, claim, writes, overlap_missed)


def _passes_gate(snapshot: ClaimSnapshot, expired: str | None) -> bool:
    """Step 2, the existing-row gate: a claim of an occurrence that already has a ledger row
    goes on only to resume that row (its buffer, its expired reservation, or a supersede)."""
    existing = snapshot.existing_fire
    if existing is None:
        return True
    occurrence = snapshot.occurrence
    active = snapshot.active
    resumable_buffer = snapshot.resume_buffered and existing.outcome == "buffered"
    resumable_reservation = existing.outcome is None and (
        active is None or (expired is not None and reservation_occurrence(expired) == occurrence)
    )
    resumable_supersede = (
        snapshot.resume_buffered
        and existing.outcome is None
        and snapshot.overlap == "supersede"
        and active is not None
        and existing.run_id == active
    )
    return resumable_buffer or resumable_reservation or resumable_supersede


def _displaced(pending: int | None, occurrence: int) -> int:
    """1 when putting ``occurrence`` in the single buffer slot gives up another occurrence."""
    return 0 if pending is None or pending == occurrence else 1


def slot_displaced(pending: int | None, occurrence: int) -> CountMissed | None:
    """The count of re-arming ``occurrence`` into a buffer slot holding ``pending``.

    The slot keeps the later of the two (:func:`pending_after`), so the earlier one will never
    run: one ``overlap`` miss, unless the slot was empty or already held ``occurrence``.
    """
    return CountMissed(overlap=1) if _displaced(pending, occurrence) else None


def dropped_applies(snapshot: ClaimSnapshot) -> bool:
    """Whether a granted claim counts the catch-up drops the scheduler sent with it.

    The scheduler counted the boundaries between its watermark (``dropped.after``) and the
    claimed occurrence from the row as it read it. The count stands only if nothing past that
    watermark has been taken care of since: the fire cursor, the occurrence a reservation
    holds and the buffered occurrence are all at or before it. Otherwise another scheduler
    acted inside the gap, and the count is left out rather than risk counting a boundary it
    fired (a counter may miss a raced gap; it never counts one occurrence twice).
    """
    dropped = snapshot.dropped
    if dropped is None:
        return False
    after = dropped.after
    marks = (snapshot.cursor, reservation_occurrence(snapshot.active), snapshot.pending)
    return all(mark is None or mark <= after for mark in marks)


def _into_slot(pending: int | None, occurrence: int) -> tuple[int, int]:
    """The buffer slot after putting ``occurrence`` in it, and the occurrences that gives up."""
    return pending_after(pending, occurrence), _displaced(pending, occurrence)


def _decided(
    snapshot: ClaimSnapshot, claim: Claim, writes: list[TriggerWrite], overlap: int
) -> ClaimDecision:
    """A granted claim's decision: its writes, then its :class:`CountMissed` if it counts
    anything (``overlap`` misses, and the scheduler's catch-up drops when they apply)."""
    dropped = snapshot.dropped
    catch_up = bound = 0
    if dropped is not None and dropped_applies(snapshot):
        catch_up, bound = dropped.catch_up, dropped.catch_up_bound
    count = CountMissed(overlap=overlap, catch_up=catch_up, catch_up_bound=bound)
    if count:
        writes.append(count)
    return ClaimDecision(claim=claim, writes=tuple(writes))


# --- manual fires ("run now", docs/operations.md) ----------------------------------------

#: The longest key a caller may give a manual fire.
MANUAL_KEY_MAX = 200


def check_manual_key(key: object) -> str | None:
    """``None`` (the store generates one) or non-empty storable text of at most
    :data:`MANUAL_KEY_MAX` characters; otherwise ``invalid_options`` at ``key``."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > MANUAL_KEY_MAX or "\x00" in key:
        raise TriggerError(
            "invalid_options",
            f"a manual fire's key must be non-empty text of at most {MANUAL_KEY_MAX} characters",
            path="key",
        )
    return key


def refuse_manual(trigger_id: str, *, enabled: bool, paused: bool) -> None:
    """A manual fire of a disabled (or removed) trigger, or of a paused one, is refused: the
    operator said no new work for it. (Resume or enable it first.)"""
    if not enabled:
        raise TriggerError("trigger_disabled", f"trigger {trigger_id} is disabled")
    if paused:
        raise TriggerError(
            "trigger_paused", f"trigger {trigger_id} is paused: resume it to fire it now"
        )


def on_grid(instant: int) -> bool:
    """Whether ``instant`` is a whole second: every boundary is, a manual fire's never is."""
    return instant % 1000 == 0


def off_grid(instant: int) -> int:
    """``instant``, or ``instant - 1`` when it is a whole second.

    A manual fire's ledger row is keyed by an instant that is never a whole second; every cron
    boundary is one (5- and 6-field expressions name seconds at most), so a manual fire can
    never take, or be taken for, a boundary's row. It moves back, never forward: a fire's
    occurrence is never later than the request, so nothing is launched before its instant.
    """
    return instant - 1 if instant % 1000 == 0 else instant


# --- the reservation lease (§10.4) -------------------------------------------------------


class LeaseIdle(msgspec.Struct, frozen=True, kw_only=True):
    """Nothing holds the trigger."""


class LeaseHeld(msgspec.Struct, frozen=True, kw_only=True):
    """``holder`` (a run id or a live reservation) holds the trigger."""

    holder: str


class LeaseExpired(msgspec.Struct, frozen=True, kw_only=True):
    """The reservation ``expected`` has expired; ``write`` releases it."""

    expected: str
    write: ReplaceHolder | ReleaseReservation
    #: The occurrence the re-arm pushed out of the buffer slot, if any.
    missed: CountMissed | None = None

    @property
    def holder(self) -> str | None:
        """What holds the trigger after the release (a recovered predecessor, or ``None``)."""
        return self.write.holder


LeaseVerdict: TypeAlias = LeaseIdle | LeaseHeld | LeaseExpired


def lease(
    active: str | None,
    active_claimed_at: int | None,
    pending: int | None,
    now: int,
    unfinished: FireState | None,
) -> LeaseVerdict:
    """The reservation lease of §10.4.

    ``unfinished`` is the ledger row of the reservation's occurrence, only when it is
    unfinished. An expired reservation whose occurrence is still owed is re-armed into the
    pending slot, and the predecessor recorded on that row (if any) becomes the holder again.
    """
    if active is None:
        return LeaseIdle()
    if not lease_expired(active, active_claimed_at, now):
        return LeaseHeld(holder=active)
    occurrence = reservation_occurrence(active)
    if occurrence is None or unfinished is None:
        return LeaseExpired(expected=active, write=ReplaceHolder(expected=active, holder=None))
    recovered = unfinished.run_id
    if recovered is not None and is_reservation(recovered):
        recovered = None
    return LeaseExpired(
        expected=active,
        write=ReleaseReservation(
            expected=active, holder=recovered, pending=pending_after(pending, occurrence)
        ),
        missed=slot_displaced(pending, occurrence),
    )


# --- results (§9.8, §9.8.1) --------------------------------------------------------------


def stale_owner(result: Result) -> TriggerError:
    return TriggerError(
        "stale_owner",
        f"result no longer owns trigger {result.trigger_id} occurrence {result.occurrence}",
    )


def refuse_result(result: Result, fire: FireState | None, active: str | None) -> None:
    """Raise the refusal of §9.8.1 for ``result`` against the snapshot, or return."""
    outcome = result.outcome
    if outcome == "launched":
        run_id = result.run_id
        if not isinstance(run_id, str) or not run_id.strip():
            raise TriggerError(
                "invalid_options", "launched requires a non-empty run_id", path="run_id"
            )
        if is_reservation(run_id):
            raise TriggerError(
                "invalid_options",
                "launched requires a run_id that is not a reservation id",
                path="run_id",
            )
    unfinished = fire is not None and is_unfinished(fire.outcome)
    reservation = is_reservation(active) and reservation_occurrence(active) == result.occurrence
    if result.reservation_id is not None:
        owner: str | None = result.reservation_id
    elif result.run_id is not None:
        owner = result.run_id
    elif reservation:
        owner = active
    else:
        owner = None
    if outcome == "launched":
        if unfinished and reservation and result.reservation_id == active:
            return
        raise stale_owner(result)
    if fire is not None:
        stored_outcome = fire.outcome
        if outcome == stored_outcome and (result.run_id is None or result.run_id == fire.run_id):
            return  # (a) harmless repeat
        if (
            stored_outcome == "launched"
            and outcome not in ("skipped", "buffered")
            and result.reservation_id is None
            and (result.run_id is None or result.run_id == fire.run_id)
        ):
            return  # (b) settling a launch
        if unfinished and reservation and owner == active:
            return  # (c) the reservation's owner reports
    raise stale_owner(result)


def plan_result(
    result: Result, fire: FireState | None, active: str | None
) -> tuple[TriggerWrite, ...]:
    """Refuse (§9.8.1) or return the writes of ``record_result`` (§9.8 steps 4-7)."""
    refuse_result(result, fire, active)
    outcome = result.outcome
    stored = fire.outcome if fire is not None else None
    if outcome != "launched" and outcome == stored:
        return ()
    if stored == "launched" and fire is not None:
        owner: str | None = fire.run_id  # a launched row's owner is its run, even NULL
    elif result.reservation_id is not None:
        owner = result.reservation_id
    elif result.run_id is not None:
        owner = result.run_id
    else:
        owner = active
    occurrence = result.occurrence
    keep = outcome in TERMINAL_OUTCOMES and result.run_id is None
    if fire is not None and result.run_id is not None and result.run_id == fire.run_id:
        keep = True  # writing the same run id again changes nothing (and spares an index write)
    writes: list[TriggerWrite] = [
        WriteFire(
            occurrence=occurrence,
            outcome=outcome,
            run_id=result.run_id,
            error=result.error,
            keep_run_id=keep,
        )
    ]
    if fire is None or not fire.manual:
        writes.append(AdvanceCursor(occurrence=occurrence))  # a manual fire never moves it
    if outcome == "launched":
        assert result.reservation_id is not None  # refuse_result guarantees it
        writes.append(ReplaceHolder(expected=result.reservation_id, holder=result.run_id))
    elif owner is not None:
        writes.append(ReplaceHolder(expected=owner, holder=None))
    return tuple(writes)


def plan_failures(
    result: Result,
    stored: Outcome | None,
    *,
    consecutive: int,
    threshold: int | None,
    at: int,
    by: str | None,
) -> tuple[TriggerWrite, ...]:
    """The writes of ``pause_after_failures`` for a result that :func:`plan_result` records.

    A result newly recorded ``failed`` adds one to the trigger's run of failures, and when the
    run reaches ``threshold`` pauses the trigger, in the same transaction as the failure; a
    ``completed`` one ends the run. Every other outcome (skipped, buffered, superseded,
    launched) and a repeat of the stored outcome change nothing (docs/declarations.md,
    "Jitter, windows and pausing after failures").
    """
    outcome = result.outcome
    if outcome == stored:
        return ()  # a harmless repeat: already counted
    if outcome == "completed":
        return (SetFailures(count=0),) if consecutive else ()
    if outcome != "failed":
        return ()
    count = consecutive + 1
    writes: list[TriggerWrite] = [SetFailures(count=count)]
    if threshold is not None and count >= threshold:
        noun = "run" if count == 1 else "runs"
        writes.append(
            PauseIfRunning(
                paused_at=at, note=f"paused after {count} consecutive failed {noun}", by=by
            )
        )
    return tuple(writes)


# --- restore_pending (§9.9) --------------------------------------------------------------


def plan_restore(
    occurrence: int,
    reservation_id: str,
    active: str | None,
    pending: int | None,
    fire: FireState | None,
    predecessor_launched: bool,
) -> ReleaseReservation:
    """The write of ``restore_pending``, or ``stale_owner`` (§9.9 steps 2-5).

    ``predecessor_launched`` tells whether some ledger row of the trigger with ``fire.run_id``
    has outcome ``launched``.
    """
    if (
        active != reservation_id
        or fire is None
        or not is_unfinished(fire.outcome)
        or reservation_occurrence(reservation_id) != occurrence
    ):
        raise TriggerError("stale_owner", "pending restoration no longer owns reservation")
    predecessor = fire.run_id
    if predecessor is None or is_reservation(predecessor) or not predecessor_launched:
        predecessor = None
    return ReleaseReservation(
        expected=reservation_id, holder=predecessor, pending=pending_after(pending, occurrence)
    )


# --- history and pruning (§9.14, §9.15) --------------------------------------------------


def check_history_limit(limit: object) -> int | None:
    """``None`` or a positive safe integer; otherwise ``invalid_options`` at ``limit``."""
    if limit is None:
        return None
    if not is_safe_integer(limit) or limit < 1:
        raise TriggerError(
            "invalid_options",
            f"history limit must be a positive safe integer, received {limit!r}",
            path="limit",
        )
    return limit


def check_prune_cutoff(older_than: object) -> int:
    """A safe integer; otherwise ``invalid_options`` at ``older_than``."""
    if not is_safe_integer(older_than):
        raise TriggerError(
            "invalid_options",
            f"prune cutoff must be a safe integer, received {older_than!r}",
            path="older_than",
        )
    return older_than


def history_key(record: FireRecord) -> tuple[int, str]:
    """Sort key of the history order; sort with ``reverse=True`` for newest first."""
    return (record.occurrence, record.trigger_id)


def after_cursor(occurrence: int, trigger_id: str, cursor: Fire | None) -> bool:
    """Whether a row comes strictly after the exclusive ``cursor`` in the history order."""
    if cursor is None:
        return True
    return occurrence < cursor.occurrence or (
        occurrence == cursor.occurrence and trigger_id < cursor.trigger_id
    )


def page(rows: list[FireRecord], query: HistoryQuery) -> HistoryPage:
    """Cut ``rows`` (ordered, at most ``limit + 1`` of them) into a page with its cursor."""
    limit = query.limit
    if limit is None or len(rows) <= limit:
        return HistoryPage(items=rows, next_cursor=None)
    items = rows[:limit]
    last = items[-1]
    return HistoryPage(
        items=items, next_cursor=Fire(trigger_id=last.trigger_id, occurrence=last.occurrence)
    )


def is_prunable(
    occurrence: int,
    outcome: Outcome | None,
    run_id: str | None,
    *,
    pending_at: int | None,
    active_run_id: str | None,
    older_than: int,
) -> bool:
    """Whether ``prune_fires(older_than)`` deletes this ledger row (§9.15)."""
    if occurrence >= older_than or outcome is None:
        return False
    if outcome not in ("completed", "failed", "skipped", "superseded"):
        return False
    if pending_at is not None and pending_at == occurrence:
        return False
    return not (active_run_id is not None and active_run_id == run_id)
