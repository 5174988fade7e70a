"""The invariant catalogue and its checkers (``triggers.md`` §20, ``ownership.md`` §14).

Each statement of the two "Invariants" sections has an id: ``T<n>`` for ``triggers.md`` §20
item ``n`` and ``O<n>`` for ``ownership.md`` §14 item ``n``.  :data:`CATALOGUE` says how each one
is checked:

* ``step``: after every store transaction, from the exact state before and after it (the
  fault-injecting wrapper serialises calls so that these snapshots are exact);
* ``call``: on every runner or store call, from what the caller asked;
* ``final``: once at the end of a simulation, after the faults have stopped and more than one
  reservation lease has passed;
* ``elsewhere``: a property of pure code or of one store implementation that the conformance
  and property test suites check; the simulator does not re-check it.

A violation raises :class:`InvariantViolation` (the checker's own error) which the simulator
turns into :class:`SimulationViolation` carrying the seed and the tail of the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from .._constants import RESERVATION_LEASE_MS
from .._errors import TriggerError
from .._identities import is_reservation, reservation_occurrence
from .._store._protocol import TRIGGER_WRITE_METHODS

__all__ = [
    "CATALOGUE",
    "InvariantInfo",
    "InvariantViolation",
    "LedgerRow",
    "SimulationViolation",
    "StoreState",
    "TriggerRow",
    "Violation",
    "check_transition",
]

LEASE: Final = RESERVATION_LEASE_MS
Mode = Literal["step", "call", "final", "elsewhere"]


class InvariantInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One invariant the checker knows: its ``id`` (``T1``...), a one-line ``title``, and the
    ``mode`` in which it is checked (after every transition, or once at the end)."""

    id: str
    title: str
    mode: Mode


def _info(id: str, mode: Mode, title: str) -> InvariantInfo:
    return InvariantInfo(id=id, title=title, mode=mode)


CATALOGUE: Final[tuple[InvariantInfo, ...]] = (
    _info("T1", "step", "The cursor never decreases"),
    _info("T2", "step", "The cursor covers fired work"),
    _info("T3", "step", "Ledger outcomes only move forward"),
    _info("T4", "step", "A launched row names a real run"),
    _info("T5", "step", "Launching requires the reservation"),
    _info("T6", "step", "At most one holder; reservations only for a free or supersede trigger"),
    _info("T7", "step", "Fences write nothing"),
    _info("T8", "step", "A refused or failed call writes nothing"),
    _info("T9", "step", "A claim timestamp belongs to its reservation"),
    _info("T10", "step", "Expired reservations are recoverable; live ones are never taken"),
    _info("T11", "step", "The pending slot only moves forward"),
    _info("T12", "step", "Owed work is only dropped in favour of later work"),
    _info("T13", "step", "Pruning never deletes live history"),
    _info("T14", "final", "History pages are consistent"),
    _info("T15", "step", "Reservations are unique"),
    _info("T16", "elsewhere", "Stores agree (conformance suite over every store)"),
    _info("T17", "call", "The per-process watermark never decreases"),
    _info("T18", "call", "Nothing fires early"),
    _info("T19", "call", "One key per occurrence"),
    _info("T20", "final", "Every dispatched occurrence ends with a ledger outcome or stays owed"),
    _info("T21", "call", "No failed record while a run may exist"),
    _info("T22", "call", "Runs are cancelled only by supersede, or as a losing duplicate"),
    _info("T23", "call", "Scope closure only forgets"),
    _info("T24", "call", "Reservations never reach the runner"),
    _info("T25", "call", "In-memory ownership is fenced"),
    _info("T26", "call", "Ticks are serial and bounded in width"),
    _info("T27", "call", "Runner calls are bounded; ticks never wait for launches"),
    _info("T28", "final", "Failures are isolated; cancellation never is"),
    _info("T29", "call", "Inspection outages change nothing durable"),
    _info("T30", "call", "Disabled or paused triggers get recovery only"),
    _info("T31", "final", "Expired reservations are reached"),
    _info("T32", "elsewhere", "Cron consistency (property tests against a brute-force oracle)"),
    _info("T33", "elsewhere", "Due-occurrence bounds (property tests)"),
    _info("T34", "call", "One exception at a time"),
    _info("T35", "step", "The attention index holds each row's exact instant (or a live take)"),
    _info("T36", "step", "A reservation's own ledger row stays unfinished while it holds"),
    _info("T37", "step", "Manual fires never move the cursor"),
    _info("T38", "step", "One manual fire per key, on a row of its own (never a boundary's)"),
    _info(
        "T39", "step", "A backfill takes its own progress, never a fired boundary, one at a time"
    ),
    _info("T40", "final", "A finished backfill left a ledger row for every boundary it covers"),
    _info("O1", "step", "Each run has at most one owner"),
    _info("O2", "step", "running exactly when owned and stamped; claims all-or-nothing"),
    _info("O3", "step", "Only create produces pending; terminal rows never change status"),
    _info("O4", "step", "The owner changes only through activate and claim_and_own"),
    _info("O5", "step", "Each Claimed grant leads to at most one Activated"),
    _info("O6", "step", "A losing activate or abandon_claim never clears a claim"),
    _info("O7", "step", "started_at written once; finished_at exactly on terminal rows"),
    _info("O8", "elsewhere", "Rows equal the two-table reference rules (conformance suite)"),
    _info("O9", "step", "A heartbeat never moves the stamp backwards"),
    _info("O10", "step", "Staleness is strict"),
    _info("O11", "elsewhere", "Skew bound on readings (conformance suite)"),
    _info("O12", "elsewhere", "Evidence is never reusable at another instant (conformance)"),
    _info("O13", "step", "A fresh heartbeat always beats evidence"),
    _info("O14", "elsewhere", "Evidence kinds match host identity (conformance suite)"),
    _info("O15", "elsewhere", "same_host_pid_probe semantics (unit tests)"),
    _info("O16", "step", "reconfirm never wins while a claim is pending"),
    _info("O17", "step", "No fenced write by a displaced owner commits"),
    _info("O18", "call", "An owner whose writes failed stops before a peer may steal"),
    _info("O19", "call", "last_confirmed_ms never decreases"),
    _info("O20", "elsewhere", "At most one reconfirm per expiry (heartbeat loop tests)"),
    _info("O21", "call", "on_lapse at most once, exactly for a lapse"),
    _info("O22", "elsewhere", "A lost fence ends the loop at that pulse (heartbeat loop tests)"),
    _info("O23", "elsewhere", "One write-failure log per outage (heartbeat loop tests)"),
    _info("O24", "call", "hold_lease exits normally only if the body returned first"),
    _info("O25", "step", "At most one row per idempotency key"),
    _info("O26", "step", "Declaration columns never change; result/error on the right rows"),
    _info("O27", "step", "Cancel request and acknowledgement written once, first writer wins"),
    _info("O28", "step", "invalid_run changes nothing; no win without a commit"),
    _info("O29", "elsewhere", "run_throughput counts terminal transitions (metrics tests)"),
    # The write-fault world (SimConfig(local_runner=True), docs/simulation.md, "Write faults").
    _info("W1", "call", "A live owner leaves no run running without a worker past a bound"),
    _info("W2", "call", "A boundary failed before its run existed has no run with its key"),
    _info("W3", "call", "A live claimant keeps working on the reservation it holds"),
    _info("W4", "call", "A process that stopped while it reached its store left nothing running"),
)
CATALOGUE_BY_ID: Final[dict[str, InvariantInfo]] = {info.id: info for info in CATALOGUE}


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One broken statement: the invariant id, when (wall ms) and what was seen."""

    invariant: str
    at_ms: int
    detail: str


class InvariantViolation(AssertionError):
    """Raised by a checker; ``.violation`` says which statement broke."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation
        title = (
            CATALOGUE_BY_ID[violation.invariant].title
            if violation.invariant in (CATALOGUE_BY_ID)
            else violation.invariant
        )
        super().__init__(
            f"{violation.invariant} ({title}) at {violation.at_ms}: {violation.detail}"
        )


class SimulationViolation(AssertionError):
    """A simulation broke an invariant: ``.seed``, ``.violation`` and the ``.trace`` tail.

    Re-run ``simulate(seed, ...)`` with the same configuration to reproduce it exactly.
    """

    def __init__(self, seed: int, violation: Violation, trace: list[str], config: str) -> None:
        self.seed = seed
        self.violation = violation
        self.trace = trace
        self.config = config
        title = CATALOGUE_BY_ID.get(violation.invariant)
        name = title.title if title is not None else violation.invariant
        lines = [
            f"seed {seed} broke {violation.invariant} ({name}) at wall {violation.at_ms}: "
            f"{violation.detail}",
            f"reproduce with: {config}",
            "last trace lines:",
            *("  " + line for line in trace),
        ]
        super().__init__("\n".join(lines))


# --------------------------------------------------------------------------- snapshots


class TriggerRow(msgspec.Struct, frozen=True, kw_only=True):
    """The durable state of one trigger row (``claimed_at`` is ``None`` also when unknown)."""

    trigger_id: str
    revision: int
    enabled: bool
    overlap: str
    last_fired_at: int | None
    pending_at: int | None
    active_run_id: str | None
    active_claimed_at: int | None = None
    #: The running backfill's next boundary and its count of boundaries taken (``None``:
    #: unknown to the snapshot, or no backfill).
    backfill_next: int | None = None
    backfill_done: int | None = None


class LedgerRow(msgspec.Struct, frozen=True, kw_only=True):
    trigger_id: str
    occurrence: int
    outcome: str | None
    run_id: str | None
    error: str | None = None
    #: A manual fire's key ("run now"); ``None`` for a boundary's row.
    manual_key: str | None = None


class StoreState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything durable the trigger-store checker compares between two transactions."""

    triggers: dict[str, TriggerRow]
    ledger: dict[tuple[str, int], LedgerRow]
    claimed_at_known: bool = False


def unfinished(row: LedgerRow | None) -> bool:
    return row is not None and (row.outcome is None or row.outcome == "buffered")


_FORWARD: Final[dict[str | None, frozenset[str | None]]] = {
    None: frozenset({None, "launched", "completed", "skipped", "buffered", "superseded", "failed"}),
    "buffered": frozenset({"launched", "completed", "skipped", "buffered", "superseded", "failed"}),
    "launched": frozenset({"launched", "completed", "failed", "superseded"}),
    "completed": frozenset({"completed"}),
    "failed": frozenset({"failed"}),
    "skipped": frozenset({"skipped"}),
    "superseded": frozenset({"superseded"}),
}
_FIRED: Final = frozenset({"launched", "skipped", "buffered", "completed", "failed"})
#: The methods that decide a claim (a backfill's step is the ordinary claim of its boundary;
#: a manual fire, the claim of its own new row).
_CLAIMS: Final = frozenset({"claim_fire", "claim_pending", "backfill_step", "claim_manual"})
#: The methods that may write a backfill's state.
_BACKFILL_WRITES: Final = frozenset({"start_backfill", "cancel_backfill", "backfill_step"})
_WRITES: Final = TRIGGER_WRITE_METHODS


class ClaimView(msgspec.Struct, frozen=True, kw_only=True):
    """What the checker needs of one claim answer (``claim_fire``, ``claim_pending``, or a
    backfill's ``backfill_step``)."""

    trigger_id: str
    occurrence: int
    claimed: bool
    action: str | None
    reservation_id: str | None
    active_run_id: str | None


def claim_view(method: str, args: tuple[Any, ...], answer: Any) -> ClaimView | None:
    """Reduce a claim call's answer to a :class:`ClaimView` (``None`` if nothing was claimed).

    A manual fire (``claim_manual``) is a claim of its own new row; a repeated key claims
    nothing."""
    if method in ("claim_fire", "backfill_step"):
        trigger_id, occurrence = args[0], args[1]
        claim = answer
    elif method in ("claim_pending", "claim_manual"):
        if answer is None or getattr(answer, "repeated", False):
            return None
        trigger_id, occurrence, claim = args[0], answer.occurrence, answer.claim
    else:
        return None
    return ClaimView(
        trigger_id=trigger_id,
        occurrence=occurrence,
        claimed=claim.claimed,
        action=claim.action,
        reservation_id=claim.reservation_id,
        active_run_id=claim.active_run_id,
    )


class Grants:
    """Everything granted so far: reservation ids and their grant times, launched rows, and
    the manual fires (their rows by key)."""

    def __init__(self) -> None:
        self.reservations: dict[str, int] = {}
        self.launched: dict[tuple[str, int], str] = {}
        self.ever_rows: dict[str, set[int]] = {}
        self.manual: dict[str, tuple[str, int]] = {}


def _expired(reservation: str, claimed_at: int | None, now: int) -> bool:
    return claimed_at is None or claimed_at <= now - LEASE


# --------------------------------------------------------------------------- transitions
#
# One checker per invariant. A checker reads one transaction (a ``_Step``) and yields what it
# saw wrong, as the detail of a violation of the invariant it is listed under. The tables below
# run in their order, which is the order of the report (the simulator shows its first entry):
# the call as a whole, each trigger row that is there before and after, the claim the call
# granted, then each ledger row that changed. ``grants`` is updated in place, by the checkers
# of T15 (the reservation granted) and T4 (the run launched) and by the ledger loop: the
# checkers listed before them must still see the grants as they were before the call.


@dataclass(frozen=True, slots=True)
class _Step:
    """One trigger-store transaction as the checkers see it."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    answer: Any
    error: BaseException | None
    pre: StoreState
    post: StoreState
    now: int
    grants: Grants
    #: The claim the call answered (``None`` for other calls and failed ones).
    claim: ClaimView | None

    def granted(self) -> ClaimView | None:
        """The claim, if it granted a reservation (``fire`` or ``supersede``)."""
        claim = self.claim
        if claim is not None and claim.claimed and claim.action in ("fire", "supersede"):
            return claim
        return None

    def granted_on(self, tid: str) -> ClaimView | None:
        """:meth:`granted`, if it is for trigger ``tid``."""
        claim = self.granted()
        return claim if claim is not None and claim.trigger_id == tid else None


Details = Iterator[str]
CallCheck = Callable[[_Step], Details]
TriggerCheck = Callable[[_Step, str, TriggerRow, TriggerRow], Details]
RowCheck = Callable[[_Step, tuple[str, int], LedgerRow | None, LedgerRow], Details]


# --- the call as a whole


def _failures_write_nothing(s: _Step) -> Details:
    """T8: a refused or failed call, or a read, writes nothing."""
    changed = s.pre.triggers != s.post.triggers or s.pre.ledger != s.post.ledger
    if s.error is not None and changed:
        yield f"{s.method}{s.args!r} raised {s.error!r} but changed durable state"
    if s.method not in _WRITES and changed:
        yield f"read-only {s.method}{s.args!r} changed durable state"


def _fences_refuse(s: _Step) -> Details:
    """T7: a claim with a stale revision, or on a disabled trigger, is refused."""
    if s.method == "claim_manual":
        before = s.pre.triggers.get(s.args[0])
        # (A key used before answers the earlier fire, whatever the trigger's state now.)
        fresh = s.error is None and not s.answer.repeated
        if before is not None and not before.enabled and fresh:
            yield f"claim_manual({s.args[0]!r}) on a disabled trigger was not refused"
        return
    if s.method not in _CLAIMS:
        return
    tid = s.args[0]
    before = s.pre.triggers.get(tid)
    expected = s.kwargs.get("expected_revision")
    # claim_pending answers None without any check when the slot is empty (§9.7).
    empty_slot = s.method == "claim_pending" and before is not None and before.pending_at is None
    if before is None or expected is None or empty_slot:
        return
    code = s.error.code if isinstance(s.error, TriggerError) else None
    stale = expected != before.revision
    if stale and code != "revision_mismatch":
        yield (
            f"{s.method}({tid!r}) with stale expected_revision {expected} (stored "
            f"{before.revision}) was not refused (answer {s.answer!r}, error {s.error!r})"
        )
    elif not stale and not before.enabled and code != "trigger_disabled":
        yield f"{s.method}({tid!r}) on a disabled trigger was not refused"
    if (stale or not before.enabled) and s.claim is not None and s.claim.claimed:
        yield f"{s.method}({tid!r}) granted a claim through a fence"


def _backfill_step_takes_its_progress(s: _Step) -> Details:
    """T39: a backfill step claims only the backfill's progress, never a boundary the ledger
    already shows fired, and a step that writes moves the progress on by one boundary."""
    if s.method != "backfill_step" or s.error is not None:
        return
    tid, occ = s.args[0], s.args[1]
    a, b = s.pre.triggers.get(tid), s.post.triggers.get(tid)
    if a is None or b is None:
        return
    changed = a != b or s.pre.ledger != s.post.ledger
    claimed = s.claim is not None and s.claim.claimed
    if (claimed or changed) and a.backfill_next != occ:
        yield f"{tid}: a backfill step of {occ} wrote while its progress was {a.backfill_next}"
    row = s.pre.ledger.get((tid, occ))
    if claimed and row is not None and (row.outcome in _FIRED or row.outcome == "superseded"):
        yield f"{tid}: a backfill step claimed {occ} again, already {row.outcome}"
    if changed and (b.backfill_next is not None and b.backfill_next <= occ):
        yield f"{tid}: a backfill step of {occ} left the progress at {b.backfill_next}"
    # A step counts the boundary it took (claimed or passed over); one that only re-aligned
    # the progress to an edited schedule counts nothing.
    counted = (b.backfill_done or 0) - (a.backfill_done or 0)
    if changed and (counted not in (0, 1) or (claimed and counted != 1)):
        yield f"{tid}: a backfill step of {occ} counted {a.backfill_done} -> {b.backfill_done}"


# --- each trigger row


def _backfill_moved_by_its_methods(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T39: only the backfill methods move a backfill's progress."""
    if s.method not in _BACKFILL_WRITES and a.backfill_next != b.backfill_next:
        yield f"{tid}: {s.method} moved a backfill's progress {a.backfill_next}->{b.backfill_next}"


def _trigger_kept(s: _Step, tid: str, a: TriggerRow | None, b: TriggerRow | None) -> Details:
    """T8: a trigger row never disappears, and only ``register`` creates one."""
    if b is None and a is not None:
        yield f"trigger {tid!r} disappeared in {s.method}"
    if a is None and b is not None and s.method != "register":
        yield f"trigger {tid!r} appeared in {s.method}"


def _cursor_never_decreases(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T1."""
    if a.last_fired_at is not None and (
        b.last_fired_at is None or b.last_fired_at < a.last_fired_at
    ):
        yield f"{tid}: last_fired_at went from {a.last_fired_at} to {b.last_fired_at} in {s.method}"


def _pending_moves_forward(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T11: the pending slot never falls, and only a claim of that occurrence clears it."""
    if a.pending_at is None:
        return
    if b.pending_at is not None and b.pending_at < a.pending_at:
        yield f"{tid}: pending_at fell {a.pending_at} -> {b.pending_at}"
    if b.pending_at is None:
        claim = s.claim
        ok = (
            s.method == "claim_pending"
            and claim is not None
            and claim.trigger_id == tid
            and claim.occurrence == a.pending_at
            and claim.claimed
            and claim.action in ("fire", "supersede", "skip")
        )
        if not ok:
            yield f"{tid}: pending_at {a.pending_at} cleared by {s.method}"


def _register_keeps_held_state(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T8: ``register`` writes the declaration only, never the held state."""
    if s.method == "register" and (
        a.pending_at != b.pending_at
        or a.active_run_id != b.active_run_id
        or a.active_claimed_at != b.active_claimed_at
    ):
        yield f"{tid}: register changed the held state"


def _claim_time_of_reservation(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T9: a claim timestamp is the grant time of the reservation that holds."""
    if s.post.claimed_at_known and b.active_claimed_at is not None:
        granted_at = s.grants.reservations.get(b.active_run_id or "")
        if not is_reservation(b.active_run_id) or (
            granted_at is not None and granted_at != b.active_claimed_at
        ):
            yield f"{tid}: active_claimed_at {b.active_claimed_at} with holder {b.active_run_id!r}"


def _reservation_from_grant(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T6: a new reservation holds only through a claim this call granted."""
    holder = b.active_run_id
    if is_reservation(holder) and holder != a.active_run_id:
        claim = s.granted_on(tid)
        if claim is None or claim.reservation_id != holder:
            yield (
                f"{tid}: holder became reservation {holder!r} in {s.method} without a granted claim"
            )


def _released(a: TriggerRow, b: TriggerRow) -> str | None:
    """The reservation that held before the call and no longer does."""
    held = a.active_run_id
    return held if is_reservation(held) and b.active_run_id != held else None


def _live_reservation_kept(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T10: lease processing removes a reservation only once it expired."""
    held = _released(a, b)
    if held is None:
        return
    granted_at = s.grants.reservations.get(held, a.active_claimed_at)
    expired = _expired(held, granted_at, s.now)
    if not s.pre.claimed_at_known and held not in s.grants.reservations:
        expired = True  # foreign reservation of unknown age: cannot judge
    claim = s.claim
    lease_path = s.method == "active_run" or (
        s.method in _CLAIMS
        and claim is not None
        and claim.trigger_id == tid
        and claim.action != "supersede"
    )
    if lease_path and not expired:
        yield f"{tid}: live reservation {held!r} removed by {s.method}"


def _owed_work_kept(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T12: a released reservation's unfinished occurrence stays owed (pending, or a later
    grant of this call)."""
    held = _released(a, b)
    occ = reservation_occurrence(held)
    if held is None or occ is None or not unfinished(s.post.ledger.get((tid, occ))):
        return
    claim = s.granted_on(tid)
    later_grant = claim is not None and claim.occurrence >= occ
    if not later_grant and (b.pending_at is None or b.pending_at < occ):
        yield (
            f"{tid}: reservation {held!r} released by {s.method} while occurrence "
            f"{occ} is owed, and pending_at is {b.pending_at}"
        )


def _active_run_recovers(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T10: ``active_run`` keeps a run holder, and replaces an expired reservation by its
    recorded predecessor (re-arming its occurrence)."""
    if s.method != "active_run" or s.args[0] != tid or s.error is not None:
        return
    held = a.active_run_id
    if held is not None and not is_reservation(held) and b.active_run_id != held:
        yield f"{tid}: active_run removed the run holder {held!r}"
    if held is None or not is_reservation(held) or held not in s.grants.reservations:
        return
    if not _expired(held, s.grants.reservations[held], s.now):
        return
    occ = reservation_occurrence(held)
    row = s.pre.ledger.get((tid, occ)) if occ is not None else None
    want_holder: str | None = None
    want_pending = a.pending_at
    if occ is not None and unfinished(row):
        assert row is not None
        if row.run_id is not None and not is_reservation(row.run_id):
            want_holder = row.run_id
        want_pending = occ if a.pending_at is None else max(a.pending_at, occ)
    if b.active_run_id != want_holder or b.pending_at != want_pending:
        yield (
            f"{tid}: active_run on expired {held!r} left holder {b.active_run_id!r} pending "
            f"{b.pending_at} (want {want_holder!r}, {want_pending})"
        )
    if s.answer != b.active_run_id:
        yield f"{tid}: active_run answered {s.answer!r}"


def _manual_fires_keep_the_cursor(s: _Step, tid: str, a: TriggerRow, b: TriggerRow) -> Details:
    """T37: the cursor moves only with a boundary's row: never in ``claim_manual``, and never
    in a call whose ledger changes for this trigger are all manual fires' rows."""
    if a.last_fired_at == b.last_fired_at:
        return
    if s.method == "claim_manual":
        yield f"{tid}: claim_manual moved the cursor {a.last_fired_at} -> {b.last_fired_at}"
        return
    changed = [
        key
        for key in set(s.pre.ledger) | set(s.post.ledger)
        if key[0] == tid and s.pre.ledger.get(key) != s.post.ledger.get(key)
    ]
    rows = [s.post.ledger.get(key) or s.pre.ledger.get(key) for key in changed]
    if rows and all(row is not None and row.manual_key is not None for row in rows):
        yield (
            f"{tid}: {s.method} of a manual fire moved the cursor "
            f"{a.last_fired_at} -> {b.last_fired_at}"
        )


def _repeated_manual_fire_writes_nothing(s: _Step) -> Details:
    """T38: a key used before answers the earlier fire and writes nothing."""
    if s.method != "claim_manual" or s.error is not None or s.answer is None:
        return
    changed = s.pre.triggers != s.post.triggers or s.pre.ledger != s.post.ledger
    if s.answer.repeated and changed:
        yield f"claim_manual{s.args!r} repeated key {s.answer.request.key!r} but wrote"
    if s.answer.repeated:
        return
    key = (s.args[0], s.answer.occurrence)
    row = s.post.ledger.get(key)
    if key in s.pre.ledger or row is None or row.manual_key != s.answer.request.key:
        yield f"claim_manual{s.args!r} answered {key} but made no new manual row for it"


def _manual_row_of_its_own(
    s: _Step, key: tuple[str, int], ra: LedgerRow | None, rb: LedgerRow
) -> Details:
    """T38: a manual row is off the grid of whole seconds (never a boundary's), made only by
    ``claim_manual``, keeps its key, and its key names no other row."""
    if ra is not None and ra.manual_key != rb.manual_key:
        yield f"ledger row {key} manual key changed {ra.manual_key!r} -> {rb.manual_key!r}"
    manual_key = rb.manual_key
    if manual_key is None:
        if ra is None and s.method == "claim_manual":
            yield f"claim_manual made ledger row {key} without a key"
        return
    if key[1] % 1000 == 0:
        yield f"manual fire {manual_key!r} took the whole-second row {key}"
    if ra is None and s.method != "claim_manual":
        yield f"manual row {key} made by {s.method}"
    owner = s.grants.manual.setdefault(manual_key, key)
    if owner != key:
        yield f"key {manual_key!r} names two manual fires: {owner} and {key}"


# --- the claim the call granted


def _matching_reservation(claim: ClaimView) -> str | None:
    rid = claim.reservation_id
    return rid if rid is not None and reservation_occurrence(rid) == claim.occurrence else None


def _grant_names_its_reservation(s: _Step) -> Details:
    """T6: a granted claim names a reservation of its own occurrence."""
    claim = s.granted()
    if claim is not None and _matching_reservation(claim) is None:
        yield f"granted claim {claim!r} has no matching reservation"


def _reservation_granted_once(s: _Step) -> Details:
    """T15: no reservation is granted twice (records the grant)."""
    claim = s.granted()
    rid = None if claim is None else _matching_reservation(claim)
    if rid is None:
        return
    if rid in s.grants.reservations:
        yield f"reservation {rid!r} granted twice"
    else:
        s.grants.reservations[rid] = s.now


def _grant_fits_the_holder(s: _Step) -> Details:
    """T6: ``supersede`` only under that policy and naming what it displaces; ``fire`` only
    for a free trigger or over an expired reservation."""
    claim = s.granted()
    before = None if claim is None else s.pre.triggers.get(claim.trigger_id)
    if claim is None or before is None:
        return
    if claim.action == "supersede":
        # A manual fire may override the policy for itself (``overlap=``).
        policy = s.kwargs.get("overlap") if s.method == "claim_manual" else None
        if (policy or before.overlap) != "supersede":
            yield f"supersede granted under {policy or before.overlap!r}"
        if claim.active_run_id is None:
            yield "a supersede claim reported no displaced holder"
        return
    h = before.active_run_id
    if h is None:
        return
    known = h in s.grants.reservations or s.pre.claimed_at_known
    at = s.grants.reservations.get(h, before.active_claimed_at)
    if not is_reservation(h) or (known and not _expired(h, at, s.now)):
        yield f"{claim.trigger_id}: fire granted for {claim.occurrence} while {h!r} holds it"


def _moved_cursor_covers_fired_rows(s: _Step) -> Details:
    """T2 for the rows that did not change: only a cursor that moved can uncover them."""
    for tid in sorted(s.post.triggers):
        a = s.pre.triggers.get(tid)
        b = s.post.triggers[tid]
        if a is None or a.last_fired_at == b.last_fired_at:
            continue
        for (rt, occ), r in s.post.ledger.items():
            if (
                rt == tid
                and r.manual_key is None  # a manual fire never moves the cursor (T37)
                and r.outcome in _FIRED
                and (b.last_fired_at is None or b.last_fired_at < occ)
            ):
                yield (
                    f"ledger row {(rt, occ)} is {r.outcome} but the cursor moved to "
                    f"{b.last_fired_at}"
                )


# --- each ledger row that changed


def _prune_keeps_live_rows(s: _Step, key: tuple[str, int], ra: LedgerRow) -> Details:
    """T13: only ``prune_fires`` deletes rows, and only settled, old, unreferenced ones."""
    tid, occ = key
    if s.method != "prune_fires":
        yield f"ledger row {key} deleted by {s.method}"
        return
    trig = s.pre.triggers.get(tid)
    if ra.outcome is None or ra.outcome in ("buffered", "launched"):
        yield f"prune deleted live row {key} ({ra.outcome})"
    if trig is not None and trig.pending_at == occ:
        yield f"prune deleted the pending row {key}"
    if trig is not None and ra.run_id is not None and ra.run_id == trig.active_run_id:
        yield f"prune deleted the holder's row {key}"
    if occ >= s.args[0]:
        yield f"prune deleted row {key} newer than {s.args[0]}"


def _became_launched(ra: LedgerRow | None, rb: LedgerRow) -> bool:
    return rb.outcome == "launched" and (ra is None or ra.outcome != "launched")


def _outcomes_move_forward(
    s: _Step, key: tuple[str, int], ra: LedgerRow | None, rb: LedgerRow
) -> Details:
    """T3: claims create rows (unfinished, skipped or buffered); outcomes only move forward;
    a row is launched once."""
    if ra is None:
        if s.method not in _CLAIMS:
            yield f"ledger row {key} created by {s.method}"
        elif rb.outcome not in (None, "skipped", "buffered"):
            yield f"ledger row {key} created as {rb.outcome!r}"
    elif rb.outcome not in _FORWARD.get(ra.outcome, frozenset()):
        yield f"ledger row {key} went {ra.outcome!r} -> {rb.outcome!r}"
    if _became_launched(ra, rb) and key in s.grants.launched:
        yield f"ledger row {key} became launched twice"


def _launch_names_a_run(
    s: _Step, key: tuple[str, int], ra: LedgerRow | None, rb: LedgerRow
) -> Details:
    """T4: a launched row names a real run, and keeps naming it (records the launch)."""
    launched = s.grants.launched
    if _became_launched(ra, rb):
        run = rb.run_id
        if not isinstance(run, str) or not run.strip() or is_reservation(run):
            yield f"ledger row {key} launched with run_id {run!r}"
        else:
            launched[key] = run
    elif key in launched and rb.run_id != launched[key]:
        yield f"ledger row {key} run_id changed from {launched[key]!r} to {rb.run_id!r}"


def _launch_needs_reservation(
    s: _Step, key: tuple[str, int], ra: LedgerRow | None, rb: LedgerRow
) -> Details:
    """T5: a row becomes launched only by ``record_result`` under its own reservation."""
    if not _became_launched(ra, rb):
        return
    tid, occ = key
    res = s.args[0] if s.method == "record_result" else None
    before = s.pre.triggers.get(tid)
    after = s.post.triggers.get(tid)
    ok = (
        res is not None
        and res.outcome == "launched"
        and res.trigger_id == tid
        and res.occurrence == occ
        and before is not None
        and before.active_run_id == res.reservation_id
        and reservation_occurrence(res.reservation_id) == occ
        and after is not None
        and after.active_run_id == res.run_id
    )
    if not ok:
        yield f"ledger row {key} became launched in {s.method} {s.args!r}"


def _fired_row_covered(
    s: _Step, key: tuple[str, int], ra: LedgerRow | None, rb: LedgerRow
) -> Details:
    """T2: the cursor covers a fired row."""
    tid, occ = key
    trig = s.post.triggers.get(tid)
    if (
        rb.manual_key is None  # a manual fire never moves the cursor (T37)
        and rb.outcome in _FIRED
        and trig is not None
        and (trig.last_fired_at is None or trig.last_fired_at < occ)
    ):
        yield f"ledger row {key} is {rb.outcome} but last_fired_at is {trig.last_fired_at}"


_CALL_CHECKS: Final[tuple[tuple[str, CallCheck], ...]] = (
    ("T8", _failures_write_nothing),
    ("T7", _fences_refuse),
    ("T39", _backfill_step_takes_its_progress),
)
#: For a trigger row there before and after the call (``_trigger_kept`` checks the others).
_TRIGGER_CHECKS: Final[tuple[tuple[str, TriggerCheck], ...]] = (
    ("T1", _cursor_never_decreases),
    ("T11", _pending_moves_forward),
    ("T8", _register_keeps_held_state),
    ("T9", _claim_time_of_reservation),
    ("T6", _reservation_from_grant),
    ("T10", _live_reservation_kept),
    ("T12", _owed_work_kept),
    ("T10", _active_run_recovers),
    ("T37", _manual_fires_keep_the_cursor),
    ("T39", _backfill_moved_by_its_methods),
)
_GRANT_CHECKS: Final[tuple[tuple[str, CallCheck], ...]] = (
    ("T6", _grant_names_its_reservation),
    ("T15", _reservation_granted_once),
    ("T6", _grant_fits_the_holder),
    ("T2", _moved_cursor_covers_fired_rows),
    ("T38", _repeated_manual_fire_writes_nothing),
)
#: For a ledger row that changed and still exists (``_prune_keeps_live_rows`` checks the
#: deleted ones).
_ROW_CHECKS: Final[tuple[tuple[str, RowCheck], ...]] = (
    ("T3", _outcomes_move_forward),
    ("T4", _launch_names_a_run),
    ("T5", _launch_needs_reservation),
    ("T2", _fired_row_covered),
    ("T38", _manual_row_of_its_own),
)


def check_transition(
    *,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    answer: Any,
    error: BaseException | None,
    pre: StoreState,
    post: StoreState,
    now: int,
    grants: Grants,
) -> list[Violation]:
    """Check one trigger-store transaction against the durable-state invariants (T1-T15, T37-T39).

    ``now`` is the store clock's reading for the call; ``grants`` is updated in place.
    """
    out: list[Violation] = []

    def report(invariant: str, details: Details) -> None:
        out.extend(Violation(invariant=invariant, at_ms=now, detail=d) for d in details)

    claim = claim_view(method, args, answer) if error is None else None
    s = _Step(
        method=method,
        args=args,
        kwargs=kwargs,
        answer=answer,
        error=error,
        pre=pre,
        post=post,
        now=now,
        grants=grants,
        claim=claim,
    )
    for invariant, check in _CALL_CHECKS:
        report(invariant, check(s))
    for tid in sorted(set(pre.triggers) | set(post.triggers)):
        a = pre.triggers.get(tid)
        b = post.triggers.get(tid)
        if a is None or b is None:
            report("T8", _trigger_kept(s, tid, a, b))
            continue
        for invariant, trigger_check in _TRIGGER_CHECKS:
            report(invariant, trigger_check(s, tid, a, b))
    for invariant, check in _GRANT_CHECKS:
        report(invariant, check(s))
    changed = [
        key
        for key in set(pre.ledger) | set(post.ledger)
        if pre.ledger.get(key) != post.ledger.get(key)
    ]
    for key in sorted(changed):
        ra = pre.ledger.get(key)
        rb = post.ledger.get(key)
        if rb is None:
            assert ra is not None
            report("T13", _prune_keeps_live_rows(s, key, ra))
            grants.launched.pop(key, None)
            if ra.manual_key is not None:
                grants.manual.pop(ra.manual_key, None)  # a pruned fire's key is forgotten
            continue
        grants.ever_rows.setdefault(key[0], set()).add(key[1])
        for invariant, row_check in _ROW_CHECKS:
            report(invariant, row_check(s, key, ra, rb))
    return out
