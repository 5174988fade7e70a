"""The PostgreSQL DDL of both stores.

The same tables, columns, constraints and migration names as SQLite (``triggers.md`` §9.3,
``ownership.md`` §8), with the documented PostgreSQL differences:

* every instant (``*_ms``), ``occurrence_at_ms``, ``revision``, ``max_catch_up`` and pid column
  is ``BIGINT`` (SQLite's ``INTEGER`` is 64-bit; PostgreSQL's is 32-bit);
* ``trigger_id`` and ``host`` are ``COLLATE "C"`` so ``ORDER BY`` is by code point, like SQLite's
  ``BINARY`` and Python's ``str`` comparison (UTF-8 byte order is code point order);
* no ``typeof(...)`` terms (a ``BIGINT`` column cannot hold anything else) and no
  ``json_valid(...)`` terms (PostgreSQL 15 has no validity predicate for ``TEXT``; the stores
  check JSON before writing and again when decoding). JSON stays ``TEXT``, never ``jsonb``, so it
  reads back byte for byte;
* ``UNIQUE (idempotency_key)`` treats NULLs as distinct (the PostgreSQL 15 default), which gives
  "unique when present".

The trigger DDL is plain (no ``IF NOT EXISTS``): a migration that meets an existing table fails
and opening reports ``could not run trigger migrations``.
"""

from __future__ import annotations

from .._migrations import (
    Migration,
    Shape,
    owns_run_migration,
    owns_trigger_migration,
    schema_shapes,
)
from .._ownership._backend import first_table_columns
from .._ownership._sqlite_store import RUN_MIGRATIONS as _SQLITE_RUN_MIGRATIONS
from .._store._backend import MISSED_COLUMNS, UNKNOWN
from .._store._sqlite_store import TRIGGER_MIGRATIONS as _SQLITE_TRIGGER_MIGRATIONS

__all__ = [
    "RUN_MIGRATIONS",
    "RUN_SHAPES",
    "TRIGGER_MIGRATIONS",
    "TRIGGER_SHAPES",
    "owns_run_migration",
    "owns_trigger_migration",
]

_OUTCOMES = "'launched', 'completed', 'skipped', 'buffered', 'superseded', 'failed'"

TRIGGER_MIGRATIONS: list[Migration] = [
    (
        "0001_triggers",
        [
            """
            CREATE TABLE tt_triggers (
                trigger_id       TEXT COLLATE "C" NOT NULL PRIMARY KEY,
                flow_id          TEXT NOT NULL,
                input_json       TEXT NOT NULL,
                cron             TEXT NOT NULL,
                timezone         TEXT,
                overlap          TEXT NOT NULL
                    CHECK (overlap IN ('skip', 'buffer-one', 'supersede')),
                catch_up         TEXT NOT NULL CHECK (catch_up IN ('none', 'one', 'all')),
                max_catch_up     BIGINT NOT NULL CHECK (max_catch_up >= 0),
                enabled          INTEGER NOT NULL CHECK (enabled IN (0, 1)),
                revision         BIGINT NOT NULL,
                last_fired_at_ms BIGINT,
                pending_at_ms    BIGINT,
                active_run_id    TEXT
            )
            """,
            f"""
            CREATE TABLE tt_trigger_fires (
                trigger_id       TEXT COLLATE "C" NOT NULL REFERENCES tt_triggers (trigger_id),
                occurrence_at_ms BIGINT NOT NULL,
                outcome          TEXT CHECK (outcome IS NULL OR outcome IN ({_OUTCOMES})),
                run_id           TEXT,
                error            TEXT,
                PRIMARY KEY (trigger_id, occurrence_at_ms)
            )
            """,
        ],
    ),
    (
        "0002_reservation_lease",
        ["ALTER TABLE tt_triggers ADD COLUMN active_claimed_at_ms BIGINT"],
    ),
    (
        "0003_heartbeat",
        [
            """
            CREATE TABLE tt_scheduler_heartbeats (
                host         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
                ticked_at_ms BIGINT NOT NULL
            )
            """
        ],
    ),
    (
        "0004_fire_run_index",
        ["CREATE INDEX tt_trigger_fires_run_id ON tt_trigger_fires (run_id)"],
    ),
    (
        "0005_attention",
        [
            "ALTER TABLE tt_triggers ADD COLUMN registered_at_ms BIGINT",
            # Rows from before the index are due at once; the first due read computes them.
            f"ALTER TABLE tt_triggers ADD COLUMN attention_at_ms BIGINT DEFAULT {UNKNOWN}",
            "CREATE INDEX tt_triggers_attention ON tt_triggers (attention_at_ms, trigger_id) "
            "WHERE attention_at_ms IS NOT NULL",
            "CREATE INDEX tt_triggers_holding ON tt_triggers (trigger_id) "
            "WHERE active_run_id IS NOT NULL",
        ],
    ),
    (
        "0006_operator_state",
        [
            "ALTER TABLE tt_triggers ADD COLUMN paused_at_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN pause_note TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN paused_by TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN resume_after_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN removed_at_ms BIGINT",
        ],
    ),
    (
        "0007_missed_counts",
        [
            f"ALTER TABLE tt_triggers ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0"
            for column in MISSED_COLUMNS
        ],
    ),
    (
        "0008_backfills",
        [
            # A trigger's latest backfill (docs/operations.md, "Backfill"): at most one runs.
            "ALTER TABLE tt_triggers ADD COLUMN backfill_start_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_end_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_next_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_total BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_done BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_bound BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_overlap TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_state TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_created_at_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_by TEXT",
        ],
    ),
    (
        "0009_manual_fires",
        [
            # As on SQLite: a manual fire's key (unique in the store), its run's input, who.
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_key TEXT",
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_input_json TEXT",
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_by TEXT",
            "CREATE UNIQUE INDEX tt_trigger_fires_manual_key ON tt_trigger_fires (manual_key) "
            "WHERE manual_key IS NOT NULL",
        ],
    ),
    (
        "0010_trigger_failure_fields",
        [
            # As on SQLite: jitter, the window and pausing after failures.
            "ALTER TABLE tt_triggers ADD COLUMN jitter_ms BIGINT NOT NULL DEFAULT 0 "
            "CHECK (jitter_ms >= 0)",
            "ALTER TABLE tt_triggers ADD COLUMN start_at_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN end_at_ms BIGINT",
            "ALTER TABLE tt_triggers ADD COLUMN pause_after_failures BIGINT "
            "CHECK (pause_after_failures IS NULL OR pause_after_failures >= 1)",
            "ALTER TABLE tt_triggers ADD COLUMN consecutive_failures BIGINT NOT NULL DEFAULT 0",
        ],
    ),
]


_MAX_SAFE = "9007199254740991"


def _instant(column: str, *, nullable: bool = True) -> str:
    bound = f"{column} BETWEEN 0 AND {_MAX_SAFE}"
    return f"{column} IS NULL OR ({bound})" if nullable else bound


RUN_MIGRATIONS: list[Migration] = [
    (
        "runs_0001_tt_runs",
        [
            f"""
            CREATE TABLE IF NOT EXISTS tt_runs (
{first_table_columns("BIGINT")},

                CONSTRAINT tt_runs_run_id CHECK (length(run_id) > 0),
                CONSTRAINT tt_runs_status CHECK (status IN
                    ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')),

                CONSTRAINT tt_runs_created_at CHECK ({_instant("created_at_ms", nullable=False)}),
                CONSTRAINT tt_runs_started_at CHECK ({_instant("started_at_ms")}),
                CONSTRAINT tt_runs_finished_at CHECK ({_instant("finished_at_ms")}),
                CONSTRAINT tt_runs_heartbeat_at CHECK ({_instant("heartbeat_at_ms")}),
                CONSTRAINT tt_runs_claimed_at CHECK ({_instant("claimed_at_ms")}),
                CONSTRAINT tt_runs_cancel_requested_at CHECK ({_instant("cancel_requested_at_ms")}),

                CONSTRAINT tt_runs_owner CHECK (
                    (status = 'running'
                        AND owner_host_id IS NOT NULL AND length(owner_host_id) > 0
                        AND owner_pid IS NOT NULL AND owner_pid BETWEEN 0 AND {_MAX_SAFE}
                        AND owner_nonce IS NOT NULL AND length(owner_nonce) > 0
                        AND heartbeat_at_ms IS NOT NULL)
                    OR
                    (status <> 'running'
                        AND owner_host_id IS NULL AND owner_pid IS NULL AND owner_nonce IS NULL
                        AND heartbeat_at_ms IS NULL)),
                CONSTRAINT tt_runs_claim CHECK (
                    (claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL
                        AND claimed_at_ms IS NULL)
                    OR
                    (claim_host_id IS NOT NULL AND length(claim_host_id) > 0
                        AND claim_pid IS NOT NULL AND claim_pid BETWEEN 0 AND {_MAX_SAFE}
                        AND claim_nonce IS NOT NULL AND length(claim_nonce) > 0
                        AND claimed_at_ms IS NOT NULL
                        AND status IN ('pending', 'suspended', 'running'))),
                CONSTRAINT tt_runs_finished CHECK ((finished_at_ms IS NOT NULL)
                    = (status IN ('completed', 'failed', 'cancelled'))),
                CONSTRAINT tt_runs_started CHECK ((started_at_ms IS NULL) = (status = 'pending')),

                CONSTRAINT tt_runs_cancel_ack CHECK (cancel_acknowledgement_json IS NULL
                    OR cancel_requested_at_ms IS NOT NULL),

                CONSTRAINT tt_runs_flow_id CHECK (flow_id IS NULL OR length(flow_id) > 0),
                CONSTRAINT tt_runs_result_json CHECK (result_json IS NULL
                    OR status = 'completed'),
                CONSTRAINT tt_runs_error CHECK (error IS NULL OR status IN ('failed', 'cancelled')),
                CONSTRAINT tt_runs_idempotency_key CHECK (idempotency_key IS NULL
                    OR length(idempotency_key) > 0)
            )
            """,
            """
            CREATE INDEX IF NOT EXISTS tt_runs_cancel_requested
                ON tt_runs (cancel_requested_at_ms) WHERE cancel_requested_at_ms IS NOT NULL
            """,
            # The local runner's listing index (list_runs / find_claimable), as on SQLite.
            "CREATE INDEX IF NOT EXISTS tt_runs_status_created ON tt_runs "
            '(status, created_at_ms, run_id COLLATE "C")',
        ],
    ),
    (
        # Our addition, as on SQLite: how many times an owner began executing the run.
        "runs_0002_attempts",
        [
            "ALTER TABLE tt_runs ADD COLUMN IF NOT EXISTS attempts BIGINT NOT NULL DEFAULT 0 "
            "CONSTRAINT tt_runs_attempts CHECK (attempts >= 0)",
        ],
    ),
    (
        # Our addition, as on SQLite: what a flow printed, kept with its outcome.
        "runs_0003_output",
        [
            "ALTER TABLE tt_runs ADD COLUMN IF NOT EXISTS output_json TEXT "
            "CONSTRAINT tt_runs_output_json CHECK (output_json IS NULL "
            "OR status IN ('completed', 'failed', 'cancelled'))",
        ],
    ),
    (
        # Our addition, as on SQLite: a run waiting between two attempts, and its failed ones.
        "runs_0004_retries",
        [
            "ALTER TABLE tt_runs ADD COLUMN IF NOT EXISTS retry_at_ms BIGINT "
            "CONSTRAINT tt_runs_retry_at_ms CHECK (retry_at_ms IS NULL OR status = 'suspended')",
            "ALTER TABLE tt_runs ADD COLUMN IF NOT EXISTS attempt_log_json TEXT",
        ],
    ),
]


# What each prefix of the migrations above makes, checked before anything is written. The
# SQLite migrations make the same tables and column names (tests/postgres/test_schema.py holds
# the two to it), and their replay in memory is the one statement of that shape.
TRIGGER_SHAPES: tuple[Shape, ...] = schema_shapes(_SQLITE_TRIGGER_MIGRATIONS)
RUN_SHAPES: tuple[Shape, ...] = schema_shapes(_SQLITE_RUN_MIGRATIONS)
