"""``MemoryTriggerStore``: the whole contract in process memory.

The rows mirror the SQL schema column for column (``tt_triggers``, ``tt_trigger_fires``,
``tt_scheduler_heartbeats``), and the method bodies are the same ones the SQLite store runs
(:mod:`._bodies`, through the seam :mod:`._backend`), so the stores cannot drift apart.

Atomicity: every call makes exactly one checkpoint, at its start, and then runs its whole body
synchronously, so no other task can observe or interleave with a half-done call. A body that
raises is rolled back from an undo log, so a refused or failed call writes nothing, exactly like
a rolled-back SQL transaction.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import trio

from .._clock import SystemWallClock, WallClock
from ._backend import (
    ATTENTION_COLUMNS,
    BACKFILL_COLUMNS,
    EXTRA_COLUMNS,
    MISSED_COLUMNS,
    TRIGGER_COLUMNS,
    AdvanceCursor,
    ClearPendingIf,
    CountMissed,
    EncodedTrigger,
    EngineStore,
    FloorResumeAfter,
    Method,
    PauseIfRunning,
    RawAttention,
    RawDue,
    RawFire,
    RawFireRecord,
    RawManualFire,
    RawState,
    RawTrigger,
    ReleaseReservation,
    ReplaceHolder,
    Reserve,
    SetBackfill,
    SetFailures,
    SetOutcome,
    SetPause,
    SetPending,
    SetRemoved,
    SetRunId,
    StepBackfill,
    StoreTx,
    TriggerWrite,
    WriteFire,
    after_cursor,
    failure_for,
    is_prunable,
)

if TYPE_CHECKING:
    import builtins

    from ._models import HistoryQuery

__all__ = ["MemoryTriggerStore"]

T = TypeVar("T")

FaultHook = Callable[[str, str, Mapping[str, object]], None]
"""``hook(operation, table, values)``: called before every row access of a call; raising an
``Exception`` makes the call fail like a database error (``store``) and roll back."""

_Row = dict[str, object]
_FireKey = tuple[str, int]


def _count(value: object) -> int:
    """A counter column's value (absent in a row built before the counters existed: 0)."""
    return value if isinstance(value, int) else 0


class _Fault(Exception):
    """Carries an exception raised by the fault hook out of a method body."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Tables:
    def __init__(self) -> None:
        self.triggers: dict[str, _Row] = {}
        self.fires: dict[str, dict[int, _Row]] = {}
        self.heartbeats: dict[str, int] = {}
        # The attention index: a heap of (attention_at_ms, trigger_id). Entries are never
        # removed when a row's instant changes (nor when a rollback restores an old one); an
        # entry counts only while it equals the row's current instant, and stale ones are
        # dropped as the heap is read (or all at once when they outnumber the rows).
        self.attention: list[tuple[int, str]] = []

    def index(self, trigger_id: str, attention: object) -> None:
        if isinstance(attention, int):
            heapq.heappush(self.attention, (attention, trigger_id))
            if len(self.attention) > 2 * len(self.triggers) + 1024:
                self.attention = [
                    (at, tid)
                    for tid, row in self.triggers.items()
                    if isinstance(at := row.get("attention_at_ms"), int)
                ]
                heapq.heapify(self.attention)

    def current(self, entry: tuple[int, str]) -> bool:
        row = self.triggers.get(entry[1])
        return row is not None and row.get("attention_at_ms") == entry[0]


class _MemoryTx:
    """One call's view of the tables, with an undo log."""

    def __init__(self, tables: _Tables, hook: FaultHook | None) -> None:
        self._t = tables
        self._hook = hook
        self._undo: list[Callable[[], object]] = []

    # -- plumbing ---------------------------------------------------------------------------

    def _touch(self, operation: str, table: str, values: Mapping[str, object]) -> None:
        if self._hook is not None:
            try:
                self._hook(operation, table, values)
            except Exception as exc:
                raise _Fault(exc) from exc

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _update_trigger(self, trigger_id: str, values: dict[str, object]) -> None:
        row = self._t.triggers.get(trigger_id)
        if row is None:
            return
        self._touch("update", "tt_triggers", values)
        old = dict(row)
        self._undo.append(lambda: row.update(old))
        row.update(values)
        if "attention_at_ms" in values:
            self._t.index(trigger_id, values["attention_at_ms"])

    def _update_fire(self, trigger_id: str, occurrence: int, values: dict[str, object]) -> None:
        row = self._t.fires.get(trigger_id, {}).get(occurrence)
        if row is None:
            return
        self._touch("update", "tt_trigger_fires", values)
        old = dict(row)
        self._undo.append(lambda: row.update(old))
        row.update(values)

    # -- reads ------------------------------------------------------------------------------

    def trigger(self, trigger_id: str) -> RawTrigger | None:
        self._touch("select", "tt_triggers", {})
        row = self._t.triggers.get(trigger_id)
        return None if row is None else tuple(row.get(c) for c in TRIGGER_COLUMNS)

    def triggers(self, *, enabled_only: bool) -> builtins.list[RawTrigger]:
        self._touch("select", "tt_triggers", {})
        rows = self._t.triggers
        return [
            tuple(rows[key].get(c) for c in TRIGGER_COLUMNS)
            for key in sorted(rows)
            if not enabled_only or rows[key]["enabled"] == 1
        ]

    def state(self, trigger_id: str) -> RawState | None:
        self._touch("select", "tt_triggers", {})
        row = self._t.triggers.get(trigger_id)
        if row is None:
            return None
        return (
            row["revision"],
            row["enabled"],
            row["overlap"],
            row["active_run_id"],
            row["active_claimed_at_ms"],
            row["pending_at_ms"],
            row["last_fired_at_ms"],
            row.get("pause_after_failures"),
            row.get("consecutive_failures", 0),
        )

    def fire(self, trigger_id: str, occurrence: int) -> RawFire | None:
        self._touch("select", "tt_trigger_fires", {})
        row = self._t.fires.get(trigger_id, {}).get(occurrence)
        return None if row is None else (row["outcome"], row["run_id"], row.get("manual_key"))

    def manual_fire(self, key: str) -> RawManualFire | None:
        self._touch("select", "tt_trigger_fires", {})
        for trigger_id, fires in self._t.fires.items():
            for occurrence, row in fires.items():
                if row.get("manual_key") == key:
                    return (
                        trigger_id,
                        occurrence,
                        row["outcome"],
                        row["run_id"],
                        row.get("manual_input_json"),
                        row.get("manual_by"),
                    )
        return None

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[RawState, RawFire | None] | None:
        state = self.state(trigger_id)
        return None if state is None else (state, self.fire(trigger_id, occurrence))

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        self._touch("select", "tt_trigger_fires", {})
        found = [
            occurrence
            for occurrence, row in self._t.fires.get(trigger_id, {}).items()
            if row["run_id"] == run_id and row["outcome"] == "launched"
        ]
        return max(found) if found else None

    def history(self, query: HistoryQuery, fetch: int | None) -> builtins.list[RawFireRecord]:
        self._touch("select", "tt_trigger_fires", {})
        rows: list[RawFireRecord] = []
        for trigger_id, fires in self._t.fires.items():
            if query.trigger_id is not None and trigger_id != query.trigger_id:
                continue
            for occurrence, row in fires.items():
                if query.run_id is not None and row["run_id"] != query.run_id:
                    continue
                if query.outcome is not None and row["outcome"] != query.outcome:
                    continue
                if not after_cursor(occurrence, trigger_id, query.cursor):
                    continue
                rows.append(
                    (
                        trigger_id,
                        occurrence,
                        row["outcome"],
                        row["run_id"],
                        row["error"],
                        row.get("manual_key"),
                    )
                )
        rows.sort(key=lambda r: (r[1], r[0]), reverse=True)
        return rows if fetch is None else rows[:fetch]

    def last_heartbeat(self) -> tuple[object, object] | None:
        self._touch("select", "tt_scheduler_heartbeats", {})
        beats = self._t.heartbeats
        if not beats:
            return None
        host = min(beats, key=lambda h: (-beats[h], h))
        return (host, beats[host])

    # -- writes -----------------------------------------------------------------------------

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        self._insert_fire(trigger_id, occurrence, {})

    def insert_manual_fire(
        self, trigger_id: str, occurrence: int, key: str, input_json: str, by: str | None
    ) -> None:
        manual: _Row = {"manual_key": key, "manual_input_json": input_json, "manual_by": by}
        self._insert_fire(trigger_id, occurrence, manual)

    def _insert_fire(self, trigger_id: str, occurrence: int, extra: _Row) -> None:
        values: _Row = {"outcome": None, "run_id": None, "error": None, **extra}
        self._touch("insert", "tt_trigger_fires", {"occurrence_at_ms": occurrence, **values})
        fires = self._t.fires.setdefault(trigger_id, {})
        fires[occurrence] = values
        self._undo.append(lambda: fires.pop(occurrence, None))

    def upsert(self, trigger: EncodedTrigger, registered_at: int) -> None:
        declared: _Row = {
            "flow_id": trigger.flow_id,
            "input_json": trigger.input_json,
            "cron": trigger.cron,
            "timezone": trigger.timezone,
            "overlap": trigger.overlap,
            "catch_up": trigger.catch_up,
            "max_catch_up": trigger.max_catch_up,
            "enabled": trigger.enabled,
            **dict(zip(EXTRA_COLUMNS, trigger.extra(), strict=True)),
        }
        row = self._t.triggers.get(trigger.trigger_id)
        if row is not None:
            revision = row["revision"]
            if not isinstance(revision, int):
                raise _Fault(TypeError("revision is not an integer"))
            if trigger.enabled == 1:
                declared["removed_at_ms"] = None  # enabled again: no longer removed
            self._update_trigger(trigger.trigger_id, {**declared, "revision": revision + 1})
            return
        new: _Row = {
            "trigger_id": trigger.trigger_id,
            **declared,
            "revision": 1,
            "last_fired_at_ms": None,
            "pending_at_ms": None,
            "active_run_id": None,
            "active_claimed_at_ms": None,
            "paused_at_ms": None,
            "pause_note": None,
            "paused_by": None,
            "resume_after_ms": None,
            "removed_at_ms": None,
            **dict.fromkeys(MISSED_COLUMNS, 0),
            "consecutive_failures": 0,
            "registered_at_ms": registered_at,
            "attention_at_ms": None,
        }
        self._touch("insert", "tt_triggers", new)
        self._t.triggers[trigger.trigger_id] = new
        self._undo.append(lambda: self._t.triggers.pop(trigger.trigger_id, None))

    def apply(self, trigger_id: str, write: TriggerWrite) -> None:
        row = self._t.triggers.get(trigger_id)
        if isinstance(write, SetOutcome):
            fire = self._t.fires.get(trigger_id, {}).get(write.occurrence)
            if fire is not None and (
                not write.while_open or fire["outcome"] is None or fire["outcome"] == "buffered"
            ):
                self._update_fire(trigger_id, write.occurrence, {"outcome": write.outcome})
        elif isinstance(write, SetRunId):
            self._update_fire(trigger_id, write.occurrence, {"run_id": write.run_id})
        elif isinstance(write, WriteFire):
            values: _Row = {"outcome": write.outcome, "error": write.error}
            if not write.keep_run_id:
                values["run_id"] = write.run_id
            self._update_fire(trigger_id, write.occurrence, values)
        elif row is None:
            return
        elif isinstance(write, ReleaseReservation):
            if row["active_run_id"] == write.expected:
                self._update_trigger(
                    trigger_id,
                    {
                        "active_run_id": write.holder,
                        "active_claimed_at_ms": None,
                        "pending_at_ms": write.pending,
                    },
                )
        elif isinstance(write, ReplaceHolder):
            if row["active_run_id"] == write.expected:
                self._update_trigger(
                    trigger_id, {"active_run_id": write.holder, "active_claimed_at_ms": None}
                )
        elif isinstance(write, AdvanceCursor):
            current = row["last_fired_at_ms"]
            o = write.occurrence
            cursor = o if not isinstance(current, int) else max(current, o)
            self._update_trigger(trigger_id, {"last_fired_at_ms": cursor})
        elif isinstance(write, SetPending):
            self._update_trigger(trigger_id, {"pending_at_ms": write.pending})
        elif isinstance(write, ClearPendingIf):
            if row["pending_at_ms"] == write.occurrence:
                self._update_trigger(trigger_id, {"pending_at_ms": None})
        elif isinstance(write, Reserve):
            self._update_trigger(
                trigger_id,
                {"active_run_id": write.reservation_id, "active_claimed_at_ms": write.claimed_at},
            )
        elif isinstance(write, CountMissed):
            added = (write.overlap, write.catch_up, write.catch_up_bound, write.paused)
            self._update_trigger(
                trigger_id,
                {
                    column: _count(row.get(column)) + count
                    for column, count in zip(MISSED_COLUMNS, added, strict=True)
                },
            )
        else:
            self._apply_operator(trigger_id, row, write)

    def _apply_operator(self, trigger_id: str, row: _Row, write: TriggerWrite) -> None:
        """The operator-state writes (pause, remove, backfill) of :meth:`apply`."""
        if isinstance(write, SetRemoved):
            self._update_trigger(trigger_id, {"removed_at_ms": write.at})
        elif isinstance(write, SetBackfill):
            self._update_trigger(
                trigger_id, dict(zip(BACKFILL_COLUMNS, write.values(), strict=True))
            )
        elif isinstance(write, StepBackfill):
            if row.get("backfill_next_ms") == write.expected:
                self._update_trigger(
                    trigger_id,
                    {
                        "backfill_next_ms": write.next,
                        "backfill_done": write.done,
                        "backfill_state": write.state,
                    },
                )
        elif isinstance(write, FloorResumeAfter):
            floor = row.get("resume_after_ms")
            if not isinstance(floor, int) or floor < write.at:
                self._update_trigger(trigger_id, {"resume_after_ms": write.at})
        elif isinstance(write, SetFailures):
            self._update_trigger(trigger_id, {"consecutive_failures": write.count})
        elif isinstance(write, PauseIfRunning):
            revision = row["revision"]
            if not isinstance(revision, int):
                raise _Fault(TypeError("revision is not an integer"))
            if row.get("paused_at_ms") is None:
                self._update_trigger(
                    trigger_id,
                    {
                        "paused_at_ms": write.paused_at,
                        "pause_note": write.note,
                        "paused_by": write.by,
                        "revision": revision + 1,
                    },
                )
        elif isinstance(write, SetPause):
            revision = row["revision"]
            if not isinstance(revision, int):
                raise _Fault(TypeError("revision is not an integer"))
            self._update_trigger(
                trigger_id,
                {
                    "paused_at_ms": write.paused_at,
                    "pause_note": write.note,
                    "paused_by": write.by,
                    "resume_after_ms": write.resume_after,
                    "revision": revision + 1,
                },
            )
        else:  # pragma: no cover - exhaustive
            raise AssertionError(f"unknown write {write!r}")

    def apply_all(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> None:
        for write in writes:
            self.apply(trigger_id, write)

    # -- the attention index ----------------------------------------------------------------

    def triggers_named(self, trigger_ids: Sequence[str]) -> builtins.list[RawTrigger]:
        self._touch("select", "tt_triggers", {})
        rows = self._t.triggers
        return [
            tuple(rows[key].get(c) for c in TRIGGER_COLUMNS) for key in trigger_ids if key in rows
        ]

    def insert_new(
        self, rows: Sequence[tuple[EncodedTrigger, int | None]], registered_at: int
    ) -> set[str]:
        inserted: set[str] = set()
        for trigger, attention_at in rows:
            if trigger.trigger_id in self._t.triggers:
                continue  # (a transaction of its own: only a caller's mistake gets here)
            self.upsert(trigger, registered_at)
            self.set_attention(trigger.trigger_id, attention_at)
            inserted.add(trigger.trigger_id)
        return inserted

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[RawAttention]:
        self._touch("select", "tt_triggers", {})
        rows = self._t.triggers
        return [
            tuple(rows[key].get(c) for c in ATTENTION_COLUMNS) for key in trigger_ids if key in rows
        ]

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        self._update_trigger(trigger_id, {"attention_at_ms": attention_at})

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        row = self._t.triggers.get(trigger_id)
        if row is not None and row.get("registered_at_ms") is None:
            self._update_trigger(trigger_id, {"registered_at_ms": registered_at})

    def _due_raw(self, row: _Row) -> RawDue:
        return (
            *(row.get(c) for c in TRIGGER_COLUMNS),
            row.get("registered_at_ms"),
            row.get("attention_at_ms"),
        )

    def due(self, now: int, limit: int) -> builtins.list[RawDue]:
        self._touch("select", "tt_triggers", {})
        heap = self._t.attention
        taken: list[tuple[int, str]] = []
        seen: set[str] = set()
        # Pop the entries that have come (dropping stale ones), then push the live ones back:
        # the read itself changes nothing, and it costs what is due, not what is stored.
        while heap and heap[0][0] <= now and len(taken) < limit:
            entry = heapq.heappop(heap)
            if entry[1] not in seen and self._t.current(entry):
                seen.add(entry[1])
                taken.append(entry)
        for entry in taken:
            heapq.heappush(heap, entry)
        return [self._due_raw(self._t.triggers[tid]) for _, tid in taken]

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        for trigger_id in trigger_ids:
            self._update_trigger(trigger_id, {"attention_at_ms": until})

    def next_attention(self) -> object:
        self._touch("select", "tt_triggers", {})
        heap = self._t.attention
        while heap and not self._t.current(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def holding(self) -> builtins.list[RawDue]:
        self._touch("select", "tt_triggers", {})
        rows = self._t.triggers
        return [
            self._due_raw(rows[key])
            for key in sorted(rows)
            if rows[key].get("active_run_id") is not None
        ]

    def prune(self, older_than: int) -> int:
        self._touch("delete", "tt_trigger_fires", {})
        deleted = 0
        for trigger_id, fires in self._t.fires.items():
            trigger = self._t.triggers.get(trigger_id, {})
            pending_at = trigger.get("pending_at_ms")
            active = trigger.get("active_run_id")
            doomed = [
                occurrence
                for occurrence, row in fires.items()
                if is_prunable(
                    occurrence,
                    row["outcome"],  # type: ignore[arg-type]
                    row["run_id"],  # type: ignore[arg-type]
                    pending_at=pending_at if isinstance(pending_at, int) else None,
                    active_run_id=active if isinstance(active, str) else None,
                    older_than=older_than,
                )
            ]
            for occurrence in doomed:
                row = fires.pop(occurrence)
                self._undo.append(functools.partial(fires.__setitem__, occurrence, row))
            deleted += len(doomed)
        return deleted

    def heartbeat(self, host: str, at: int) -> None:
        self._touch("upsert", "tt_scheduler_heartbeats", {"host": host, "ticked_at_ms": at})
        beats = self._t.heartbeats
        if host in beats:
            old = beats[host]
            self._undo.append(lambda: beats.__setitem__(host, old))
        else:
            self._undo.append(lambda: beats.pop(host, None))
        beats[host] = at


class MemoryTriggerStore(EngineStore):
    """A :class:`TriggerStore` held in memory (lost when the object goes).

    ``clock`` tells the store's now (claims, leases, heartbeats); it defaults to the system
    clock. Every method makes exactly one checkpoint, at its start.
    """

    def __init__(self, *, clock: WallClock | None = None) -> None:
        self._clock = clock if clock is not None else SystemWallClock()
        self._tables = _Tables()
        #: Test seam: ``hook(operation, table, values)`` before every row access (see FaultHook).
        self.fault_hook: FaultHook | None = None

    @property
    def clock(self) -> WallClock:
        return self._clock

    def _raw_tables(self) -> _Tables:
        """The rows themselves (tests write "by hand" through this, like SQL against a file)."""
        return self._tables

    async def _run(
        self, method: Method, body: Callable[[StoreTx, int], T], *, now: bool = False
    ) -> T:
        await trio.lowlevel.checkpoint()
        tx = _MemoryTx(self._tables, self.fault_hook)
        at = self._clock.now_ms() if now else 0
        try:
            return body(tx, at)
        except _Fault as fault:
            tx.rollback()
            raise failure_for(method) from fault.cause
        except BaseException:
            tx.rollback()
            raise

    def __repr__(self) -> str:
        return f"MemoryTriggerStore(clock={self._clock!r})"
