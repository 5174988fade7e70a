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
    _info("T30", "call", "Disabled triggers get recovery only"),
    _info("T31", "final", "Expired reservations are reached"),
    _info("T32", "elsewhere", "Cron consistency (property tests against a brute-force oracle)"),
    _info("T33", "elsewhere", "Due-occurrence bounds (property tests)"),
    _info("T34", "call", "One exception at a time"),
    _info("T35", "step", "The attention index holds each row's exact instant (or a live take)"),
    _info("T36", "step", "A reservation's own ledger row stays unfinished while it holds"),
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


class LedgerRow(msgspec.Struct, frozen=True, kw_only=True):
    trigger_id: str
    occurrence: int
    outcome: str | None
    run_id: str | None
    error: str | None = None


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
_WRITES: Final = TRIGGER_WRITE_METHODS


class ClaimView(msgspec.Struct, frozen=True, kw_only=True):
    """What the checker needs of one claim answer (from ``claim_fire`` or ``claim_pending``)."""

    trigger_id: str
    occurrence: int
    claimed: bool
    action: str | None
    reservation_id: str | None
    active_run_id: str | None


def claim_view(method: str, args: tuple[Any, ...], answer: Any) -> ClaimView | None:
    """Reduce a claim call's answer to a :class:`ClaimView` (``None`` if nothing was claimed)."""
    if method == "claim_fire":
        trigger_id, occurrence = args[0], args[1]
        claim = answer
    elif method == "claim_pending":
        if answer is None:
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
    """Everything granted so far: reservation ids and their grant times, launched rows."""

    def __init__(self) -> None:
        self.reservations: dict[str, int] = {}
        self.launched: dict[tuple[str, int], str] = {}
        self.ever_rows: dict[str, set[int]] = {}


def _err(violations: list[Violation], now: int, invariant: str, detail: str) -> None:
    violations.append(Violation(invariant=invariant, at_ms=now, detail=detail))


def _expired(reservation: str, claimed_at: int | None, now: int) -> bool:
    return claimed_at is None or claimed_at <= now - LEASE


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
    """Check one trigger-store transaction against the durable-state invariants T1-T15.

    ``now`` is the store clock's reading for the call; ``grants`` is updated in place.
    """
    out: list[Violation] = []
    claim = claim_view(method, args, answer) if error is None else None
    granted_reserved = claim is not None and claim.claimed and claim.action in ("fire", "supersede")

    # T8: a refused or failed call writes nothing.
    if error is not None and (pre.triggers != post.triggers or pre.ledger != post.ledger):
        _err(out, now, "T8", f"{method}{args!r} raised {error!r} but changed durable state")
    if method not in _WRITES and (pre.triggers != post.triggers or pre.ledger != post.ledger):
        _err(out, now, "T8", f"read-only {method}{args!r} changed durable state")

    # T7: fences.
    if method in ("claim_fire", "claim_pending"):
        tid = args[0]
        before = pre.triggers.get(tid)
        expected = kwargs.get("expected_revision")
        # claim_pending answers None without any check when the slot is empty (§9.7).
        empty_slot = method == "claim_pending" and before is not None and before.pending_at is None
        if before is not None and expected is not None and not empty_slot:
            code = error.code if isinstance(error, TriggerError) else None
            stale = expected != before.revision
            if stale and code != "revision_mismatch":
                _err(
                    out,
                    now,
                    "T7",
                    f"{method}({tid!r}) with stale expected_revision {expected} (stored "
                    f"{before.revision}) was not refused (answer {answer!r}, error {error!r})",
                )
            elif not stale and not before.enabled and code != "trigger_disabled":
                _err(out, now, "T7", f"{method}({tid!r}) on a disabled trigger was not refused")
            if (stale or not before.enabled) and claim is not None and claim.claimed:
                _err(out, now, "T7", f"{method}({tid!r}) granted a claim through a fence")

    # Per trigger.
    for tid in sorted(set(pre.triggers) | set(post.triggers)):
        a = pre.triggers.get(tid)
        b = post.triggers.get(tid)
        if b is None:
            if a is not None:
                _err(out, now, "T8", f"trigger {tid!r} disappeared in {method}")
            continue
        if a is None:
            if method != "register":
                _err(out, now, "T8", f"trigger {tid!r} appeared in {method}")
            continue
        # T1
        if a.last_fired_at is not None and (
            b.last_fired_at is None or b.last_fired_at < a.last_fired_at
        ):
            _err(
                out,
                now,
                "T1",
                f"{tid}: last_fired_at went from {a.last_fired_at} to {b.last_fired_at} in "
                f"{method}",
            )
        # T11
        if a.pending_at is not None:
            if b.pending_at is not None and b.pending_at < a.pending_at:
                _err(out, now, "T11", f"{tid}: pending_at fell {a.pending_at} -> {b.pending_at}")
            if b.pending_at is None:
                ok = (
                    method == "claim_pending"
                    and claim is not None
                    and claim.trigger_id == tid
                    and claim.occurrence == a.pending_at
                    and claim.claimed
                    and claim.action in ("fire", "supersede", "skip")
                )
                if not ok:
                    _err(out, now, "T11", f"{tid}: pending_at {a.pending_at} cleared by {method}")
        if method == "register" and (
            a.pending_at != b.pending_at
            or a.active_run_id != b.active_run_id
            or a.active_claimed_at != b.active_claimed_at
        ):
            _err(out, now, "T8", f"{tid}: register changed the held state")
        # T9
        if post.claimed_at_known and b.active_claimed_at is not None:
            granted_at = grants.reservations.get(b.active_run_id or "")
            if not is_reservation(b.active_run_id) or (
                granted_at is not None and granted_at != b.active_claimed_at
            ):
                _err(
                    out,
                    now,
                    "T9",
                    f"{tid}: active_claimed_at {b.active_claimed_at} with holder "
                    f"{b.active_run_id!r}",
                )
        # T6: a new reservation only from a granted claim of this call.
        if (
            is_reservation(b.active_run_id)
            and b.active_run_id != a.active_run_id
            and not (
                granted_reserved
                and claim is not None
                and claim.trigger_id == tid
                and claim.reservation_id == b.active_run_id
            )
        ):
            _err(
                out,
                now,
                "T6",
                f"{tid}: holder became reservation {b.active_run_id!r} in {method} without "
                "a granted claim",
            )
        # T10 / T12: a reservation stops being the holder.
        held = a.active_run_id
        if is_reservation(held) and b.active_run_id != held:
            assert held is not None
            granted_at = grants.reservations.get(held, a.active_claimed_at)
            expired = _expired(held, granted_at if granted_at is not None else None, now)
            if not pre.claimed_at_known and held not in grants.reservations:
                expired = True  # foreign reservation of unknown age: cannot judge
            lease_path = method == "active_run" or (
                method in ("claim_fire", "claim_pending")
                and claim is not None
                and claim.trigger_id == tid
                and claim.action != "supersede"
            )
            if lease_path and not expired:
                _err(out, now, "T10", f"{tid}: live reservation {held!r} removed by {method}")
            occ = reservation_occurrence(held)
            if occ is not None and unfinished(post.ledger.get((tid, occ))):
                later_grant = (
                    granted_reserved
                    and claim is not None
                    and claim.trigger_id == tid
                    and claim.occurrence >= occ
                )
                if not later_grant and (b.pending_at is None or b.pending_at < occ):
                    _err(
                        out,
                        now,
                        "T12",
                        f"{tid}: reservation {held!r} released by {method} while occurrence "
                        f"{occ} is owed, and pending_at is {b.pending_at}",
                    )
        # T10: active_run on an expired reservation removes it and re-arms it.
        if method == "active_run" and args[0] == tid and error is None:
            if held is not None and not is_reservation(held) and b.active_run_id != held:
                _err(out, now, "T10", f"{tid}: active_run removed the run holder {held!r}")
            if is_reservation(held) and held in grants.reservations:
                assert held is not None
                if _expired(held, grants.reservations[held], now):
                    occ = reservation_occurrence(held)
                    row = pre.ledger.get((tid, occ)) if occ is not None else None
                    want_holder: str | None = None
                    want_pending = a.pending_at
                    if occ is not None and unfinished(row):
                        assert row is not None
                        if row.run_id is not None and not is_reservation(row.run_id):
                            want_holder = row.run_id
                        want_pending = occ if a.pending_at is None else max(a.pending_at, occ)
                    if b.active_run_id != want_holder or b.pending_at != want_pending:
                        _err(
                            out,
                            now,
                            "T10",
                            f"{tid}: active_run on expired {held!r} left holder "
                            f"{b.active_run_id!r} pending {b.pending_at} (want {want_holder!r}, "
                            f"{want_pending})",
                        )
                    if answer != b.active_run_id:
                        _err(out, now, "T10", f"{tid}: active_run answered {answer!r}")

    # T6: the shape of a granted claim.
    if claim is not None and claim.claimed and error is None:
        before = pre.triggers.get(claim.trigger_id)
        if claim.action in ("fire", "supersede"):
            rid = claim.reservation_id
            if rid is None or reservation_occurrence(rid) != claim.occurrence:
                _err(out, now, "T6", f"granted claim {claim!r} has no matching reservation")
            elif rid in grants.reservations:
                _err(out, now, "T15", f"reservation {rid!r} granted twice")
            else:
                grants.reservations[rid] = now
            if before is not None:
                if claim.action == "supersede":
                    if before.overlap != "supersede":
                        _err(out, now, "T6", f"supersede granted under {before.overlap!r}")
                    if claim.active_run_id is None:
                        _err(out, now, "T6", "a supersede claim reported no displaced holder")
                else:
                    h = before.active_run_id
                    if h is not None:
                        known = h in grants.reservations or pre.claimed_at_known
                        at = grants.reservations.get(h, before.active_claimed_at)
                        if not is_reservation(h) or (known and not _expired(h, at, now)):
                            _err(
                                out,
                                now,
                                "T6",
                                f"{claim.trigger_id}: fire granted for {claim.occurrence} while "
                                f"{h!r} holds it",
                            )

    # T2 for the rows that did not change: only a cursor that moved can uncover them.
    for tid in sorted(post.triggers):
        a = pre.triggers.get(tid)
        b = post.triggers[tid]
        if a is not None and a.last_fired_at != b.last_fired_at:
            for (rt, occ), r in post.ledger.items():
                if (
                    rt == tid
                    and r.outcome in _FIRED
                    and (b.last_fired_at is None or b.last_fired_at < occ)
                ):
                    _err(
                        out,
                        now,
                        "T2",
                        f"ledger row {(rt, occ)} is {r.outcome} but the "
                        f"cursor moved to {b.last_fired_at}",
                    )
    # Ledger rows that changed.
    changed = [
        key
        for key in set(pre.ledger) | set(post.ledger)
        if pre.ledger.get(key) != post.ledger.get(key)
    ]
    for key in sorted(changed):
        ra = pre.ledger.get(key)
        rb = post.ledger.get(key)
        tid, occ = key
        if rb is None:
            assert ra is not None
            # T13
            trig = pre.triggers.get(tid)
            if method != "prune_fires":
                _err(out, now, "T13", f"ledger row {key} deleted by {method}")
            else:
                if ra.outcome is None or ra.outcome in ("buffered", "launched"):
                    _err(out, now, "T13", f"prune deleted live row {key} ({ra.outcome})")
                if trig is not None and trig.pending_at == occ:
                    _err(out, now, "T13", f"prune deleted the pending row {key}")
                if trig is not None and ra.run_id is not None and ra.run_id == trig.active_run_id:
                    _err(out, now, "T13", f"prune deleted the holder's row {key}")
                if occ >= args[0]:
                    _err(out, now, "T13", f"prune deleted row {key} newer than {args[0]}")
            grants.launched.pop(key, None)
            continue
        grants.ever_rows.setdefault(tid, set()).add(occ)
        if ra is None:
            if method not in ("claim_fire", "claim_pending"):
                _err(out, now, "T3", f"ledger row {key} created by {method}")
            elif rb.outcome not in (None, "skipped", "buffered"):
                _err(out, now, "T3", f"ledger row {key} created as {rb.outcome!r}")
        elif rb.outcome not in _FORWARD.get(ra.outcome, frozenset()):
            _err(out, now, "T3", f"ledger row {key} went {ra.outcome!r} -> {rb.outcome!r}")
        became_launched = rb.outcome == "launched" and (ra is None or ra.outcome != "launched")
        if became_launched:
            if key in grants.launched:
                _err(out, now, "T3", f"ledger row {key} became launched twice")
            run = rb.run_id
            if not isinstance(run, str) or not run.strip() or is_reservation(run):
                _err(out, now, "T4", f"ledger row {key} launched with run_id {run!r}")
            else:
                grants.launched[key] = run
            # T5
            res = args[0] if method == "record_result" else None
            before = pre.triggers.get(tid)
            after = post.triggers.get(tid)
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
                _err(out, now, "T5", f"ledger row {key} became launched in {method} {args!r}")
        elif key in grants.launched and rb.run_id != grants.launched[key]:
            _err(
                out,
                now,
                "T4",
                f"ledger row {key} run_id changed from {grants.launched[key]!r} to {rb.run_id!r}",
            )
        # T2
        trig_after = post.triggers.get(tid)
        if (
            rb.outcome in _FIRED
            and trig_after is not None
            and (trig_after.last_fired_at is None or trig_after.last_fired_at < occ)
        ):
            _err(
                out,
                now,
                "T2",
                f"ledger row {key} is {rb.outcome} but last_fired_at is {trig_after.last_fired_at}",
            )
    return out
