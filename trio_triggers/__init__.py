"""trio-triggers: durable cron triggers and fenced run ownership for Trio.

The public API is what this module exports (``__all__``) plus the documented submodules
``trio_triggers.testing``, ``trio_triggers.postgres`` and ``trio_triggers.cli``.
"""

from __future__ import annotations

# --- foundation: errors, clocks, the blocking seam ---------------------------------------
from ._clock import EpochMs, SystemWallClock, TrioWallClock, WallClock
from ._errors import LeaseLost, RunStoreError, TriggerError
from ._executor import Executor, InlineExecutor, ThreadExecutor

# --- declarations, identities, cron, policies (issue 2) ----------------------------------
# --- trigger store (issue 3) -------------------------------------------------------------
# --- runners and scheduler (issue 4) -----------------------------------------------------
# --- ownership (issue 5) -----------------------------------------------------------------
# --- local runner (issue 6) --------------------------------------------------------------

__version__ = "0.1.0"

__all__ = [
    "EpochMs",
    "Executor",
    "InlineExecutor",
    "LeaseLost",
    "RunStoreError",
    "SystemWallClock",
    "ThreadExecutor",
    "TriggerError",
    "TrioWallClock",
    "WallClock",
    "__version__",
]
