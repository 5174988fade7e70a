"""The trigger store: models, protocol, the shared pure decisions, memory and SQLite stores."""

from __future__ import annotations

from . import _models
from ._memory import MemoryTriggerStore
from ._models import *  # noqa: F403 - the models are re-exported whole (their __all__ is the list)
from ._protocol import TriggerStore
from ._sqlite_store import SqliteTriggerStore, open_sqlite_trigger_store

__all__ = [
    "MemoryTriggerStore",
    "SqliteTriggerStore",
    "TriggerStore",
    "open_sqlite_trigger_store",
]
__all__ += _models.__all__
