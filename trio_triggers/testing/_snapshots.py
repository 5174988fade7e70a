"""Exact snapshots of a trigger store's durable state, taken between two transactions.

* the memory store: read its row tables directly (synchronous, so nothing can interleave);
* an SQLite file: a second, read-only ``sqlite3`` connection on the same file (WAL lets it see
  every committed transaction) reading the schema of ``triggers.md`` §9.3;
* any other store: the public reads ``list()`` and ``history()`` (``active_claimed_at_ms`` is
  then unknown, so the checks that need it are skipped).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._store._memory import MemoryTriggerStore
from ._invariants import LedgerRow, StoreState, TriggerRow

if TYPE_CHECKING:
    from .._store._protocol import TriggerStore

__all__ = [
    "AttentionReader",
    "Snapshotter",
    "memory_attention",
    "memory_snapshot",
    "public_snapshot",
    "snapshotter_for",
    "sqlite_attention",
    "sqlite_snapshot",
]

Snapshotter = Callable[[], Awaitable[StoreState]]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def memory_snapshot(store: MemoryTriggerStore, trigger_id: str | None = None) -> StoreState:
    """The memory store's rows (only ``trigger_id``'s, if given) as a :class:`StoreState`."""
    tables = store._raw_tables()
    triggers: dict[str, TriggerRow] = {}
    if trigger_id is None:
        items = list(tables.triggers.items())
        fire_items = list(tables.fires.items())
    else:
        one = tables.triggers.get(trigger_id)
        items = [] if one is None else [(trigger_id, one)]
        fires_of = tables.fires.get(trigger_id)
        fire_items = [] if fires_of is None else [(trigger_id, fires_of)]
    for tid, row in items:
        triggers[tid] = TriggerRow(
            trigger_id=tid,
            revision=_int(row.get("revision")) or 0,
            enabled=bool(row.get("enabled")),
            overlap=str(row.get("overlap")),
            last_fired_at=_int(row.get("last_fired_at_ms")),
            pending_at=_int(row.get("pending_at_ms")),
            active_run_id=_str(row.get("active_run_id")),
            active_claimed_at=_int(row.get("active_claimed_at_ms")),
            backfill_next=_int(row.get("backfill_next_ms")),
            backfill_done=_int(row.get("backfill_done")),
        )
    ledger: dict[tuple[str, int], LedgerRow] = {}
    for tid, fires in fire_items:
        for occ, fire in fires.items():
            ledger[(tid, occ)] = LedgerRow(
                trigger_id=tid,
                occurrence=occ,
                outcome=_str(fire.get("outcome")),
                run_id=_str(fire.get("run_id")),
                error=_str(fire.get("error")),
                manual_key=_str(fire.get("manual_key")),
            )
    return StoreState(triggers=triggers, ledger=ledger, claimed_at_known=True)


class MemorySnapshotter:
    """:func:`memory_snapshot` with a cache that reuses unchanged rows (the hot path)."""

    def __init__(self, store: MemoryTriggerStore) -> None:
        self._store = store
        self._rows: dict[tuple[str, int], tuple[tuple[Any, Any, Any, Any], LedgerRow]] = {}

    def __call__(self, trigger_id: str | None = None) -> StoreState:
        tables = self._store._raw_tables()
        if trigger_id is None:
            ids = list(tables.triggers)
        else:
            ids = [trigger_id] if trigger_id in tables.triggers else []
        triggers: dict[str, TriggerRow] = {}
        ledger: dict[tuple[str, int], LedgerRow] = {}
        cache = self._rows
        for tid in ids:
            row = tables.triggers[tid]
            triggers[tid] = TriggerRow(
                trigger_id=tid,
                revision=_int(row.get("revision")) or 0,
                enabled=bool(row.get("enabled")),
                overlap=str(row.get("overlap")),
                last_fired_at=_int(row.get("last_fired_at_ms")),
                pending_at=_int(row.get("pending_at_ms")),
                active_run_id=_str(row.get("active_run_id")),
                active_claimed_at=_int(row.get("active_claimed_at_ms")),
                backfill_next=_int(row.get("backfill_next_ms")),
                backfill_done=_int(row.get("backfill_done")),
            )
            for occ, fire in tables.fires.get(tid, {}).items():
                key = (tid, occ)
                raw = (
                    fire.get("outcome"),
                    fire.get("run_id"),
                    fire.get("error"),
                    fire.get("manual_key"),
                )
                hit = cache.get(key)
                if hit is None or hit[0] != raw:
                    made = LedgerRow(
                        trigger_id=tid,
                        occurrence=occ,
                        outcome=_str(raw[0]),
                        run_id=_str(raw[1]),
                        error=_str(raw[2]),
                        manual_key=_str(raw[3]),
                    )
                    hit = (raw, made)
                    cache[key] = hit
                ledger[key] = hit[1]
        return StoreState(triggers=triggers, ledger=ledger, claimed_at_known=True)


class _SqliteReader:
    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)

    def close(self) -> None:
        self._conn.close()

    def snapshot(self, trigger_id: str | None = None) -> StoreState:
        cur = self._conn.cursor()
        where = "" if trigger_id is None else " WHERE trigger_id = ?"
        params: tuple[str, ...] = () if trigger_id is None else (trigger_id,)
        cur.execute("BEGIN")
        try:
            rows = cur.execute(
                "SELECT trigger_id, revision, enabled, overlap, last_fired_at_ms, pending_at_ms,"
                " active_run_id, active_claimed_at_ms, backfill_next_ms, backfill_done"
                " FROM tt_triggers" + where,
                params,
            ).fetchall()
            fires = cur.execute(
                "SELECT trigger_id, occurrence_at_ms, outcome, run_id, error, manual_key"
                " FROM tt_trigger_fires" + where,
                params,
            ).fetchall()
        finally:
            cur.execute("COMMIT")
        triggers = {
            r[0]: TriggerRow(
                trigger_id=r[0],
                revision=r[1],
                enabled=bool(r[2]),
                overlap=r[3],
                last_fired_at=r[4],
                pending_at=r[5],
                active_run_id=r[6],
                active_claimed_at=r[7],
                backfill_next=r[8],
                backfill_done=r[9],
            )
            for r in rows
        }
        ledger = {
            (f[0], f[1]): LedgerRow(
                trigger_id=f[0],
                occurrence=f[1],
                outcome=f[2],
                run_id=f[3],
                error=f[4],
                manual_key=f[5],
            )
            for f in fires
        }
        return StoreState(triggers=triggers, ledger=ledger, claimed_at_known=True)


def sqlite_snapshot(
    path: str,
) -> tuple[Callable[[str | None], StoreState], Callable[[], None]]:
    """A synchronous snapshot function over an SQLite file, and a function that closes it."""
    reader = _SqliteReader(path)
    return reader.snapshot, reader.close


async def public_snapshot(store: TriggerStore) -> StoreState:
    """A snapshot through the public read methods (``active_claimed_at_ms`` unknown)."""
    listing = await store.list()
    page = await store.history()
    triggers: dict[str, TriggerRow] = {}
    for item in listing:
        if item.trigger is None:
            continue
        t = item.trigger
        triggers[t.id] = TriggerRow(
            trigger_id=t.id,
            revision=t.revision,
            enabled=t.enabled,
            overlap=t.overlap,
            last_fired_at=t.last_fired_at,
            pending_at=item.pending_at,
            active_run_id=item.active_run_id,
            backfill_next=None if t.backfill is None else t.backfill.next,
            backfill_done=None if t.backfill is None else t.backfill.done,
        )
    ledger = {
        (r.trigger_id, r.occurrence): LedgerRow(
            trigger_id=r.trigger_id,
            occurrence=r.occurrence,
            outcome=r.outcome,
            run_id=r.run_id,
            error=r.error,
            manual_key=r.manual_key,
        )
        for r in page.items
    }
    return StoreState(triggers=triggers, ledger=ledger, claimed_at_known=False)


def snapshotter_for(store: TriggerStore, sqlite_path: str | None = None) -> Snapshotter:
    """The most exact snapshot function available for ``store``."""
    if isinstance(store, MemoryTriggerStore):

        async def memory() -> StoreState:
            return memory_snapshot(store)

        return memory
    if sqlite_path is not None:
        snap, _close = sqlite_snapshot(sqlite_path)

        async def sqlite_file() -> StoreState:
            return snap(None)

        return sqlite_file

    async def public() -> StoreState:
        return await public_snapshot(store)

    return public


# --- the attention index ---------------------------------------------------------------------

AttentionReader = Callable[[str | None], dict[str, tuple[int | None, int | None]]]
"""``reader(trigger_id or None)``: per row, ``(stored attention_at_ms, exact instant)``."""


def _exact(row: dict[str, Any]) -> int | None:
    from .._store._attention import UNKNOWN, AttentionInputs, attention_at

    cron, overlap = row.get("cron"), row.get("overlap")
    if not isinstance(cron, str) or not isinstance(overlap, str):
        return UNKNOWN + 1
    timezone = row.get("timezone")
    return attention_at(
        AttentionInputs(
            cron=cron,
            timezone=timezone if isinstance(timezone, str) else None,
            enabled=row.get("enabled") == 1,
            overlap=overlap,
            last_fired_at=_int(row.get("last_fired_at_ms")),
            pending_at=_int(row.get("pending_at_ms")),
            active=_str(row.get("active_run_id")),
            claimed_at=_int(row.get("active_claimed_at_ms")),
            registered_at=_int(row.get("registered_at_ms")),
            paused=row.get("paused_at_ms") is not None,
            resume_after=_int(row.get("resume_after_ms")),
            backfill_next=_int(row.get("backfill_next_ms")),
            trigger_id=_str(row.get("trigger_id")) or "",
            jitter_ms=_int(row.get("jitter_ms")) or 0,
            start_at=_int(row.get("start_at_ms")),
            end_at=_int(row.get("end_at_ms")),
        )
    )


def memory_attention(store: MemoryTriggerStore) -> AttentionReader:
    """The memory store's stored and exact attention instants, read from its rows."""

    def read(trigger_id: str | None) -> dict[str, tuple[int | None, int | None]]:
        rows = store._raw_tables().triggers
        ids = list(rows) if trigger_id is None else [t for t in (trigger_id,) if t in rows]
        return {t: (_int(rows[t].get("attention_at_ms")), _exact(rows[t])) for t in ids}

    return read


def sqlite_attention(path: str) -> tuple[AttentionReader, Callable[[], None]]:
    """The same over an SQLite file (its own read-only connection), and its closer."""
    from .._store._backend import ATTENTION_COLUMNS

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    columns = ", ".join(ATTENTION_COLUMNS)

    def read(trigger_id: str | None) -> dict[str, tuple[int | None, int | None]]:
        sql = f"SELECT {columns} FROM tt_triggers"
        rows = (
            conn.execute(sql).fetchall()
            if trigger_id is None
            else conn.execute(sql + " WHERE trigger_id = ?", (trigger_id,)).fetchall()
        )
        found: dict[str, tuple[int | None, int | None]] = {}
        for raw in rows:
            row = dict(zip(ATTENTION_COLUMNS, raw, strict=True))
            found[str(row["trigger_id"])] = (_int(row["attention_at_ms"]), _exact(row))
        return found

    return read, conn.close
