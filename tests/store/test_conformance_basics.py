"""Conformance: registration, reads, fences, decoding, heartbeats, bad input (§9.2-§9.5, §9.16)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from trio_triggers._declarations import Trigger
from trio_triggers._store import (
    Held,
    HistoryQuery,
    Listed,
    Result,
    SchedulerHeartbeat,
    TriggerStore,
    listed,
)

from .helpers import DAILY, Env, declaration, raises


async def test_store_satisfies_protocol(env: Env) -> None:
    assert isinstance(env.store, TriggerStore)


async def test_missing_rows_raise_unknown_trigger(env: Env) -> None:
    s = env.store
    calls: list[Any] = [
        lambda: s.claim_fire("absent", 1, expected_revision=1),
        lambda: s.record_result(Result(trigger_id="absent", occurrence=1, outcome="completed")),
        lambda: s.set_pending("absent", 1),
        lambda: s.restore_pending("absent", 1, "trigger-reservation:absent:x:1"),
        lambda: s.active_run("absent"),
        lambda: s.active_occurrence("absent", "run"),
        lambda: s.claim_pending("absent", expected_revision=1),
        lambda: s.inspect("absent"),
    ]
    for call in calls:
        with raises("unknown_trigger", "unknown trigger absent"):
            await call()
    # never raised by these
    assert await s.get("absent") is None
    await s.clear_active("absent", "run")
    assert (await s.history(HistoryQuery(trigger_id="absent"))).items == []
    assert await s.prune_fires(10) == 0
    assert await s.last_heartbeat() is None
    assert await env.backdoor.dump() == {
        "tt_triggers": [],
        "tt_trigger_fires": [],
        "tt_scheduler_heartbeats": [],
    }


async def test_register_upsert_keeps_held_state(env: Env) -> None:
    first = await env.register()
    assert first.revision == 1
    assert first.last_fired_at is None
    await env.register(id="other")
    claim = await env.claim(5)
    await env.launched(5, "run-5", claim)
    again = await env.register(flow_id="next")
    assert again.revision == 2
    assert again.flow_id == "next"
    assert again.last_fired_at == 5
    assert await env.held() == Held(active_run_id="run-5")
    assert [row.trigger_id for row in await env.store.list()] == ["daily", "other"]
    assert [t.id for t in await env.store.list_enabled()] == ["daily", "other"]
    third = await env.register(cron="0 1 * * *", overlap="supersede", enabled=False)
    assert (third.revision, third.cron, third.overlap, third.enabled) == (
        3,
        "0 1 * * *",
        "supersede",
        False,
    )
    assert third.last_fired_at == 5
    assert await env.held() == Held(active_run_id="run-5")


async def test_register_answers_what_get_reads(env: Env) -> None:
    registered = await env.register()
    assert await env.store.get("daily") == registered
    assert registered.declaration == declaration()


async def test_list_order_and_enabled(env: Env) -> None:
    await env.register(id="weekly")
    await env.register(id="hourly")
    await env.register(id="daily", enabled=False)
    assert [row.trigger_id for row in await env.store.list()] == ["daily", "hourly", "weekly"]
    assert [t.id for t in await env.store.list_enabled()] == ["hourly", "weekly"]


async def test_list_orders_by_code_point(env: Env) -> None:
    ids = ["b", "B", "a", "é", "Z", "aa", "\u00e9t\u00e9", "\U0001f600", "~"]
    for trigger_id in ids:
        await env.register(id=trigger_id)
    assert [row.trigger_id for row in await env.store.list()] == sorted(ids)


async def test_listing_carries_held_state(env: Env) -> None:
    await env.register(overlap="buffer-one")
    claim = await env.claim(1)
    await env.launched(1, "run-1", claim)
    await env.store.set_pending("daily", 2)
    rows = await env.store.list()
    assert len(rows) == 1
    row = rows[0]
    assert (row.trigger_id, row.active_run_id, row.pending_at, row.error) == (
        "daily",
        "run-1",
        2,
        None,
    )
    assert row.trigger is not None
    assert row.trigger.revision == 1
    assert row == listed(row.trigger, Held(active_run_id="run-1", pending_at=2))


async def test_fences(env: Env) -> None:
    await env.register()
    with raises("revision_mismatch", "trigger daily is at revision 1, not the claimed 2"):
        await env.claim(1, revision=2)
    await env.register(enabled=False)
    with raises("trigger_disabled", "trigger daily is disabled"):
        await env.claim(1, revision=2)
    # the revision check comes first
    with raises("revision_mismatch", "trigger daily is at revision 2, not the claimed 1"):
        await env.claim(1, revision=1)
    # a refusal writes nothing (no ledger row)
    assert (await env.backdoor.dump())["tt_trigger_fires"] == []
    assert await env.held() == Held()


async def test_round_trip_and_snapshots(env: Env) -> None:
    value: dict[str, Any] = {"nested": [1, "two", None], "enabled": True}
    trigger = Trigger(id="daily", flow_id="flow", input=value, cron="0 0 * * *", max_catch_up=1)
    registered = await env.store.register(trigger)
    assert registered.input == {"nested": [1, "two", None], "enabled": True}
    value["nested"].append("changed")
    value["extra"] = 1
    got = await env.store.get("daily")
    assert got is not None
    assert got.input == {"nested": [1, "two", None], "enabled": True}
    # mutating an answer never changes stored state
    got.input["nested"].append("answer")  # type: ignore[union-attr]
    registered.input["nested"].append("answer")  # type: ignore[union-attr]
    again = await env.store.get("daily")
    assert again is not None
    assert again.input == {"nested": [1, "two", None], "enabled": True}
    assert list(again.input) == ["nested", "enabled"]
    rows = await env.store.list()
    assert rows[0].trigger is not None
    assert rows[0].trigger.input is not again.input


async def test_register_revalidates_a_directly_built_trigger(env: Env) -> None:
    bad = Trigger(id="", flow_id="flow", input={}, cron="0 0 * * *")
    with raises("invalid_trigger", path="id"):
        await env.store.register(bad)
    nan = Trigger(id="x", flow_id="flow", input={"v": float("nan")}, cron="0 0 * * *")
    with raises("invalid_trigger", path="input"):
        await env.store.register(nan)
    nul = Trigger(id="a\x00b", flow_id="flow", input={}, cron="0 0 * * *")
    with raises("invalid_trigger", path="id"):
        await env.store.register(nul)
    assert await env.store.list() == []


async def test_register_snapshot_is_taken_before_the_first_checkpoint(env: Env) -> None:
    value: dict[str, Any] = {"k": "before"}
    trigger = Trigger(id="daily", flow_id="flow", input=value, cron="0 0 * * *")
    async with trio.open_nursery() as nursery:

        async def register() -> None:
            await env.store.register(trigger)

        nursery.start_soon(register)
        await trio.testing.wait_all_tasks_blocked()
        value["k"] = "after"
    got = await env.store.get("daily")
    assert got is not None
    assert got.input == {"k": "before"}


@pytest.mark.parametrize(
    "trigger_id",
    ["it's", 'say "hi"', "a; DROP TABLE tt_triggers; --", "x" * 10_000, "'; --\"\\"],
)
async def test_hostile_ids_are_stored_exactly(env: Env, trigger_id: str) -> None:
    registered = await env.register(id=trigger_id, flow_id=trigger_id)
    assert registered.id == trigger_id
    got = await env.store.get(trigger_id)
    assert got is not None
    assert got.id == trigger_id
    assert got.flow_id == trigger_id
    claim = await env.claim(1, trigger_id=trigger_id)
    assert claim.action == "fire"
    await env.launched(1, trigger_id, claim, tid=trigger_id)
    assert await env.store.active_run(trigger_id) == trigger_id
    assert [row.trigger_id for row in await env.store.list()] == [trigger_id]
    items = (await env.store.history(HistoryQuery(trigger_id=trigger_id))).items
    assert [(r.trigger_id, r.run_id) for r in items] == [(trigger_id, trigger_id)]


async def test_nul_ids_are_refused_or_absent_and_write_nothing(env: Env) -> None:
    await env.register()
    before = await env.backdoor.dump()
    with raises("invalid_trigger", path="id"):
        await env.register(id="da\x00ily")
    with raises("unknown_trigger", "unknown trigger da\x00ily"):
        await env.claim(1, trigger_id="da\x00ily")
    with raises("unknown_trigger"):
        await env.store.inspect("\x00")
    assert await env.store.get("\x00") is None
    await env.store.clear_active("daily", "\x00")
    assert (await env.store.history(HistoryQuery(trigger_id="\x00"))).items == []
    assert (await env.store.history(HistoryQuery(run_id="\x00"))).items == []
    claim = await env.claim(1)
    with raises("invalid_options", path="run_id"):
        await env.launched(1, "run\x00", claim)
    with raises("invalid_options", path="error"):
        await env.result(1, "failed", reservation_id=claim.reservation_id, error="e\x00")
    with raises("invalid_options", path="host"):
        await env.store.heartbeat("h\x00")
    after = await env.backdoor.dump()
    assert len(after["tt_trigger_fires"]) == 1  # only the claim wrote
    assert after["tt_scheduler_heartbeats"] == before["tt_scheduler_heartbeats"] == []


async def test_non_json_input_is_refused_and_writes_nothing(env: Env) -> None:
    for value in (float("inf"), {1: "x"}, (1, 2), {"s": {1, 2}}, b"raw", object()):
        bad = Trigger(id="x", flow_id="flow", input=value, cron="0 0 * * *")  # type: ignore[arg-type]
        with raises("invalid_trigger", path="input"):
            await env.store.register(bad)
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with raises("invalid_trigger", path="input"):
        await env.store.register(Trigger(id="x", flow_id="f", input=cyclic, cron="0 0 * * *"))
    lone = Trigger(id="x", flow_id="f", input={"s": "\ud800"}, cron="0 0 * * *")
    with raises("invalid_trigger", path="input"):
        await env.store.register(lone)
    assert await env.store.list() == []


@pytest.mark.parametrize("occurrence", [2**53, -(2**53), 1.5, True])
async def test_out_of_range_occurrences_are_refused(env: Env, occurrence: Any) -> None:
    await env.register()
    with raises("invalid_options", path="occurrence"):
        await env.claim(occurrence)
    with raises("invalid_options", path="occurrence"):
        await env.store.set_pending("daily", occurrence)
    assert (await env.backdoor.dump())["tt_trigger_fires"] == []
    assert await env.held() == Held()


async def test_optional_columns(env: Env) -> None:
    registered = await env.register(
        timezone="America/New_York", overlap="buffer-one", catch_up="all", max_catch_up=4
    )
    assert registered.declaration == declaration(
        timezone="America/New_York", overlap="buffer-one", catch_up="all", max_catch_up=4
    )
    assert registered.revision == 1
    assert registered.last_fired_at is None
    claim = await env.claim(7)
    await env.launched(7, "run-7", claim)
    assert await env.cursor() == 7


async def test_cursor_after_launch(env: Env) -> None:
    await env.register()
    claim = await env.claim(7)
    assert await env.cursor() is None
    await env.launched(7, "run-7", claim)
    assert await env.cursor() == 7


async def test_decode_failure_is_isolated_to_its_row(env: Env) -> None:
    await env.register()
    await env.register(id="a-corrupt")
    await env.backdoor.set_columns("a-corrupt", input_json="{not json")
    with raises("store", "could not decode trigger row a-corrupt") as caught:
        await env.store.get("a-corrupt")
    assert caught.error is not None
    assert caught.error.__cause__ is not None
    rows = await env.store.list()
    assert [row.trigger_id for row in rows] == ["a-corrupt", "daily"]
    corrupt, healthy = rows
    assert corrupt.trigger is None
    assert corrupt.error is not None
    assert corrupt.error.code == "store"
    assert corrupt.error.message == "could not decode trigger row a-corrupt"
    assert healthy.error is None
    assert healthy.trigger is not None
    with raises("store", "could not decode trigger row a-corrupt"):
        await env.store.list_enabled()
    await env.backdoor.set_columns("daily", input_json='"ok"')
    got = await env.store.get("daily")
    assert got is not None
    assert got.input == "ok"


async def test_corrupt_daily_get_raises(env: Env) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", input_json="[1,")
    with raises("store", "could not decode trigger row daily") as caught:
        await env.store.get("daily")
    assert caught.error is not None
    assert caught.error.__cause__ is not None


@pytest.mark.parametrize(
    "columns",
    [{"revision": "one"}, {"max_catch_up": 1001}, {"flow_id": ""}, {"last_fired_at_ms": "x"}],
)
async def test_corrupt_columns_fail_decoding(env: Env, columns: dict[str, object]) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", **columns)
    with raises("store", "could not decode trigger row daily"):
        await env.store.get("daily")
    rows = await env.store.list()
    assert rows[0].error is not None
    assert rows[0].trigger is None


async def test_statement_failures(env: Env) -> None:
    await env.register()
    claim = await env.claim(1)
    await env.backdoor.break_tables()
    with raises("store", "trigger store read failed") as caught:
        await env.store.list()
    assert caught.error is not None
    assert caught.error.__cause__ is not None
    with raises("store", "trigger store write failed"):
        await env.result(1, "completed", reservation_id=claim.reservation_id)
    with raises("store", "trigger store read failed"):
        await env.store.history()
    with raises("store", "trigger store write failed"):
        await env.store.heartbeat("h")


async def test_heartbeats(env: Env) -> None:
    s = env.store
    assert await s.last_heartbeat() is None
    await s.heartbeat("b")
    assert await s.last_heartbeat() == SchedulerHeartbeat(host="b", ticked_at=0)
    await s.heartbeat("a")
    assert await s.last_heartbeat() == SchedulerHeartbeat(host="a", ticked_at=0)
    env.clock.advance(10)
    await s.heartbeat("b")
    assert await s.last_heartbeat() == SchedulerHeartbeat(host="b", ticked_at=10)
    await s.heartbeat("a")
    assert await s.last_heartbeat() == SchedulerHeartbeat(host="a", ticked_at=10)


async def test_models_are_frozen_msgspec_structs() -> None:
    row = Listed(trigger_id="x", trigger=None)
    with pytest.raises(AttributeError):
        row.trigger_id = "y"  # type: ignore[misc]
    held = msgspec.json.decode(msgspec.json.encode(Held(pending_at=3)), type=Held)
    assert held == Held(pending_at=3)
    assert DAILY["id"] == "daily"


async def test_register_parses_the_cron(env: Env) -> None:
    bad = Trigger(id="x", flow_id="flow", input={}, cron="not a cron")
    with raises("invalid_cron"):
        await env.store.register(bad)
    never = Trigger(id="x", flow_id="flow", input={}, cron="0 0 30 2 *")
    with raises("unsatisfiable_cron", "cron expression '0 0 30 2 *' has no next occurrence"):
        await env.store.register(never)
    zone = Trigger(id="x", flow_id="flow", input={}, cron="0 0 * * *", timezone="Mars/Base")
    with raises("invalid_cron"):
        await env.store.register(zone)
    assert await env.store.list() == []


async def test_a_cancelled_call_writes_nothing(env: Env) -> None:
    await env.register()
    dump = await env.backdoor.dump()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await env.claim(1)
        with pytest.raises(trio.Cancelled):
            await env.register(flow_id="changed")
    assert await env.backdoor.dump() == dump
    # every call is a checkpoint at its start, even when it would fail
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await env.store.inspect("absent")


async def test_calls_cancelled_mid_flight_are_atomic(env: Env) -> None:
    await env.register(overlap="supersede")
    for occurrence in range(1, 21):
        with trio.move_on_after(0.0 if occurrence % 2 else 1.0):
            await env.claim(occurrence)
    dump = await env.backdoor.dump()
    fires = dump["tt_trigger_fires"]
    held = await env.held()
    # each claim either happened completely (row + reservation) or not at all
    claimed = [row[1] for row in fires]
    assert claimed == sorted(claimed)
    assert held.active_run_id is not None
    assert held.active_run_id.endswith(f":{claimed[-1]}")
