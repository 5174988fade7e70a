"""The decision's writes as SQL statements, written once for every SQL dialect.

A claim or a result returns writes (:mod:`._decision`); a SQL backend turns each into one
conditional ``UPDATE``. The statements are written here once; a backend builds its table with
:func:`write_statements` from the three things its dialect spells differently (placeholders,
``max`` vs ``GREATEST``, a typed text parameter). Which statement a write becomes, with which
parameters, and which neighbouring writes merge into one statement, is decided here too.
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

__all__ = ["Statement", "WriteStatements", "statement_for", "statements_for", "write_statements"]

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


def write_statements(*, param: str, greatest: str, text_param: str) -> WriteStatements:
    """The statements in one dialect: ``param`` is its placeholder (``?``, ``%s``),
    ``greatest`` its two-argument maximum (``max``, ``GREATEST``) and ``text_param`` a
    placeholder typed as text where the server cannot infer it (``%s::text``)."""
    p, t = param, text_param
    set_outcome = (
        f"UPDATE tt_trigger_fires SET outcome = {p} "
        f"WHERE trigger_id = {p} AND occurrence_at_ms = {p}"
    )
    advance = f"last_fired_at_ms = {greatest}(coalesce(last_fired_at_ms, {p}), {p})"
    return WriteStatements(
        set_outcome=set_outcome,
        set_outcome_open=set_outcome + " AND (outcome IS NULL OR outcome = 'buffered')",
        set_run_id=(
            f"UPDATE tt_trigger_fires SET run_id = {p} "
            f"WHERE trigger_id = {p} AND occurrence_at_ms = {p}"
        ),
        write_fire=(
            f"UPDATE tt_trigger_fires SET outcome = {p}, run_id = {p}, error = {p} "
            f"WHERE trigger_id = {p} AND occurrence_at_ms = {p}"
        ),
        write_fire_keep=(
            f"UPDATE tt_trigger_fires SET outcome = {p}, error = {p} "
            f"WHERE trigger_id = {p} AND occurrence_at_ms = {p}"
        ),
        release=(
            f"UPDATE tt_triggers SET active_run_id = {p}, active_claimed_at_ms = NULL, "
            f"pending_at_ms = {p} WHERE trigger_id = {p} AND active_run_id = {p}"
        ),
        replace_holder=(
            f"UPDATE tt_triggers SET active_run_id = {p}, active_claimed_at_ms = NULL "
            f"WHERE trigger_id = {p} AND active_run_id = {p}"
        ),
        advance_cursor=f"UPDATE tt_triggers SET {advance} WHERE trigger_id = {p}",
        # The two writes touch disjoint columns, and every right-hand side reads the row's old
        # values, so one statement does both.
        advance_and_replace=(
            f"UPDATE tt_triggers SET {advance}, "
            f"active_run_id = CASE WHEN active_run_id = {t} THEN {t} ELSE active_run_id END, "
            f"active_claimed_at_ms = CASE WHEN active_run_id = {t} THEN NULL "
            f"ELSE active_claimed_at_ms END "
            f"WHERE trigger_id = {p}"
        ),
        set_pending=f"UPDATE tt_triggers SET pending_at_ms = {p} WHERE trigger_id = {p}",
        clear_pending_if=(
            f"UPDATE tt_triggers SET pending_at_ms = NULL "
            f"WHERE trigger_id = {p} AND pending_at_ms = {p}"
        ),
        reserve=(
            f"UPDATE tt_triggers SET active_run_id = {p}, active_claimed_at_ms = {p} "
            f"WHERE trigger_id = {p}"
        ),
    )


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
