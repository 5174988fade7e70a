"""``heartbeat_loop`` under ``MockClock`` (``ownership.md`` §11, invariants 18-23)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from trio_triggers import LeaseLost, RunStoreError, TrioWallClock
from trio_triggers._ownership import FenceLost, Updated, heartbeat_loop

from .helpers import A
from .scripted import (
    Answer,
    ScriptedStore,
    failing,
    fence_lost,
    hanging,
    not_found,
    updated,
)

LOGGER = "trio_triggers.ownership"


class Recorded:
    def __init__(self, wall: TrioWallClock) -> None:
        self.wall = wall
        self.lapses: list[tuple[int, int]] = []  # (unconfirmed, at)
        self.receipts: list[tuple[int, int]] = []

    async def on_lapse(self, unconfirmed: int) -> None:
        self.lapses.append((unconfirmed, self.wall.now_ms()))

    async def on_reconfirm(self, unconfirmed: int) -> None:
        self.receipts.append((unconfirmed, self.wall.now_ms()))


async def run_loop(
    store: ScriptedStore, wall: TrioWallClock, rec: Recorded | None = None, **kw: Any
) -> tuple[LeaseLost, int]:
    callbacks: dict[str, Any] = {}
    if rec is not None:
        callbacks = {"on_lapse": rec.on_lapse, "on_reconfirm": rec.on_reconfirm}
    callbacks.update(kw)
    with pytest.raises(LeaseLost) as info:
        await heartbeat_loop(store.as_store, "r", A, clock=wall, **callbacks)
    return info.value, wall.now_ms()


def warnings(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == message]


async def test_steady_pulses(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall)
    with trio.move_on_after(5.5):
        await heartbeat_loop(store.as_store, "r", A, clock=wall)
    assert store.heartbeats == [1_000, 2_000, 3_000, 4_000, 5_000]
    assert store.reconfirms == []


async def test_all_writes_fail_lapses_at_exactly_19s(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=failing, reconfirm=fence_lost)
    rec = Recorded(wall)
    lost, at = await run_loop(store, wall, rec)
    assert (lost.reason, lost.unconfirmed_ms, lost.run_id, at) == ("lapsed", 19_000, "r", 19_000)
    assert str(lost) == "lease lost for run r: lapsed after 19000 ms unconfirmed"
    assert store.reconfirms == [19_000]
    assert store.heartbeats == list(range(1_000, 19_000, 1_000))  # alive through 18 999
    assert rec.lapses == [(19_000, 19_000)]
    failed = warnings(caplog, "run heartbeat write failed")
    assert len(failed) == 1
    assert (failed[0].run_id, failed[0].code) == ("r", "persistence_failed")  # type: ignore[attr-defined]
    lapsed = warnings(caplog, "run lease lapsed; interrupting owned work")
    assert len(lapsed) == 1
    assert (lapsed[0].run_id, lapsed[0].unconfirmed_ms) == ("r", 19_000)  # type: ignore[attr-defined]


async def test_one_success_rearms_a_full_window(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def only_18000(now: int) -> Answer:
        return await (updated(now) if now == 18_000 else failing(now))

    store = ScriptedStore(wall, heartbeat=only_18000)
    rec = Recorded(wall)
    lost, at = await run_loop(store, wall, rec)
    assert store.reconfirms == [37_000]
    assert (at, lost.unconfirmed_ms, rec.lapses) == (37_000, 19_000, [(19_000, 37_000)])
    assert max(store.heartbeats) == 36_000


async def test_rearming_uses_the_stamp_sent(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def slow_first(now: int) -> Answer:
        if now == 1_000:
            await trio.sleep(5)  # completes at 6 000
            return Updated()
        await trio.sleep_forever()

    store = ScriptedStore(wall, heartbeat=slow_first)
    rec = Recorded(wall)
    _lost, at = await run_loop(store, wall, rec)
    assert (at, rec.lapses, store.reconfirms) == (20_000, [(19_000, 20_000)], [20_000])


async def test_a_stalled_write_does_not_delay_the_lapse(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=not_found)
    rec = Recorded(wall)
    lost, at = await run_loop(store, wall, rec)
    assert (lost.reason, at, store.heartbeats, store.reconfirms) == (
        "lapsed",
        19_000,
        [1_000],
        [19_000],
    )
    assert store.cancelled_heartbeats == 1  # the pending heartbeat was cancelled


@pytest.mark.parametrize("succeed", [True, False])
async def test_a_write_that_sleeps_35s_is_bounded(
    autojump_clock: trio.testing.MockClock, succeed: bool
) -> None:
    wall = TrioWallClock(0)

    async def very_slow(now: int) -> Answer:
        await trio.sleep(35)
        return await (updated(now) if succeed else failing(now))

    store = ScriptedStore(wall, heartbeat=very_slow)
    lost, at = await run_loop(store, wall)
    assert (lost.reason, at, store.reconfirms) == ("lapsed", 19_000, [19_000])


async def test_reconfirm_keeps_an_untouched_lease(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=updated)
    rec = Recorded(wall)
    with trio.move_on_after(60):
        await heartbeat_loop(store.as_store, "r", A, clock=wall, on_reconfirm=rec.on_reconfirm)
    assert rec.receipts == [(19_000, 19_000), (19_000, 38_000), (19_000, 57_000)]
    assert store.reconfirms == [19_000, 38_000, 57_000]


async def test_a_delayed_receipt_within_budget(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def slowish(now: int) -> Answer:
        await trio.sleep(0.5)
        return Updated()

    async def slow_receipt(unconfirmed: int) -> None:
        receipts.append(unconfirmed)
        await trio.sleep(1.001)

    receipts: list[int] = []
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=slowish)
    with trio.move_on_after(30):
        await heartbeat_loop(store.as_store, "r", A, clock=wall, on_reconfirm=slow_receipt)
    assert receipts == [19_000]


async def test_a_stalled_receipt_lapses_when_the_renewed_budget_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)

    async def late(now: int) -> Answer:
        await trio.sleep(0.999)
        return Updated()

    async def never(unconfirmed: int) -> None:
        await trio.sleep_forever()

    rec = Recorded(wall)
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=late)
    with pytest.raises(LeaseLost) as info:
        await heartbeat_loop(
            store.as_store, "r", A, clock=wall, on_reconfirm=never, on_lapse=rec.on_lapse
        )
    assert (wall.now_ms(), info.value.unconfirmed_ms, rec.lapses) == (
        38_000,
        19_000,
        [(19_000, 38_000)],
    )


async def test_a_late_reconfirm_result_lapses(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def host_stall(now: int) -> Answer:
        autojump_clock.jump(19)  # the host stalls during the call: no checkpoint, no timeout
        return Updated()

    rec = Recorded(wall)
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=host_stall)
    lost, at = await run_loop(store, wall, rec)
    assert (at, lost.unconfirmed_ms, rec.receipts, rec.lapses) == (
        38_000,
        19_000,
        [],
        [(19_000, 38_000)],
    )


async def test_reconfirm_error_is_the_cause(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def broken(now: int) -> Answer:
        raise RunStoreError("persistence_failed", "reconfirm", "down")

    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=broken)
    lost, at = await run_loop(store, wall)
    assert at == 19_000
    assert isinstance(lost.__cause__, RunStoreError)


async def test_a_failing_receipt_lapses_with_its_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)

    async def bad_receipt(unconfirmed: int) -> None:
        raise ValueError("audit down")

    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=updated)
    lost, at = await run_loop(store, wall, on_reconfirm=bad_receipt)
    assert (at, lost.reason, type(lost.__cause__)) == (19_000, "lapsed", ValueError)


@pytest.mark.parametrize(
    ("answer", "reason"), [(fence_lost, "fence_lost"), (not_found, "not_found")]
)
@pytest.mark.parametrize("pulse", [1_000, 2_000])
async def test_a_lost_fence_raises_at_once(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    answer: Any,
    reason: str,
    pulse: int,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    wall = TrioWallClock(0)

    async def script(now: int) -> Answer:
        return await (answer(now) if now == pulse else updated(now))

    rec = Recorded(wall)
    store = ScriptedStore(wall, heartbeat=script, reconfirm=updated)
    lost, at = await run_loop(store, wall, rec)
    assert (lost.reason, lost.unconfirmed_ms, at) == (reason, None, pulse)
    assert str(lost) == f"lease lost for run r: {reason}"
    assert (rec.lapses, store.reconfirms, caplog.records) == ([], [], [])


async def test_shared_recorder_holds_only_the_lapsing_loop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    rec = Recorded(wall)
    lapsing = ScriptedStore(wall, heartbeat=failing, reconfirm=fence_lost)
    fencing = ScriptedStore(wall, heartbeat=fence_lost)
    reasons: list[str] = []

    async def one(store: ScriptedStore) -> None:
        lost, _ = await run_loop(store, wall, rec)
        reasons.append(lost.reason)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, lapsing)
        nursery.start_soon(one, fencing)
    assert sorted(reasons) == ["fence_lost", "lapsed"]
    assert rec.lapses == [(19_000, 19_000)]


async def test_warning_once_per_outage(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    wall = TrioWallClock(0)
    fail_at = {1_000, 2_000, 3_000, 5_000, 6_000}

    async def script(now: int) -> Answer:
        return await (failing(now) if now in fail_at else updated(now))

    store = ScriptedStore(wall, heartbeat=script)
    with trio.move_on_after(7.5):
        await heartbeat_loop(store.as_store, "r", A, clock=wall)
    assert len(warnings(caplog, "run heartbeat write failed")) == 2  # at 1 000 and at 5 000


async def test_on_lapse_error_is_logged_and_lease_lost_still_raised(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    wall = TrioWallClock(0)

    async def bad_lapse(unconfirmed: int) -> None:
        raise RuntimeError("notify failed")

    store = ScriptedStore(wall, heartbeat=failing, reconfirm=fence_lost)
    lost, _ = await run_loop(store, wall, on_lapse=bad_lapse)
    assert lost.reason == "lapsed"
    errors = warnings(caplog, "run lease lapse callback failed")
    assert len(errors) == 1
    assert errors[0].levelno == logging.ERROR
    assert errors[0].exc_info


async def test_a_defect_propagates_as_itself(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def defect(now: int) -> Answer:
        raise ZeroDivisionError("bug")

    store = ScriptedStore(wall, heartbeat=defect)
    rec = Recorded(wall)
    with pytest.raises(ZeroDivisionError):
        await heartbeat_loop(store.as_store, "r", A, clock=wall, on_lapse=rec.on_lapse)
    assert rec.lapses == []


async def test_outer_cancellation_is_one_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def slow_reconfirm(now: int) -> Answer:
        await trio.sleep(0.5)
        return FenceLost()

    store = ScriptedStore(wall, heartbeat=failing, reconfirm=slow_reconfirm)
    rec = Recorded(wall)
    with trio.CancelScope() as scope:
        scope.deadline = trio.current_time() + 19.2  # while reconfirm is pending
        await heartbeat_loop(store.as_store, "r", A, clock=wall, on_lapse=rec.on_lapse)
    assert scope.cancelled_caught
    assert (store.reconfirms, rec.lapses) == ([19_000], [])


async def test_invalid_arguments_fail_at_once() -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall)
    with pytest.raises(RunStoreError) as info:
        await heartbeat_loop(store.as_store, "", A, clock=wall)
    assert (info.value.code, info.value.method) == ("invalid_run", "heartbeat_loop")
    with pytest.raises(RunStoreError):
        await heartbeat_loop(store.as_store, "r", {"host_id": "h"}, clock=wall)  # type: ignore[arg-type]
    assert store.heartbeats == []


# --- host stalls: single clock jumps, no autojump ---------------------------------------------


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


@pytest.mark.parametrize(
    ("jump", "beats", "unconfirmed"),
    [(18.999, [18_999], None), (19.0, [], 19_000), (20.0, [], 20_000)],
)
async def test_host_stall_single_jump(
    mock_clock: trio.testing.MockClock, jump: float, beats: list[int], unconfirmed: int | None
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=updated, reconfirm=fence_lost)
    rec = Recorded(wall)
    outcome: list[LeaseLost] = []

    async def loop() -> None:
        lost, _ = await run_loop(store, wall, rec)
        outcome.append(lost)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop)
        await settle()
        mock_clock.jump(jump)
        await settle()
        assert store.heartbeats == beats
        if unconfirmed is None:
            assert (store.reconfirms, outcome) == ([], [])
            nursery.cancel_scope.cancel()
    if unconfirmed is not None:
        assert store.reconfirms == [unconfirmed]
        assert [lost.unconfirmed_ms for lost in outcome] == [unconfirmed]
        assert rec.lapses == [(unconfirmed, unconfirmed)]


@pytest.mark.parametrize("release", ["updated", "fence_lost"])
async def test_host_stall_one_blocked_reconfirm(
    mock_clock: trio.testing.MockClock, release: str
) -> None:
    wall = TrioWallClock(0)
    gate = trio.Event()

    async def blocked(now: int) -> Answer:
        await gate.wait()
        return Updated() if release == "updated" else FenceLost()

    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=blocked)
    rec = Recorded(wall)
    outcome: list[LeaseLost] = []

    async def loop() -> None:
        with pytest.raises(LeaseLost) as info:
            await heartbeat_loop(
                store.as_store,
                "r",
                A,
                clock=wall,
                on_lapse=rec.on_lapse,
                on_reconfirm=rec.on_reconfirm,
            )
        outcome.append(info.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop)
        await settle()
        mock_clock.jump(19.0)
        await settle()
        assert store.reconfirms == [19_000]  # both tasks are due; exactly one call
        gate.set()
        await settle()
        if release == "updated":
            assert (rec.receipts, rec.lapses, store.reconfirms) == (
                [(19_000, 19_000)],
                [],
                [19_000],
            )
            nursery.cancel_scope.cancel()
    if release == "fence_lost":
        assert rec.lapses == [(19_000, 19_000)]
        assert store.reconfirms == [19_000]
        assert [lost.reason for lost in outcome] == ["lapsed"]


async def test_outer_cancel_leaves_as_a_bare_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=hanging, reconfirm=hanging)
    seen: list[type[BaseException]] = []
    with trio.move_on_after(19.5):  # both tasks are blocked in store calls
        try:
            await heartbeat_loop(store.as_store, "r", A, clock=wall)
        except BaseException as exc:
            seen.append(type(exc))
            raise
    assert seen == [trio.Cancelled]
