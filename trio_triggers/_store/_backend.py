"""THE backend seam of the trigger store: what a new store implements, and all it may import.

A trigger store is an :class:`EngineStore` subclass that runs method bodies in its transactions.
The bodies (every rule of the contract: claims, leases, results, the attention index) are written
once, over the small synchronous :class:`StoreTx` below, so a backend writes no rule of its own,
only row reads and writes. To add one (the memory, SQLite and PostgreSQL stores are the three
worked examples):

1. **Implement** :class:`StoreTx` over one open transaction of your database: each method is a
   row read or a write, described on the method. Rows are plain tuples in the column orders of
   :data:`TRIGGER_COLUMNS`, :data:`STATE_COLUMNS` and :data:`ATTENTION_COLUMNS` (the ``Raw*``
   aliases); values are checked by the engine, not by you. ``apply`` receives the decision's
   writes (:data:`TriggerWrite`: a handful of conditional updates). A SQL backend takes every
   statement, the writes' included (:meth:`TriggerSql.statements`), from its dialect's
   :func:`trigger_sql` table and only executes them; its schema's attention column defaults to
   :data:`UNKNOWN` (rows written before the index are computed on first read).
2. **Subclass** :class:`EngineStore` and implement ``_run(method, body, *, now=False)``: open one
   transaction (a read transaction is allowed when ``method in READ_ONLY_METHODS``), read the
   store clock once if ``now`` (else pass ``0``), call ``body(tx, now_ms)``, commit, and return its
   value. If the body raises, roll back and let the exception propagate unchanged
   (``TriggerError``\\ s are the contract's refusals); a failure of the database itself becomes
   ``failure_for(method)`` raised ``from`` the driver error. Set ``_clock`` to the store clock.
3. **Optionally batch**: set ``_batching = True`` and implement ``_run_batch(bodies, hints=...)``
   with :func:`run_bodies` on one write transaction. Let its :class:`BatchItemFailed` (a body
   failed; the engine then runs each call alone) propagate, and raise :func:`write_failed` from a
   failure of the database.

**What must lock what.** A method body's read-decide-write must be atomic against every other
writer of the same trigger, in any process. A server backend therefore locks the trigger row in
:meth:`StoreTx.state` and :meth:`StoreTx.state_with_fire` when the transaction may write (the
first read of every writing body is one of them), and reads that trigger's ledger rows only after
the lock is granted; ``due`` locks the rows it answers, skipping rows another transaction holds
(``FOR UPDATE SKIP LOCKED``). A single-writer database (SQLite: ``BEGIN IMMEDIATE``) or a
single-threaded one (memory: no checkpoint inside a body) gets this for free. A backend that
batches locks the batch's rows in one order (``trigger_id``) so that two batches cannot deadlock.

The tests of ``tests/store`` run against every backend listed in ``tests/store/backends.py``; a
new backend adds itself there and passes them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from ._attention import UNKNOWN
from ._backfill import FloorResumeAfter, SetBackfill, StepBackfill
from ._codec import (
    ATTENTION_COLUMNS,
    BACKFILL_COLUMNS,
    EXTRA_COLUMNS,
    MISSED_COLUMNS,
    STATE_COLUMNS,
    TRIGGER_COLUMNS,
    EncodedTrigger,
    failure_for,
    read_failed,
    write_failed,
)
from ._decision import (
    AdvanceCursor,
    ClearPendingIf,
    CountMissed,
    PauseIfRunning,
    ReleaseReservation,
    ReplaceHolder,
    Reserve,
    SetFailures,
    SetOutcome,
    SetPause,
    SetPending,
    SetRemoved,
    SetRunId,
    TriggerWrite,
    WriteFire,
    after_cursor,
    is_prunable,
)
from ._engine import EngineStore
from ._group_commit import BatchItemFailed, run_bodies
from ._protocol import CLOCK_METHODS, READ_ONLY_METHODS, Method
from ._sql import Statement, TriggerSql, trigger_sql

if TYPE_CHECKING:
    import builtins

    from ._models import HistoryQuery

__all__ = [
    "ATTENTION_COLUMNS",
    "BACKFILL_COLUMNS",
    "CLOCK_METHODS",
    "EXTRA_COLUMNS",
    "MISSED_COLUMNS",
    "READ_ONLY_METHODS",
    "STATE_COLUMNS",
    "TRIGGER_COLUMNS",
    "UNKNOWN",
    "AdvanceCursor",
    "BatchItemFailed",
    "Body",
    "ClearPendingIf",
    "CountMissed",
    "EncodedTrigger",
    "EngineStore",
    "FloorResumeAfter",
    "Hint",
    "Method",
    "PauseIfRunning",
    "RawAttention",
    "RawDue",
    "RawFire",
    "RawFireRecord",
    "RawManualFire",
    "RawState",
    "RawTrigger",
    "ReleaseReservation",
    "ReplaceHolder",
    "Reserve",
    "SetBackfill",
    "SetFailures",
    "SetOutcome",
    "SetPause",
    "SetPending",
    "SetRemoved",
    "SetRunId",
    "Statement",
    "StepBackfill",
    "StoreTx",
    "TriggerSql",
    "TriggerWrite",
    "WriteFire",
    "after_cursor",
    "failure_for",
    "is_prunable",
    "read_failed",
    "run_bodies",
    "trigger_sql",
    "write_failed",
]


RawTrigger: TypeAlias = tuple[object, ...]
"""A ``tt_triggers`` row as read, in :data:`TRIGGER_COLUMNS` order (values not yet checked)."""
RawState: TypeAlias = tuple[object, ...]
"""The :data:`STATE_COLUMNS` of one ``tt_triggers`` row, as read."""
RawAttention: TypeAlias = tuple[object, ...]
"""The :data:`ATTENTION_COLUMNS` of one ``tt_triggers`` row, as read."""
RawDue: TypeAlias = tuple[object, ...]
"""A ``due`` row: the :data:`TRIGGER_COLUMNS`, then ``registered_at_ms``, ``attention_at_ms``."""
RawFireRecord: TypeAlias = tuple[object, object, object, object, object, object]
"""A ledger row as read: ``(trigger_id, occurrence_at_ms, outcome, run_id, error,
manual_key)``."""
RawFire: TypeAlias = tuple[object, object, object]
"""What a decision reads of one ledger row: ``(outcome, run_id, manual_key)``."""
RawManualFire: TypeAlias = tuple[object, object, object, object, object, object]
"""A manual fire's ledger row found by its key: ``(trigger_id, occurrence_at_ms, outcome,
run_id, manual_input_json, manual_by)``."""


class StoreTx(Protocol):
    """What a method body needs from one open transaction of a backend."""

    def trigger(self, trigger_id: str) -> RawTrigger | None:
        """The whole row of ``trigger_id``."""
        ...

    def triggers(self, *, enabled_only: bool) -> builtins.list[RawTrigger]:
        """Every row (or those with ``enabled = 1``), ordered by ``trigger_id`` (code points)."""
        ...

    def state(self, trigger_id: str) -> RawState | None:
        """The :data:`STATE_COLUMNS` of ``trigger_id`` (a SQL server locks the row here)."""
        ...

    def fire(self, trigger_id: str, occurrence: int) -> RawFire | None:
        """``(outcome, run_id, manual_key)`` of the ledger row, if it exists."""
        ...

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[RawState, RawFire | None] | None:
        """:meth:`state` and :meth:`fire` in one read (``None`` when the trigger is absent)."""
        ...

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        """Insert the ledger row ``(trigger_id, occurrence, outcome NULL)`` (known absent)."""
        ...

    def manual_fire(self, key: str) -> RawManualFire | None:
        """The ledger row whose ``manual_key`` is ``key`` (of any trigger), if there is one."""
        ...

    def insert_manual_fire(
        self, trigger_id: str, occurrence: int, key: str, input_json: str, by: str | None
    ) -> None:
        """Insert a manual fire's ledger row (outcome NULL, ``manual_key``,
        ``manual_input_json``, ``manual_by``); ``(trigger_id, occurrence)`` and ``key`` are
        known absent."""
        ...

    def apply(self, trigger_id: str, write: TriggerWrite) -> None:
        """Apply one decision write (§10.3) to ``trigger_id``'s rows."""
        ...

    def apply_all(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> None:
        """Apply ``writes`` in order (a backend may merge writes to disjoint columns)."""
        ...

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        """The greatest occurrence whose row has ``run_id`` and outcome ``launched``."""
        ...

    def upsert(self, trigger: EncodedTrigger, registered_at: int) -> None:
        """Insert with revision 1 (and ``registered_at_ms``), or overwrite the declared columns
        and add 1 to revision (``registered_at_ms`` kept)."""
        ...

    def triggers_named(self, trigger_ids: Sequence[str]) -> builtins.list[RawTrigger]:
        """The whole rows of the named triggers (any order; absent ids omitted), read in as
        few statements as the backend allows (a bulk registration's one look at what exists)."""
        ...

    def insert_new(
        self, rows: Sequence[tuple[EncodedTrigger, int | None]], registered_at: int
    ) -> set[str]:
        """Insert each ``(trigger, attention_at)`` as a new row (revision 1, ``registered_at``,
        that attention instant) in multi-row statements; answers the ids it inserted. A row
        that exists by then (a concurrent registration on a server database) is left alone
        and its id is not in the answer: the caller registers it the ordinary way."""
        ...

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[RawAttention]:
        """The :data:`ATTENTION_COLUMNS` of the named rows (any order; absent ids omitted)."""
        ...

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        """Write ``attention_at_ms`` (and nothing else)."""
        ...

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        """Write ``registered_at_ms`` where it is NULL (rows from before the index)."""
        ...

    def due(self, now: int, limit: int) -> builtins.list[RawDue]:
        """Rows with ``attention_at_ms <= now``, earliest first (ties by id), at most
        ``limit``: the :data:`TRIGGER_COLUMNS` then ``registered_at_ms``, ``attention_at_ms``.
        A server backend locks them, skipping rows another transaction has locked."""
        ...

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        """Set ``attention_at_ms = until`` on the named rows (a ``due`` read's take)."""
        ...

    def next_attention(self) -> object:
        """The smallest non-NULL ``attention_at_ms`` (``None`` when there is none)."""
        ...

    def holding(self) -> builtins.list[RawDue]:
        """Rows with a holder (``active_run_id`` not NULL), by id, shaped as :meth:`due` rows."""
        ...

    def history(self, query: HistoryQuery, fetch: int | None) -> builtins.list[RawFireRecord]:
        """Filtered rows after ``query.cursor``, newest first, at most ``fetch`` of them."""
        ...

    def prune(self, older_than: int) -> int:
        """Delete the rows :func:`._decision.is_prunable` selects; answer how many."""
        ...

    def heartbeat(self, host: str, at: int) -> None:
        """Upsert ``(host, at)``."""
        ...

    def last_heartbeat(self) -> tuple[object, object] | None:
        """``(host, ticked_at_ms)`` with the greatest time, ties to the lowest host."""
        ...


Body: TypeAlias = Callable[[StoreTx, int], Any]
"""A method body: ``body(tx, now)``."""
Hint: TypeAlias = tuple[str, int] | None
"""The ``(trigger_id, occurrence)`` a batched body reads first (a backend may prefetch it)."""
