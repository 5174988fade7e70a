"""Keeping thread-backed stores deterministic under ``trio.testing.MockClock``.

Under ``MockClock(autojump_threshold=0)`` a task waiting for a worker thread counts as blocked,
so Trio jumps the clock to the next deadline while the thread runs (trio issue #456): a
``TrioWallClock`` then reads a time that depends on how fast the thread was. Wrapping the
store's executor in :class:`AutojumpGuardExecutor` switches autojumping off
(``autojump_threshold = math.inf``) while any call is in flight and restores the previous
threshold when the last one returns, so simulated time only moves when every task is really
idle.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple, final

if TYPE_CHECKING:
    from collections.abc import Callable

    import trio.testing

    from .._executor import Executor

__all__ = ["AutojumpGuardExecutor"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class AutojumpGuardExecutor:
    """An :class:`~trio_triggers.Executor` that pauses ``clock``'s autojump during calls.

    ``AutojumpGuardExecutor(ThreadExecutor(), mock_clock)`` behaves like the thread executor,
    except that the mock clock cannot jump while a call runs. Concurrent calls are counted: the
    threshold is restored only when the last in-flight call has finished.
    """

    def __init__(self, inner: Executor, clock: trio.testing.MockClock) -> None:
        self._inner = inner
        self._clock = clock
        self._in_flight = 0
        self._saved = clock.autojump_threshold

    @property
    def inner(self) -> Executor:
        return self._inner

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        if self._in_flight == 0:
            self._saved = self._clock.autojump_threshold
            self._clock.autojump_threshold = math.inf
        self._in_flight += 1
        try:
            return await self._inner.run(fn, *args)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._clock.autojump_threshold = self._saved

    def __repr__(self) -> str:
        return f"AutojumpGuardExecutor({self._inner!r})"
