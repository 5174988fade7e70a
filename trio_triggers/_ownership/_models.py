"""Run rows, snapshots, outcomes and the :class:`RunStore` protocol (``ownership.md`` §6, §10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeAlias

import msgspec

from ._owner import OwnerId

if TYPE_CHECKING:
    from ._liveness import LivenessEvidence

__all__ = [
    "ATTEMPT_OUTPUT_TAIL",
    "CLAIMABLE_STATUSES",
    "OUTPUT_TAIL_BYTES",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "Abandoned",
    "Activated",
    "AlreadyClaimed",
    "AlreadyRequested",
    "AttemptRecord",
    "CancelAcknowledgement",
    "CancelRequested",
    "ClaimAndOwnOutcome",
    "ClaimChanged",
    "ClaimFresh",
    "ClaimLost",
    "ClaimOutcome",
    "Claimed",
    "Created",
    "EvidenceRequired",
    "Existing",
    "FenceLost",
    "GuardFailed",
    "HeartbeatFresh",
    "LivenessUnconfirmed",
    "NotFound",
    "Recovered",
    "RunOutput",
    "RunRow",
    "RunSnapshot",
    "RunStatus",
    "RunStore",
    "SnapshotChanged",
    "StealOutcome",
    "Terminal",
    "TransitionGuard",
    "Transitioned",
    "Updated",
    "WaitingToRetry",
]

RunStatus = Literal["pending", "running", "suspended", "completed", "failed", "cancelled"]
RUN_STATUSES: frozenset[str] = frozenset(
    ("pending", "running", "suspended", "completed", "failed", "cancelled")
)
TERMINAL_STATUSES: frozenset[str] = frozenset(("completed", "failed", "cancelled"))
CLAIMABLE_STATUSES: frozenset[str] = frozenset(("pending", "suspended"))


class CancelAcknowledgement(msgspec.Struct, frozen=True, kw_only=True):
    """The owner's record that it saw a cancellation request (first writer wins)."""

    observed_at_ms: int
    owner: OwnerId


class RunSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The compare-and-swap key: the three persisted fields a claim and activation guard."""

    status: RunStatus
    owner: OwnerId | None
    heartbeat_at_ms: int | None


#: How much of each output stream a run keeps: the last 64 KiB of stdout and of stderr.
OUTPUT_TAIL_BYTES: Final = 64 * 1024


class RunOutput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a flow printed, as a run records it (``RunRow.output_json`` decodes to this).

    ``stdout`` and ``stderr`` hold the last :data:`OUTPUT_TAIL_BYTES` of each stream, decoded
    as UTF-8 (an invalid byte becomes U+FFFD); ``stdout_bytes`` and ``stderr_bytes`` are each
    stream's whole size in bytes, so a size above ``OUTPUT_TAIL_BYTES`` says the head was dropped.
    Only the tail is kept because the end of a log is where a failure explains itself, and a
    run's row must stay bounded however much a command prints.
    """

    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def truncated(self) -> bool:
        """Whether either stream was longer than :data:`OUTPUT_TAIL_BYTES` (only its tail kept)."""
        return max(self.stdout_bytes, self.stderr_bytes) > OUTPUT_TAIL_BYTES


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded row of ``tt_runs``: the run, its lease and its claim."""

    run_id: str
    status: RunStatus
    created_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    owner: OwnerId | None = None
    heartbeat_at_ms: int | None = None
    claim: OwnerId | None = None
    claimed_at_ms: int | None = None
    cancel_requested_at_ms: int | None = None
    cancel_acknowledgement: CancelAcknowledgement | None = None
    state_json: str
    # our additions for the local runner
    flow_id: str | None = None
    input_json: str | None = None
    result_json: str | None = None
    error: str | None = None
    idempotency_key: str | None = None
    #: How many times an owner began executing the run (``activate`` or ``claim_and_own``):
    #: 1 for a run that ran once, 2 after a peer took over from a dead owner, and so on.
    attempts: int = 0
    #: What the flow printed, when it recorded it (command flows do): a JSON object
    #: ``{"stdout": text, "stderr": text, "stdout_bytes": n, "stderr_bytes": n}`` holding the
    #: last :data:`~trio_triggers.OUTPUT_TAIL_BYTES` of each stream and each stream's total
    #: size (a total above the kept text's size says the head was dropped). Set with the run's
    #: terminal transition; ``None`` for a flow that recorded nothing.
    output_json: str | None = None
    #: While the run waits between two attempts of its flow's retry policy (``suspended``
    #: only): the instant its next attempt may begin. No owner takes it earlier, unless a
    #: cancel request arrives (docs/failures.md, "Retries").
    retry_at_ms: int | None = None
    #: The attempts that failed and were retried, oldest first: a JSON list of
    #: :class:`AttemptRecord` objects (``None`` before the first retry).
    attempt_log_json: str | None = None

    @property
    def attempt(self) -> int:
        """The number of the run's current (or last) attempt: 1 plus the retried failures.

        Unlike :attr:`attempts` (executions begun, a takeover after a crash included), a
        crashed execution does not end an attempt: the attempt is executed again.
        """
        if self.attempt_log_json is None:
            return 1
        return 1 + len(_log_decoder.decode(self.attempt_log_json))

    @property
    def attempt_log(self) -> list[AttemptRecord]:
        """The retried attempts, decoded (oldest first)."""
        if self.attempt_log_json is None:
            return []
        return _log_decoder.decode(self.attempt_log_json)

    @property
    def snapshot(self) -> RunSnapshot:
        """This row's :class:`RunSnapshot` (status, owner, heartbeat stamp)."""
        return RunSnapshot(
            status=self.status, owner=self.owner, heartbeat_at_ms=self.heartbeat_at_ms
        )


class AttemptRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One failed attempt of a run that was retried (``RunRow.attempt_log``).

    ``error`` is the failure as the final one would have been recorded; ``output`` is what the
    flow printed in that attempt, cut to its last :data:`ATTEMPT_OUTPUT_TAIL` characters per
    stream (the final attempt keeps the full tail in ``output_json``).
    """

    attempt: int
    started_at_ms: int
    ended_at_ms: int
    error: str
    retry_at_ms: int
    output: RunOutput | None = None


#: How much of each stream a retried attempt keeps in the attempt log (a row must stay
#: bounded whatever ``max_attempts`` is).
ATTEMPT_OUTPUT_TAIL: Final = 4_000

_log_decoder = msgspec.json.Decoder(list[AttemptRecord])


class TransitionGuard(msgspec.Struct, frozen=True, kw_only=True):
    """A condition on the cancellation request that ``transition_owned`` must find."""

    cancel_requested: Literal["absent", "present"] | None = None


# --- outcomes -----------------------------------------------------------------------------


class _Outcome(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    pass


class NotFound(_Outcome, frozen=True, kw_only=True):
    """No run with that id."""


class AlreadyClaimed(_Outcome, frozen=True, kw_only=True):
    """Someone holds a claim on the run."""


class HeartbeatFresh(_Outcome, frozen=True, kw_only=True):
    """The run is owned and its heartbeat is fresh: nobody may take it."""


class SnapshotChanged(_Outcome, frozen=True, kw_only=True):
    """The row no longer matches the caller's snapshot."""


class WaitingToRetry(_Outcome, frozen=True, kw_only=True):
    """The run waits for its next attempt until ``retry_at_ms``: nobody may take it earlier."""

    retry_at_ms: int


class Activated(_Outcome, frozen=True, kw_only=True):
    """The caller (or the owner it named) now owns the run."""


class ClaimLost(_Outcome, frozen=True, kw_only=True):
    """The presented grant is not the row's claim (another, spent, or none)."""


class Abandoned(_Outcome, frozen=True, kw_only=True):
    """The caller's claim was given back."""


class EvidenceRequired(_Outcome, frozen=True, kw_only=True):
    """Taking over another owner's stale run needs matching liveness evidence."""


class LivenessUnconfirmed(_Outcome, frozen=True, kw_only=True):
    """The evidence does not match (owner, instant or host relation)."""


class Recovered(_Outcome, frozen=True, kw_only=True):
    """The stale claim was cleared; the run is claimable again."""


class ClaimFresh(_Outcome, frozen=True, kw_only=True):
    """The claim is not stale yet."""


class ClaimChanged(_Outcome, frozen=True, kw_only=True):
    """The row does not carry that claim any more."""


class Updated(_Outcome, frozen=True, kw_only=True):
    """The heartbeat stamp was renewed (it never moves backwards)."""


class FenceLost(_Outcome, frozen=True, kw_only=True):
    """The caller does not own the run (or, for ``reconfirm``, a claim is pending)."""


class Transitioned(_Outcome, frozen=True, kw_only=True):
    """The owned transition committed."""


class GuardFailed(_Outcome, frozen=True, kw_only=True):
    """The transition guard did not hold."""


class Claimed(_Outcome, frozen=True, kw_only=True):
    """A claim was granted; ``claimed_at_ms`` is the activation token."""

    claimed_at_ms: int


class CancelRequested(_Outcome, frozen=True, kw_only=True):
    """The cancellation request was recorded."""

    requested_at_ms: int


class AlreadyRequested(_Outcome, frozen=True, kw_only=True):
    """An earlier request exists (the first writer wins)."""

    requested_at_ms: int


class Terminal(_Outcome, frozen=True, kw_only=True):
    """The run has ended; nothing was recorded."""

    status: RunStatus


class Created(_Outcome, frozen=True, kw_only=True):
    """A new row was inserted."""

    row: RunRow


class Existing(_Outcome, frozen=True, kw_only=True):
    """A row with that idempotency key already exists; nothing was written."""

    row: RunRow


Snapshotish = RunSnapshot | RunRow


ClaimOutcome: TypeAlias = (
    Claimed | NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged | WaitingToRetry
)
"""What :meth:`RunStore.claim` answers."""
ClaimAndOwnOutcome: TypeAlias = (
    Activated
    | NotFound
    | AlreadyClaimed
    | HeartbeatFresh
    | SnapshotChanged
    | EvidenceRequired
    | WaitingToRetry
)
"""What :meth:`RunStore.claim_and_own` answers."""
StealOutcome: TypeAlias = (
    Claimed | NotFound | AlreadyClaimed | HeartbeatFresh | SnapshotChanged | LivenessUnconfirmed
)
"""What :meth:`RunStore.steal` answers."""


class RunStore(Protocol):
    """The durable run rows and their leases (``ownership.md`` §10). Every method is async."""

    async def create(
        self,
        run_id: str,
        state_json: str,
        *,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> Created | Existing: ...

    async def get(self, run_id: str) -> RunRow: ...

    async def claim(
        self, run_id: str, expected: Snapshotish, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome: ...

    async def activate(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int, expected: Snapshotish
    ) -> Activated | ClaimLost | SnapshotChanged: ...

    async def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> Abandoned | ClaimLost: ...

    async def claim_and_own(
        self,
        run_id: str,
        expected: Snapshotish,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome: ...

    async def steal(
        self,
        run_id: str,
        expected: Snapshotish,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome: ...

    async def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> Recovered | NotFound | ClaimFresh | ClaimChanged | LivenessUnconfirmed: ...

    async def heartbeat(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> Updated | FenceLost | NotFound: ...

    async def reconfirm(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> Updated | FenceLost | NotFound: ...

    async def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: RunStatus,
        *,
        state_json: str | None = None,
        result_json: str | None = None,
        error: str | None = None,
        guard: TransitionGuard | None = None,
        output_json: str | None = None,
    ) -> Transitioned | FenceLost | NotFound | GuardFailed: ...

    async def request_cancel(
        self, run_id: str, now_ms: int
    ) -> CancelRequested | AlreadyRequested | Terminal | NotFound: ...

    async def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool: ...
