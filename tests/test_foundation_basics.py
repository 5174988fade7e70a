"""Errors, clocks and the blocking seam."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from trio_triggers import (
    InlineExecutor,
    LeaseLost,
    RunStoreError,
    SystemWallClock,
    ThreadExecutor,
    TriggerError,
    TrioWallClock,
)


def test_trigger_error_shape() -> None:
    err = TriggerError("unknown_trigger", "unknown trigger t1")
    assert str(err) == "unknown trigger t1"
    assert err.code == "unknown_trigger"
    assert err.path is None
    assert TriggerError("invalid_options", "m", "limit").path == "limit"


def test_run_store_error_text() -> None:
    err = RunStoreError("invalid_run", "steal", "now_ms is more than the skew allowance")
    assert str(err) == "invalid_run: RunStore.steal: now_ms is more than the skew allowance"
    assert (err.code, err.method) == ("invalid_run", "steal")


def test_lease_lost_text() -> None:
    assert str(LeaseLost("r1", "fence_lost")) == "lease lost for run r1: fence_lost"
    lapsed = LeaseLost("r1", "lapsed", 19_000)
    assert str(lapsed) == "lease lost for run r1: lapsed after 19000 ms unconfirmed"
    assert lapsed.unconfirmed_ms == 19_000
    assert LeaseLost("r1", "not_found", 5).unconfirmed_ms is None


async def test_trio_wall_clock_follows_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(1_000_000)
    assert clock.now_ms() == 1_000_000
    await trio.sleep(1.5)
    assert clock.now_ms() == 1_001_500
    autojump_clock.jump(0.0004)
    assert clock.now_ms() == 1_001_500  # floor, never rounds up


def test_system_wall_clock_is_epoch_ms() -> None:
    assert SystemWallClock().now_ms() > 1_700_000_000_000


async def test_inline_executor_runs_on_trio_thread() -> None:
    seen = await InlineExecutor().run(threading.get_ident)
    assert seen == threading.get_ident()


async def test_thread_executor_runs_in_worker() -> None:
    seen = await ThreadExecutor(2).run(threading.get_ident)
    assert seen != threading.get_ident()
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        ThreadExecutor(0)
