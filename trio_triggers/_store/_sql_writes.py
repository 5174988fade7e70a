"""The decision's writes as SQL statements, written once for every SQL dialect.

A claim or a result returns writes (:mod:`._decision`); a SQL backend turns each into one
conditional ``UPDATE``. The statements differ between dialects (placeholders, ``max`` vs
``GREATEST``, casts), so each backend supplies a :class:`WriteStatements` table; which
statement a write becomes, with which parameters, and which neighbouring writes merge into one
statement, is decided here for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

import msgspec

from ._decision import (
    AdvanceCursor,
    ClearPendingIf,
    ReleaseReservation,
    ReplaceHolder,
    Reserve,
    SetOutcome,
    SetPending,
    SetRunId,
    TriggerWrite,
    WriteFire,
)

__all__ = ["Statement", "WriteStatements", "statement_for", "statements_for"]

Statement: TypeAlias = tuple[str, tuple[object, ...]]
"""One SQL statement and its parameters."""


class WriteStatements(msgspec.Struct, frozen=True, kw_only=True):
    """A dialect's SQL for each write (parameters in the order :func:`statement_for` passes)."""

    set_outcome: str  # (outcome, trigger_id, occurrence)
    set_outcome_open: str  # the same, only while the row is open (NULL or buffered)
    set_run_id: str  # (run_id, trigger_id, occurrence)
    write_fire: str  # (outcome, run_id, error, trigger_id, occurrence)
    write_fire_keep: str  # (outcome, error, trigger_id, occurrence)
    release: str  # (holder, pending, trigger_id, expected)
    replace_holder: str  # (holder, trigger_id, expected)
    advance_cursor: str  # (occurrence, occurrence, trigger_id)
    # AdvanceCursor then ReplaceHolder (every record_result) in one statement:
    advance_and_replace: str  # (occurrence, occurrence, expected, holder, expected, trigger_id)
    set_pending: str  # (pending, trigger_id)
    clear_pending_if: str  # (trigger_id, occurrence)
    reserve: str  # (reservation_id, claimed_at, trigger_id)


def statement_for(trigger_id: str, write: TriggerWrite, sql: WriteStatements) -> Statement:
    """The statement that applies ``write`` to ``trigger_id``'s rows."""
    if isinstance(write, SetOutcome):
        text = sql.set_outcome_open if write.while_open else sql.set_outcome
        return text, (write.outcome, trigger_id, write.occurrence)
    if isinstance(write, SetRunId):
        return sql.set_run_id, (write.run_id, trigger_id, write.occurrence)
    if isinstance(write, WriteFire):
        if write.keep_run_id:
            return sql.write_fire_keep, (write.outcome, write.error, trigger_id, write.occurrence)
        return sql.write_fire, (
            write.outcome,
            write.run_id,
            write.error,
            trigger_id,
            write.occurrence,
        )
    if isinstance(write, ReleaseReservation):
        return sql.release, (write.holder, write.pending, trigger_id, write.expected)
    if isinstance(write, ReplaceHolder):
        return sql.replace_holder, (write.holder, trigger_id, write.expected)
    if isinstance(write, AdvanceCursor):
        return sql.advance_cursor, (write.occurrence, write.occurrence, trigger_id)
    if isinstance(write, SetPending):
        return sql.set_pending, (write.pending, trigger_id)
    if isinstance(write, ClearPendingIf):
        return sql.clear_pending_if, (trigger_id, write.occurrence)
    if isinstance(write, Reserve):
        return sql.reserve, (write.reservation_id, write.claimed_at, trigger_id)
    raise AssertionError(f"unknown write {write!r}")  # pragma: no cover - exhaustive


def statements_for(
    trigger_id: str, writes: tuple[TriggerWrite, ...], sql: WriteStatements
) -> Iterator[Statement]:
    """The statements for ``writes`` in order, merging an ``AdvanceCursor`` with the
    ``ReplaceHolder`` right after it (they touch disjoint columns, and every right-hand side
    of the merged ``UPDATE`` reads the row's old values, so one statement does both)."""
    index = 0
    count = len(writes)
    while index < count:
        write = writes[index]
        following = writes[index + 1] if index + 1 < count else None
        if isinstance(write, AdvanceCursor) and isinstance(following, ReplaceHolder):
            o = write.occurrence
            expected = following.expected
            yield (
                sql.advance_and_replace,
                (o, o, expected, following.holder, expected, trigger_id),
            )
            index += 2
            continue
        yield statement_for(trigger_id, write, sql)
        index += 1
