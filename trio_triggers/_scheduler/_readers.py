"""Dashboard readers (``triggers.md`` §14): ``summaries`` and ``fires``.

They only read the store, so a dashboard or the command line can call them from any process,
scheduler or not. Reservations are an internal detail of claiming and are never shown as a
trigger's active run.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import msgspec

from .. import _instrument as instrument
from .._constants import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from .._declarations import Backfill, Pause
from .._identities import is_reservation
from .._policies import next_occurrences
from .._store._models import HistoryPage, HistoryQuery, MissedCounts

if TYPE_CHECKING:
    from .._clock import WallClock
    from .._store._protocol import TriggerStore

__all__ = ["TriggerSummary", "fires", "next_occurrences", "summaries"]


class TriggerSummary(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One trigger as a dashboard shows it; ``None`` fields are omitted when encoded."""

    trigger_id: str
    flow_id: str
    input: Any
    cron: str
    overlap: str
    catch_up: str
    max_catch_up: int
    enabled: bool
    revision: int
    next_occurrences: list[int]
    missed: MissedCounts
    """Its occurrences that will never run, by reason (always shown, zeros included)."""
    timezone: str | None = None
    last_fired_at: int | None = None
    pending_at: int | None = None
    active_run_id: str | None = None
    scheduler_last_tick: int | None = None
    paused: Pause | None = None
    """The operator's pause (``None`` unless paused): since when, the note, by whom."""
    removed_at: int | None = None
    """When ``remove`` retired it (``None`` unless removed; it is then disabled too)."""
    backfill: Backfill | None = None
    """Its latest backfill (running, done or cancelled; ``None`` if it never had one)."""
    jitter: float | None = None
    """Seconds each launch may wait after its boundary (``None``: no jitter)."""
    start_at: int | None = None
    end_at: int | None = None
    """Its window of owed boundaries, both ends included (``None``: unbounded)."""
    pause_after_failures: int | None = None
    consecutive_failures: int = 0
    """Its failed runs in a row (``pause_after_failures`` pauses it when they reach it)."""


async def summaries(store: TriggerStore, clock: WallClock) -> list[TriggerSummary]:
    """Every trigger with its held state, next occurrences and the last scheduler tick."""
    with instrument.span("DispatchReader.summaries"):
        now = clock.now_ms()
        heartbeat = await store.last_heartbeat()
        listing = await store.list()
        answer: list[TriggerSummary] = []
        for row in listing:
            if row.error is not None:
                raise row.error
            trigger = row.trigger
            if trigger is None:  # pragma: no cover - a store always sets one of the two
                continue
            holder = row.active_run_id
            answer.append(
                TriggerSummary(
                    trigger_id=trigger.id,
                    flow_id=trigger.flow_id,
                    input=copy.deepcopy(trigger.input),
                    cron=trigger.cron,
                    timezone=trigger.timezone,
                    overlap=trigger.overlap,
                    catch_up=trigger.catch_up,
                    max_catch_up=trigger.max_catch_up,
                    enabled=trigger.enabled,
                    revision=trigger.revision,
                    last_fired_at=trigger.last_fired_at,
                    pending_at=row.pending_at,
                    active_run_id=holder
                    if holder is not None and not is_reservation(holder)
                    else None,
                    next_occurrences=next_occurrences(trigger, now),
                    missed=row.missed,
                    scheduler_last_tick=heartbeat.ticked_at if heartbeat is not None else None,
                    paused=trigger.paused,
                    removed_at=trigger.removed_at,
                    backfill=trigger.backfill,
                    jitter=trigger.jitter or None,
                    start_at=trigger.start_at,
                    end_at=trigger.end_at,
                    pause_after_failures=trigger.pause_after_failures,
                    consecutive_failures=trigger.consecutive_failures,
                )
            )
        return answer


async def fires(store: TriggerStore, query: HistoryQuery | None = None) -> HistoryPage:
    """One page of the fire ledger, newest first (default 100 rows, at most 500)."""
    with instrument.span("DispatchReader.fires"):
        asked = query if query is not None else HistoryQuery()
        limit = asked.limit
        if limit is None:
            limit = DEFAULT_PAGE_SIZE
        elif isinstance(limit, int) and not isinstance(limit, bool) and limit > MAX_PAGE_SIZE:
            limit = MAX_PAGE_SIZE
        return await store.history(msgspec.structs.replace(asked, limit=limit))
