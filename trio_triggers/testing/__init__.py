"""Testing support for trio-triggers (``triggers.md`` §19).

Each helper lives in its own private module; this package only re-exports them.
"""

from __future__ import annotations

# --- executors for deterministic tests under MockClock (store area) -----------------------
from ._autojump import AutojumpGuardExecutor

__all__ = [
    "AutojumpGuardExecutor",
]
