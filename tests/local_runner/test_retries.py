"""Retry policies and timeouts of the LocalRunner, on memory, SQLite and PostgreSQL, under the
autojump MockClock (docs/failures.md)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from tests.pg_support import fresh_schema, postgres_marks
from trio_triggers import LocalRunner, RetryPolicy, ThreadExecutor, TriggerError, TrioWallClock
from trio_triggers._local_runner import RunContext, open_local_runner
from trio_triggers._ownership import MemoryRunStore, OwnerId, RunStore, open_sqlite_run_store
from trio_triggers._scheduler import StartRequest
from trio_triggers.postgres._run_store import open_postgres_run_store
from trio_triggers.testing import AutojumpGuardExecutor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from trio.testing import MockClock

EPOCH = 1_780_000_000_000


@contextlib.asynccontextmanager
async def opened(
    kind: str, clock: TrioWallClock, mock: MockClock, path: Path
) -> AsyncIterator[RunStore]:
    if kind == "memory":
        yield MemoryRunStore(clock=clock)
    elif kind == "sqlite":
        async with open_sqlite_run_store(str(path / "runs.sqlite"), clock=clock) as store:
            yield store
    else:
        with fresh_schema() as dsn:
            guard = AutojumpGuardExecutor(ThreadExecutor(limit=4), mock)
            async with open_postgres_run_store(
                dsn, clock=clock, pool_size=2, executor=guard
            ) as store:
                yield store


BACKENDS = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("postgres", marks=postgres_marks()),
]


@pytest.fixture(params=BACKENDS)
async def store(
    request: pytest.FixtureRequest, autojump_clock: MockClock, tmp_path: Path
) -> AsyncIterator[RunStore]:
    async with opened(request.param, TrioWallClock(EPOCH), autojump_clock, tmp_path) as s:
        yield s


def req(key: str, flow: str = "flow") -> StartRequest:
    return StartRequest(flow_id=flow, input={"key": key}, idempotency_key=key)


async def wait_state(runner: LocalRunner, run_id: str, state: str, limit: float = 600) -> float:
    with trio.fail_after(limit):
        while await runner.inspect(run_id) != state:  # noqa: ASYNC110 - polling the store
            await trio.sleep(0.01)
    return trio.current_time()


def failing(
    times: int, calls: list[float], exc: Callable[[], Exception] = lambda: OSError("down")
) -> Any:
    async def flow(value: Any, run: RunContext) -> Any:
        calls.append(trio.current_time())
        await trio.sleep(0.5)
        if len(calls) <= times:
            raise exc()
        return {"after": len(calls)}

    return flow


async def test_fails_twice_then_completes_as_one_run_with_three_attempts(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=3, initial_delay=10, multiplier=2, max_delay=60)
    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", failing(2, calls), retry=policy)
        run_id = await runner.start(req("k"))
        await wait_state(runner, run_id, "completed")
    row = await store.get(run_id)
    assert row.status == "completed"
    assert row.attempts == 3
    assert row.attempt == 3
    assert row.result_json == '{"after":3}'
    log = row.attempt_log
    assert [a.attempt for a in log] == [1, 2]
    assert all(a.error == "OSError: down" for a in log)
    # Backoff: 10 s then 20 s, each shortened by at most 20 % (jitter), measured start to start.
    first_wait = calls[1] - calls[0] - 0.5
    second_wait = calls[2] - calls[1] - 0.5
    assert 8 - 0.01 <= first_wait <= 10 + 1.01
    assert 16 - 0.01 <= second_wait <= 20 + 1.01
    assert log[0].retry_at_ms - log[0].ended_at_ms == policy.delay_ms(1, run_id)
    assert log[1].retry_at_ms - log[1].ended_at_ms == policy.delay_ms(2, run_id)


async def test_attempts_never_exceed_max_attempts(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    async with open_local_runner(store, clock=clock) as runner:
        runner.register(
            "flow", failing(99, calls), retry=RetryPolicy(max_attempts=4, initial_delay=1)
        )
        run_id = await runner.start(req("k"))
        await wait_state(runner, run_id, "failed")
        await trio.sleep(120)  # nothing more happens
    row = await store.get(run_id)
    assert len(calls) == 4
    assert row.attempts == 4
    assert row.attempt == 4
    assert row.error == "OSError: down"
    assert len(row.attempt_log) == 3


async def test_a_failure_retry_on_does_not_name_ends_the_run_at_once(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=5, initial_delay=1, retry_on=("ConnectionError",))
    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", failing(9, calls, lambda: KeyError("nope")), retry=policy)
        runner.register(
            "net", failing(1, calls, lambda: ConnectionResetError("reset")), retry=policy
        )
        bad = await runner.start(req("bad"))
        await wait_state(runner, bad, "failed")
        assert len(calls) == 1
        calls.clear()
        # ConnectionResetError is not named, but its class name is checked, not its bases:
        net = await runner.start(req("net", flow="net"))
        await wait_state(runner, net, "failed")
    assert len(calls) == 1
    assert (await store.get(bad)).attempt_log == []


async def test_retry_on_names_the_exception_class(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=3, initial_delay=1, retry_on=("builtins.OSError",))
    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", failing(1, calls), retry=policy)
        run_id = await runner.start(req("k"))
        await wait_state(runner, run_id, "completed")
    assert len(calls) == 2


async def test_timeout_fails_the_attempt_and_is_retried(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]

    async def hangs_once(value: Any, run: RunContext) -> str:
        calls.append(trio.current_time())
        if len(calls) == 1:
            await trio.sleep_forever()
        return "ok"

    async with open_local_runner(store, clock=clock) as runner:
        runner.register(
            "flow", hangs_once, timeout=30, retry=RetryPolicy(max_attempts=2, retry_on=("timeout",))
        )
        run_id = await runner.start(req("k"))
        await wait_state(runner, run_id, "completed")
    row = await store.get(run_id)
    assert [a.error for a in row.attempt_log] == ["flow flow timed out after 30 s"]
    assert 30 <= calls[1] - calls[0] <= 32


async def test_timeout_without_retry_fails_the_run(
    store: RunStore, autojump_clock: MockClock
) -> None:
    clock = store.clock  # type: ignore[attr-defined]

    async def hangs(value: Any, run: RunContext) -> None:
        await trio.sleep_forever()

    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", hangs, timeout=5)
        began = trio.current_time()
        run_id = await runner.start(req("k"))
        ended = await wait_state(runner, run_id, "failed")
    assert 5 <= ended - began <= 6
    assert (await store.get(run_id)).error == "flow flow timed out after 5 s"


async def test_a_run_waiting_to_retry_is_active_and_nobody_takes_it_early(
    store: RunStore, autojump_clock: MockClock
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=2, initial_delay=100, max_delay=100)
    other = OwnerId(host_id="other-host", pid=2, nonce="b")
    async with (
        open_local_runner(store, clock=clock) as a,
        open_local_runner(store, clock=clock, owner=other) as b,
    ):
        for runner in (a, b):
            runner.register("flow", failing(1, calls), retry=policy)
        run_id = await a.start(req("k"))
        with trio.fail_after(10):
            while len(calls) < 1 or (await store.get(run_id)).retry_at_ms is None:  # noqa: ASYNC110
                await trio.sleep(0.1)
        row = await store.get(run_id)
        assert row.status == "suspended"
        assert row.owner is None
        assert await a.inspect(run_id) == "active"
        await trio.sleep(60)
        assert len(calls) == 1  # two runners polling every second, neither took it early
        await wait_state(a, run_id, "completed")
    assert len(calls) == 2
    assert calls[1] - calls[0] >= 80


async def test_a_crash_between_attempts_loses_nothing_and_runs_no_attempt_twice(
    store: RunStore,
    autojump_clock: MockClock,
) -> None:
    """The runner stops while the run waits for its second attempt; a new runner (the next
    process) runs that attempt at its instant, once."""
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30)
    async with open_local_runner(store, clock=clock) as first:
        first.register("flow", failing(1, calls), retry=policy)
        run_id = await first.start(req("k"))
        with trio.fail_after(10):
            while (await store.get(run_id)).retry_at_ms is None:  # noqa: ASYNC110
                await trio.sleep(0.1)
    retry_at = (await store.get(run_id)).retry_at_ms
    assert retry_at is not None
    await trio.sleep(5)
    again = OwnerId(host_id="next-process", pid=3, nonce="c")
    async with open_local_runner(store, clock=clock, owner=again) as second:
        second.register("flow", failing(1, calls), retry=policy)
        await wait_state(second, run_id, "completed")
    row = await store.get(run_id)
    assert len(calls) == 2
    assert row.attempt == 2
    assert row.attempts == 2
    assert clock.now_ms() >= retry_at


async def test_cancel_while_waiting_to_retry_ends_the_run_cancelled_at_once(
    store: RunStore,
    autojump_clock: MockClock,
) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]
    policy = RetryPolicy(max_attempts=3, initial_delay=3600, max_delay=3600)
    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", failing(5, calls), retry=policy)
        run_id = await runner.start(req("k"))
        with trio.fail_after(10):
            while (await store.get(run_id)).retry_at_ms is None:  # noqa: ASYNC110
                await trio.sleep(0.1)
        asked = trio.current_time()
        await runner.cancel(run_id)
        ended = await wait_state(runner, run_id, "cancelled")
    assert ended - asked < 5
    assert len(calls) == 1
    row = await store.get(run_id)
    assert row.retry_at_ms is None
    assert len(row.attempt_log) == 1


async def test_a_cancelled_run_is_never_retried(store: RunStore, autojump_clock: MockClock) -> None:
    calls: list[float] = []
    clock = store.clock  # type: ignore[attr-defined]

    async def slow(value: Any, run: RunContext) -> None:
        calls.append(trio.current_time())
        await trio.sleep(100)

    async with open_local_runner(store, clock=clock) as runner:
        runner.register("flow", slow, retry=RetryPolicy(max_attempts=5, initial_delay=1))
        run_id = await runner.start(req("k"))
        await wait_state(runner, run_id, "active")
        while not calls:  # noqa: ASYNC110
            await trio.sleep(0.1)
        await runner.cancel(run_id)
        await wait_state(runner, run_id, "cancelled")
        await trio.sleep(30)
    assert len(calls) == 1


async def test_bad_policies_and_timeouts_are_refused(autojump_clock: MockClock) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"initial_delay": -1}, "initial_delay"),
        ({"initial_delay": float("nan")}, "initial_delay"),
        ({"initial_delay": 10, "max_delay": 5}, "max_delay"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"retry_on": "timeout"}, "retry_on"),
        ({"retry_on": ("ok", "")}, "retry_on[1]"),
        ({"retry_on": (1.5,)}, "retry_on[0]"),
    ]
    for kwargs, path in cases:
        with pytest.raises(TriggerError) as err:
            RetryPolicy(**kwargs)
        assert err.value.code == "invalid_options"
        assert err.value.path == path, kwargs
    runner = LocalRunner(MemoryRunStore(clock=TrioWallClock(EPOCH)))

    async def flow(value: Any, run: RunContext) -> None:
        return None

    for timeout in (0, -1, float("inf"), True):
        with pytest.raises(TriggerError) as err:
            runner.register("flow", flow, timeout=timeout)
        assert err.value.path == "timeout"
    with pytest.raises(TriggerError):
        runner.register("flow", flow, retry={"max_attempts": 2})  # type: ignore[arg-type]
    assert runner.flows == []


def test_delays_grow_cap_and_are_the_same_everywhere() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1, multiplier=3, max_delay=20)
    delays = [policy.delay_ms(n, "run-x") for n in range(1, 6)]
    assert delays == [policy.delay_ms(n, "run-x") for n in range(1, 6)]  # deterministic
    for n, delay in enumerate(delays, start=1):
        base = min(20_000, 1000 * 3 ** (n - 1))
        assert 0.8 * base <= delay <= base
    assert {policy.delay_ms(1, f"run-{i}") for i in range(20)} != {delays[0]}  # spread out
