"""The trigger store's data model (``triggers.md`` §8).

Every model is a frozen, keyword-only :class:`msgspec.Struct`. Constructing one directly does not
validate it; the store validates what it is given where the contract says so.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

import msgspec

from .._constants import MISSED_COUNT_LIMIT
from .._declarations import RegisteredTrigger
from .._errors import TriggerError
from .._json import JsonValue

__all__ = [
    "MISSED_REASONS",
    "OUTCOMES",
    "SETTLED_OUTCOMES",
    "TERMINAL_OUTCOMES",
    "Claim",
    "ClaimAction",
    "Dropped",
    "Fire",
    "FireRecord",
    "Held",
    "HistoryPage",
    "HistoryQuery",
    "Listed",
    "ManualFire",
    "ManualRequest",
    "MissedCounts",
    "MissedReason",
    "Outcome",
    "PendingClaim",
    "Result",
    "ResumePoint",
    "Resumed",
    "SchedulerHeartbeat",
    "is_unfinished",
    "listed",
]

Outcome: TypeAlias = Literal["launched", "completed", "skipped", "buffered", "superseded", "failed"]
"""What happened to one fire (one ledger row)."""

ClaimAction: TypeAlias = Literal["fire", "supersede", "skip", "buffer"]
"""What a granted claim decided."""

OUTCOMES: Final[tuple[Outcome, ...]] = (
    "launched",
    "completed",
    "skipped",
    "buffered",
    "superseded",
    "failed",
)
#: Outcomes after which nothing more happens to a fire.
SETTLED_OUTCOMES: Final[frozenset[Outcome]] = frozenset(
    {"completed", "failed", "skipped", "superseded"}
)
#: Result outcomes that end a launched run.
TERMINAL_OUTCOMES: Final[frozenset[Outcome]] = frozenset({"completed", "failed", "superseded"})


def is_unfinished(outcome: Outcome | None) -> bool:
    """A ledger row is unfinished while its outcome is ``None`` (claimed) or ``"buffered"``."""
    return outcome is None or outcome == "buffered"


class Fire(msgspec.Struct, frozen=True, kw_only=True):
    """The identity of one fire, ``(trigger_id, occurrence)``; also the history cursor."""

    trigger_id: str
    occurrence: int


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of a claim, in exactly one of three shapes.

    * not claimed: ``Claim(claimed=False)``;
    * decided: ``Claim(claimed=True, action="skip" | "buffer")``;
    * reserved: ``Claim(claimed=True, action="fire" | "supersede", reservation_id=...,
      active_run_id=<what a supersede displaces, else None>)``.
    """

    claimed: bool
    action: ClaimAction | None = None
    reservation_id: str | None = None
    active_run_id: str | None = None


class ManualRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a manual fire ("run now") keeps on its ledger row: its key, the input its run
    gets (the caller's, or the trigger's input when the fire was made) and who asked."""

    key: str
    input: JsonValue = None
    by: str | None = None


class PendingClaim(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of ``claim_pending``: the pending occurrence and the claim made for it.

    ``manual`` is set when the occurrence is a manual fire's (buffered, or re-armed after its
    launcher died): its run gets that fire's input, and it never moves the cursor.
    """

    occurrence: int
    claim: Claim
    manual: ManualRequest | None = None


class ManualFire(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of ``claim_manual``: the ledger row a manual fire made, or found.

    ``occurrence`` is the row's off-grid instant (never a whole second, so never a boundary);
    ``claim`` is what the overlap decision made of it, to launch exactly as a scheduled
    boundary's claim. ``repeated`` means ``key`` was used before for this trigger: nothing was
    written, ``claim`` is ``Claim(claimed=False)`` and ``outcome``/``run_id`` are the earlier
    fire's row as it stands.
    """

    trigger_id: str
    occurrence: int
    request: ManualRequest
    claim: Claim
    #: The trigger as the fire's transaction read it (what a launch of the claim uses).
    trigger: RegisteredTrigger
    repeated: bool = False
    outcome: Outcome | None = None
    run_id: str | None = None


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """What ``record_result`` writes for one fire."""

    trigger_id: str
    occurrence: int
    outcome: Outcome
    run_id: str | None = None
    reservation_id: str | None = None
    error: str | None = None
    #: Who records it: read only when the result pauses the trigger (``pause_after_failures``),
    #: as the pause's ``by``. The scheduler names itself there for such a trigger's failures.
    by: str | None = None


class FireRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One fire-ledger row; ``outcome=None`` means claimed and not yet reported."""

    trigger_id: str
    occurrence: int
    outcome: Outcome | None
    run_id: str | None = None
    error: str | None = None
    #: The key of a manual fire ("run now"); ``None`` for a scheduled boundary.
    manual_key: str | None = None


class HistoryQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Filters (``None`` = no filter, combined with AND), an exclusive cursor and a page size."""

    trigger_id: str | None = None
    run_id: str | None = None
    outcome: Outcome | None = None
    cursor: Fire | None = None
    limit: int | None = None


class HistoryPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of history, newest first; ``next_cursor`` is set when more rows follow."""

    items: list[FireRecord]
    next_cursor: Fire | None = None


class Held(msgspec.Struct, frozen=True, kw_only=True):
    """The raw view of what a trigger holds: its holder and its pending (owed) occurrence."""

    active_run_id: str | None = None
    pending_at: int | None = None


MissedReason: TypeAlias = Literal["overlap", "catch_up", "catch_up_bound", "paused"]
"""Why an occurrence will never run (docs/operations.md, "Occurrences that do not run")."""

#: Every :data:`MissedReason`, in the order listings show them.
MISSED_REASONS: Final[tuple[MissedReason, ...]] = (
    "overlap",
    "catch_up",
    "catch_up_bound",
    "paused",
)


class MissedCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How many occurrences of one trigger will never run, by reason (durable, never reset).

    * ``overlap``: skipped because a run held the trigger (``skip``), or pushed out of the
      single buffer slot by a later boundary (``buffer-one``);
    * ``catch_up``: a backlog boundary the catch-up policy gives up (``none`` gives up every
      one, ``one`` all but the latest);
    * ``catch_up_bound``: a backlog boundary the policy would have run, abandoned because the
      backlog was over ``max_catch_up``;
    * ``paused``: fell due while paused and given up by a resume from ``"now"``.
    """

    overlap: int = 0
    catch_up: int = 0
    catch_up_bound: int = 0
    paused: int = 0

    @property
    def total(self) -> int:
        """Every reason together."""
        return self.overlap + self.catch_up + self.catch_up_bound + self.paused

    def by_reason(self) -> tuple[tuple[MissedReason, int], ...]:
        """``(reason, count)`` for every reason, in :data:`MISSED_REASONS` order."""
        return tuple((reason, getattr(self, reason)) for reason in MISSED_REASONS)


class Dropped(msgspec.Struct, frozen=True, kw_only=True):
    """What a scheduler's catch-up gave up just before the occurrence it claims.

    Passed with ``claim_fire`` so that the store counts it in the claim's transaction, only
    when that claim is granted (one scheduler wins it) and nothing after ``after`` (the
    watermark the scheduler counted from) has been taken care of since: no fire cursor, held
    reservation or buffered occurrence past it. ``catch_up`` and ``catch_up_bound`` count
    the boundaries strictly between ``after`` and the claimed occurrence that the policy, or
    its bound, gave up.
    """

    after: int
    catch_up: int = 0
    catch_up_bound: int = 0


class Listed(msgspec.Struct, frozen=True, kw_only=True):
    """One listing row: exactly one of ``trigger`` / ``error`` is set.

    A row that cannot be decoded carries its ``store`` error instead of failing the listing.
    ``missed`` counts the trigger's occurrences that will never run, by reason.
    """

    trigger_id: str
    trigger: RegisteredTrigger | None = None
    error: TriggerError | None = None
    active_run_id: str | None = None
    pending_at: int | None = None
    missed: MissedCounts = MissedCounts()


class SchedulerHeartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """The last tick a scheduler host reported."""

    host: str
    ticked_at: int


def listed(registered: RegisteredTrigger, held: Held | None = None) -> Listed:
    """The :class:`Listed` row a store would return for ``registered`` holding ``held``."""
    state = held if held is not None else Held()
    return Listed(
        trigger_id=registered.id,
        trigger=registered,
        error=None,
        active_run_id=state.active_run_id,
        pending_at=state.pending_at,
    )


ResumePoint: TypeAlias = Literal["now", "policy"]
"""Where a resumed trigger picks up: ``"now"`` skips every occurrence up to the resume (each
counted in :attr:`Resumed.skipped`); ``"policy"`` owes them under the catch-up policy, as after
downtime."""

#: :attr:`Resumed.skipped` counts at most this many occurrences (then ``skipped_more`` is set).
SKIPPED_COUNT_LIMIT: Final = MISSED_COUNT_LIMIT


class Resumed(msgspec.Struct, frozen=True, kw_only=True):
    """What ``resume`` did: the trigger as it now is, and what the resume point skipped.

    ``skipped`` counts the occurrences a resume from ``"now"`` gave up (those after the last
    boundary fired, claimed or buffered, or after the pause when there is none, up to the
    resume), at most
    :data:`SKIPPED_COUNT_LIMIT` (``skipped_more`` says there were more); ``0`` for a resume
    under the catch-up policy and for a trigger that was not paused (``was_paused`` false).
    """

    trigger: RegisteredTrigger
    point: ResumePoint
    was_paused: bool
    skipped: int = 0
    skipped_more: bool = False
