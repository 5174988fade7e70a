"""The attention index as the engine keeps it (``docs/store.md``, "The attention index").

Every write a body makes is followed, in the same transaction, by :func:`refresh` of the rows it
wrote (:func:`attending` wraps a body to do so), so each row's ``attention_at_ms`` is always the
instant :func:`._attention.attention_at` computes from its columns. The index reads (``due``,
``holding``, ``next_attention``) are here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ._attention import UNKNOWN, AttentionInputs, DueRow, attention_at
from ._codec import ATTENTION_AT, REGISTERED_AT, EncodedTrigger, due_row, is_int

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Iterable, Sequence

    from ._backend import (
        RawAttention,
        RawDue,
        RawFire,
        RawFireRecord,
        RawManualFire,
        RawState,
        RawTrigger,
        StoreTx,
    )
    from ._decision import TriggerWrite
    from ._models import HistoryQuery

__all__ = ["Attending", "attending", "body_due", "body_holding", "body_next_attention", "refresh"]

T = TypeVar("T")


def body_due(tx: StoreTx, now: int, limit: int, hold_ms: int) -> builtins.list[DueRow]:
    """The rows whose attention instant has come (``due``); see :mod:`._attention`."""
    answer: list[DueRow] = []
    for raw in tx.due(now, limit):
        trigger_id = raw[0]
        if raw[ATTENTION_AT] == UNKNOWN and isinstance(trigger_id, str):
            # A row from before the index: compute its instant now (a row that never went
            # through an indexed register counts as registered now).
            registered_at = raw[REGISTERED_AT]
            if registered_at is None:
                tx.set_registered_at(trigger_id, now)
                registered_at = now
            computed = refresh(tx, (trigger_id,)).get(trigger_id)
            if computed is None or computed > now:
                continue
            raw = (*raw[:REGISTERED_AT], registered_at, computed)
        answer.append(due_row(raw))
    if hold_ms > 0 and answer:
        tx.hold([due.row.trigger_id for due in answer], now + hold_ms)
    return answer


def body_holding(tx: StoreTx) -> builtins.list[DueRow]:
    return [due_row(raw) for raw in tx.holding()]


def body_next_attention(tx: StoreTx) -> int | None:
    value = tx.next_attention()
    return value if is_int(value) else None  # type: ignore[return-value]


def _attention_inputs(raw: RawAttention) -> AttentionInputs | None:
    (
        _trigger_id,
        cron,
        timezone,
        enabled,
        overlap,
        last_fired_at,
        pending_at,
        active,
        claimed_at,
        registered_at,
        paused_at,
        resume_after,
        backfill_next,
        jitter_ms,
        start_at,
        end_at,
        _attention,
    ) = raw
    if not isinstance(cron, str) or not isinstance(overlap, str):
        return None
    return AttentionInputs(
        cron=cron,
        timezone=timezone if isinstance(timezone, str) else None,
        enabled=enabled == 1,
        overlap=overlap,
        last_fired_at=last_fired_at if is_int(last_fired_at) else None,  # type: ignore[arg-type]
        pending_at=pending_at if is_int(pending_at) else None,  # type: ignore[arg-type]
        active=active if isinstance(active, str) else None,
        claimed_at=claimed_at if is_int(claimed_at) else None,  # type: ignore[arg-type]
        registered_at=registered_at if is_int(registered_at) else None,  # type: ignore[arg-type]
        paused=paused_at is not None,
        resume_after=resume_after if is_int(resume_after) else None,  # type: ignore[arg-type]
        backfill_next=backfill_next if is_int(backfill_next) else None,  # type: ignore[arg-type]
        trigger_id=_trigger_id if isinstance(_trigger_id, str) else "",
        jitter_ms=jitter_ms if is_int(jitter_ms) else 0,  # type: ignore[arg-type]
        start_at=start_at if is_int(start_at) else None,  # type: ignore[arg-type]
        end_at=end_at if is_int(end_at) else None,  # type: ignore[arg-type]
    )


def refresh(tx: StoreTx, trigger_ids: Iterable[str]) -> dict[str, int | None]:
    """Re-compute and write the attention instant of each named row, in the same transaction.

    Answers the instants now stored. A row whose columns cannot be read as inputs (a corrupt
    row) is made due at once, so every tick looks at it and logs why, as a listing tick did.
    """
    ids = sorted(set(trigger_ids))
    found: dict[str, int | None] = {}
    if not ids:
        return found
    for raw in tx.attention_inputs(ids):
        trigger_id = raw[0]
        if not isinstance(trigger_id, str):
            continue
        inputs = _attention_inputs(raw)
        value = UNKNOWN + 1 if inputs is None else attention_at(inputs)
        if value != raw[-1]:
            tx.set_attention(trigger_id, value)
        found[trigger_id] = value
    return found


class Attending:
    """A :class:`StoreTx` that remembers which triggers a body wrote (see :func:`attending`)."""

    __slots__ = ("touched", "tx")

    def __init__(self, tx: StoreTx) -> None:
        self.tx = tx
        self.touched: set[str] = set()

    def trigger(self, trigger_id: str) -> RawTrigger | None:
        return self.tx.trigger(trigger_id)

    def triggers(self, *, enabled_only: bool) -> builtins.list[RawTrigger]:
        return self.tx.triggers(enabled_only=enabled_only)

    def state(self, trigger_id: str) -> RawState | None:
        return self.tx.state(trigger_id)

    def fire(self, trigger_id: str, occurrence: int) -> RawFire | None:
        return self.tx.fire(trigger_id, occurrence)

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[RawState, RawFire | None] | None:
        return self.tx.state_with_fire(trigger_id, occurrence)

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        self.tx.insert_fire(trigger_id, occurrence)

    def manual_fire(self, key: str) -> RawManualFire | None:
        return self.tx.manual_fire(key)

    def insert_manual_fire(
        self, trigger_id: str, occurrence: int, key: str, input_json: str, by: str | None
    ) -> None:
        self.tx.insert_manual_fire(trigger_id, occurrence, key, input_json, by)

    def apply(self, trigger_id: str, write: TriggerWrite) -> None:
        self.touched.add(trigger_id)
        self.tx.apply(trigger_id, write)

    def apply_all(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> None:
        if writes:
            self.touched.add(trigger_id)
            self.tx.apply_all(trigger_id, writes)

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        return self.tx.launched_occurrence(trigger_id, run_id)

    def upsert(self, trigger: EncodedTrigger, registered_at: int) -> None:
        self.touched.add(trigger.trigger_id)
        self.tx.upsert(trigger, registered_at)

    def triggers_named(self, trigger_ids: Sequence[str]) -> builtins.list[RawTrigger]:
        return self.tx.triggers_named(trigger_ids)

    def insert_new(
        self, rows: Sequence[tuple[EncodedTrigger, int | None]], registered_at: int
    ) -> set[str]:
        # A new row's attention instant is written with it: nothing to refresh.
        return self.tx.insert_new(rows, registered_at)

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[RawAttention]:
        return self.tx.attention_inputs(trigger_ids)

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        self.tx.set_attention(trigger_id, attention_at)

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        self.touched.add(trigger_id)
        self.tx.set_registered_at(trigger_id, registered_at)

    def due(self, now: int, limit: int) -> builtins.list[RawDue]:
        return self.tx.due(now, limit)

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        self.tx.hold(trigger_ids, until)

    def next_attention(self) -> object:
        return self.tx.next_attention()

    def holding(self) -> builtins.list[RawDue]:
        return self.tx.holding()

    def history(self, query: HistoryQuery, fetch: int | None) -> builtins.list[RawFireRecord]:
        return self.tx.history(query, fetch)

    def prune(self, older_than: int) -> int:
        return self.tx.prune(older_than)

    def heartbeat(self, host: str, at: int) -> None:
        self.tx.heartbeat(host, at)

    def last_heartbeat(self) -> tuple[object, object] | None:
        return self.tx.last_heartbeat()


def attending(body: Callable[[StoreTx, int], T]) -> Callable[[StoreTx, int], T]:
    """``body`` followed, in its transaction, by :func:`refresh` of every trigger it wrote.

    Inside a batch (:func:`run_bodies`, whose transaction is already attended) the refresh is
    left to the batch, which does it once for all its bodies.
    """

    def attended(tx: StoreTx, now: int) -> T:
        if isinstance(tx, Attending):
            return body(tx, now)
        wrapped = Attending(tx)
        value = body(wrapped, now)
        refresh(tx, wrapped.touched)
        return value

    return attended
