"""The pure decisions of a backfill (``docs/operations.md``, "Backfill").

A backfill fires a trigger's own boundaries in a past interval ``[start, end]``, in order, one
boundary per step. Its state lives on the trigger's row (:class:`~trio_triggers.Backfill`), and
each step is ONE transaction of the store: the ordinary claim decision of ``_decision.decide``
for the boundary (so a boundary already in the ledger is passed over, never run twice), then
the progress moved to the following boundary, conditionally on the progress the step read.

Nothing here does I/O or reads a clock: the bodies of ``_bodies`` read the row, call these
functions and apply the writes they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from .._constants import is_safe_integer
from .._cron import Cron
from .._declarations import Backfill, Overlap, overlap_override
from .._errors import TriggerError
from .._identities import iso, reservation_occurrence

if TYPE_CHECKING:
    from .._declarations import RegisteredTrigger

__all__ = [
    "BACKFILL_DEFAULT_MAX",
    "BACKFILL_MAX_LIMIT",
    "BackfillPlan",
    "FloorResumeAfter",
    "SetBackfill",
    "StepBackfill",
    "cancel_backfill",
    "check_backfill_arguments",
    "may_step",
    "plan_backfill",
    "plan_step",
    "schedule_progress",
]

#: How many boundaries a backfill may cover unless its caller raises the bound.
BACKFILL_DEFAULT_MAX: Final = 1_000
#: The highest bound a caller may ask for.
BACKFILL_MAX_LIMIT: Final = 100_000


# --- writes --------------------------------------------------------------------------------


class SetBackfill(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: every ``backfill_*`` column from ``backfill`` (a start, or a cancel)."""

    backfill: Backfill

    def values(self) -> tuple[object, ...]:
        """The column values, in ``BACKFILL_COLUMNS`` order (``Backfill``'s field order)."""
        b = self.backfill
        return (
            b.start,
            b.end,
            b.next,
            b.total,
            b.done,
            b.bound,
            b.overlap,
            b.state,
            b.created_at,
            b.by,
        )


class StepBackfill(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``backfill_next_ms = next``, ``backfill_done = done``,
    ``backfill_state = state``, where ``backfill_next_ms = expected`` (the compare-and-set
    that lets only one step take a boundary)."""

    expected: int
    next: int | None
    done: int
    state: str


class FloorResumeAfter(msgspec.Struct, frozen=True, kw_only=True):
    """Trigger: ``resume_after_ms = max(coalesce(resume_after_ms, at), at)``."""

    at: int


# --- starting ------------------------------------------------------------------------------


class BackfillPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What starting a backfill writes: the backfill, and the floor under the schedule."""

    backfill: Backfill
    floor: FloorResumeAfter | None


def _instant(name: str, value: object) -> int:
    if not is_safe_integer(value) or value < 0:
        raise TriggerError(
            "invalid_options",
            f"backfill {name} must be a non-negative safe integer (epoch ms), received {value!r}",
            path=name,
        )
    return value


def _bound(value: object) -> int:
    if value is None:
        return BACKFILL_DEFAULT_MAX
    if not is_safe_integer(value) or not 1 <= value <= BACKFILL_MAX_LIMIT:
        raise TriggerError(
            "invalid_options",
            f"backfill bound must be an integer from 1 to {BACKFILL_MAX_LIMIT}, received {value!r}",
            path="max_boundaries",
        )
    return value


def _overlap(value: object) -> Overlap | None:
    return overlap_override(value, label="backfill overlap")


def check_backfill_arguments(
    start: object, end: object, bound: object, overlap: object
) -> tuple[int, int, int, Overlap | None]:
    """The argument checks that need no row (``invalid_options`` with ``path``)."""
    first = _instant("start", start)
    last = _instant("end", end)
    if last < first:
        raise TriggerError(
            "invalid_options",
            f"backfill end {iso(last)} is before its start {iso(first)}",
            path="end",
        )
    return first, last, _bound(bound), _overlap(overlap)


def schedule_progress(
    trigger: RegisteredTrigger, active: str | None, registered_at: int | None, now: int, cron: Cron
) -> int:
    """The latest instant the trigger's own schedule has taken care of.

    The greatest of the fire cursor, a ``resume`` from now's floor and the boundary a
    reservation holds; for a trigger that never fired, the boundary at or before its
    registration (the schedule owes only what comes after it), or before ``now`` for a row
    registered before the attention index.
    """
    marks = [
        mark
        for mark in (trigger.last_fired_at, trigger.resume_after, reservation_occurrence(active))
        if mark is not None
    ]
    if marks:
        return max(marks)
    return cron.previous_at_or_before(registered_at if registered_at is not None else now)


def plan_backfill(
    trigger: RegisteredTrigger,
    *,
    active: str | None,
    registered_at: int | None,
    start: int,
    end: int,
    bound: int,
    overlap: Overlap | None,
    by: str | None,
    now: int,
) -> BackfillPlan:
    """Refuse, or plan the start of a backfill of ``trigger`` over ``[start, end]``.

    Refusals (``invalid_options``, nothing written), in this order: ``end`` in the future
    (after ``now``); ``end`` past the schedule's own progress (those boundaries are the
    schedule's to fire, under its catch-up policy); no boundary in the interval; more
    boundaries than ``bound``; a backfill already running.
    """
    if end > now:
        raise TriggerError(
            "invalid_options",
            f"backfill end {iso(end)} is in the future (now is {iso(now)})",
            path="end",
        )
    cron = Cron.parse(trigger.cron, trigger.timezone, now=now)
    progress = schedule_progress(trigger, active, registered_at, now, cron)
    if end > progress:
        raise TriggerError(
            "invalid_options",
            f"backfill end {iso(end)} is past the schedule's own progress ({iso(progress)}): "
            "later boundaries are the schedule's to fire under its catch-up policy",
            path="end",
        )
    boundaries = cron.occurrences_between(start - 1, end, limit=bound + 1)
    if not boundaries:
        raise TriggerError(
            "invalid_options", f"no boundary of trigger {trigger.id} in the interval", path="start"
        )
    if len(boundaries) > bound:
        raise TriggerError(
            "invalid_options",
            f"the interval holds more than {bound} boundaries (raise the bound, at most "
            f"{BACKFILL_MAX_LIMIT})",
            path="max_boundaries",
        )
    current = trigger.backfill
    if current is not None and current.running:
        raise TriggerError(
            "invalid_options",
            f"trigger {trigger.id} already has a running backfill "
            f"(cancel it first: backfill {trigger.id} --cancel)",
            path="backfill",
        )
    backfill = Backfill(
        start=start,
        end=end,
        next=boundaries[0],
        total=len(boundaries),
        bound=bound,
        overlap=overlap,
        created_at=now,
        by=by,
    )
    # The backfill's claims and results move the fire cursor to its boundaries. The floor makes
    # that invisible to the schedule: nothing at or before its progress is owed by it anyway.
    floor = None
    if trigger.resume_after is None or trigger.resume_after < progress:
        floor = FloorResumeAfter(at=progress)
    return BackfillPlan(backfill=backfill, floor=floor)


# --- steps ---------------------------------------------------------------------------------


def may_step(
    trigger: RegisteredTrigger, occurrence: int, *, pending: int | None
) -> Backfill | None:
    """The running backfill whose step ``occurrence`` is, if a step may be taken now.

    Not while the trigger is paused (disabled is refused by the claim's own fences), nor while
    an occurrence waits in the buffer slot (the backfill waits behind it), nor when the
    progress is elsewhere (another scheduler's step took this boundary first).
    """
    backfill = trigger.backfill
    if backfill is None or not backfill.running or backfill.next != occurrence:
        return None
    if trigger.paused is not None or pending is not None:
        return None
    return backfill


def plan_step(backfill: Backfill, cron: Cron) -> tuple[bool, StepBackfill]:
    """Whether the step claims ``backfill.next``, and its progress write.

    A backfill follows the trigger's schedule as it is at each step: after an edit of the cron
    (or its zone) its progress may not be a boundary any more, and the step then only
    re-aligns it to the first boundary of the current schedule after it, claiming nothing.
    """
    taken = backfill.next
    assert taken is not None  # may_step guarantees it
    following = cron.next(taken)
    if cron.previous_at_or_before(taken) != taken:
        return False, _progress(backfill, taken, following, backfill.done)
    return True, _progress(backfill, taken, following, backfill.done + 1)


def _progress(backfill: Backfill, taken: int, following: int, done: int) -> StepBackfill:
    if following > backfill.end:
        return StepBackfill(expected=taken, next=None, done=done, state="done")
    return StepBackfill(expected=taken, next=following, done=done, state="running")


def cancel_backfill(backfill: Backfill) -> SetBackfill:
    """The write that cancels a running backfill (its progress count is kept)."""
    return SetBackfill(
        backfill=msgspec.structs.replace(backfill, next=None, state="cancelled"),
    )
