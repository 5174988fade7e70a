"""The fault-injecting store wrappers and the scripted test doubles, over both protocols."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from trio_triggers import (
    Held,
    MemoryRunStore,
    MemoryTriggerStore,
    OwnerId,
    Result,
    RunStoreError,
    Trigger,
    TriggerError,
    TrioWallClock,
)
from trio_triggers._ownership._models import ClaimLost, Created, FenceLost, NotFound
from trio_triggers.testing import (
    Fault,
    FaultyRunStore,
    FaultyTriggerStore,
    InjectedFault,
    NoopTriggerStore,
    ScriptedRunStore,
    StoreCall,
)

HOURLY = Trigger(
    id="hourly", flow_id="flow", input={"a": 1}, cron="0 * * * *", timezone="UTC", overlap="skip"
)


def make_store() -> tuple[MemoryTriggerStore, FaultyTriggerStore]:
    inner = MemoryTriggerStore(clock=TrioWallClock(0))
    return inner, FaultyTriggerStore(inner)


async def test_fail_before_writes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    inner, store = make_store()
    await store.register(HOURLY)
    store.fail_next("claim_fire")
    with pytest.raises(TriggerError) as info:
        await store.claim_fire("hourly", 3_600_000, expected_revision=1)
    assert info.value.code == "store"
    assert info.value.message == "trigger store write failed"
    assert isinstance(info.value.__cause__, InjectedFault)
    assert await inner.inspect("hourly") == Held()
    claim = await store.claim_fire("hourly", 3_600_000, expected_revision=1)
    assert claim.action == "fire"


async def test_fail_after_commits(autojump_clock: trio.testing.MockClock) -> None:
    inner, store = make_store()
    await store.register(HOURLY)
    store.fail_next("claim_fire", after_commit=True)
    with pytest.raises(TriggerError):
        await store.claim_fire("hourly", 3_600_000, expected_revision=1)
    held = await inner.inspect("hourly")
    assert held.active_run_id is not None  # the reservation was written
    [call] = store.calls_of("claim_fire")
    assert call.fault == "fail_after"
    assert call.reached


async def test_read_failures_say_read(autojump_clock: trio.testing.MockClock) -> None:
    _, store = make_store()
    store.fail_next("list")
    with pytest.raises(TriggerError) as info:
        await store.list()
    assert info.value.message == "trigger store read failed"
    custom = TriggerError("unknown_trigger", "x")
    store.fail_next("get", error=custom)
    with pytest.raises(TriggerError) as info:
        await store.get("x")
    assert info.value is custom


async def test_slow_and_hang_and_release(autojump_clock: trio.testing.MockClock) -> None:
    faults = [Fault(kind="slow", delay=5.0), Fault(kind="hang")]
    store = FaultyTriggerStore(
        MemoryTriggerStore(clock=TrioWallClock(0)),
        decide=lambda caller, method, args: faults.pop(0) if faults else None,
    )
    started = trio.current_time()
    await store.heartbeat("h")
    assert trio.current_time() - started == 5.0
    with trio.move_on_after(100) as scope:
        await store.heartbeat("h")
    assert scope.cancelled_caught
    faults.append(Fault(kind="hang"))
    async with trio.open_nursery() as nursery:

        async def hung() -> None:
            with pytest.raises(TriggerError):
                await store.heartbeat("h")

        nursery.start_soon(hung)
        await trio.sleep(10)
        store.release_hangs()
    assert await store.last_heartbeat() is not None


async def test_block_until_released(autojump_clock: trio.testing.MockClock) -> None:
    _, store = make_store()
    await store.register(HOURLY)
    blocker = store.block("claim_fire")
    answers = []
    async with trio.open_nursery() as nursery:

        async def claim() -> None:
            answers.append(await store.claim_fire("hourly", 0, expected_revision=1))

        nursery.start_soon(claim)
        await trio.sleep(60)
        assert blocker.waiting == 1
        assert answers == []
        blocker.release()
    assert answers
    assert answers[0].claimed


async def test_rewrite_listing_and_views(autojump_clock: trio.testing.MockClock) -> None:
    _, store = make_store()
    await store.register(HOURLY)
    store.rewrite_listing(lambda rows: [])
    assert await store.list() == []
    other = store.view("scheduler-b")
    assert await other.list() == []  # the rewrite is shared
    assert [call.caller for call in store.calls_of("list")] == ["caller", "scheduler-b"]


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.inside = 0

    async def before(self, call: StoreCall) -> None:
        self.inside += 1
        assert self.inside == 1, "observer calls overlap"
        self.events.append(f"before {call.method}")
        await trio.lowlevel.checkpoint()

    async def after(self, call: StoreCall) -> None:
        self.events.append(f"after {call.method} {call.error is not None}")
        self.inside -= 1


async def test_observer_sees_serialised_calls(autojump_clock: trio.testing.MockClock) -> None:
    recorder = Recorder()
    inner = MemoryTriggerStore(clock=TrioWallClock(0))
    store = FaultyTriggerStore(inner, observer=recorder, serialize=True)
    await store.register(HOURLY)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(store.heartbeat, "h")
    with pytest.raises(TriggerError):
        await store.record_result(
            Result(trigger_id="hourly", occurrence=1, outcome="completed", run_id="r")
        )
    assert recorder.events[-1] == "after record_result True"
    assert recorder.events.count("before heartbeat") == 3


async def test_faulty_run_store(autojump_clock: trio.testing.MockClock) -> None:
    inner = MemoryRunStore(clock=TrioWallClock(0))
    store = FaultyRunStore(inner)
    store.fail_next("create")
    with pytest.raises(RunStoreError) as info:
        await store.create("r1", "{}")
    assert info.value.code == "persistence_failed"
    assert info.value.method == "create"
    with pytest.raises(RunStoreError):
        await inner.get("r1")  # nothing was written
    store.fail_next("create", after_commit=True)
    with pytest.raises(RunStoreError):
        await store.create("r1", "{}", idempotency_key="k")
    assert (await inner.get("r1")).run_id == "r1"  # written all the same
    again = await store.create("r2", "{}", idempotency_key="k")
    assert not isinstance(again, Created)
    assert again.row.run_id == "r1"
    owner = OwnerId(host_id="h", pid=1, nonce="n")
    assert isinstance(await store.heartbeat("r1", owner, 0), FenceLost)  # not owned by anyone
    assert isinstance(await store.heartbeat("nope", owner, 0), NotFound)


async def test_noop_trigger_store() -> None:
    async def get(trigger_id: str) -> None:
        return None

    store = NoopTriggerStore(get=get)
    assert await store.get("x") is None
    with pytest.raises(TriggerError) as info:
        await store.last_heartbeat()
    assert info.value.code == "store"
    assert info.value.message == "last_heartbeat is unavailable"
    with pytest.raises(TypeError):
        NoopTriggerStore(nope=get)


async def test_scripted_run_store_defaults() -> None:
    store = ScriptedRunStore()
    owner = OwnerId(host_id="h", pid=1, nonce="n")
    with pytest.raises(RunStoreError) as info:
        await store.get("r")
    assert info.value.code == "persistence_failed"
    assert await store.acknowledge_cancel("r", owner, 0) is False
    assert isinstance(await store.activate("r", owner, 0, None), ClaimLost)
    assert isinstance(await store.reconfirm("r", owner, 0), NotFound)
    assert isinstance(await store.request_cancel("r", 0), NotFound)
    assert [call[0] for call in store.calls] == [
        "get",
        "acknowledge_cancel",
        "activate",
        "reconfirm",
        "request_cancel",
    ]
