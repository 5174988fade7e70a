"""``trio-triggers history --follow``: the fire ledger as it is written, until Ctrl-C.

The ledger keeps no write order: a row is keyed, and ordered, by its boundary
``(occurrence, trigger_id)``, and its outcome is updated in place (``launched`` becomes
``completed``). So "what is new" cannot be a cursor past the last row printed: a later write
may be an update of a row already printed, and two triggers' rows share an occurrence. The
follower instead compares what it reads with what it has seen, keyed by the row's primary key:

* every poll reads, newest first with the ledger's own paging cursor, the rows whose boundary is
  at most ``window`` below the newest boundary seen (the *horizon*; it only moves forward);
* a row is printed when its key is new or its ``(outcome, run_id, error)`` differs from what was
  seen: each row once, and again each time its outcome changes; two rows sharing a timestamp
  are two keys, so neither is missed or printed twice;
* a row that falls below the horizon unsettled (claimed, ``launched`` or ``buffered``: a run
  longer than the window) is re-read by its key each poll until it settles, so its completion
  is printed however long it ran.

What it cannot see is a row *inserted* below the horizon: a boundary more than ``window`` older
than the newest one in the ledger, written late (a trigger lagging far behind the others).
``history`` shows such rows; ``--window`` widens the net at the price of reading more per poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Final, Protocol

import trio

from .._clock import SystemWallClock
from .._databases import open_stores
from .._errors import TriggerError
from .._groups import one_exception
from .._store import Fire, FireRecord, HistoryPage, HistoryQuery, Outcome
from ._commands import (
    PIPE_CLOSED_STATUS,
    _stop_on_signal,
    history_cells,
    history_json,
    run_errors_of,
)
from ._output import print_json

if TYPE_CHECKING:
    import argparse

    from .._ownership import RunStore

__all__ = ["FOLLOW_INTERVAL_S", "FOLLOW_WINDOW_S", "Follower", "follow"]

logger = logging.getLogger("trio_triggers.cli")

FOLLOW_INTERVAL_S: Final = 1.0
"""How often ``--follow`` reads the ledger unless ``--interval`` says otherwise."""
FOLLOW_WINDOW_S: Final = 600.0
"""How far below the newest boundary ``--follow`` looks for new rows (``--window``)."""
PAGE: Final = 500
"""Rows per ledger read while a poll pages down to the horizon."""

_UNSETTLED: Final = frozenset((None, "launched", "buffered"))

Key = tuple[str, int]
Seen = tuple[Outcome | None, str | None, str | None]


def _key(record: FireRecord) -> Key:
    return (record.trigger_id, record.occurrence)


def _state(record: FireRecord) -> Seen:
    return (record.outcome, record.run_id, record.error)


class Ledger(Protocol):
    """What the follower needs of a trigger store: its ledger read (``TriggerStore.history``)."""

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage: ...


class Follower:
    """What ``--follow`` has seen of one trigger's ledger (or all of it), and what is new."""

    def __init__(self, store: Ledger, *, trigger_id: str | None, window_ms: int) -> None:
        self.store = store
        self.trigger_id = trigger_id
        self.window_ms = window_ms
        self.horizon: int | None = None
        """Rows with ``occurrence >= horizon`` are read whole each poll."""
        self.seen: dict[Key, Seen] = {}
        """The state of every row at or above the horizon, as last read."""
        self.lagging: dict[Key, Seen] = {}
        """Unsettled rows below the horizon, re-read by key until they settle."""

    async def poll(self) -> list[FireRecord]:
        """The rows new or changed since the last poll, oldest boundary first."""
        window = await self._window()
        changed = [record for record in window if self._note(record)]
        present = {_key(record) for record in window}
        for key in list(self.seen):  # below the horizon now, or pruned
            if key in present:
                continue
            state = self.seen.pop(key)
            if state[0] in _UNSETTLED and self.horizon is not None and key[1] < self.horizon:
                self.lagging[key] = state
        for key, state in list(self.lagging.items()):
            record = await self._row(key)
            if record is None:  # pruned
                del self.lagging[key]
                continue
            if _state(record) != state:
                changed.append(record)
                self.lagging[key] = _state(record)
            if record.outcome not in _UNSETTLED:
                del self.lagging[key]
        changed.sort(key=lambda r: (r.occurrence, r.trigger_id))
        return changed

    def note(self, records: list[FireRecord]) -> None:
        """Mark ``records`` (printed from elsewhere: the backlog) as seen in their state."""
        for record in records:
            key = _key(record)
            if key in self.seen:
                self.seen[key] = _state(record)
            elif key in self.lagging or (
                self.horizon is not None
                and record.occurrence < self.horizon
                and record.outcome in _UNSETTLED
            ):
                self.lagging[key] = _state(record)

    def _note(self, record: FireRecord) -> bool:
        key, state = _key(record), _state(record)
        if self.seen.get(key) == state:
            return False
        self.seen[key] = state
        self.lagging.pop(key, None)
        return True

    async def _window(self) -> list[FireRecord]:
        """Every row at or above the horizon (moved up first to the newest row's boundary
        minus the window), read newest first through the ledger's exclusive cursor."""
        rows: list[FireRecord] = []
        cursor: Fire | None = None
        while True:
            page = await self.store.history(
                HistoryQuery(trigger_id=self.trigger_id, cursor=cursor, limit=PAGE)
            )
            if cursor is None and page.items:
                floor = page.items[0].occurrence - self.window_ms
                self.horizon = floor if self.horizon is None else max(self.horizon, floor)
            for record in page.items:
                if self.horizon is not None and record.occurrence < self.horizon:
                    return rows
                rows.append(record)
            if page.next_cursor is None:
                return rows
            cursor = page.next_cursor

    async def _row(self, key: Key) -> FireRecord | None:
        """The current state of one row, by key: the first of its trigger's rows at or below
        its occurrence (the cursor is exclusive, so start just above it)."""
        trigger_id, occurrence = key
        page = await self.store.history(
            HistoryQuery(
                trigger_id=trigger_id,
                cursor=Fire(trigger_id=trigger_id, occurrence=occurrence + 1),
                limit=1,
            )
        )
        found = page.items[0] if page.items else None
        return found if found is not None and _key(found) == key else None


class _Printer:
    """Prints rows in ``history``'s formats, one line each, keeping only the ``--outcome``."""

    def __init__(self, args: argparse.Namespace, runs: RunStore) -> None:
        self.args = args
        self.runs = runs
        self.clock = SystemWallClock()

    async def print(self, records: list[FireRecord]) -> None:
        wanted = [
            r
            for r in records
            if r.outcome is not None
            and (self.args.outcome is None or r.outcome == self.args.outcome)
        ]
        if not wanted:
            return
        run_errors = await run_errors_of(self.runs, wanted)
        now = self.clock.now_ms()
        for record in wanted:
            if self.args.json:
                print_json(history_json(record, run_errors))
            else:
                cells = history_cells(record, now, run_errors, utc=self.args.utc)
                widths = (0, 16, 16, 10, 0, 0)
                print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        sys.stdout.flush()


async def follow(args: argparse.Namespace, db: str) -> int:
    """``history --follow``: the backlog, then every new or changed row, until Ctrl-C (exit 0)
    or until stdout's reader goes away (exit 141, as ``run``)."""
    interval = getattr(args, "interval_s", FOLLOW_INTERVAL_S)
    window_ms = round(getattr(args, "window_s", FOLLOW_WINDOW_S) * 1000)
    try:
        with one_exception():
            await _follow(args, db, interval, window_ms)
    except BrokenPipeError:
        _silence_stdout()
        print("-- stdout was closed: stopped", file=sys.stderr)
        return PIPE_CLOSED_STATUS
    return 0


def _silence_stdout() -> None:
    """Point ``sys.stdout`` at ``/dev/null``: its reader is gone, and the interpreter's flush
    at exit would otherwise fail with a traceback."""
    with contextlib.suppress(OSError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kept open until the exit


async def _follow(args: argparse.Namespace, db: str, interval: float, window_ms: int) -> None:
    clock = SystemWallClock()
    async with open_stores(db, clock=clock) as (store, runs), trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
        follower = Follower(store, trigger_id=args.trigger, window_ms=window_ms)
        printer = _Printer(args, runs)
        await follower.poll()  # what exists now is seen: only the backlog prints it
        backlog = await store.history(
            HistoryQuery(trigger_id=args.trigger, outcome=args.outcome, limit=args.limit)
        )
        follower.note(backlog.items)
        await printer.print(list(reversed(backlog.items)))
        while True:
            await trio.sleep(interval)
            try:
                changed = await follower.poll()
            except TriggerError as exc:  # a passing outage: say so and read again
                logger.warning("could not read the fire ledger", extra={"error": str(exc)})
                continue
            await printer.print(changed)
