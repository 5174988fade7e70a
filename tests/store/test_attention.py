"""The attention index on every store: each row is found exactly when a tick has work for it.

``due(now)`` answers the rows whose attention instant has come and ``next_attention()`` the
earliest instant (``docs/store.md``, "The attention index"). Each scenario moves one row through
the writes that change its instant and checks, after each, the instant the index holds and that
``due`` finds the row at that instant and not one millisecond before.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from trio_triggers import TriggerError
from trio_triggers._store import Result
from trio_triggers._store._attention import UNKNOWN, AttentionInputs, attention_at
from trio_triggers._store._engine import EngineStore

from .helpers import LEASE, Env, declaration

H = 3_600_000
MINUTE = 60_000


def hourly(**changes: Any) -> Any:
    return declaration(**{"cron": "0 * * * *", "timezone": "UTC", **changes})


def engine(env: Env) -> EngineStore:
    store = env.store
    assert isinstance(store, EngineStore)
    return store


async def instant(env: Env, trigger_id: str = "daily") -> int | None:
    """The row's instant as the index holds it (``None``: the row needs no attention)."""
    rows = await engine(env).due(2**53 - 1, limit=10_000)
    found = [row.attention_at for row in rows if row.row.trigger_id == trigger_id]
    return found[0] if found else None


async def due_ids(env: Env, now: int) -> list[str]:
    return [row.row.trigger_id for row in await engine(env).due(now)]


async def found_exactly_at(env: Env, at: int, trigger_id: str = "daily") -> None:
    assert await instant(env, trigger_id) == at
    assert trigger_id not in await due_ids(env, at - 1)
    assert trigger_id in await due_ids(env, at)


async def test_a_new_trigger_is_due_at_its_first_boundary_after_registration(env: Env) -> None:
    env.clock.value = H // 2
    await env.store.register(hourly())
    await found_exactly_at(env, H)
    assert await engine(env).next_attention() == H
    (row,) = await engine(env).due(H)
    assert row.registered_at == H // 2
    assert row.row.trigger is not None
    assert row.row.trigger.revision == 1


async def test_reservation_lease_pending_and_a_held_run(env: Env) -> None:
    store = env.store
    await store.register(hourly())
    env.clock.value = H
    claim = await store.claim_fire("daily", H, expected_revision=1)
    assert claim.action == "fire"
    assert claim.reservation_id is not None
    # Claimed, launch in flight: nothing to do before the lease ends (the next boundary, 2H,
    # comes later than H + LEASE).
    await found_exactly_at(env, H + LEASE)
    # The lease ends: the row is due; enforcing the lease re-arms H, which is due at once.
    env.clock.value = H + LEASE
    assert await store.active_run("daily") is None
    assert (await store.inspect("daily")).pending_at == H
    await found_exactly_at(env, H)
    pending = await store.claim_pending("daily", expected_revision=1)
    assert pending is not None
    assert pending.claim.reservation_id is not None
    await store.record_result(
        Result(
            trigger_id="daily",
            occurrence=H,
            outcome="launched",
            run_id="run-1",
            reservation_id=pending.claim.reservation_id,
        )
    )
    # A launched run held: the row costs nothing until its next boundary.
    await found_exactly_at(env, 2 * H)
    await store.record_result(Result(trigger_id="daily", occurrence=H, outcome="completed"))
    await found_exactly_at(env, 2 * H)


async def test_a_boundary_skipped_behind_a_run_moves_the_instant(env: Env) -> None:
    store = env.store
    await store.register(hourly())
    env.clock.value = H
    claim = await store.claim_fire("daily", H, expected_revision=1)
    assert claim.reservation_id is not None
    await store.record_result(
        Result(
            trigger_id="daily",
            occurrence=H,
            outcome="launched",
            run_id="run-1",
            reservation_id=claim.reservation_id,
        )
    )
    env.clock.value = 2 * H
    assert (await store.claim_fire("daily", 2 * H, expected_revision=1)).action == "skip"
    await found_exactly_at(env, 3 * H)


async def test_buffered_occurrence_is_due_when_the_holder_ends(env: Env) -> None:
    store = env.store
    await store.register(hourly(overlap="buffer-one"))
    env.clock.value = H
    claim = await store.claim_fire("daily", H, expected_revision=1)
    assert claim.reservation_id is not None
    await store.record_result(
        Result(
            trigger_id="daily",
            occurrence=H,
            outcome="launched",
            run_id="run-1",
            reservation_id=claim.reservation_id,
        )
    )
    env.clock.value = 2 * H
    assert (await store.claim_fire("daily", 2 * H, expected_revision=1)).action == "buffer"
    # Buffered behind a live run: waiting for the run, the row's next work is 3H.
    await found_exactly_at(env, 3 * H)
    await store.record_result(Result(trigger_id="daily", occurrence=H, outcome="completed"))
    # The holder ended: the buffered occurrence can be resumed now.
    await found_exactly_at(env, 2 * H)


async def test_disable_enable_and_a_catch_up_backlog(env: Env) -> None:
    store = env.store
    await store.register(hourly(catch_up="all", max_catch_up=5))
    env.clock.value = H
    assert (await store.claim_fire("daily", H, expected_revision=1)).action == "fire"
    await store.record_result(Result(trigger_id="daily", occurrence=H, outcome="failed"))
    await found_exactly_at(env, 2 * H)
    await store.register(hourly(catch_up="all", max_catch_up=5, enabled=False))
    assert await instant(env) is None  # disabled and holding nothing: never due
    assert "daily" not in await due_ids(env, 10 * H)
    env.clock.value = 5 * H
    await store.register(hourly(catch_up="all", max_catch_up=5))
    # Enabled again: the backlog since the cursor (2H, 3H, 4H, 5H) is owed at once.
    await found_exactly_at(env, 2 * H)


async def test_re_registration_recomputes_from_the_new_schedule(env: Env) -> None:
    store = env.store
    await store.register(hourly())
    await found_exactly_at(env, H)
    env.clock.value = 10 * MINUTE
    await store.register(hourly(cron="*/15 * * * *"))
    # Never fired: counted from its first registration (0), on the new schedule.
    await found_exactly_at(env, 15 * MINUTE)


async def test_a_due_read_with_a_hold_takes_its_rows(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    await store.register(hourly(id="other"))
    taken = await store.due(H, hold_ms=30_000)
    assert sorted(row.row.trigger_id for row in taken) == ["daily", "other"]
    assert await due_ids(env, H) == []  # taken: a concurrent reader does not get them
    assert await due_ids(env, H + 30_000) == ["daily", "other"]  # came back after the hold
    env.clock.value = H
    assert (await store.claim_fire("daily", H, expected_revision=1)).action == "fire"
    # The taker's write re-computed the instant exactly.
    assert await instant(env) == H + LEASE


async def test_due_is_bounded_and_ordered(env: Env) -> None:
    store = engine(env)
    for index in range(5):
        await store.register(hourly(id=f"t{index}", cron=f"{index} * * * *"))
    # Registered at 0: t0 ("0 * * * *") is next due at H, t1 at minute 1, t2 at minute 2...
    rows = await store.due(H, limit=3)
    assert [row.row.trigger_id for row in rows] == ["t1", "t2", "t3"]
    assert [row.attention_at for row in rows] == [MINUTE, 2 * MINUTE, 3 * MINUTE]
    assert [row.row.trigger_id for row in await store.due(H)] == ["t1", "t2", "t3", "t4", "t0"]
    with pytest.raises(TriggerError) as info:
        await store.due(H, limit=0)
    assert info.value.code == "invalid_options"
    assert info.value.path == "limit"


async def test_holding_lists_rows_with_a_holder(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    await store.register(hourly(id="idle"))
    env.clock.value = H
    await store.claim_fire("daily", H, expected_revision=1)
    assert [row.row.trigger_id for row in await store.holding()] == ["daily"]


async def test_register_many_leaves_unchanged_declarations_alone(env: Env) -> None:
    store = engine(env)
    first = await store.register_many([hourly(id=f"t{i}") for i in range(3)])
    assert [t.revision for t in first] == [1, 1, 1]
    again = await store.register_many(
        [hourly(id="t0"), hourly(id="t1", flow_id="changed"), hourly(id="t2"), hourly(id="t3")]
    )
    assert [(t.id, t.revision) for t in again] == [("t0", 1), ("t1", 2), ("t2", 1), ("t3", 1)]
    assert await instant(env, "t3") == H
    with pytest.raises(TriggerError) as info:
        await store.register_many([hourly(id="t9"), hourly(id="t9")])
    assert info.value.code == "invalid_trigger"
    assert await store.get("t9") is None  # refused whole: nothing written


@pytest.mark.usefixtures("sql_only")
async def test_rows_from_before_the_index_are_computed_by_the_first_due_read(env: Env) -> None:
    await env.store.register(hourly())
    await env.backdoor.set_columns("daily", attention_at_ms=UNKNOWN, registered_at_ms=None)
    env.clock.value = 2 * H + 5
    # Never fired and never registered through the index: counted as registered now.
    assert await due_ids(env, 2 * H + 5) == []
    await found_exactly_at(env, 3 * H)


def test_attention_rules() -> None:
    base = {
        "cron": "0 * * * *",
        "timezone": "UTC",
        "enabled": True,
        "overlap": "skip",
        "last_fired_at": None,
        "pending_at": None,
        "active": None,
        "claimed_at": None,
        "registered_at": 10,
    }

    def at(**changes: Any) -> int | None:
        return attention_at(AttentionInputs(**{**base, **changes}))

    assert at() == H
    assert at(last_fired_at=H) == 2 * H
    assert at(enabled=False) is None
    assert at(enabled=False, active="run-1") is None
    reservation = f"trigger-reservation:daily:abc:{2 * H}"
    assert at(last_fired_at=H, active=reservation, claimed_at=2 * H) == 2 * H + LEASE
    assert at(enabled=False, active=reservation, claimed_at=2 * H) == 2 * H + LEASE
    assert at(active=reservation, claimed_at=None) == 2 * H  # always expired: due at once
    assert at(last_fired_at=H, pending_at=H, active="run-1") == 2 * H
    assert at(last_fired_at=H, pending_at=H, active="run-1", overlap="supersede") == H
    assert at(last_fired_at=H, pending_at=H) == H
    assert at(registered_at=None) == UNKNOWN + 1
    assert at(cron="not a cron") == 10


async def test_register_many_answers_what_the_store_then_reads(env: Env) -> None:
    """A bulk registration makes a new row's answer from its declaration instead of reading
    it back: the answer must be what ``get`` reads, for new, unchanged and changed rows, and
    across the inserts' chunks (1 200 rows: more than one multi-row statement everywhere)."""
    store = engine(env)
    env.clock.value = 5 * MINUTE
    await store.register(hourly(id="t0000", input={"v": 1}))
    declared = [
        hourly(id=f"t{i:04d}", input={"n": i, "list": [i, "x"]}, enabled=i % 7 != 0)
        for i in range(1200)
    ]
    answers = await store.register_many(declared)
    assert [answer.id for answer in answers] == [d.id for d in declared]
    for answer in answers:
        assert answer == await store.get(answer.id)
    assert answers[0].revision == 2  # changed (its input)
    assert {answer.revision for answer in answers[1:]} == {1}
    assert await instant(env, "t0001") == H
    assert await instant(env, "t0007") is None  # disabled: no attention
    again = await store.register_many(declared)
    assert again == answers  # unchanged: nothing written, the same answers


async def test_register_many_writes_new_rows_in_a_few_statements(tmp_path: Any) -> None:
    """1 000 new triggers on SQLite: one read of what exists and multi-row inserts, not four
    statements per row (issue: registration at a million)."""
    from trio_triggers._store import open_sqlite_trigger_store

    async with open_sqlite_trigger_store(str(tmp_path / "t.sqlite")) as store:
        statements: list[str] = []
        store._database._connection.set_trace_callback(statements.append)
        registered = await store.register_many([hourly(id=f"t{i}") for i in range(1000)])
        assert len(registered) == 1000
        touching = [s for s in statements if "tt_triggers" in s]
        assert len(touching) <= 10, touching[:20]


async def test_register_many_restores_the_garbage_collector(env: Env) -> None:
    # The batch is built with the cyclic collector held off; a refused batch must hand the
    # collector back as it found it (on, or off when the application turned it off).
    store = engine(env)
    assert gc.isenabled()
    with pytest.raises(TriggerError):
        await store.register_many([hourly(id="t9"), hourly(id="t9", cron="not cron")])
    assert gc.isenabled()
    gc.disable()
    try:
        await store.register_many([hourly(id="t8")])
        assert not gc.isenabled()
    finally:
        gc.enable()
