"""The trigger store's SQL, written once for every SQL dialect (SQLite, PostgreSQL).

A SQL backend builds its table of statements with :func:`trigger_sql` from the few things its
dialect spells differently: placeholders (``?``, ``%s``), ``max`` vs ``GREATEST``, a typed text
parameter, and the row locks a server needs (``FOR UPDATE`` on a writing method's first read,
``FOR UPDATE SKIP LOCKED`` on ``due``). The reads, the upsert, the prune and the heartbeat are
the same text in every dialect; so are the decision's writes (:mod:`._decision`): each becomes
one conditional ``UPDATE``, and which statement a write becomes, with which parameters, and which
neighbouring writes merge into one statement, is decided here too (:func:`statements_for`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeAlias

import msgspec

from ._backfill import FloorResumeAfter, SetBackfill, StepBackfill
from ._codec import (
    ATTENTION_COLUMNS,
    BACKFILL_COLUMNS,
    EXTRA_COLUMNS,
    MISSED_COLUMNS,
    STATE_COLUMNS,
    TRIGGER_COLUMNS,
    EncodedTrigger,
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
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ._models import HistoryQuery

__all__ = [
    "INSERT_NEW_COLUMNS",
    "Statement",
    "TriggerSql",
    "WriteStatements",
    "history_statement",
    "insert_new_params",
    "insert_new_statement",
    "split_state_with_fire",
    "statement_for",
    "statements_for",
    "trigger_sql",
    "upsert_params",
    "write_statements",
]

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
    set_pause: str  # (paused_at, note, by, resume_after, trigger_id)
    set_removed: str  # (removed_at, trigger_id)
    count_missed: str  # (overlap, catch_up, catch_up_bound, paused, trigger_id)
    set_failures: str  # (count, trigger_id)
    pause_if_running: str  # (paused_at, note, by, trigger_id)
    set_backfill: str  # (the BACKFILL_COLUMNS values, trigger_id)
    step_backfill: str  # (next, done, state, trigger_id, expected)
    floor_resume_after: str  # (at, at, trigger_id)


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
        set_pause=(
            f"UPDATE tt_triggers SET paused_at_ms = {p}, pause_note = {p}, paused_by = {p}, "
            f"resume_after_ms = {p}, revision = revision + 1 WHERE trigger_id = {p}"
        ),
        set_removed=f"UPDATE tt_triggers SET removed_at_ms = {p} WHERE trigger_id = {p}",
        set_failures=f"UPDATE tt_triggers SET consecutive_failures = {p} WHERE trigger_id = {p}",
        pause_if_running=(
            f"UPDATE tt_triggers SET paused_at_ms = {p}, pause_note = {p}, paused_by = {p}, "
            f"revision = revision + 1 WHERE trigger_id = {p} AND paused_at_ms IS NULL"
        ),
        count_missed=(
            "UPDATE tt_triggers SET "
            + ", ".join(f"{column} = {column} + {p}" for column in MISSED_COLUMNS)
            + f" WHERE trigger_id = {p}"
        ),
        set_backfill=(
            "UPDATE tt_triggers SET "
            + ", ".join(f"{column} = {p}" for column in BACKFILL_COLUMNS)
            + f" WHERE trigger_id = {p}"
        ),
        step_backfill=(
            f"UPDATE tt_triggers SET backfill_next_ms = {p}, backfill_done = {p}, "
            f"backfill_state = {p} WHERE trigger_id = {p} AND backfill_next_ms = {p}"
        ),
        floor_resume_after=(
            f"UPDATE tt_triggers SET resume_after_ms = {greatest}(coalesce(resume_after_ms, {p}), "
            f"{p}) WHERE trigger_id = {p}"
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
    if isinstance(write, SetRemoved):
        return sql.set_removed, (write.at, trigger_id)
    if isinstance(write, SetFailures):
        return sql.set_failures, (write.count, trigger_id)
    if isinstance(write, PauseIfRunning):
        return sql.pause_if_running, (write.paused_at, write.note, write.by, trigger_id)
    if isinstance(write, CountMissed):
        return sql.count_missed, (
            write.overlap,
            write.catch_up,
            write.catch_up_bound,
            write.paused,
            trigger_id,
        )
    if isinstance(write, SetBackfill):
        return sql.set_backfill, (*write.values(), trigger_id)
    if isinstance(write, StepBackfill):
        return sql.step_backfill, (
            write.next,
            write.done,
            write.state,
            trigger_id,
            write.expected,
        )
    if isinstance(write, FloorResumeAfter):
        return sql.floor_resume_after, (write.at, write.at, trigger_id)
    if isinstance(write, SetPause):
        return sql.set_pause, (
            write.paused_at,
            write.note,
            write.by,
            write.resume_after,
            trigger_id,
        )
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


# --- the reads, the upsert, the prune, the heartbeat ---------------------------------------

_COLUMNS = ", ".join(TRIGGER_COLUMNS)
_EXTRA_UPDATES = ", ".join(f"{column} = excluded.{column}" for column in EXTRA_COLUMNS)
_DUE_COLUMNS = _COLUMNS + ", registered_at_ms, attention_at_ms"
_STATE_COLUMNS = ", ".join(STATE_COLUMNS)


class TriggerSql(msgspec.Struct, frozen=True, kw_only=True):
    """One dialect's statements (parameters in the order the comment says)."""

    select_trigger: str  # (trigger_id)
    select_triggers_head: str  # every row, no WHERE (select_named adds its id test)
    select_triggers: str
    select_enabled: str
    select_state: str  # (trigger_id)
    lock_state: str  # (trigger_id): select_state, locking the row where the dialect locks
    # (occurrence, trigger_id): the state columns, then "fire row exists", outcome, run_id,
    # manual_key
    state_with_fire: str
    select_fire: str  # (trigger_id, occurrence)
    insert_fire: str  # (trigger_id, occurrence)
    select_manual_fire: str  # (manual_key)
    insert_manual_fire: str  # (trigger_id, occurrence, key, input_json, by)
    launched_occurrence: str  # (trigger_id, run_id)
    upsert: str  # upsert_params(...)
    prune: str  # (older_than)
    select_attention: str  # the ATTENTION_COLUMNS ... WHERE (the dialect adds its id test)
    set_attention: str  # (attention_at, trigger_id)
    set_registered_at: str  # (registered_at, trigger_id)
    due: str  # (now, limit)
    next_attention: str
    holding: str
    heartbeat: str  # (host, at)
    last_heartbeat: str
    writes: WriteStatements
    param: str

    def statement(self, trigger_id: str, write: TriggerWrite) -> Statement:
        """The statement that applies ``write`` to ``trigger_id``'s rows."""
        return statement_for(trigger_id, write, self.writes)

    def statements(self, trigger_id: str, writes: tuple[TriggerWrite, ...]) -> Iterator[Statement]:
        """The statements for ``writes`` in order (see :func:`statements_for`)."""
        return statements_for(trigger_id, writes, self.writes)

    def history(self, query: HistoryQuery, fetch: int | None) -> Statement:
        """``history``'s read (see :func:`history_statement`)."""
        return history_statement(query, fetch, self.param)

    def select_named(self, count: int) -> str:
        """The whole rows of ``count`` named triggers (``trigger_id IN (...)``)."""
        marks = ", ".join([self.param] * count)
        return f"{self.select_triggers_head} WHERE trigger_id IN ({marks})"

    @staticmethod
    def upsert_values(trigger: EncodedTrigger, registered_at: int) -> tuple[object, ...]:
        """The parameters of :attr:`upsert`."""
        return upsert_params(trigger, registered_at)

    @staticmethod
    def state_and_fire(
        row: Sequence[object] | None,
    ) -> tuple[tuple[object, ...], tuple[object, object, object] | None] | None:
        """A :attr:`state_with_fire` row as ``StoreTx.state_with_fire`` answers it."""
        return split_state_with_fire(row)


def trigger_sql(
    *,
    param: str,
    greatest: str,
    text_param: str,
    lock: str = "",
    skip_locked: str = "",
    insert_fire_suffix: str = "",
) -> TriggerSql:
    """The statements in one dialect: ``param``, ``greatest`` and ``text_param`` as for
    :func:`write_statements`; ``lock`` ends a writing method's read of its trigger row
    (`` FOR UPDATE``), ``skip_locked`` ends the ``due`` read (`` FOR UPDATE SKIP LOCKED``),
    ``insert_fire_suffix`` ends the ledger insert (`` ON CONFLICT DO NOTHING``)."""
    p = param
    select_state = f"SELECT {_STATE_COLUMNS} FROM tt_triggers WHERE trigger_id = {p}"
    return TriggerSql(
        select_trigger=f"SELECT {_COLUMNS} FROM tt_triggers WHERE trigger_id = {p}",
        select_triggers_head=f"SELECT {_COLUMNS} FROM tt_triggers",
        select_triggers=f"SELECT {_COLUMNS} FROM tt_triggers ORDER BY trigger_id",
        select_enabled=(
            f"SELECT {_COLUMNS} FROM tt_triggers WHERE enabled = 1 ORDER BY trigger_id"
        ),
        select_state=select_state,
        lock_state=select_state + lock,
        state_with_fire=(
            "SELECT "
            + "".join(f"t.{column}, " for column in STATE_COLUMNS)
            + "f.occurrence_at_ms IS NOT NULL, f.outcome, f.run_id, f.manual_key "
            "FROM tt_triggers AS t LEFT JOIN tt_trigger_fires AS f "
            f"ON f.trigger_id = t.trigger_id AND f.occurrence_at_ms = {p} "
            f"WHERE t.trigger_id = {p}"
        ),
        select_fire=(
            "SELECT outcome, run_id, manual_key FROM tt_trigger_fires "
            f"WHERE trigger_id = {p} AND occurrence_at_ms = {p}"
        ),
        insert_fire=(
            f"INSERT INTO tt_trigger_fires (trigger_id, occurrence_at_ms) VALUES ({p}, {p})"
            + insert_fire_suffix
        ),
        select_manual_fire=(
            "SELECT trigger_id, occurrence_at_ms, outcome, run_id, manual_input_json, manual_by "
            f"FROM tt_trigger_fires WHERE manual_key = {p}"
        ),
        insert_manual_fire=(
            "INSERT INTO tt_trigger_fires (trigger_id, occurrence_at_ms, manual_key, "
            f"manual_input_json, manual_by) VALUES ({p}, {p}, {p}, {p}, {p})"
        ),
        launched_occurrence=(
            "SELECT max(occurrence_at_ms) FROM tt_trigger_fires "
            f"WHERE trigger_id = {p} AND run_id = {p} AND outcome = 'launched'"
        ),
        upsert=f"""
            INSERT INTO tt_triggers (
                trigger_id, flow_id, input_json, cron, timezone, overlap, catch_up,
                max_catch_up, enabled, {", ".join(EXTRA_COLUMNS)}, revision,
                registered_at_ms, attention_at_ms
            ) VALUES ({", ".join([p] * (9 + len(EXTRA_COLUMNS)))}, 1, {p}, NULL)
            ON CONFLICT (trigger_id) DO UPDATE SET
                flow_id = excluded.flow_id,
                input_json = excluded.input_json,
                cron = excluded.cron,
                timezone = excluded.timezone,
                overlap = excluded.overlap,
                catch_up = excluded.catch_up,
                max_catch_up = excluded.max_catch_up,
                enabled = excluded.enabled,
                {_EXTRA_UPDATES},
                removed_at_ms = CASE WHEN excluded.enabled = 1 THEN NULL
                                     ELSE tt_triggers.removed_at_ms END,
                revision = tt_triggers.revision + 1
        """,
        # The rows is_prunable selects (settled, older than the cutoff, and neither the row's
        # pending occurrence nor its holder's).
        prune=f"""
            DELETE FROM tt_trigger_fires
            WHERE occurrence_at_ms < {p}
              AND outcome IN ('completed', 'failed', 'skipped', 'superseded')
              AND NOT EXISTS (
                SELECT 1 FROM tt_triggers AS t
                WHERE t.trigger_id = tt_trigger_fires.trigger_id
                  AND ((t.pending_at_ms IS NOT NULL
                        AND t.pending_at_ms = tt_trigger_fires.occurrence_at_ms)
                    OR (t.active_run_id IS NOT NULL
                        AND t.active_run_id = tt_trigger_fires.run_id))
              )
        """,
        select_attention=(
            "SELECT " + ", ".join(ATTENTION_COLUMNS) + " FROM tt_triggers WHERE trigger_id "
        ),
        set_attention=f"UPDATE tt_triggers SET attention_at_ms = {p} WHERE trigger_id = {p}",
        set_registered_at=(
            f"UPDATE tt_triggers SET registered_at_ms = {p} "
            f"WHERE trigger_id = {p} AND registered_at_ms IS NULL"
        ),
        due=(
            f"SELECT {_DUE_COLUMNS} FROM tt_triggers "
            f"WHERE attention_at_ms IS NOT NULL AND attention_at_ms <= {p} "
            f"ORDER BY attention_at_ms, trigger_id LIMIT {p}" + skip_locked
        ),
        next_attention=(
            "SELECT min(attention_at_ms) FROM tt_triggers WHERE attention_at_ms IS NOT NULL"
        ),
        holding=(
            f"SELECT {_DUE_COLUMNS} FROM tt_triggers "
            "WHERE active_run_id IS NOT NULL ORDER BY trigger_id"
        ),
        heartbeat=(
            f"INSERT INTO tt_scheduler_heartbeats (host, ticked_at_ms) VALUES ({p}, {p}) "
            "ON CONFLICT (host) DO UPDATE SET ticked_at_ms = excluded.ticked_at_ms"
        ),
        last_heartbeat=(
            "SELECT host, ticked_at_ms FROM tt_scheduler_heartbeats "
            "ORDER BY ticked_at_ms DESC, host ASC LIMIT 1"
        ),
        writes=write_statements(param=param, greatest=greatest, text_param=text_param),
        param=param,
    )


#: The columns a bulk registration writes for a new row (:func:`insert_new_statement`).
INSERT_NEW_COLUMNS: Final = (
    "trigger_id",
    "flow_id",
    "input_json",
    "cron",
    "timezone",
    "overlap",
    "catch_up",
    "max_catch_up",
    "enabled",
    *EXTRA_COLUMNS,
    "registered_at_ms",
    "attention_at_ms",
)
_DECLARED = 9 + len(EXTRA_COLUMNS)


def insert_new_statement(rows: int, param: str, suffix: str = "") -> str:
    """One ``INSERT`` of ``rows`` new trigger rows (revision 1), each with the parameters
    :func:`insert_new_params` gives; ``suffix`` ends it (`` ON CONFLICT DO NOTHING ...``)."""
    values = "(" + ", ".join([param] * _DECLARED) + f", 1, {param}, {param})"
    columns = (
        ", ".join(INSERT_NEW_COLUMNS[:_DECLARED]) + ", revision, registered_at_ms, attention_at_ms"
    )
    return f"INSERT INTO tt_triggers ({columns}) VALUES " + ", ".join([values] * rows) + suffix


def insert_new_params(
    rows: Sequence[tuple[EncodedTrigger, int | None]], registered_at: int
) -> list[object]:
    """The parameters of :func:`insert_new_statement`, row after row."""
    params: list[object] = []
    extend = params.extend
    for trigger, attention_at in rows:
        extend(
            (
                trigger.trigger_id,
                trigger.flow_id,
                trigger.input_json,
                trigger.cron,
                trigger.timezone,
                trigger.overlap,
                trigger.catch_up,
                trigger.max_catch_up,
                trigger.enabled,
                *trigger.extra(),
                registered_at,
                attention_at,
            )
        )
    return params


def upsert_params(trigger: EncodedTrigger, registered_at: int) -> tuple[object, ...]:
    """The parameters of :attr:`TriggerSql.upsert`."""
    return (
        trigger.trigger_id,
        trigger.flow_id,
        trigger.input_json,
        trigger.cron,
        trigger.timezone,
        trigger.overlap,
        trigger.catch_up,
        trigger.max_catch_up,
        trigger.enabled,
        *trigger.extra(),
        registered_at,
    )


def split_state_with_fire(
    row: Sequence[object] | None,
) -> tuple[tuple[object, ...], tuple[object, object, object] | None] | None:
    """A :attr:`TriggerSql.state_with_fire` row as ``StoreTx.state_with_fire`` answers it."""
    if row is None:
        return None
    width = len(STATE_COLUMNS)
    fire = (row[width + 1], row[width + 2], row[width + 3]) if row[width] else None
    return tuple(row[:width]), fire


def history_statement(query: HistoryQuery, fetch: int | None, param: str) -> Statement:
    """``history``'s filtered read after ``query.cursor``, newest first, at most ``fetch``."""
    p = param
    where: list[str] = []
    params: list[object] = []
    if query.trigger_id is not None:
        where.append(f"trigger_id = {p}")
        params.append(query.trigger_id)
    if query.run_id is not None:
        where.append(f"run_id = {p}")
        params.append(query.run_id)
    if query.outcome is not None:
        where.append(f"outcome = {p}")
        params.append(query.outcome)
    if query.cursor is not None:
        where.append(f"(occurrence_at_ms < {p} OR (occurrence_at_ms = {p} AND trigger_id < {p}))")
        params.extend((query.cursor.occurrence, query.cursor.occurrence, query.cursor.trigger_id))
    sql = (
        "SELECT trigger_id, occurrence_at_ms, outcome, run_id, error, manual_key "
        "FROM tt_trigger_fires"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY occurrence_at_ms DESC, trigger_id DESC"
    if fetch is not None:
        sql += f" LIMIT {p}"
        params.append(fetch)
    return sql, tuple(params)
