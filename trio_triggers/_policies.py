"""Overlap, catch-up and due occurrences (``triggers.md`` §5-§7, §14.1): pure schedule policy.

Nothing here does I/O or reads a clock: ``now`` is always an argument, so the scheduler, the
dashboard readers and the tests all get the same answer for the same inputs.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import TYPE_CHECKING, Literal

import msgspec

from ._constants import MISSED_COUNT_LIMIT, NEXT_OCCURRENCE_COUNT, is_safe_integer
from ._cron import Cron
from ._errors import TriggerError
from ._identities import idempotency_key

if TYPE_CHECKING:
    from ._declarations import CatchUp, Overlap, RegisteredTrigger, Schedule, Trigger

__all__ = [
    "DueOccurrences",
    "OverlapDecision",
    "catch_up_occurrences",
    "due_occurrences",
    "jitter_delay",
    "launch_at",
    "next_launches",
    "next_occurrences",
    "overlap_decision",
    "pending_after",
]

logger = logging.getLogger("trio_triggers.policies")

OverlapDecision = Literal["fire", "skip", "buffer", "supersede"]

_WHEN_RUNNING: dict[str, OverlapDecision] = {
    "skip": "skip",
    "buffer-one": "buffer",
    "supersede": "supersede",
}


def overlap_decision(
    policy: Overlap, *, running: bool, pending: int | None = None, due: int
) -> OverlapDecision:
    """What to do with a due occurrence (§7): ``fire`` when nothing runs, else the policy's
    answer (``skip``, ``buffer`` or ``supersede``). ``pending`` and ``due`` do not change it."""
    del pending, due
    try:
        when_running = _WHEN_RUNNING[policy]
    except KeyError:
        raise ValueError(f"unknown overlap policy {policy!r}") from None
    return when_running if running else "fire"


def pending_after(pending: int | None, due: int) -> int:
    """The single buffer slot after buffering ``due``: it only ever moves forward."""
    return due if pending is None else max(pending, due)


def _bound_exceeded(missed: int, max_catch_up: int) -> TriggerError:
    noun = "occurrence" if missed == 1 else "occurrences"
    return TriggerError(
        "catch_up_bound_exceeded", f"missed {missed} {noun}; max_catch_up is {max_catch_up}"
    )


def catch_up_occurrences(
    policy: CatchUp, max_catch_up: int, last_fired_at: int | None, now: int, cron: Cron
) -> list[int]:
    """The occurrences owed for the time since ``last_fired_at`` (§5.1), ascending.

    Raises ``catch_up_bound_exceeded`` for an unusable bound (checked first, for every policy)
    or when more is owed than ``max_catch_up`` allows: a backlog past the bound is refused
    rather than silently trimmed, so the caller decides (``due_occurrences`` abandons it).
    """
    if not is_safe_integer(max_catch_up) or max_catch_up < 0:
        raise TriggerError(
            "catch_up_bound_exceeded",
            f"max_catch_up must be a non-negative safe integer, received {max_catch_up!r}",
            "max_catch_up",
        )
    if policy not in ("none", "one", "all"):
        raise ValueError(f"unknown catch-up policy {policy!r}")
    if last_fired_at is None or policy == "none":
        return []
    if policy == "one":
        latest = cron.previous_at_or_before(now)
        if latest <= last_fired_at:
            return []
        if max_catch_up < 1:
            raise _bound_exceeded(1, max_catch_up)
        return [latest]
    missed = cron.occurrences_between(last_fired_at, now, limit=max_catch_up + 1)
    if len(missed) > max_catch_up:
        raise _bound_exceeded(len(missed), max_catch_up)
    return missed


def jitter_delay(trigger_id: str, occurrence: int, jitter_ms: int, following: int | None) -> int:
    """How long after ``occurrence`` its launch waits, in ms: in ``[0, jitter_ms)``.

    Derived from the occurrence's idempotency key alone (a BLAKE2b hash of it as a fraction
    of ``jitter_ms``), so every scheduler process computes the same delay for the same
    occurrence, and capped so the launch stays strictly before ``following`` (the schedule's
    next boundary; ``None``: there is none). 0 when ``jitter_ms`` is 0.
    """
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(
        idempotency_key(trigger_id, occurrence).encode("utf-8", "surrogatepass"), digest_size=8
    ).digest()
    delay = int.from_bytes(digest, "big") * jitter_ms >> 64
    if following is not None:
        delay = min(delay, following - occurrence - 1)
    return max(delay, 0)


def launch_at(trigger_id: str, jitter_ms: int, cron: Cron, occurrence: int) -> int:
    """The earliest instant ``occurrence`` of the trigger is launched: the boundary plus its
    :func:`jitter_delay` (the boundary itself without jitter)."""
    if jitter_ms <= 0:
        return occurrence
    try:
        following: int | None = cron.next(occurrence)
    except TriggerError:
        following = None
    return occurrence + jitter_delay(trigger_id, occurrence, jitter_ms, following)


def horizon(trigger: Trigger, cron: Cron, now: int) -> int:
    """The instant up to which a trigger's boundaries are due at ``now``.

    ``now`` itself, but never past ``end_at`` (a later boundary is never owed), and, under
    jitter, just before the latest boundary while that boundary's launch instant is still
    ahead (every earlier boundary's launch is before it: :func:`jitter_delay` caps it).
    """
    limit = now if trigger.end_at is None else min(now, trigger.end_at)
    jitter_ms = trigger.jitter_ms
    if jitter_ms > 0:
        latest = cron.previous_at_or_before(limit)
        if launch_at(trigger.id, jitter_ms, cron, latest) > now:
            limit = latest - 1
    return limit


def window_floor(trigger: Trigger) -> int | None:
    """The watermark no boundary before ``start_at`` can be owed from (``start_at - 1``)."""
    return None if trigger.start_at is None else trigger.start_at - 1


class DueOccurrences(msgspec.Struct, frozen=True, kw_only=True):
    """What one poll owes for a trigger, and the watermark to remember for the next poll.

    The backlog boundaries it gives up (they will never run) are counted by reason:
    ``catch_up_missed`` by the catch-up policy itself (``none`` gives up every one, ``one`` all
    but the latest), ``bound_missed`` those the policy would have run but ``max_catch_up``
    refused. They all lie strictly between ``dropped_after`` (the watermark the poll counted
    from) and the first owed occurrence; each count stops at ``MISSED_COUNT_LIMIT``.
    """

    occurrences: list[int]
    watermark: int
    dropped_after: int | None = None
    catch_up_missed: int = 0
    bound_missed: int = 0


def _within_bound(
    trigger: RegisteredTrigger, since: int, now: int, cron: Cron
) -> tuple[list[int], bool]:
    """The catch-up policy's backlog, and whether it was abandoned for breaching the bound."""
    try:
        owed = catch_up_occurrences(trigger.catch_up, trigger.max_catch_up, since, now, cron)
    except TriggerError as error:
        if error.code != "catch_up_bound_exceeded":
            raise
        logger.warning(
            "A trigger abandoned catch-up work beyond its bound",
            exc_info=error,
            extra={"trigger_id": trigger.id},
        )
        return [], True
    return owed, False


@functools.lru_cache(maxsize=1024)
def _backlog(cron: Cron, since: int, current: int) -> int:
    """How many boundaries lie strictly between ``since`` and ``current`` (at most
    ``MISSED_COUNT_LIMIT``). Remembered: a tick asks it of every trigger sharing an expression,
    with the same watermark and boundary, and the answer never changes."""
    return len(cron.occurrences_between(since, current - 1, limit=MISSED_COUNT_LIMIT))


def _given_up(
    trigger: RegisteredTrigger,
    cron: Cron,
    since: int,
    current: int,
    kept: int,
    abandoned: bool,
    *,
    keeps_latest: bool,
) -> tuple[int, int]:
    """``(catch_up, bound)``: the backlog boundaries in ``(since, current)`` that will not run,
    ``kept`` of them being owed. When the bound abandoned the backlog, what the policy would
    have kept (everything under ``all``; the latest under ``one`` when ``keeps_latest``, as
    ``current`` itself is the kept one on first sight) is the bound's, the rest the policy's."""
    backlog = _backlog(cron, since, current)
    if not abandoned:
        return backlog - kept, 0
    if trigger.catch_up == "all":
        wanted = backlog
    else:
        wanted = min(backlog, 1) if trigger.catch_up == "one" and keeps_latest else 0
    return backlog - wanted, wanted


def due_occurrences(trigger: RegisteredTrigger, now: int, observed: int | None) -> DueOccurrences:
    """The occurrences a scheduler owes at ``now`` (§6.1).

    ``observed`` is this scheduler's watermark for the trigger (``None`` on first sight).
    After first sight the current boundary is always owed; the catch-up policy only governs
    the backlog strictly between the watermark and the current boundary. A backlog over the
    bound is abandoned (one warning) and the current boundary is kept. The watermark never
    moves back. Cron errors other than a breached bound propagate.

    A trigger resumed from ``"now"`` owes nothing at or before its ``resume_after``: that point
    acts as a watermark no scheduler's own can be behind, whatever it saw before the pause.

    A window (``start_at``/``end_at``) and jitter move only what is due: no boundary before
    ``start_at`` or after ``end_at`` is owed or counted, and a boundary is due at its launch
    instant (:func:`horizon`). Without them the answer is the same as before they existed.
    """
    cron = Cron.parse(trigger.cron, trigger.timezone, now=now)
    # A first sight owes nothing at or before itself: the boundary instant counts there, not
    # its launch (as the indexed tick's registration instant does), so the two ticks agree.
    sighted = now if trigger.end_at is None else min(now, trigger.end_at)
    now = horizon(trigger, cron, now)
    current = cron.previous_at_or_before(now)
    floor = trigger.resume_after
    if floor is not None and observed is not None and observed < floor:
        observed = floor
    start = window_floor(trigger)
    if start is not None:
        # Before the window nothing is owed, so nothing there is counted as given up either:
        # the window's start is a watermark no scheduler's own can be behind.
        if observed is not None and observed < start:
            observed = start
        if observed is None and (trigger.last_fired_at is not None or floor is not None):
            floor = start if floor is None else max(floor, start)
    if observed is None:
        last = trigger.last_fired_at
        if floor is not None and (last is None or last < floor):
            last = floor
        if last is None:
            seen = current if sighted == now else cron.previous_at_or_before(sighted)
            return DueOccurrences(occurrences=[], watermark=seen)
        if current <= last:
            return DueOccurrences(occurrences=[], watermark=current)
        owed, abandoned = _within_bound(trigger, last, now, cron)
        if not owed or owed[-1] != current:
            owed.append(current)
        catch_up, bound = _given_up(
            trigger, cron, last, current, len(owed) - 1, abandoned, keeps_latest=False
        )
        return DueOccurrences(
            occurrences=owed,
            watermark=current,
            dropped_after=last,
            catch_up_missed=catch_up,
            bound_missed=bound,
        )
    if current <= observed:
        return DueOccurrences(occurrences=[], watermark=observed)
    backlog, abandoned = _within_bound(trigger, observed, current - 1, cron)
    catch_up, bound = _given_up(
        trigger, cron, observed, current, len(backlog), abandoned, keeps_latest=True
    )
    return DueOccurrences(
        occurrences=[*backlog, current],
        watermark=current,
        dropped_after=observed,
        catch_up_missed=catch_up,
        bound_missed=bound,
    )


def next_launches(
    trigger: Trigger, now: int, count: int = NEXT_OCCURRENCE_COUNT
) -> list[tuple[int, int]]:
    """The trigger's next ``count`` owed boundaries whose launch is after ``now``, each with
    its launch instant: ``(occurrence, launch_at)``. A boundary already passed whose jittered
    launch is still ahead comes first; none after ``end_at``, none before ``start_at``."""
    cron = Cron.parse(trigger.cron, trigger.timezone, now=now)
    jitter_ms = trigger.jitter_ms
    found: list[tuple[int, int]] = []
    cursor = now
    if jitter_ms > 0:
        latest = cron.previous_at_or_before(now)
        if launch_at(trigger.id, jitter_ms, cron, latest) > now:
            cursor = latest - 1
    if trigger.start_at is not None and cursor < trigger.start_at - 1:
        cursor = trigger.start_at - 1
    while len(found) < count:
        try:
            cursor = cron.next(cursor)
        except TriggerError:
            break
        if trigger.end_at is not None and cursor > trigger.end_at:
            break
        found.append((cursor, launch_at(trigger.id, jitter_ms, cron, cursor)))
    return found


def next_occurrences(trigger: Trigger | Schedule, now: int) -> list[int]:
    """The next ``NEXT_OCCURRENCE_COUNT`` (5) occurrences strictly after ``now`` (§14.1).

    A trigger's window bounds them: none before ``start_at``, none after ``end_at`` (then
    there may be fewer than five, or none)."""
    cron = Cron.parse(trigger.cron, trigger.timezone, now=now)
    found: list[int] = []
    cursor = now
    start = getattr(trigger, "start_at", None)
    end = getattr(trigger, "end_at", None)
    if start is not None and cursor < start - 1:
        cursor = start - 1
    for _ in range(NEXT_OCCURRENCE_COUNT):
        cursor = cron.next(cursor)
        if end is not None and cursor > end:
            break
        found.append(cursor)
    return found
