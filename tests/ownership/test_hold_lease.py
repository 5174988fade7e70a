"""``hold_lease`` (``ownership.md`` §12, invariant 24) and the loop against a real store."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_triggers import LeaseLost, RunStoreError, TrioWallClock
from trio_triggers._ownership import (
    Activated,
    Claimed,
    FenceLost,
    LivenessEvidence,
    MemoryRunStore,
    NotFound,
    RunStore,
    Transitioned,
    Updated,
    hold_lease,
)
from trio_triggers._ownership._lease import pulse_interval_ms, work_limit_ms

from .helpers import A, C, created
from .scripted import Answer, ScriptedStore, failing, fence_lost, hanging


class Boom(Exception):
    pass


async def test_body_returns_normally(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall)
    lapses: list[int] = []

    async def on_lapse(unconfirmed: int) -> None:
        lapses.append(unconfirmed)

    async with hold_lease(store.as_store, "r", A, clock=wall, on_lapse=on_lapse) as lease:
        assert (lease.run_id, lease.owner, lease.last_confirmed_ms) == ("r", A, 0)
        await trio.sleep(3.5)
        assert lease.last_confirmed_ms == 3_000
    assert store.heartbeats == [1_000, 2_000, 3_000]
    await trio.sleep(5)
    assert store.heartbeats == [1_000, 2_000, 3_000]  # the loop stopped with the body
    assert lapses == []


async def test_lapse_cancels_the_body_and_raises(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=failing, reconfirm=fence_lost)
    cancelled_at: list[int] = []
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(store.as_store, "r", A, clock=wall):
            try:
                await trio.sleep(100)
            except trio.Cancelled:
                cancelled_at.append(wall.now_ms())
                raise
    assert (info.value.reason, info.value.unconfirmed_ms) == ("lapsed", 19_000)
    assert cancelled_at == [19_000]


async def test_body_error_while_unwinding_becomes_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=fence_lost)
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(store.as_store, "r", A, clock=wall):
            try:
                await trio.sleep(100)
            finally:
                raise Boom("cleanup failed")
    assert info.value.reason == "fence_lost"
    assert isinstance(info.value.__context__, Boom)


async def test_body_error_propagates_as_itself(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=hanging)
    with pytest.raises(Boom) as info:
        async with hold_lease(store.as_store, "r", A, clock=wall):
            await trio.sleep(1.5)  # a heartbeat is pending inside the loop
            raise Boom("work failed")
    assert not isinstance(info.value, BaseExceptionGroup)
    assert store.cancelled_heartbeats == 1


async def test_loop_defect_propagates_as_itself(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)

    async def defect(now: int) -> Answer:
        raise KeyError("bug")

    store = ScriptedStore(wall, heartbeat=defect)
    with pytest.raises(KeyError):
        async with hold_lease(store.as_store, "r", A, clock=wall):
            await trio.sleep(100)


async def test_outer_cancel_scope_still_works(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=failing, reconfirm=fence_lost)
    lapses: list[int] = []

    async def on_lapse(unconfirmed: int) -> None:
        lapses.append(unconfirmed)

    reached = False
    with trio.move_on_after(5) as scope:
        async with hold_lease(store.as_store, "r", A, clock=wall, on_lapse=on_lapse):
            await trio.sleep(100)
        reached = True
    assert scope.cancelled_caught
    assert not reached
    assert (lapses, store.reconfirms, wall.now_ms()) == ([], [], 5_000)


async def test_shielded_body_that_finishes_after_the_loss_still_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=fence_lost)
    finished = False
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(store.as_store, "r", A, clock=wall):
            with trio.CancelScope(shield=True):
                await trio.sleep(2)
            finished = True  # no checkpoint after the loop ended at 1 000
    assert finished
    assert info.value.reason == "fence_lost"


async def test_invalid_arguments_fail_before_the_body() -> None:
    store = ScriptedStore(TrioWallClock(0))
    entered = False
    with pytest.raises(RunStoreError) as info:
        async with hold_lease(store.as_store, "r", {"pid": 1}):  # type: ignore[arg-type]
            entered = True
    assert info.value.code == "invalid_run"
    assert not entered


# --- against a real MemoryRunStore ----------------------------------------------------------


class FailingHeartbeats:
    """Wraps a store: heartbeats (and optionally reconfirms) fail; the rest goes through."""

    def __init__(self, inner: MemoryRunStore, *, reconfirm_fails: bool = False) -> None:
        self.inner = inner
        self.reconfirm_fails = reconfirm_fails

    async def reconfirm(self, run_id: str, owner: Any, now_ms: int) -> object:
        if self.reconfirm_fails:
            raise RunStoreError("persistence_failed", "reconfirm", "disk gone")
        return await self.inner.reconfirm(run_id, owner, now_ms)

    async def heartbeat(self, run_id: str, owner: Any, now_ms: int) -> Updated:
        await trio.lowlevel.checkpoint()
        raise RunStoreError("persistence_failed", "heartbeat", "disk gone")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_pending_claim_lapses_without_receipt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(100_000)
    store = MemoryRunStore(clock=wall)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 60_000) == Activated()
    evidence = LivenessEvidence(expected_owner=A, checked_at_ms=100_000, kind="lease-expired")
    assert await store.steal("r", await store.get("r"), C, 100_000, evidence) == Claimed(
        claimed_at_ms=100_000
    )
    receipts: list[int] = []
    lapses: list[int] = []

    async def on_reconfirm(unconfirmed: int) -> None:
        receipts.append(unconfirmed)

    async def on_lapse(unconfirmed: int) -> None:
        lapses.append(unconfirmed)

    wrapped: RunStore = FailingHeartbeats(store)  # type: ignore[assignment]
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(
            wrapped, "r", A, clock=wall, on_reconfirm=on_reconfirm, on_lapse=on_lapse
        ):
            await trio.sleep(100)
    assert (info.value.reason, wall.now_ms(), lapses, receipts) == (
        "lapsed",
        119_000,
        [19_000],
        [],
    )


async def test_untouched_lease_is_reconfirmed(autojump_clock: trio.testing.MockClock) -> None:
    wall = TrioWallClock(100_000)
    store = MemoryRunStore(clock=wall)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 100_000) == Activated()
    receipts: list[int] = []

    async def on_reconfirm(unconfirmed: int) -> None:
        receipts.append(unconfirmed)

    wrapped: RunStore = FailingHeartbeats(store)  # type: ignore[assignment]
    async with hold_lease(wrapped, "r", A, clock=wall, on_reconfirm=on_reconfirm) as lease:
        await trio.sleep(40)
        assert lease.last_confirmed_ms == 138_000
    assert receipts == [19_000, 19_000]
    assert (await store.get("r")).heartbeat_at_ms == 138_000


async def test_final_transition_then_the_next_pulse_loses_the_fence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = MemoryRunStore(clock=wall)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 0) == Activated()
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(store, "r", A, clock=wall):
            await trio.sleep(2.5)
            assert await store.transition_owned("r", A, "completed") == Transitioned()
            await trio.sleep(5)  # not the last await: the next pulse reports FenceLost
    assert (info.value.reason, wall.now_ms()) == ("fence_lost", 3_000)
    assert await store.heartbeat("r", A, 3_000) == FenceLost()
    assert isinstance(await store.heartbeat("missing", A, 3_000), NotFound)


async def test_peer_cannot_steal_before_the_owner_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Invariant 18: writes failing from 0; the owner stops at 19 000; steals wait for 30 001."""
    wall = TrioWallClock(0)
    store = MemoryRunStore(clock=wall)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 0) == Activated()
    wrapped: RunStore = FailingHeartbeats(store, reconfirm_fails=True)  # type: ignore[assignment]
    owned = await store.get("r")
    observations: list[tuple[int, str]] = []

    async def steal(reading: int) -> None:
        evidence = LivenessEvidence(expected_owner=A, checked_at_ms=reading, kind="lease-expired")
        outcome = await store.steal("r", owned, C, reading, evidence)
        observations.append((reading, type(outcome).__name__))

    async def peer() -> None:
        await trio.sleep_until(18.999)
        await steal(18_999)  # a peer on the same clock
        await steal(23_999)  # a peer whose clock is 5 s ahead
        await trio.sleep_until(30.000)
        await steal(30_000)
        await trio.sleep_until(30.001)
        await steal(30_001)

    stopped: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer)
        with pytest.raises(LeaseLost):
            async with hold_lease(wrapped, "r", A, clock=wall):
                try:
                    await trio.sleep(100)
                finally:
                    stopped.append(wall.now_ms())
    assert stopped == [19_000]
    assert observations == [
        (18_999, "HeartbeatFresh"),
        (23_999, "HeartbeatFresh"),
        (30_000, "HeartbeatFresh"),
        (30_001, "Claimed"),
    ]


async def test_outer_cancel_leaves_hold_lease_as_a_bare_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(0)
    store = ScriptedStore(wall, heartbeat=hanging)
    seen: list[type[BaseException]] = []
    with trio.move_on_after(1.5):
        try:
            async with hold_lease(store.as_store, "r", A, clock=wall):
                await trio.sleep(100)
        except BaseException as exc:
            seen.append(type(exc))
            raise
    assert seen == [trio.Cancelled]


class SlowHeartbeats:
    """Wraps a store: every heartbeat takes ``delay`` seconds (a slow round trip)."""

    def __init__(self, inner: MemoryRunStore, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    async def heartbeat(self, run_id: str, owner: Any, now_ms: int) -> object:
        await trio.sleep(self.delay)
        return await self.inner.heartbeat(run_id, owner, now_ms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_woken_owner_past_its_work_limit_runs_no_more_owned_code(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A process stopped (SIGSTOP) past the stale moment: on waking every Trio deadline has
    expired at once; the body must be cancelled in that same pass, not after a heartbeat round
    trip reports the lost fence (docs/faults.md, "A frozen owner")."""
    wall = TrioWallClock(0)
    store = MemoryRunStore(clock=wall, stale_after_ms=3_000)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 0) == Activated()
    wrapped: RunStore = SlowHeartbeats(store, 0.35)  # type: ignore[assignment]
    steps: list[float] = []
    taken: list[float] = []

    async def freeze_then_take_over() -> None:
        await trio.sleep(1.05)
        autojump_clock.jump(8)  # the owner's process was stopped for 8 s: nothing ran
        owned = await store.get("r")
        now = wall.now_ms()
        evidence = LivenessEvidence(expected_owner=A, checked_at_ms=now, kind="lease-expired")
        assert await store.claim_and_own("r", owned, C, now, evidence) == Activated()
        taken.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(freeze_then_take_over)
        with pytest.raises(LeaseLost) as info:
            async with hold_lease(wrapped, "r", A, clock=wall):
                for _ in range(200):
                    await trio.sleep(0.1)
                    steps.append(trio.current_time())
    assert info.value.reason == "lapsed"
    assert len(taken) == 1
    assert 9 <= len(steps) <= 10  # the steps made before the freeze
    assert [s for s in steps if s >= taken[0]] == []  # none after the takeover
    assert (await store.get("r")).owner == C


def test_the_work_limit_is_two_thirds_of_a_short_lease() -> None:
    assert [work_limit_ms(s) for s in (30_000, 60_000, 3_000, 2_000)] == [20_000] * 2 + [
        2_000,
        1_334,
    ]
    assert [pulse_interval_ms(s) for s in (30_000, 3_000, 2_000)] == [1_000, 500, 333]


async def test_a_short_lease_stops_owned_work_before_a_peer_may_take_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With a 3 s lease a peer may take the run after 3 s of failed heartbeats; the owner used to
    work on for the fixed 19 s tolerance. It now stops at the work limit, 2 s."""
    wall = TrioWallClock(0)
    store = MemoryRunStore(clock=wall, stale_after_ms=3_000)
    row = await created(store)
    assert await store.claim_and_own("r", row, A, 0) == Activated()
    wrapped: RunStore = FailingHeartbeats(store)  # type: ignore[assignment]
    stopped: list[int] = []
    with pytest.raises(LeaseLost) as info:
        async with hold_lease(wrapped, "r", A, clock=wall):
            try:
                await trio.sleep(100)
            finally:
                stopped.append(wall.now_ms())
    assert (info.value.reason, stopped) == ("lapsed", [2_000])
