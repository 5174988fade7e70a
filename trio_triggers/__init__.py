"""trio-triggers: durable cron triggers and fenced run ownership for Trio.

The public API is what this module exports (``__all__``) plus the documented submodules
``trio_triggers.testing``, ``trio_triggers.postgres`` and ``trio_triggers.cli``.
"""

from __future__ import annotations

# --- foundation: errors, clocks, the blocking seam ---------------------------------------
from ._clock import EpochMs, SystemWallClock, TrioWallClock, WallClock
from ._errors import LeaseLost, RunStoreError, TriggerError
from ._executor import Executor, InlineExecutor, ThreadExecutor

# isort: split
# --- declarations, identities, cron, policies (issue 2) ----------------------------------
from ._constants import (
    CANCEL_KEY_PREFIX,
    DEFAULT_CONCURRENCY,
    DEFAULT_HOST,
    DEFAULT_PAGE_SIZE,
    DURATION_BOUNDARIES_MS,
    MAX_OCCURRENCES,
    MAX_PAGE_SIZE,
    MAX_SAFE_INTEGER,
    NEXT_OCCURRENCE_COUNT,
    PRUNE_INTERVAL_MS,
    RESERVATION_LEASE_MS,
    RESERVATION_PREFIX,
)
from ._cron import Cron, host_timezone
from ._declarations import CatchUp, Overlap, RegisteredTrigger, Schedule, Trigger
from ._identities import (
    idempotency_key,
    is_reservation,
    iso,
    reservation_id,
    reservation_occurrence,
)
from ._json import JsonValue
from ._policies import (
    DueOccurrences,
    OverlapDecision,
    catch_up_occurrences,
    due_occurrences,
    next_occurrences,
    overlap_decision,
    pending_after,
)

# isort: split
# --- trigger store (issue 3) -------------------------------------------------------------
from ._store import (
    Claim,
    ClaimAction,
    Fire,
    FireRecord,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    MemoryTriggerStore,
    Outcome,
    PendingClaim,
    Result,
    SchedulerHeartbeat,
    SqliteTriggerStore,
    TriggerStore,
    listed,
    open_sqlite_trigger_store,
)

# isort: split
# --- runners and scheduler (issue 4) -----------------------------------------------------
# --- ownership (issue 5) -----------------------------------------------------------------
# --- local runner (issue 6) --------------------------------------------------------------

__version__ = "0.1.0"

__all__ = [
    "CANCEL_KEY_PREFIX",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_HOST",
    "DEFAULT_PAGE_SIZE",
    "DURATION_BOUNDARIES_MS",
    "MAX_OCCURRENCES",
    "MAX_PAGE_SIZE",
    "MAX_SAFE_INTEGER",
    "NEXT_OCCURRENCE_COUNT",
    "PRUNE_INTERVAL_MS",
    "RESERVATION_LEASE_MS",
    "RESERVATION_PREFIX",
    "CatchUp",
    "Claim",
    "ClaimAction",
    "Cron",
    "DueOccurrences",
    "EpochMs",
    "Executor",
    "Fire",
    "FireRecord",
    "Held",
    "HistoryPage",
    "HistoryQuery",
    "InlineExecutor",
    "JsonValue",
    "LeaseLost",
    "Listed",
    "MemoryTriggerStore",
    "Outcome",
    "Overlap",
    "OverlapDecision",
    "PendingClaim",
    "RegisteredTrigger",
    "Result",
    "RunStoreError",
    "Schedule",
    "SchedulerHeartbeat",
    "SqliteTriggerStore",
    "SystemWallClock",
    "ThreadExecutor",
    "Trigger",
    "TriggerError",
    "TriggerStore",
    "TrioWallClock",
    "WallClock",
    "__version__",
    "catch_up_occurrences",
    "due_occurrences",
    "host_timezone",
    "idempotency_key",
    "is_reservation",
    "iso",
    "listed",
    "next_occurrences",
    "open_sqlite_trigger_store",
    "overlap_decision",
    "pending_after",
    "reservation_id",
    "reservation_occurrence",
]
