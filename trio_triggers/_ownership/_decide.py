"""The pure decision of every run-store operation (``ownership.md`` §7, §10). No I/O.

Each ``decide_*`` takes the row as it was read inside the operation's serialized unit (or
``None`` when there is no row) and the already validated inputs, and returns a
:class:`Decision`: the outcome and, when the operation writes, the complete new row. A store
only reads the row, calls the decision and writes ``decision.row`` (the columns that differ)
in the same transaction. Because the memory, SQLite and PostgreSQL stores share these
functions, their outcomes cannot drift apart.

``stale_after_ms`` is :data:`HEARTBEAT_STALE_AFTER_MS` unless a store was built with another
value for tests; staleness is strict everywhere: ``h`` is stale at ``now`` iff
``h < now - stale_after_ms``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from ._liveness import LivenessEvidence, matches_evidence
from ._models import (
    CLAIMABLE_STATUSES,
    TERMINAL_STATUSES,
    Abandoned,
    Activated,
    AlreadyClaimed,
    AlreadyRequested,
    CancelAcknowledgement,
    CancelRequested,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    ClaimOutcome,
    Created,
    EvidenceRequired,
    Existing,
    FenceLost,
    GuardFailed,
    HeartbeatFresh,
    LivenessUnconfirmed,
    NotFound,
    Recovered,
    RunRow,
    RunSnapshot,
    RunStatus,
    SnapshotChanged,
    Terminal,
    Transitioned,
    TransitionGuard,
    Updated,
    WaitingToRetry,
)

if TYPE_CHECKING:
    from ._owner import OwnerId

__all__ = [
    "Decision",
    "claimed_by",
    "classify",
    "decide_abandon_claim",
    "decide_acknowledge_cancel",
    "decide_activate",
    "decide_claim",
    "decide_claim_and_own",
    "decide_create",
    "decide_heartbeat",
    "decide_recover_claim",
    "decide_request_cancel",
    "decide_steal",
    "decide_transition_owned",
    "is_claimable",
    "matches",
    "owned_by",
    "recover_admitted",
    "steal_admitted",
]

OutcomeT = TypeVar("OutcomeT")

_replace = msgspec.structs.replace


class Decision(Generic[OutcomeT]):
    """An outcome and the new row to write (``None``: write nothing)."""

    __slots__ = ("outcome", "row")

    def __init__(self, outcome: OutcomeT, row: RunRow | None = None) -> None:
        self.outcome = outcome
        self.row = row

    def __repr__(self) -> str:
        return f"Decision({self.outcome!r}, row={self.row!r})"


# --- predicates (§10.2) ---------------------------------------------------------------------


def matches(row: RunRow, expected: RunSnapshot) -> bool:
    """Status, the three owner columns and the stamp equal (``NULL`` equal to ``NULL``)."""
    return (
        row.status == expected.status
        and row.owner == expected.owner
        and row.heartbeat_at_ms == expected.heartbeat_at_ms
    )


def owned_by(row: RunRow, owner: OwnerId) -> bool:
    return row.status == "running" and row.owner == owner


def claimed_by(row: RunRow, claimant: OwnerId, claimed_at_ms: int) -> bool:
    return row.claim == claimant and row.claimed_at_ms == claimed_at_ms


def _fresh(row: RunRow, now_ms: int, stale_after_ms: int) -> bool:
    return (
        row.status == "running"
        and row.heartbeat_at_ms is not None
        and row.heartbeat_at_ms >= now_ms - stale_after_ms
    )


def classify(
    row: RunRow | None, now_ms: int, stale_after_ms: int
) -> NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged:
    """The loss classification of ``claim``, ``claim_and_own`` and ``steal`` (§10.2)."""
    if row is None:
        return NotFound()
    if row.claim is not None:
        return AlreadyClaimed()
    if _fresh(row, now_ms, stale_after_ms):
        return HeartbeatFresh()
    return SnapshotChanged()


def is_claimable(row: RunRow, now_ms: int, stale_after_ms: int) -> bool:
    """Whether some operation could take the run now (used by ``find_claimable``).

    True for an unclaimed ``pending``/``suspended`` row, an unclaimed ``running`` row with a
    stale stamp, and any row whose claim is stale (``recover_claim`` can clear it).
    """
    if row.claim is not None:
        assert row.claimed_at_ms is not None
        return row.claimed_at_ms < now_ms - stale_after_ms
    if row.status in CLAIMABLE_STATUSES:
        return not waiting_to_retry(row, now_ms)
    return row.status == "running" and not _fresh(row, now_ms, stale_after_ms)


def waiting_to_retry(row: RunRow, now_ms: int) -> bool:
    """Whether ``row`` waits between two attempts at ``now_ms`` (nobody may begin it yet).

    A cancel request ends the wait: the run is taken at once and recorded ``cancelled``.
    """
    return (
        row.retry_at_ms is not None
        and row.retry_at_ms > now_ms
        and row.cancel_requested_at_ms is None
    )


def _without_claim(row: RunRow) -> RunRow:
    return _replace(row, claim=None, claimed_at_ms=None)


def _begin_attempt(row: RunRow, owner: OwnerId, now_ms: int) -> RunRow:
    """``row`` running under ``owner`` from ``now_ms``: one more attempt, the first start kept, a
    fresh heartbeat. Both ways an owner begins executing a run (``activate`` after a claim,
    ``claim_and_own`` at once) go through here, so they cannot count attempts differently."""
    started = row.started_at_ms if row.started_at_ms is not None else now_ms
    return _replace(
        row,
        status="running",
        started_at_ms=started,
        attempts=row.attempts + 1,
        finished_at_ms=None,
        owner=owner,
        heartbeat_at_ms=now_ms,
        retry_at_ms=None,
    )


# --- operations -----------------------------------------------------------------------------


def decide_create(
    by_key: RunRow | None,
    id_taken: bool,
    *,
    run_id: str,
    state_json: str,
    flow_id: str | None,
    input_json: str | None,
    idempotency_key: str | None,
    created_at_ms: int,
    owner: OwnerId | None = None,
) -> Decision[Created | Existing] | None:
    """``Existing`` for a known key; ``None`` when ``run_id`` is taken (a constraint).

    With ``owner``, the new run is created already executing under that owner (its first
    attempt begun, as ``claim_and_own`` would begin it): a runner that creates a run it is free
    to execute spares the claim, and no other runner can take the run in between.
    """
    if by_key is not None:
        return Decision(Existing(row=by_key))
    if id_taken:
        return None
    row = RunRow(
        run_id=run_id,
        status="pending",
        created_at_ms=created_at_ms,
        state_json=state_json,
        flow_id=flow_id,
        input_json=input_json,
        idempotency_key=idempotency_key,
    )
    if owner is not None:
        row = _begin_attempt(row, owner, created_at_ms)
    return Decision(Created(row=row), row)


def decide_claim(
    row: RunRow | None,
    expected: RunSnapshot,
    claimant: OwnerId,
    now_ms: int,
    stale_after_ms: int,
) -> Decision[ClaimOutcome]:
    if row is not None and row.claim is None and waiting_to_retry(row, now_ms):
        # The two-phase path refuses a run between attempts as claim_and_own does: a claim
        # now would let ``activate`` begin the next attempt before its instant.
        assert row.retry_at_ms is not None
        return Decision(WaitingToRetry(retry_at_ms=row.retry_at_ms))
    if (
        row is not None
        and row.status in CLAIMABLE_STATUSES
        and matches(row, expected)
        and row.claim is None
    ):
        return Decision(
            Claimed(claimed_at_ms=now_ms), _replace(row, claim=claimant, claimed_at_ms=now_ms)
        )
    return Decision(classify(row, now_ms, stale_after_ms))


def decide_activate(
    row: RunRow | None,
    claimant: OwnerId,
    claimed_at_ms: int,
    expected: RunSnapshot,
    activated_at_ms: int,
) -> Decision[Activated | ClaimLost | SnapshotChanged]:
    if row is None or not claimed_by(row, claimant, claimed_at_ms):
        return Decision(ClaimLost())
    if not matches(row, expected):
        return Decision(SnapshotChanged(), _without_claim(row))
    return Decision(Activated(), _without_claim(_begin_attempt(row, claimant, activated_at_ms)))


def decide_abandon_claim(
    row: RunRow | None, claimant: OwnerId, claimed_at_ms: int
) -> Decision[Abandoned | ClaimLost]:
    if row is None or not claimed_by(row, claimant, claimed_at_ms):
        return Decision(ClaimLost())
    return Decision(Abandoned(), _without_claim(row))


def decide_claim_and_own(
    row: RunRow | None,
    expected: RunSnapshot,
    owner: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence | None,
    stale_after_ms: int,
) -> Decision[
    Activated
    | NotFound
    | AlreadyClaimed
    | HeartbeatFresh
    | SnapshotChanged
    | EvidenceRequired
    | WaitingToRetry
]:
    if (
        expected.status == "running"
        and expected.owner != owner
        and not matches_evidence(expected.owner, owner, now_ms, evidence)
    ):
        # Step 0, read only: a fresh lease reports itself; evidence cannot beat it.
        loss = classify(row, now_ms, stale_after_ms)
        if isinstance(loss, SnapshotChanged) and row is not None and matches(row, expected):
            return Decision(EvidenceRequired())
        return Decision(loss)
    if row is not None and row.claim is None and waiting_to_retry(row, now_ms):
        assert row.retry_at_ms is not None
        return Decision(WaitingToRetry(retry_at_ms=row.retry_at_ms))
    admissible = (
        row is not None
        and row.status in ("pending", "suspended", "running")
        and matches(row, expected)
        and row.claim is None
        and not _fresh(row, now_ms, stale_after_ms)
    )
    if not admissible:
        return Decision(classify(row, now_ms, stale_after_ms))
    assert row is not None
    return Decision(Activated(), _begin_attempt(row, owner, now_ms))


def steal_admitted(expected: RunSnapshot, claimant: OwnerId, now_ms: int, evidence: object) -> bool:
    """Step 1 of ``steal``, decided without reading the row."""
    return isinstance(evidence, LivenessEvidence) and matches_evidence(
        expected.owner, claimant, now_ms, evidence
    )


def decide_steal(
    row: RunRow | None,
    expected: RunSnapshot,
    claimant: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence,
    stale_after_ms: int,
) -> Decision[
    Claimed | NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged | LivenessUnconfirmed
]:
    if not steal_admitted(expected, claimant, now_ms, evidence):
        return Decision(LivenessUnconfirmed())
    admissible = (
        row is not None
        and matches(row, expected)
        and row.claim is None
        and row.status == "running"
        and not _fresh(row, now_ms, stale_after_ms)
    )
    if not admissible:
        return Decision(classify(row, now_ms, stale_after_ms))
    assert row is not None
    return Decision(
        Claimed(claimed_at_ms=now_ms), _replace(row, claim=claimant, claimed_at_ms=now_ms)
    )


def recover_admitted(
    stale_claimant: OwnerId, observer: OwnerId, now_ms: int, evidence: LivenessEvidence
) -> bool:
    """Step 1 of ``recover_claim``, decided without reading the row."""
    return matches_evidence(stale_claimant, observer, now_ms, evidence)


def decide_recover_claim(
    row: RunRow | None,
    stale_claimant: OwnerId,
    claimed_at_ms: int,
    observer: OwnerId,
    now_ms: int,
    evidence: LivenessEvidence,
    stale_after_ms: int,
) -> Decision[Recovered | NotFound | ClaimFresh | ClaimChanged | LivenessUnconfirmed]:
    if not recover_admitted(stale_claimant, observer, now_ms, evidence):
        return Decision(LivenessUnconfirmed())
    if row is None:
        return Decision(NotFound())
    if not claimed_by(row, stale_claimant, claimed_at_ms):
        return Decision(ClaimChanged())
    if claimed_at_ms >= now_ms - stale_after_ms:
        return Decision(ClaimFresh())
    return Decision(Recovered(), _without_claim(row))


def decide_heartbeat(
    row: RunRow | None, owner: OwnerId, now_ms: int, *, reconfirm: bool
) -> Decision[Updated | FenceLost | NotFound]:
    if row is None:
        return Decision(NotFound())
    if not owned_by(row, owner) or (reconfirm and row.claim is not None):
        return Decision(FenceLost())
    assert row.heartbeat_at_ms is not None
    if now_ms <= row.heartbeat_at_ms:
        return Decision(Updated())  # monotonic: a late pulse never moves the stamp back
    return Decision(Updated(), _replace(row, heartbeat_at_ms=now_ms))


def decide_transition_owned(
    row: RunRow | None,
    owner: OwnerId,
    to_status: RunStatus,
    *,
    state_json: str | None,
    result_json: str | None,
    error: str | None,
    guard: TransitionGuard | None,
    transitioned_at_ms: int,
    output_json: str | None = None,
) -> Decision[Transitioned | FenceLost | NotFound | GuardFailed]:
    if row is None:
        return Decision(NotFound())
    if not owned_by(row, owner):
        return Decision(FenceLost())
    if guard is not None:
        requested = row.cancel_requested_at_ms is not None
        if (guard.cancel_requested == "absent" and requested) or (
            guard.cancel_requested == "present" and not requested
        ):
            return Decision(GuardFailed())
    new_state = state_json if state_json is not None else row.state_json
    if to_status == "running":
        if new_state == row.state_json:
            return Decision(Transitioned())
        return Decision(Transitioned(), _replace(row, state_json=new_state))
    return Decision(
        Transitioned(),
        _replace(
            row,
            status=to_status,
            finished_at_ms=transitioned_at_ms if to_status in TERMINAL_STATUSES else None,
            owner=None,
            heartbeat_at_ms=None,
            claim=None,
            claimed_at_ms=None,
            state_json=new_state,
            result_json=result_json if result_json is not None else row.result_json,
            error=error if error is not None else row.error,
            output_json=output_json if output_json is not None else row.output_json,
        ),
    )


def decide_retry_owned(
    row: RunRow | None,
    owner: OwnerId,
    *,
    retry_at_ms: int,
    attempt_json: str,
    state_json: str | None,
) -> Decision[Transitioned | FenceLost | NotFound | GuardFailed]:
    """A failed attempt, retried: the run goes back to ``suspended`` with the attempt appended
    to its log and ``retry_at_ms`` set, in one write, so a crash between two attempts neither
    loses the failure nor runs the attempt twice. Fenced like ``transition_owned``; a cancel
    request already made wins (``GuardFailed``: the caller records ``cancelled`` instead)."""
    if row is None:
        return Decision(NotFound())
    if not owned_by(row, owner):
        return Decision(FenceLost())
    if row.cancel_requested_at_ms is not None:
        return Decision(GuardFailed())
    entries = [] if row.attempt_log_json is None else msgspec.json.decode(row.attempt_log_json)
    entries.append(msgspec.json.decode(attempt_json))
    joined = msgspec.json.encode(entries).decode()
    return Decision(
        Transitioned(),
        _replace(
            row,
            status="suspended",
            owner=None,
            heartbeat_at_ms=None,
            claim=None,
            claimed_at_ms=None,
            state_json=state_json if state_json is not None else row.state_json,
            retry_at_ms=retry_at_ms,
            attempt_log_json=joined,
        ),
    )


def decide_request_cancel(
    row: RunRow | None, now_ms: int
) -> Decision[CancelRequested | AlreadyRequested | Terminal | NotFound]:
    if row is None:
        return Decision(NotFound())
    if row.status in TERMINAL_STATUSES:
        return Decision(Terminal(status=row.status))
    if row.cancel_requested_at_ms is not None:
        return Decision(AlreadyRequested(requested_at_ms=row.cancel_requested_at_ms))
    return Decision(
        CancelRequested(requested_at_ms=now_ms), _replace(row, cancel_requested_at_ms=now_ms)
    )


def decide_acknowledge_cancel(row: RunRow | None, owner: OwnerId, now_ms: int) -> Decision[bool]:
    if row is None or not owned_by(row, owner) or row.cancel_requested_at_ms is None:
        return Decision(False)
    if row.cancel_acknowledgement is not None:
        return Decision(True)
    ack = CancelAcknowledgement(observed_at_ms=now_ms, owner=owner)
    return Decision(True, _replace(row, cancel_acknowledgement=ack))
