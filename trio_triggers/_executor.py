"""The blocking seam: how stores run their database work.

An executor has one method, ``async run(fn, *args)``. The inline executor calls ``fn`` on the
Trio thread after a checkpoint (deterministic under ``MockClock``); the thread executor runs it
in a worker thread under a :class:`trio.CapacityLimiter`. A thread that holds a transaction is
never abandoned (``abandon_on_cancel=False``): bound the work server-side instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar, TypeVarTuple, final

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Executor", "ExecutorResource", "InlineExecutor", "ThreadExecutor"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Executor(Protocol):
    """Runs one blocking callable for a store."""

    async def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T: ...


@final
class InlineExecutor:
    """Run ``fn`` on the Trio thread after a checkpoint."""

    async def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        await trio.lowlevel.checkpoint()
        return fn(*args)

    def __repr__(self) -> str:
        return "InlineExecutor()"


@final
class ThreadExecutor:
    """Run ``fn`` in a worker thread, at most ``limit`` at a time.

    Cancellation waits for the thread to finish: a thread holding a transaction is never
    abandoned.
    """

    def __init__(self, limit: int | trio.CapacityLimiter = 1) -> None:
        if isinstance(limit, trio.CapacityLimiter):
            self._limiter = limit
        else:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError("limit must be a positive integer")
            self._limiter = trio.CapacityLimiter(limit)

    @property
    def limiter(self) -> trio.CapacityLimiter:
        return self._limiter

    async def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def __repr__(self) -> str:
        return f"ThreadExecutor(limit={self._limiter.total_tokens})"


class ExecutorResource:
    """What every database object of the stores shares, whatever its driver (SQLite's one
    connection, PostgreSQL's pool): the executor its blocking calls run on, and whether it has
    been closed (``aclose`` closes it once; a closed one refuses calls)."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._closed = False

    @property
    def executor(self) -> Executor:
        return self._executor

    @property
    def closed(self) -> bool:
        return self._closed
