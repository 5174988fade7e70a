"""Wall clocks.

Every wall-clock reading in the library goes through a :class:`WallClock`. Only
:class:`SystemWallClock` reads the operating system's clock; :class:`TrioWallClock` derives wall
time from ``trio.current_time()`` so that ``trio.testing.MockClock`` simulates it completely.
"""

from __future__ import annotations

import math
import time
from typing import Protocol, final, runtime_checkable

import trio

__all__ = ["EpochMs", "SystemWallClock", "TrioWallClock", "WallClock"]

EpochMs = int
"""An instant: integer epoch milliseconds, UTC."""


@runtime_checkable
class WallClock(Protocol):
    """Something that tells the wall time as epoch milliseconds."""

    def now_ms(self) -> int: ...


@final
class SystemWallClock:
    """The operating system's wall clock (the only code that reads it)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemWallClock()"


@final
class TrioWallClock:
    """``epoch_ms + floor((trio.current_time() - t0) * 1000)``.

    ``t0`` is Trio's clock when the object is created, so it must be created inside
    ``trio.run``. Under ``trio.testing.MockClock`` the wall time is fully simulated.
    """

    __slots__ = ("_epoch_ms", "_t0")

    def __init__(self, epoch_ms: int) -> None:
        if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int):
            raise TypeError("epoch_ms must be an int")
        self._epoch_ms = epoch_ms
        self._t0 = trio.current_time()

    @property
    def epoch_ms(self) -> int:
        return self._epoch_ms

    def now_ms(self) -> int:
        return self._epoch_ms + math.floor((trio.current_time() - self._t0) * 1000)

    def __repr__(self) -> str:
        return f"TrioWallClock(epoch_ms={self._epoch_ms})"
