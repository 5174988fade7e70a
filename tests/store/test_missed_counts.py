"""Occurrences that do not run, counted by reason on every store (issue 16, item 6).

Each reason is counted in the transaction that gives the occurrence up, and only there: the
claim that skips it or pushes it out of the buffer slot (``overlap``), the granted claim that
carries a scheduler's catch-up drops (``catch_up``, ``catch_up_bound``), the resume from now
(``paused``). A claim that is not granted, or a transaction that rolls back, counts nothing;
re-registering the trigger resets nothing; the ``trio_triggers.missed`` counter follows the
columns sample for sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from trio_triggers import Dropped, MissedCounts, TriggerError, _instrument
from trio_triggers._store._engine import EngineStore

from .helpers import Env, declaration

if TYPE_CHECKING:
    from collections.abc import Iterator

H = 3_600_000


def hourly(**changes: Any) -> Any:
    return declaration(**{"cron": "0 * * * *", "timezone": "UTC", **changes})


def engine(env: Env) -> EngineStore:
    store = env.store
    assert isinstance(store, EngineStore)
    return store


@pytest.fixture
def recorder() -> Iterator[_instrument.Recorder]:
    installed = _instrument.install_recorder()
    yield installed
    _instrument.reset()


async def counts(env: Env, trigger_id: str = "daily") -> MissedCounts:
    (row,) = [row for row in await env.store.list() if row.trigger_id == trigger_id]
    return row.missed


def samples(recorder: _instrument.Recorder) -> list[tuple[int, dict[str, Any]]]:
    return [
        (value, attrs) for name, value, attrs in recorder.counters if name == _instrument.MISSED
    ]


async def test_a_new_trigger_has_missed_nothing(env: Env) -> None:
    await env.store.register(hourly())
    assert await counts(env) == MissedCounts()
    assert (await counts(env)).total == 0


async def test_an_overlap_skip_is_counted_by_the_claim_that_skips(
    env: Env, recorder: _instrument.Recorder
) -> None:
    await env.store.register(hourly())
    assert (await env.claim(H)).action == "fire"
    assert (await env.claim(2 * H)).action == "skip"
    assert await counts(env) == MissedCounts(overlap=1)
    # The same occurrence claimed again (a peer, a retry) is not granted: nothing more.
    assert not (await env.claim(2 * H)).claimed
    assert (await env.claim(3 * H)).action == "skip"
    assert await counts(env) == MissedCounts(overlap=2)
    assert samples(recorder) == [
        (1, {"reason": "overlap", "trigger_id": "daily"}),
        (1, {"reason": "overlap", "trigger_id": "daily"}),
    ]


async def test_buffer_one_counts_what_the_slot_gives_up(env: Env) -> None:
    await env.store.register(hourly(overlap="buffer-one"))
    first = await env.claim(H)
    await env.launched(H, "run-1", first)
    assert (await env.claim(2 * H)).action == "buffer"
    assert await counts(env) == MissedCounts()  # the slot was empty: 2H is owed, not lost
    assert (await env.claim(3 * H)).action == "buffer"
    assert await counts(env) == MissedCounts(overlap=1)  # 2H pushed out by 3H
    await env.result(H, "completed", "run-1")
    pending = await env.store.claim_pending("daily", expected_revision=1)
    assert pending is not None
    assert (pending.occurrence, pending.claim.action) == (3 * H, "fire")
    assert await counts(env) == MissedCounts(overlap=1)


async def test_a_pending_slot_re_armed_behind_a_newer_one_counts_the_older(env: Env) -> None:
    await env.store.register(hourly(overlap="buffer-one"))
    first = await env.claim(H)
    await env.launched(H, "run-1", first)
    await env.claim(2 * H)  # buffered
    await env.result(H, "completed", "run-1")
    pending = await env.store.claim_pending("daily", expected_revision=1)
    assert pending is not None
    assert pending.claim.reservation_id is not None
    await env.store.set_pending("daily", 5 * H)  # a newer boundary took the slot meanwhile
    # The launch of 2H failed: re-arming it keeps the later 5H, and 2H is given up.
    await env.store.restore_pending("daily", 2 * H, pending.claim.reservation_id)
    assert (await env.held()).pending_at == 5 * H
    assert await counts(env) == MissedCounts(overlap=1)


async def test_catch_up_drops_count_only_with_a_granted_claim(
    env: Env, recorder: _instrument.Recorder
) -> None:
    await env.store.register(hourly(catch_up="none"))
    dropped = Dropped(after=H, catch_up=3, catch_up_bound=0)
    claim = await env.store.claim_fire("daily", 5 * H, expected_revision=1, dropped=dropped)
    assert claim.action == "fire"
    assert await counts(env) == MissedCounts(catch_up=3)
    # A second scheduler that computed the same gap loses the claim: nothing is counted twice.
    lost = await env.store.claim_fire("daily", 5 * H, expected_revision=1, dropped=dropped)
    assert not lost.claimed
    assert await counts(env) == MissedCounts(catch_up=3)
    assert samples(recorder) == [(3, {"reason": "catch_up", "trigger_id": "daily"})]


async def test_a_bound_drop_is_its_own_reason(env: Env) -> None:
    await env.store.register(hourly(catch_up="one", max_catch_up=0))
    dropped = Dropped(after=0, catch_up=3, catch_up_bound=1)
    await env.store.claim_fire("daily", 5 * H, expected_revision=1, dropped=dropped)
    assert await counts(env) == MissedCounts(catch_up=3, catch_up_bound=1)


async def test_drops_are_fenced_when_the_gap_was_taken_care_of(env: Env) -> None:
    await env.store.register(hourly())
    # A peer holds a reservation of 3H, inside the gap this scheduler counted from H.
    held = await env.claim(3 * H)
    stale = Dropped(after=H, catch_up=3)
    skipped = await env.store.claim_fire("daily", 5 * H, expected_revision=1, dropped=stale)
    assert skipped.action == "skip"  # granted, but the gap (H, 5H) is not all missed
    assert await counts(env) == MissedCounts(overlap=1)
    # Launched and settled, the cursor is at 3H: a gap counted from before it is fenced too.
    await env.launched(3 * H, "run-3", held)
    await env.result(3 * H, "completed", "run-3")
    await env.store.claim_fire("daily", 7 * H, expected_revision=1, dropped=stale)
    assert await counts(env) == MissedCounts(overlap=1)
    # A gap counted from the cursor stands.
    fresh = Dropped(after=7 * H, catch_up=2)
    await env.store.claim_fire("daily", 10 * H, expected_revision=1, dropped=fresh)
    assert await counts(env) == MissedCounts(overlap=2, catch_up=2)  # 10H skipped: 7H runs


async def test_a_fenced_revision_counts_nothing(env: Env) -> None:
    await env.store.register(hourly())
    await env.store.register(hourly(input={"v": 2}))  # revision 2
    with pytest.raises(TriggerError):
        await env.store.claim_fire("daily", 5 * H, expected_revision=1, dropped=Dropped(after=0))
    assert await counts(env) == MissedCounts()


async def test_a_rolled_back_claim_counts_nothing(env: Env, recorder: _instrument.Recorder) -> None:
    await env.store.register(hourly(overlap="buffer-one"))
    first = await env.claim(H)
    await env.launched(H, "run-1", first)
    await env.claim(2 * H)
    await env.backdoor.fail_pending_writes(True)
    with pytest.raises(TriggerError):
        await env.claim(3 * H)  # would push 2H out of the slot, but its write fails
    await env.backdoor.fail_pending_writes(False)
    assert await counts(env) == MissedCounts()
    assert samples(recorder) == []


async def test_resume_from_now_counts_paused_in_its_transaction(
    env: Env, recorder: _instrument.Recorder
) -> None:
    await env.store.register(hourly())
    env.clock.value = H
    await env.claim(H)
    env.clock.value = H + 5
    await engine(env).pause("daily")
    env.clock.value = 5 * H + 7  # 2H, 3H, 4H, 5H fell due while paused
    resumed = await engine(env).resume("daily", point="now")
    assert resumed.skipped == 4
    assert await counts(env) == MissedCounts(paused=4)
    again = await engine(env).resume("daily", point="now")  # not paused: nothing
    assert not again.was_paused
    await engine(env).pause("daily")
    env.clock.value = 8 * H
    await engine(env).resume("daily", point="policy")  # owed, not given up
    assert await counts(env) == MissedCounts(paused=4)
    assert samples(recorder) == [(4, {"reason": "paused", "trigger_id": "daily"})]


async def test_registration_never_resets_the_counts(env: Env) -> None:
    await env.store.register(hourly())
    await env.claim(H)
    await env.claim(2 * H)
    await env.store.register(hourly(input={"v": 2}, overlap="buffer-one"))
    await engine(env).register_many([hourly(enabled=False)])
    await env.store.register(hourly())
    assert await counts(env) == MissedCounts(overlap=1)


async def test_two_stores_claiming_with_the_same_drops_count_them_once(env: Env) -> None:
    """Two schedulers (two connections: on PostgreSQL two sessions racing for the row lock)
    claim the same first boundary after the same backlog, each carrying its drops."""
    await env.store.register(hourly())
    dropped = Dropped(after=0, catch_up=4)
    answers = []
    async with env.opened.peer() as other:

        async def claim(store: Any) -> None:
            answers.append(
                await store.claim_fire("daily", 5 * H, expected_revision=1, dropped=dropped)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, env.store)
            nursery.start_soon(claim, other)
    assert sorted(answer.claimed for answer in answers) == [False, True]
    assert await counts(env) == MissedCounts(catch_up=4)
