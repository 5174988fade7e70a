"""What every run store shares: validation, the skew bound, metrics, the operation flow.

A concrete store supplies four primitives (run one decision atomically against one row,
create, get, list); everything the contract says about arguments, validation order, store-clock
readings and counters lives here once. The PostgreSQL store subclasses :class:`RunStoreBase`
the same way the memory and SQLite stores do.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import trio

from .._clock import SystemWallClock, WallClock
from .._errors import RunStoreError
from . import _metrics
from ._decide import (
    Decision,
    decide_abandon_claim,
    decide_acknowledge_cancel,
    decide_activate,
    decide_claim,
    decide_claim_and_own,
    decide_create,
    decide_heartbeat,
    decide_recover_claim,
    decide_request_cancel,
    decide_retry_owned,
    decide_steal,
    decide_transition_owned,
    recover_admitted,
    steal_admitted,
)
from ._models import (
    RUN_STATUSES,
    TERMINAL_STATUSES,
    Abandoned,
    Activated,
    AlreadyRequested,
    AttemptRecord,
    CancelRequested,
    ClaimAndOwnOutcome,
    ClaimChanged,
    ClaimFresh,
    ClaimLost,
    ClaimOutcome,
    Created,
    Existing,
    FenceLost,
    GuardFailed,
    LivenessUnconfirmed,
    NotFound,
    Recovered,
    RunRow,
    RunStatus,
    SnapshotChanged,
    Snapshotish,
    StealOutcome,
    Terminal,
    Transitioned,
    TransitionGuard,
    Updated,
)
from ._owner import HEARTBEAT_STALE_AFTER_MS, OwnerId, check_owner, check_timestamp, invalid
from ._validate import (
    check_durable_text,
    check_evidence,
    check_guard,
    check_json_text,
    check_message_text,
    check_output_json,
    check_reading,
    check_run_id,
    check_snapshot,
    check_to_status,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence

    from ._liveness import LivenessEvidence

__all__ = [
    "RUN_CLAIMS",
    "RUN_HEARTBEATS",
    "RUN_THROUGHPUT",
    "RUN_TRANSITIONS",
    "RunStoreBase",
    "outcome_tag",
]

RUN_CLAIMS = "trio_triggers.run_claims"
RUN_HEARTBEATS = "trio_triggers.run_heartbeats"
RUN_TRANSITIONS = "trio_triggers.run_transitions"
RUN_THROUGHPUT = "trio_triggers.run_throughput"

OutcomeT = TypeVar("OutcomeT")
_attempt_decoder = msgspec.json.Decoder(AttemptRecord)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def outcome_tag(outcome: object) -> str:
    """``AlreadyClaimed`` -> ``already_claimed`` (§13.1)."""
    return _CAMEL.sub("_", type(outcome).__name__).lower()


async def _counted(
    counter: str, attributes: dict[str, str], call: Callable[[], Awaitable[OutcomeT]]
) -> OutcomeT:
    try:
        outcome = await call()
    except trio.Cancelled:
        _metrics.add_counter(counter, 1, {**attributes, "outcome": "interrupt"})
        raise
    except BaseException:
        _metrics.add_counter(counter, 1, {**attributes, "outcome": "failure"})
        raise
    _metrics.add_counter(counter, 1, {**attributes, "outcome": outcome_tag(outcome)})
    return outcome


def check_stale_after_ms(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("stale_after_ms must be a positive int")
    return value


class RunStoreBase(ABC):
    """The shared half of every :class:`~trio_triggers.RunStore` implementation.

    ``clock`` is the store clock (lifecycle stamps and the skew bound). ``stale_after_ms`` is
    the staleness cutoff of the store's predicates; it exists for tests that must see an
    owner go stale in real time. Production code keeps the default
    (:data:`HEARTBEAT_STALE_AFTER_MS`): the owner's write tolerance is derived from it, and
    every process sharing a database must use the same value.
    """

    def __init__(
        self, *, clock: WallClock | None = None, stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS
    ) -> None:
        self._clock: WallClock = clock if clock is not None else SystemWallClock()
        self._stale_after_ms = check_stale_after_ms(stale_after_ms)

    @property
    def clock(self) -> WallClock:
        return self._clock

    @property
    def stale_after_ms(self) -> int:
        return self._stale_after_ms

    # --- primitives a backend provides ------------------------------------------------------

    @abstractmethod
    async def _atomic(
        self, method: str, run_id: str, decide: Callable[[RunRow | None], Decision[OutcomeT]]
    ) -> OutcomeT:
        """Read the row, decide and write ``decision.row`` as one serialized unit."""

    @abstractmethod
    async def _create(
        self,
        run_id: str,
        idempotency_key: str | None,
        decide: Callable[[RunRow | None, bool], Decision[Created | Existing] | None],
    ) -> Created | Existing:
        """Look up ``idempotency_key`` and ``run_id``, decide, insert ``decision.row`` (one unit).

        ``decide`` returning ``None`` means ``run_id`` is taken: raise ``constraint``.
        """

    @abstractmethod
    async def _get(self, run_id: str) -> RunRow | None: ...

    @abstractmethod
    async def _list(
        self,
        statuses: Collection[str] | None,
        limit: int | None,
        claimable_at: int | None,
        *,
        newest_first: bool = False,
        trigger_id: str | None = None,
    ) -> list[RunRow]: ...

    # --- the contract ------------------------------------------------------------------------

    async def create(
        self,
        run_id: str,
        state_json: str,
        *,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> Created | Existing:
        """Insert a ``pending`` run, or return the row that already has ``idempotency_key``."""
        return await self._insert(
            "create", run_id, state_json, None, flow_id, input_json, idempotency_key
        )

    async def create_owned(
        self,
        run_id: str,
        state_json: str,
        *,
        owner: OwnerId,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> Created | Existing:
        """:meth:`create`, the new run already ``running`` under ``owner`` (its first attempt
        begun, heartbeat now), in the same one write; a known key answers ``Existing``
        unchanged. An addition for the local runner: it creates a run it has room to execute
        and begins at once, instead of creating it ``pending`` and claiming it after."""
        check_owner("create_owned", owner, "owner")
        return await self._insert(
            "create_owned", run_id, state_json, owner, flow_id, input_json, idempotency_key
        )

    async def _insert(
        self,
        m: str,
        run_id: str,
        state_json: str,
        owner: OwnerId | None,
        flow_id: str | None,
        input_json: str | None,
        idempotency_key: str | None,
    ) -> Created | Existing:
        """Both creates: the arguments checked, then one :func:`decide_create` write."""
        check_run_id(m, run_id)
        check_json_text(m, state_json, "state_json")
        check_durable_text(m, flow_id, "flow_id", optional=True)
        check_json_text(m, input_json, "input_json", optional=True)
        check_durable_text(m, idempotency_key, "idempotency_key", optional=True)
        created_at = self._clock.now_ms()

        def decide(by_key: RunRow | None, id_taken: bool) -> Decision[Created | Existing] | None:
            return decide_create(
                by_key,
                id_taken,
                run_id=run_id,
                state_json=state_json,
                flow_id=flow_id,
                input_json=input_json,
                idempotency_key=idempotency_key,
                created_at_ms=created_at,
                owner=owner,
            )

        return await self._create(run_id, idempotency_key, decide)

    async def get(self, run_id: str) -> RunRow:
        """The run's row; ``RunStoreError("not_found_row")`` for an unknown id."""
        check_run_id("get", run_id)
        row = await self._get(run_id)
        if row is None:
            raise RunStoreError("not_found_row", "get", "no run with that run_id")
        return row

    async def claim(
        self, run_id: str, expected: Snapshotish, claimant: OwnerId, now_ms: int
    ) -> ClaimOutcome:
        m = "claim"

        async def call() -> ClaimOutcome:
            check_run_id(m, run_id)
            snap = check_snapshot(m, expected)
            check_owner(m, claimant, "claimant")
            now = check_reading(m, now_ms, self._clock.now_ms())
            s = self._stale_after_ms
            return await self._atomic(
                m, run_id, lambda row: decide_claim(row, snap, claimant, now, s)
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    async def activate(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int, expected: Snapshotish
    ) -> Activated | ClaimLost | SnapshotChanged:
        m = "activate"

        async def call() -> Activated | ClaimLost | SnapshotChanged:
            check_run_id(m, run_id)
            snap = check_snapshot(m, expected)
            check_owner(m, claimant, "claimant")
            token = check_timestamp(m, claimed_at_ms, "claimed_at_ms")
            at = self._clock.now_ms()
            return await self._atomic(
                m, run_id, lambda row: decide_activate(row, claimant, token, snap, at)
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    async def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> Abandoned | ClaimLost:
        m = "abandon_claim"

        async def call() -> Abandoned | ClaimLost:
            check_run_id(m, run_id)
            check_owner(m, claimant, "claimant")
            token = check_timestamp(m, claimed_at_ms, "claimed_at_ms")
            return await self._atomic(
                m, run_id, lambda row: decide_abandon_claim(row, claimant, token)
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    async def claim_and_own(
        self,
        run_id: str,
        expected: Snapshotish,
        owner: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence | None = None,
    ) -> ClaimAndOwnOutcome:
        m = "claim_and_own"

        async def call() -> ClaimAndOwnOutcome:
            check_run_id(m, run_id)
            snap = check_snapshot(m, expected)
            check_owner(m, owner, "owner")
            now = check_reading(m, now_ms, self._clock.now_ms())
            ev = None if evidence is None else check_evidence(m, evidence)
            s = self._stale_after_ms
            return await self._atomic(
                m, run_id, lambda row: decide_claim_and_own(row, snap, owner, now, ev, s)
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    @staticmethod
    async def _admitted(
        m: str, evidence: LivenessEvidence | None, admits: Callable[[LivenessEvidence], bool]
    ) -> LivenessEvidence | None:
        """Step 1 of the takeovers on evidence (:meth:`steal`, :meth:`recover_claim`), before the
        row is read: the evidence is required and checked, then ``None`` (after a checkpoint, as
        any store call makes one) when it does not admit the caller, who may not try."""
        if evidence is None:
            raise invalid(m, "evidence is required")
        ev = check_evidence(m, evidence)
        if admits(ev):
            return ev
        await trio.lowlevel.checkpoint()
        return None

    async def steal(
        self,
        run_id: str,
        expected: Snapshotish,
        claimant: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> StealOutcome:
        m = "steal"

        async def call() -> StealOutcome:
            check_run_id(m, run_id)
            snap = check_snapshot(m, expected)
            check_owner(m, claimant, "claimant")
            now = check_reading(m, now_ms, self._clock.now_ms())
            ev = await self._admitted(m, evidence, lambda e: steal_admitted(snap, claimant, now, e))
            if ev is None:
                return LivenessUnconfirmed()  # the caller was not allowed to try
            s = self._stale_after_ms
            return await self._atomic(
                m, run_id, lambda row: decide_steal(row, snap, claimant, now, ev, s)
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    async def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: LivenessEvidence,
    ) -> Recovered | NotFound | ClaimFresh | ClaimChanged | LivenessUnconfirmed:
        m = "recover_claim"

        async def call() -> Recovered | NotFound | ClaimFresh | ClaimChanged | LivenessUnconfirmed:
            check_run_id(m, run_id)
            check_owner(m, stale_claimant, "stale_claimant")
            check_owner(m, observer, "observer")
            token = check_timestamp(m, claimed_at_ms, "claimed_at_ms")
            now = check_reading(m, now_ms, self._clock.now_ms())
            ev = await self._admitted(
                m, evidence, lambda e: recover_admitted(stale_claimant, observer, now, e)
            )
            if ev is None:
                return LivenessUnconfirmed()
            s = self._stale_after_ms
            return await self._atomic(
                m,
                run_id,
                lambda row: decide_recover_claim(row, stale_claimant, token, observer, now, ev, s),
            )

        return await _counted(RUN_CLAIMS, {"op": m}, call)

    async def _renew(
        self, m: str, run_id: str, owner: OwnerId, now_ms: int
    ) -> Updated | FenceLost | NotFound:
        async def call() -> Updated | FenceLost | NotFound:
            check_run_id(m, run_id)
            check_owner(m, owner, "owner")
            now = check_reading(m, now_ms, self._clock.now_ms())
            reconfirm = m == "reconfirm"
            return await self._atomic(
                m, run_id, lambda row: decide_heartbeat(row, owner, now, reconfirm=reconfirm)
            )

        return await _counted(RUN_HEARTBEATS, {"op": m}, call)

    async def heartbeat(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> Updated | FenceLost | NotFound:
        """Renew the stamp (``max(stamp, now_ms)``) if ``owner`` still owns the run."""
        return await self._renew("heartbeat", run_id, owner, now_ms)

    async def reconfirm(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> Updated | FenceLost | NotFound:
        """Like :meth:`heartbeat`, but ``FenceLost`` while any claim is pending."""
        return await self._renew("reconfirm", run_id, owner, now_ms)

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
    ) -> Transitioned | FenceLost | NotFound | GuardFailed:
        m = "transition_owned"
        attributes: dict[str, str] = {"to": str(to_status)}

        async def call() -> Transitioned | FenceLost | NotFound | GuardFailed:
            check_run_id(m, run_id)
            check_owner(m, owner, "owner")
            to = check_to_status(m, to_status)
            check_json_text(m, state_json, "state_json", optional=True)
            if result_json is not None:
                check_json_text(m, result_json, "result_json")
                if to != "completed":
                    raise invalid(m, "result_json is allowed only with to_status completed")
            if error is not None:
                check_message_text(m, error, "error")
                if to not in ("failed", "cancelled"):
                    raise invalid(m, "error is allowed only with to_status failed or cancelled")
            if output_json is not None:
                check_output_json(m, output_json)
                if to not in TERMINAL_STATUSES:
                    raise invalid(m, "output_json is allowed only with a terminal to_status")
            g = check_guard(m, guard)
            at = self._clock.now_ms()
            return await self._atomic(
                m,
                run_id,
                lambda row: decide_transition_owned(
                    row,
                    owner,
                    to,
                    state_json=state_json,
                    result_json=result_json,
                    error=error,
                    guard=g,
                    transitioned_at_ms=at,
                    output_json=output_json,
                ),
            )

        outcome = await _counted(RUN_TRANSITIONS, attributes, call)
        if isinstance(outcome, Transitioned) and to_status in TERMINAL_STATUSES:
            _metrics.add_counter(RUN_THROUGHPUT, 1, {})
        return outcome

    async def retry_owned(
        self,
        run_id: str,
        owner: OwnerId,
        *,
        retry_at_ms: int,
        attempt_json: str,
        state_json: str | None = None,
    ) -> Transitioned | FenceLost | NotFound | GuardFailed:
        """Record a failed attempt that will be retried (fenced, one write): the run returns to
        ``suspended`` with ``attempt_json`` (an :class:`AttemptRecord`) appended to its attempt
        log, and no owner may begin it before ``retry_at_ms``. ``GuardFailed`` when a cancel
        request is already recorded (the caller records ``cancelled`` instead).

        An addition for the local runner's retry policies; not part of the ``RunStore`` contract.
        """
        m = "retry_owned"
        attributes: dict[str, str] = {"to": "suspended"}

        async def call() -> Transitioned | FenceLost | NotFound | GuardFailed:
            check_run_id(m, run_id)
            check_owner(m, owner, "owner")
            at = check_timestamp(m, retry_at_ms, "retry_at_ms")
            check_json_text(m, state_json, "state_json", optional=True)
            if not isinstance(attempt_json, str):
                raise invalid(m, "attempt_json must be text")
            try:
                _attempt_decoder.decode(attempt_json)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise invalid(m, "attempt_json must be one attempt record") from None
            return await self._atomic(
                m,
                run_id,
                lambda row: decide_retry_owned(
                    row, owner, retry_at_ms=at, attempt_json=attempt_json, state_json=state_json
                ),
            )

        return await _counted(RUN_TRANSITIONS, attributes, call)

    async def request_cancel(
        self, run_id: str, now_ms: int
    ) -> CancelRequested | AlreadyRequested | Terminal | NotFound:
        """Ask the owner to cancel (not fenced; the first request wins)."""
        m = "request_cancel"
        check_run_id(m, run_id)
        now = check_timestamp(m, now_ms, "now_ms")
        return await self._atomic(m, run_id, lambda row: decide_request_cancel(row, now))

    async def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        """Record that the owner saw the request (fenced; the first acknowledgement wins)."""
        m = "acknowledge_cancel"
        check_run_id(m, run_id)
        check_owner(m, owner, "owner")
        now = check_timestamp(m, now_ms, "now_ms")
        return await self._atomic(m, run_id, lambda row: decide_acknowledge_cancel(row, owner, now))

    # --- additions for the local runner (not part of the contract) ---------------------------

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        trigger_id: str | None = None,
    ) -> list[RunRow]:
        """Rows in ``(created_at_ms, run_id)`` order (reversed with ``newest_first``),
        optionally only some statuses, or only the runs launched for ``trigger_id``'s
        boundaries (a read).

        An addition for the local runner and dashboards; not part of the ``RunStore`` contract.
        """
        m = "list_runs"
        wanted = _check_statuses(m, statuses)
        bound = _check_limit(m, limit)
        if trigger_id is not None and (not isinstance(trigger_id, str) or not trigger_id):
            raise invalid(m, "trigger_id must be a non-empty string or None")
        return await self._list(
            wanted, bound, None, newest_first=bool(newest_first), trigger_id=trigger_id
        )

    async def find_claimable(self, now_ms: int, *, limit: int | None = 100) -> list[RunRow]:
        """Rows some operation could take at ``now_ms``, oldest first (a read).

        That is: unclaimed ``pending``/``suspended`` rows; unclaimed ``running`` rows whose
        stamp is stale at ``now_ms``; and rows whose claim is stale (``recover_claim``). The
        result is a hint: the taking operation re-checks everything in its own transaction.
        An addition for the local runner; not part of the ``RunStore`` contract.
        """
        m = "find_claimable"
        now = check_timestamp(m, now_ms, "now_ms")
        bound = _check_limit(m, limit)
        return await self._list(None, bound, now)


def _check_statuses(method: str, statuses: Collection[str] | None) -> Sequence[str] | None:
    if statuses is None:
        return None
    if isinstance(statuses, str):
        raise invalid(method, "statuses must be a collection of run statuses, not a str")
    values = list(statuses)
    for value in values:
        if not isinstance(value, str) or value not in RUN_STATUSES:
            raise invalid(method, "statuses must hold only run statuses")
    return values


def _check_limit(method: str, limit: int | None) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise invalid(method, "limit must be a positive int or None")
    return limit
