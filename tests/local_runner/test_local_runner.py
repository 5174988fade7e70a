"""LocalRunner on MemoryRunStore and the SQLite run store, under the autojump MockClock."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from trio_triggers import LocalRunner, TriggerError, TrioWallClock
from trio_triggers._local_runner import RunContext, open_local_runner
from trio_triggers._ownership import (
    Activated,
    MemoryRunStore,
    OwnerId,
    RunStore,
    lease_liveness,
    open_sqlite_run_store,
)
from trio_triggers._scheduler import StartRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trio.testing import MockClock

EPOCH = 1_780_000_000_000


class Env:
    def __init__(self, store: RunStore, clock: TrioWallClock) -> None:
        self.store = store
        self.clock = clock


@pytest.fixture(params=["memory", "sqlite"])
async def env(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    clock = TrioWallClock(EPOCH)
    if request.param == "memory":
        yield Env(MemoryRunStore(clock=clock), clock)
    else:
        async with open_sqlite_run_store(":memory:", clock=clock) as store:
            yield Env(store, clock)


def req(key: str, flow: str = "flow", value: Any = None) -> StartRequest:
    return StartRequest(flow_id=flow, input={"key": key, "value": value}, idempotency_key=key)


async def wait_state(runner: LocalRunner, run_id: str, state: str, limit: float = 120) -> float:
    """Wait (simulated time) until ``inspect`` answers ``state``; return when it did."""
    with trio.fail_after(limit):
        while await runner.inspect(run_id) != state:  # noqa: ASYNC110 - polling the store
            await trio.sleep(0.01)
    return trio.current_time()


async def test_completed_run_keeps_result_and_dedups_by_key(
    env: Env, autojump_clock: MockClock
) -> None:
    calls: list[Any] = []

    async def flow(value: Any, run: RunContext) -> Any:
        calls.append((value, run.idempotency_key))
        await trio.sleep(1)
        return {"echo": value["key"]}

    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock) as runner:
        first = await runner.start(req("k1"))
        again = await runner.start(req("k1", value="different input"))
        assert again == first
        await wait_state(runner, first, "completed")
        assert await runner.start(req("k1")) == first  # also after it finished
        await trio.sleep(5)
    row = await env.store.get(first)
    assert row.status == "completed"
    assert row.result_json == '{"echo":"k1"}'
    assert row.idempotency_key == "k1"
    assert calls == [({"key": "k1", "value": None}, "k1")]


async def test_dedup_across_runner_instances(env: Env, autojump_clock: MockClock) -> None:
    """Two runners (two processes sharing a database) answer one run id for one key."""
    ran: list[str] = []

    async def flow(value: Any, run: RunContext) -> None:
        ran.append(run.run_id)
        await trio.sleep(0.5)

    owner_b = OwnerId(host_id="host-b", pid=1, nonce="b")
    async with (
        open_local_runner(env.store, {"flow": flow}, clock=env.clock) as a,
        open_local_runner(env.store, {"flow": flow}, clock=env.clock, owner=owner_b) as b,
    ):
        ids = {await a.start(req("same")), await b.start(req("same")), await a.start(req("same"))}
        assert len(ids) == 1
        (run_id,) = ids
        await wait_state(a, run_id, "completed")
        assert await b.inspect(run_id) == "completed"
    assert ran == [run_id]


async def test_failed_flow_records_error(env: Env, autojump_clock: MockClock) -> None:
    async def boom(value: Any, run: RunContext) -> None:
        await trio.sleep(0.1)
        raise RuntimeError("disk full")

    async with open_local_runner(env.store, {"boom": boom}, clock=env.clock) as runner:
        run_id = await runner.start(req("k", flow="boom"))
        await wait_state(runner, run_id, "failed")
    row = await env.store.get(run_id)
    assert row.status == "failed"
    assert row.error == "RuntimeError: disk full"
    assert row.result_json is None


async def test_unknown_flow_is_refused_and_unknown_run_is_missing(
    env: Env, autojump_clock: MockClock
) -> None:
    runner = LocalRunner(env.store, {}, clock=env.clock)
    with pytest.raises(TriggerError) as info:
        await runner.start(req("k", flow="nope"))
    assert info.value.code == "runner"
    assert "nope" in info.value.message
    assert await runner.inspect("run-does-not-exist") == "missing"
    await runner.cancel("run-does-not-exist")  # idempotent, no error


async def test_concurrency_limit_bounds_running_flows(env: Env, autojump_clock: MockClock) -> None:
    active = 0
    peak = 0

    async def flow(value: Any, run: RunContext) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await trio.sleep(3)
        active -= 1

    async with open_local_runner(
        env.store, {"flow": flow}, clock=env.clock, concurrency=2
    ) as runner:
        assert runner.running_count.value == 0
        ids = [await runner.start(req(f"k{i}")) for i in range(5)]
        await runner.running_count.wait_value(2)  # waits on the count, no polling
        states = [await runner.inspect(i) for i in ids]
        assert states == ["active"] * 5
        assert len(runner.running) == 2
        for run_id in ids:
            await wait_state(runner, run_id, "completed")
        assert runner.running_count.value == 0
    assert peak == 2


async def test_a_serving_runner_with_room_creates_its_runs_already_running(
    env: Env, autojump_clock: MockClock
) -> None:
    """One write per start: the run is created running under this runner (its first attempt
    begun), never ``pending`` for the dispatcher to claim, so no other runner can take it in
    between and the claim is spared. Without room it is created ``pending`` as before."""
    release = trio.Event()

    async def flow(value: Any, run: RunContext) -> None:
        await release.wait()

    async with open_local_runner(
        env.store, {"flow": flow}, clock=env.clock, concurrency=1
    ) as runner:
        first = await runner.start(req("k1"))
        row = await env.store.get(first)  # read before any other task ran
        assert (row.status, row.owner, row.attempts) == ("running", runner.owner, 1)
        assert runner.running == [first]
        second = await runner.start(req("k2"))  # no room: pending, claimed later
        assert (await env.store.get(second)).status == "pending"
        release.set()
        await wait_state(runner, first, "completed")
        await wait_state(runner, second, "completed")
    assert (await env.store.get(second)).attempts == 1


async def test_a_runner_that_is_not_serving_creates_pending_runs(
    env: Env, autojump_clock: MockClock
) -> None:
    async def flow(value: Any, run: RunContext) -> None:
        await trio.lowlevel.checkpoint()

    runner = LocalRunner(env.store, {"flow": flow}, clock=env.clock)
    run_id = await runner.start(req("k"))
    row = await env.store.get(run_id)
    assert (row.status, row.owner) == ("pending", None)


async def _plant_dead_owner_run(env: Env, owner: OwnerId, key: str) -> str:
    created = await env.store.create(
        f"run-{key}", "null", flow_id="flow", input_json='{"key":"x"}', idempotency_key=key
    )
    row = created.row
    outcome = await env.store.claim_and_own(row.run_id, row, owner, env.clock.now_ms())
    assert isinstance(outcome, Activated)
    return row.run_id  # nobody heartbeats it: its owner "died" right after claiming


async def test_takeover_after_owner_death_once_lease_expires(
    env: Env, autojump_clock: MockClock
) -> None:
    attempts: list[float] = []

    async def flow(value: Any, run: RunContext) -> str:
        attempts.append(trio.current_time())
        return "done"

    dead = OwnerId(host_id="host-gone", pid=4242, nonce="dead")
    run_id = await _plant_dead_owner_run(env, dead, "orphan")
    start = trio.current_time()
    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock) as runner:
        await trio.sleep(29)
        assert attempts == []  # the lease is still fresh: the owner is left alone
        assert (await env.store.get(run_id)).owner == dead
        done_at = await wait_state(runner, run_id, "completed")
    assert len(attempts) == 1
    assert 30 < attempts[0] - start <= 32  # one poll interval after the 30 s lease expired
    assert done_at - start <= 33


async def test_same_host_dead_pid_is_taken_over(env: Env, autojump_clock: MockClock) -> None:
    proc = await trio.lowlevel.open_process([sys.executable, "-c", "pass"])
    await proc.wait()  # reaped: its pid now probes dead (ESRCH)
    me = OwnerId.for_this_process()
    dead = OwnerId(host_id=me.host_id, pid=proc.pid, nonce="dead")
    run_id = await _plant_dead_owner_run(env, dead, "same-host")

    async def flow(value: Any, run: RunContext) -> str:
        return "ok"

    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock, owner=me) as runner:
        await wait_state(runner, run_id, "completed")


async def test_live_owner_on_this_host_is_left_alone(env: Env, autojump_clock: MockClock) -> None:
    """A stale lease whose owner pid is alive on this host (a stalled process) is not taken."""
    me = OwnerId.for_this_process()
    stalled = OwnerId(host_id=me.host_id, pid=me.pid, nonce="another-engine")
    run_id = await _plant_dead_owner_run(env, stalled, "stalled")

    async def flow(value: Any, run: RunContext) -> str:
        raise AssertionError("must not run")

    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock, owner=me) as runner:
        await trio.sleep(90)
        assert await runner.inspect(run_id) == "active"
    assert (await env.store.get(run_id)).owner == stalled


async def test_cancel_from_another_process_within_one_heartbeat(
    env: Env, autojump_clock: MockClock
) -> None:
    started = trio.Event()
    stopped_at: list[float] = []

    async def flow(value: Any, run: RunContext) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            stopped_at.append(trio.current_time())

    owner_b = OwnerId(host_id="host-b", pid=1, nonce="b")
    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock) as owner_side:
        run_id = await owner_side.start(req("c"))
        await started.wait()
        await trio.sleep(0.3)
        other = LocalRunner(env.store, {}, clock=env.clock, owner=owner_b)  # never serves
        asked = trio.current_time()
        await other.cancel(run_id)
        done = await wait_state(other, run_id, "cancelled")
    assert stopped_at
    assert stopped_at[0] - asked <= 1.0
    assert done - asked <= 1.1
    row = await env.store.get(run_id)
    assert row.status == "cancelled"
    assert row.error == "cancel requested"
    assert row.cancel_acknowledgement is not None


async def test_cancel_in_process_is_immediate_and_pending_runs_cancel_without_running(
    env: Env, autojump_clock: MockClock
) -> None:
    ran: list[str] = []

    async def flow(value: Any, run: RunContext) -> None:
        ran.append(value["key"])
        await trio.sleep_forever()

    async with open_local_runner(
        env.store, {"flow": flow}, clock=env.clock, concurrency=1
    ) as runner:
        busy = await runner.start(req("busy"))
        await trio.sleep(0.5)
        queued = await runner.start(req("queued"))
        await trio.sleep(0.5)
        assert await runner.inspect(queued) == "active"  # pending behind the limit
        await runner.cancel(queued)
        await wait_state(runner, queued, "cancelled", limit=2)
        t0 = trio.current_time()
        await runner.cancel(busy)
        assert await wait_state(runner, busy, "cancelled") - t0 < 0.1
        await runner.cancel(busy)  # idempotent on a finished run
    assert ran == ["busy"]


async def test_shutdown_suspends_and_next_runner_resumes_with_saved_state(
    env: Env, autojump_clock: MockClock
) -> None:
    seen_states: list[Any] = []

    async def flow(value: Any, run: RunContext) -> Any:
        seen_states.append(run.state)
        step = (run.state or {}).get("step", 0)
        while step < 4:
            await trio.sleep(1)
            step += 1
            await run.save_state({"step": step})
        return step

    async with open_local_runner(env.store, {"flow": flow}, clock=env.clock) as first:
        run_id = await first.start(req("resume"))
        await trio.sleep(2.5)
    row = await env.store.get(run_id)
    assert row.status == "suspended"  # handed back, nothing failed
    assert row.state_json == '{"step":2}'
    second_owner = OwnerId(host_id="h", pid=2, nonce="second")
    async with open_local_runner(
        env.store, {"flow": flow}, clock=env.clock, owner=second_owner
    ) as second:
        await wait_state(second, run_id, "completed", limit=10)
    assert seen_states == [None, {"step": 2}]
    assert (await env.store.get(run_id)).result_json == "4"


async def test_lease_liveness_only_takes_over_own_pid_rows(
    env: Env, autojump_clock: MockClock
) -> None:
    """Embedded hosts recreating their engine in place use ``lease_liveness`` (ownership §5.5)."""
    me = OwnerId.for_this_process()
    previous = OwnerId(host_id=me.host_id, pid=me.pid, nonce="previous-incarnation")
    run_id = await _plant_dead_owner_run(env, previous, "in-place")

    async def flow(value: Any, run: RunContext) -> str:
        return "again"

    async with open_local_runner(
        env.store, {"flow": flow}, clock=env.clock, owner=me, liveness=lease_liveness()
    ) as runner:
        await wait_state(runner, run_id, "completed")


async def test_bad_options_are_refused(env: Env, autojump_clock: MockClock) -> None:
    with pytest.raises(TriggerError) as info:
        LocalRunner(env.store, {}, clock=env.clock, concurrency=0)
    assert info.value.path == "concurrency"
    with pytest.raises(TriggerError) as info:
        LocalRunner(env.store, {}, clock=env.clock, poll_interval=0)
    assert info.value.path == "poll_interval"
