"""The trigger store: models, protocol, the shared pure decisions, memory and SQLite stores."""

from __future__ import annotations

from ._memory import MemoryTriggerStore
from ._models import (
    OUTCOMES,
    SETTLED_OUTCOMES,
    TERMINAL_OUTCOMES,
    Claim,
    ClaimAction,
    Fire,
    FireRecord,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    Outcome,
    PendingClaim,
    Result,
    SchedulerHeartbeat,
    is_unfinished,
    listed,
)
from ._protocol import TriggerStore
from ._sqlite_store import SqliteTriggerStore, open_sqlite_trigger_store

__all__ = [
    "OUTCOMES",
    "SETTLED_OUTCOMES",
    "TERMINAL_OUTCOMES",
    "Claim",
    "ClaimAction",
    "Fire",
    "FireRecord",
    "Held",
    "HistoryPage",
    "HistoryQuery",
    "Listed",
    "MemoryTriggerStore",
    "Outcome",
    "PendingClaim",
    "Result",
    "SchedulerHeartbeat",
    "SqliteTriggerStore",
    "TriggerStore",
    "is_unfinished",
    "listed",
    "open_sqlite_trigger_store",
]
