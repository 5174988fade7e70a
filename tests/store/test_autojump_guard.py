"""``AutojumpGuardExecutor``: no clock jumps while a worker thread runs a store call."""

from __future__ import annotations

import contextlib
import threading

import trio
import trio.testing

from trio_triggers import InlineExecutor, ThreadExecutor
from trio_triggers.testing import AutojumpGuardExecutor


def _busy(event: threading.Event) -> int:
    # Real work in a thread, long enough for Trio to consider every task blocked.
    event.wait(0.05)
    return 7


async def _jump_during_call(executor: object, clock: trio.testing.MockClock) -> float:
    start = trio.current_time()
    elapsed = -1.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 1000)  # a deadline the clock could jump to
        await trio.lowlevel.checkpoint()
        answer = await executor.run(_busy, threading.Event())  # type: ignore[attr-defined]
        assert answer == 7
        elapsed = trio.current_time() - start
    return elapsed


async def test_unguarded_thread_call_lets_the_clock_jump(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert await _jump_during_call(ThreadExecutor(), autojump_clock) >= 1000


async def test_guard_freezes_autojump_while_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    guard = AutojumpGuardExecutor(ThreadExecutor(limit=2), autojump_clock)
    assert await _jump_during_call(guard, autojump_clock) == 0
    assert autojump_clock.autojump_threshold == 0
    assert guard.in_flight == 0


async def test_guard_counts_concurrent_calls(autojump_clock: trio.testing.MockClock) -> None:
    guard = AutojumpGuardExecutor(ThreadExecutor(limit=2), autojump_clock)
    seen: list[float] = []

    async def call() -> None:
        await guard.run(_busy, threading.Event())
        seen.append(autojump_clock.autojump_threshold)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        nursery.start_soon(call)
    assert sorted(seen) == [0, float("inf")]  # the first finisher leaves the guard up
    assert autojump_clock.autojump_threshold == 0


async def test_guard_restores_after_failure(autojump_clock: trio.testing.MockClock) -> None:
    guard = AutojumpGuardExecutor(InlineExecutor(), autojump_clock)

    def boom() -> None:
        raise RuntimeError("boom")

    with contextlib.suppress(RuntimeError):
        await guard.run(boom)
    assert autojump_clock.autojump_threshold == 0
