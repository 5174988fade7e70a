"""The trigger store: models, protocol, the shared pure decisions, memory and SQLite stores."""

from __future__ import annotations

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
    "Outcome",
    "PendingClaim",
    "Result",
    "SchedulerHeartbeat",
    "TriggerStore",
    "is_unfinished",
    "listed",
]
