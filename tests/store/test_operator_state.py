"""Operator state on every store (issues 16 and 18): pause, resume and remove.

A pause stops new work (the attention index stops finding the row for its boundaries), survives
re-registration, fences claims decided before it (the revision grows), and a resume states its
point: ``"now"`` skips and counts what fell due, ``"policy"`` leaves it owed.
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_triggers import TriggerError
from trio_triggers._policies import due_occurrences
from trio_triggers._store._engine import EngineStore

from .helpers import Env, declaration

H = 3_600_000


def hourly(**changes: Any) -> Any:
    return declaration(**{"cron": "0 * * * *", "timezone": "UTC", **changes})


def engine(env: Env) -> EngineStore:
    store = env.store
    assert isinstance(store, EngineStore)
    return store


async def instant(env: Env, trigger_id: str = "daily") -> int | None:
    rows = await engine(env).due(2**53 - 1, limit=10_000)
    found = [row.attention_at for row in rows if row.row.trigger_id == trigger_id]
    return found[0] if found else None


async def test_pause_records_who_when_why_and_stops_attention(env: Env) -> None:
    store = engine(env)
    env.clock.value = H // 2
    await store.register(hourly())
    assert await instant(env) == H
    env.clock.value = H // 2 + 10
    paused = await store.pause("daily", note="db migration", by="ops@host")
    assert paused.paused is not None
    assert (paused.paused.at, paused.paused.note, paused.paused.by) == (
        H // 2 + 10,
        "db migration",
        "ops@host",
    )
    assert paused.revision == 2  # a claim decided on revision 1 is now fenced
    assert not paused.schedulable
    assert paused.enabled  # the declaration is untouched
    assert await instant(env) is None  # no tick has work for it
    with pytest.raises(TriggerError) as caught:
        await store.claim_fire("daily", H, expected_revision=1)
    assert caught.value.code == "revision_mismatch"
    assert await store.get("daily") == paused


async def test_pausing_again_keeps_the_time_and_a_new_note_replaces(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    env.clock.value = 100
    first = await store.pause("daily", note="one")
    env.clock.value = 200
    same = await store.pause("daily")
    assert same == first  # nothing to change: no write, no revision bump
    renoted = await store.pause("daily", note="two", by="b")
    assert renoted.paused is not None
    assert (renoted.paused.at, renoted.paused.note, renoted.paused.by) == (100, "two", "b")


async def test_re_registering_leaves_the_pause(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    await store.pause("daily", note="hold")
    changed = await store.register(hourly(input={"v": 2}))
    assert changed.paused is not None
    assert changed.paused.note == "hold"
    (again,) = await store.register_many([hourly(input={"v": 3})])
    assert again.paused is not None
    disabled = await store.register(hourly(enabled=False))
    assert disabled.paused is not None
    assert (await store.list())[0].trigger == disabled


async def test_resume_from_now_skips_and_counts_what_fell_due(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    env.clock.value = H
    claim = await store.claim_fire("daily", H, expected_revision=1)
    assert claim.claimed
    env.clock.value = H + 5
    await store.pause("daily")
    env.clock.value = 5 * H + 7  # 2H, 3H, 4H, 5H fell due while paused
    resumed = await store.resume("daily", point="now")
    assert resumed.was_paused
    assert resumed.skipped == 4
    assert not resumed.skipped_more
    trigger = resumed.trigger
    assert trigger.paused is None
    assert trigger.resume_after == 5 * H + 7
    assert trigger.revision == 3
    # A scheduler that last saw H owes nothing until 6H; one that never saw it, the same.
    assert due_occurrences(trigger, 5 * H + 9, H).occurrences == []
    assert due_occurrences(trigger, 5 * H + 9, None).occurrences == []
    assert due_occurrences(trigger, 6 * H, H).occurrences == [6 * H]
    # ... while the index still answers for the held reservation (its lease), not for 2H-5H.
    rows = await store.due(5 * H + 7)
    assert [row.row.trigger_id for row in rows] == ["daily"]  # the reservation's lease ran out
    assert await store.active_run("daily") is None


async def test_resume_from_now_does_not_count_a_claimed_boundary_at_the_pause(env: Env) -> None:
    # M is claimed in the very millisecond of the pause, its launch in flight (the cursor moves
    # only when the launch is recorded): it is being taken care of, not given up by the resume.
    minute = 60_000
    store = engine(env)
    await store.register(declaration(cron="* * * * *", timezone="UTC"))
    env.clock.value = minute
    assert (await store.claim_fire("daily", minute, expected_revision=1)).claimed
    await store.pause("daily")
    env.clock.value = 3 * minute + 7  # 2M and 3M fell due while paused
    resumed = await store.resume("daily", point="now")
    assert resumed.skipped == 2
    (row,) = await store.list()
    assert row.missed.paused == 2


async def test_resume_under_the_policy_owes_the_backlog(env: Env) -> None:
    store = engine(env)
    await store.register(hourly(catch_up="all", max_catch_up=10))
    env.clock.value = H
    await store.claim_fire("daily", H, expected_revision=1)
    await store.pause("daily")
    env.clock.value = 4 * H + 1
    resumed = await store.resume("daily", point="policy")
    assert resumed.was_paused
    assert resumed.skipped == 0
    trigger = resumed.trigger
    assert trigger.resume_after is None
    assert due_occurrences(trigger, 4 * H + 1, H).occurrences == [2 * H, 3 * H, 4 * H]


async def test_resume_of_a_trigger_that_is_not_paused_changes_nothing(env: Env) -> None:
    store = engine(env)
    registered = await store.register(hourly())
    resumed = await store.resume("daily", point="now")
    assert not resumed.was_paused
    assert resumed.trigger == registered
    assert await store.get("daily") == registered


async def test_resume_attention_comes_back_at_the_next_boundary(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    await store.pause("daily")
    env.clock.value = 3 * H + 1
    await store.resume("daily", point="now")
    assert await instant(env) == 4 * H
    await store.pause("daily")
    env.clock.value = 5 * H + 1
    await store.resume("daily", point="policy")
    assert await instant(env) == 4 * H  # still counted from the last resume point


async def test_unknown_trigger_and_bad_arguments_are_refused(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    for call in (store.pause("nope"), store.resume("nope", point="now")):
        with pytest.raises(TriggerError) as caught:
            await call
        assert caught.value.code == "unknown_trigger"
    with pytest.raises(TriggerError) as caught:
        await store.resume("daily", point="later")  # type: ignore[arg-type]
    assert caught.value.code == "invalid_options"
    with pytest.raises(TriggerError) as caught:
        await store.pause("daily", note="a\x00b")
    assert caught.value.code == "invalid_options"
    assert (await store.get("daily")) is not None
    assert (await store.get("daily")).paused is None  # type: ignore[union-attr]


async def test_the_count_is_bounded(env: Env) -> None:
    store = engine(env)
    await store.register(declaration(cron="* * * * * *", timezone="UTC"))
    await store.pause("daily")
    env.clock.value = 200_000 * 1000  # 200 000 every-second boundaries
    resumed = await store.resume("daily", point="now")
    assert resumed.skipped == 100_000
    assert resumed.skipped_more


async def test_remove_disables_marks_and_an_enabling_registration_clears(env: Env) -> None:
    store = engine(env)
    await store.register(hourly())
    env.clock.value = 42
    removed = await store.remove("daily")
    assert not removed.enabled
    assert removed.removed_at == 42
    assert removed.revision == 2
    assert await instant(env) is None
    env.clock.value = 50
    again = await store.remove("daily")  # removing a removed trigger changes nothing
    assert again == removed
    # A registration that keeps it disabled keeps the mark; one that enables it clears it.
    still = await store.register(hourly(enabled=False, input={"v": 1}))
    assert still.removed_at == 42
    (back,) = await store.register_many([hourly()])
    assert back.enabled
    assert back.removed_at is None


async def test_removing_a_disabled_trigger_marks_it_without_a_new_revision(env: Env) -> None:
    store = engine(env)
    await store.register(hourly(enabled=False))
    removed = await store.remove("daily")
    assert removed.removed_at is not None
    assert removed.revision == 1
    with pytest.raises(TriggerError) as caught:
        await store.remove("nope")
    assert caught.value.code == "unknown_trigger"
