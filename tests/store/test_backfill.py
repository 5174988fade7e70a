"""Backfill state on every store (issue 16): start, step, cancel.

A backfill is a durable part of the trigger's row: starting one is refused with a typed error and
nothing written when its arguments are bad; each step is the ordinary claim of one boundary and
the progress moved on, in ONE transaction (a boundary already in the ledger is passed over, a
step that lost the race writes nothing); the attention index brings the row to a tick while it
runs, unless the trigger is paused or an occurrence waits in the buffer slot.
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_triggers import Result, TriggerError
from trio_triggers._store._engine import EngineStore

from .helpers import LEASE, Env, declaration

H = 3_600_000


def hourly(**changes: Any) -> Any:
    return declaration(**{"cron": "0 * * * *", "timezone": "UTC", **changes})


def engine(env: Env) -> EngineStore:
    store = env.store
    assert isinstance(store, EngineStore)
    return store


async def instant(env: Env) -> int | None:
    rows = await engine(env).due(2**53 - 1, limit=10_000)
    found = [row.attention_at for row in rows if row.row.trigger_id == "daily"]
    return found[0] if found else None


async def fire(store: EngineStore, occurrence: int, revision: int = 1) -> None:
    """Claim ``occurrence`` and settle it ``completed``, as a scheduler would."""
    claim = await store.claim_fire("daily", occurrence, expected_revision=revision)
    assert claim.claimed
    assert claim.reservation_id is not None
    run_id = f"run-{occurrence // H}"
    for outcome in ("launched", "completed"):
        await store.record_result(
            Result(
                trigger_id="daily",
                occurrence=occurrence,
                outcome=outcome,
                run_id=run_id,
                reservation_id=claim.reservation_id if outcome == "launched" else None,
            )
        )


async def ten_hours_in(env: Env, **changes: Any) -> EngineStore:
    """``daily`` registered at 0, its schedule at 10H (fired), the clock at 10H + 5 s."""
    store = engine(env)
    await store.register(hourly(**changes))
    env.clock.value = 10 * H + 5_000
    await fire(store, 10 * H)
    return store


async def test_start_records_the_backfill_and_brings_the_row_to_a_tick(env: Env) -> None:
    store = await ten_hours_in(env)
    started = await store.start_backfill("daily", start=H, end=9 * H, by="ops@host")
    backfill = started.backfill
    assert backfill is not None
    assert (backfill.start, backfill.end, backfill.next, backfill.total, backfill.done) == (
        H,
        9 * H,
        H,
        9,
        0,
    )
    assert (backfill.bound, backfill.overlap, backfill.state) == (1_000, None, "running")
    assert (backfill.created_at, backfill.by) == (10 * H + 5_000, "ops@host")
    assert backfill.running
    assert started.revision == 1  # no fence: the declaration did not change
    assert started.resume_after == 10 * H  # the floor: the schedule's own progress
    assert await instant(env) == H  # a past instant: the next tick takes a step
    assert await store.get("daily") == started


async def test_a_never_fired_trigger_is_floored_at_its_registration(env: Env) -> None:
    store = engine(env)
    env.clock.value = 30 * H + 7
    await store.register(hourly())
    env.clock.value = 31 * H
    started = await store.start_backfill("daily", start=0, end=30 * H)
    assert started.backfill is not None
    assert started.backfill.total == 31
    # The backfill's results will move the fire cursor to old boundaries: the floor keeps the
    # schedule from reading them as a backlog it owes.
    assert started.resume_after == 30 * H
    with pytest.raises(TriggerError) as caught:
        await store.start_backfill("daily", start=0, end=31 * H)
    assert caught.value.code == "invalid_options"  # (a backfill is already running, too)


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"start": 5 * H, "end": 4 * H}, "end"),  # end before start
        ({"start": H, "end": 10 * H + 6_000}, "end"),  # end in the future
        ({"start": -1, "end": H}, "start"),
        ({"start": H, "end": 2.5}, "end"),
        ({"start": H + 1, "end": H + 2}, "start"),  # no boundary in the interval
        ({"start": H, "end": 9 * H, "max_boundaries": 5}, "max_boundaries"),  # over the bound
        ({"start": H, "end": H, "max_boundaries": 0}, "max_boundaries"),
        ({"start": H, "end": H, "max_boundaries": 100_001}, "max_boundaries"),
        ({"start": H, "end": H, "overlap": "queue"}, "overlap"),
        ({"start": H, "end": H, "by": "a\x00b"}, "by"),
    ],
)
async def test_bad_arguments_are_refused_and_nothing_is_written(
    env: Env, arguments: dict[str, Any], path: str
) -> None:
    store = await ten_hours_in(env)
    before = await env.backdoor.dump()
    with pytest.raises(TriggerError) as caught:
        await store.start_backfill("daily", **arguments)
    assert (caught.value.code, caught.value.path) == ("invalid_options", path)
    assert await env.backdoor.dump() == before


async def test_unknown_trigger_and_a_second_backfill_are_refused(env: Env) -> None:
    store = await ten_hours_in(env)
    with pytest.raises(TriggerError) as caught:
        await store.start_backfill("nope", start=H, end=2 * H)
    assert caught.value.code == "unknown_trigger"
    for call in (
        store.cancel_backfill("nope"),
        store.backfill_step("nope", H, expected_revision=1),
    ):
        with pytest.raises(TriggerError) as caught:
            await call
        assert caught.value.code == "unknown_trigger"
    await store.start_backfill("daily", start=H, end=2 * H)
    before = await env.backdoor.dump()
    with pytest.raises(TriggerError) as caught:
        await store.start_backfill("daily", start=3 * H, end=4 * H)
    assert (caught.value.code, caught.value.path) == ("invalid_options", "backfill")
    assert await env.backdoor.dump() == before


async def test_the_end_may_not_pass_the_schedules_own_progress(env: Env) -> None:
    store = await ten_hours_in(env)
    env.clock.value = 13 * H  # 11H-13H fell due; the schedule has not taken them yet
    before = await env.backdoor.dump()
    with pytest.raises(TriggerError) as caught:
        await store.start_backfill("daily", start=H, end=11 * H)
    assert (caught.value.code, caught.value.path) == ("invalid_options", "end")
    assert "progress" in caught.value.message
    assert await env.backdoor.dump() == before
    started = await store.start_backfill("daily", start=H, end=10 * H)  # up to it is fine
    assert started.backfill is not None
    assert started.backfill.total == 10


async def test_steps_claim_in_order_pass_over_fired_boundaries_and_finish(env: Env) -> None:
    store = await ten_hours_in(env)
    await env.backdoor.put_fire("daily", 2 * H, "completed", run_id="run-old")
    await store.start_backfill("daily", start=H, end=3 * H)
    claim = await store.backfill_step("daily", H, expected_revision=1)
    assert claim.claimed
    assert claim.action == "fire"
    assert claim.reservation_id is not None
    assert claim.reservation_id.endswith(f":{H}")
    after = await store.get("daily")
    assert after is not None
    assert after.backfill is not None
    assert (after.backfill.next, after.backfill.done) == (2 * H, 1)
    # The run holds the trigger; under skip the next boundary would be skipped, so settle it.
    for outcome in ("launched", "completed"):
        await store.record_result(
            Result(
                trigger_id="daily",
                occurrence=H,
                outcome=outcome,
                run_id="run-b1",
                reservation_id=claim.reservation_id if outcome == "launched" else None,
            )
        )
    # 2H is in the ledger already: passed over, never run twice; the progress moves on.
    passed = await store.backfill_step("daily", 2 * H, expected_revision=1)
    assert not passed.claimed
    again = await store.get("daily")
    assert again is not None
    assert again.backfill is not None
    assert (again.backfill.next, again.backfill.done) == (3 * H, 2)
    assert again.last_fired_at == 10 * H  # the cursor never moved back
    last = await store.backfill_step("daily", 3 * H, expected_revision=1)
    assert last.claimed
    done = await store.get("daily")
    assert done is not None
    assert done.backfill is not None
    assert (done.backfill.next, done.backfill.done, done.backfill.state) == (None, 3, "done")
    assert not done.backfill.running
    assert await instant(env) == 10 * H + 5_000 + LEASE  # only the reservation's lease now


async def test_a_step_that_is_not_the_progress_writes_nothing(env: Env) -> None:
    store = await ten_hours_in(env)
    await store.start_backfill("daily", start=H, end=3 * H)
    await store.backfill_step("daily", H, expected_revision=1)
    before = await env.backdoor.dump()
    # A second scheduler that read the same progress: its step lost the race.
    late = await store.backfill_step("daily", H, expected_revision=1)
    assert not late.claimed
    assert await env.backdoor.dump() == before
    with pytest.raises(TriggerError) as caught:
        await store.backfill_step("daily", 2 * H, expected_revision=7)
    assert caught.value.code == "revision_mismatch"
    assert await env.backdoor.dump() == before


async def test_the_overlap_policy_applies_and_an_override_replaces_it(env: Env) -> None:
    store = await ten_hours_in(env)
    env.clock.value = 11 * H
    held = await store.claim_fire("daily", 11 * H, expected_revision=1)  # a run holds it
    assert held.claimed
    await store.start_backfill("daily", start=H, end=2 * H)
    skipped = await store.backfill_step("daily", H, expected_revision=1)
    assert (skipped.claimed, skipped.action) == (True, "skip")  # the trigger's policy
    await store.cancel_backfill("daily")
    await store.start_backfill("daily", start=3 * H, end=4 * H, overlap="buffer-one")
    buffered = await store.backfill_step("daily", 3 * H, expected_revision=1)
    assert (buffered.claimed, buffered.action) == (True, "buffer")
    assert (await store.inspect("daily")).pending_at == 3 * H
    # The backfill waits behind the buffered occurrence: no attention for it, no step.
    assert await instant(env) == 11 * H + LEASE  # the lease of the held reservation
    before = await env.backdoor.dump()
    waiting = await store.backfill_step("daily", 4 * H, expected_revision=1)
    assert not waiting.claimed
    assert await env.backdoor.dump() == before


async def test_a_step_is_one_transaction(env: Env) -> None:
    store = await ten_hours_in(env)
    env.clock.value = 11 * H
    await store.claim_fire("daily", 11 * H, expected_revision=1)
    await store.start_backfill("daily", start=H, end=2 * H, overlap="buffer-one")
    before = await env.backdoor.dump()
    await env.backdoor.fail_pending_writes(True)
    with pytest.raises(TriggerError) as caught:
        await store.backfill_step("daily", H, expected_revision=1)
    assert caught.value.code == "store"
    await env.backdoor.fail_pending_writes(False)
    # Neither the ledger row, nor the buffer slot, nor the progress: all or nothing.
    assert await env.backdoor.dump() == before


async def test_a_paused_or_disabled_trigger_takes_no_step(env: Env) -> None:
    store = await ten_hours_in(env)
    await store.start_backfill("daily", start=H, end=2 * H)
    paused = await store.pause("daily")
    assert await instant(env) is None
    before = await env.backdoor.dump()
    assert not (await store.backfill_step("daily", H, expected_revision=paused.revision)).claimed
    assert await env.backdoor.dump() == before
    resumed = await store.resume("daily", point="policy")
    assert await instant(env) == H  # it carries on where it stopped
    disabled = await store.register(hourly(enabled=False))
    assert disabled.backfill is not None  # operator state: a registration leaves it
    assert await instant(env) is None
    with pytest.raises(TriggerError) as caught:
        await store.backfill_step("daily", H, expected_revision=disabled.revision)
    assert caught.value.code == "trigger_disabled"
    assert resumed.trigger.revision < disabled.revision


async def test_cancel_stops_it_keeps_its_count_and_allows_a_new_one(env: Env) -> None:
    store = await ten_hours_in(env)
    await store.start_backfill("daily", start=H, end=5 * H)
    await store.backfill_step("daily", H, expected_revision=1)
    cancelled = await store.cancel_backfill("daily")
    assert cancelled.backfill is not None
    assert (cancelled.backfill.state, cancelled.backfill.next, cancelled.backfill.done) == (
        "cancelled",
        None,
        1,
    )
    assert await store.cancel_backfill("daily") == cancelled  # nothing running: no change
    assert not (await store.backfill_step("daily", 2 * H, expected_revision=1)).claimed
    again = await store.start_backfill("daily", start=6 * H, end=7 * H, max_boundaries=2)
    assert again.backfill is not None
    assert (again.backfill.state, again.backfill.total, again.backfill.bound) == (
        "running",
        2,
        2,
    )


async def test_a_cron_edit_re_aligns_the_progress_to_the_new_schedule(env: Env) -> None:
    store = await ten_hours_in(env)
    await store.start_backfill("daily", start=H, end=4 * H)  # hourly: next H
    edited = await store.register(hourly(cron="30 * * * *"))  # now at half past
    realigned = await store.backfill_step("daily", H, expected_revision=edited.revision)
    assert not realigned.claimed  # H is no boundary any more: nothing claimed, nothing fired
    assert H not in [item.occurrence for item in (await store.history()).items]
    after = await store.get("daily")
    assert after is not None
    assert after.backfill is not None
    assert (after.backfill.next, after.backfill.done) == (H + H // 2, 0)
    claim = await store.backfill_step("daily", H + H // 2, expected_revision=edited.revision)
    assert claim.claimed
