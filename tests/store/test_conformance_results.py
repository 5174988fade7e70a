"""Conformance: results, restores, the pending slot and the holder methods (§9.8-§9.13)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trio_triggers._identities import reservation_id
from trio_triggers._store import Claim, Held, HistoryQuery, Result

from .helpers import LEASE, Env, raises


def rid(claim: Claim) -> str:
    assert claim.reservation_id is not None
    return claim.reservation_id


async def test_old_unqualified_result_is_a_harmless_repeat(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    await env.result(1, "completed", "run-1")
    await env.launched(2, "run-2", await env.claim(2))
    await env.result(1, "completed")
    assert await env.store.active_run("daily") == "run-2"
    await env.result(2, "completed")
    assert await env.store.active_run("daily") is None


@pytest.mark.parametrize("run_id", [None, "", "   "])
async def test_invalid_launched_run_id(env: Env, run_id: str | None) -> None:
    await env.register()
    c1 = await env.claim(1)
    before = await env.held()
    with raises("invalid_options", "launched requires a non-empty run_id", "run_id"):
        await env.launched(1, run_id, c1)
    assert await env.held() == before
    assert await env.newest_outcome() is None


@pytest.mark.parametrize("variant", ["newer-launch", "completed-by-reservation"])
async def test_late_launched_result_is_fenced(env: Env, variant: str) -> None:
    await env.register(overlap="supersede")
    c1 = await env.claim(1)
    if variant == "newer-launch":
        c2 = await env.claim(2)
        await env.launched(2, "new-run", c2)
    else:
        await env.result(1, "completed", reservation_id=rid(c1))
    held, history = await env.held(), await env.store.history()
    with raises("stale_owner", "result no longer owns trigger daily occurrence 1"):
        await env.launched(1, "old-run", c1)
    assert await env.held() == held
    assert await env.store.history() == history


async def test_unclaimed_occurrence_result_is_refused(env: Env) -> None:
    registered = await env.register()
    with raises("stale_owner", "result no longer owns trigger daily occurrence 1"):
        await env.result(1, "completed")
    assert (await env.store.history()).items == []
    assert await env.store.get("daily") == registered


@pytest.mark.parametrize("settled_first", [False, True])
async def test_restore_only_a_live_predecessor(env: Env, settled_first: bool) -> None:
    await env.register(overlap="supersede")
    await env.launched(1, "predecessor", await env.claim(1))
    c2 = await env.claim(2)
    assert c2.action == "supersede"
    if settled_first:
        await env.result(1, "superseded", "predecessor")
    await env.store.restore_pending("daily", 2, rid(c2))
    expected = (
        Held(pending_at=2) if settled_first else Held(active_run_id="predecessor", pending_at=2)
    )
    assert await env.held() == expected


@pytest.mark.parametrize("outcome", ["launched", "failed", "superseded"])
async def test_previous_attempt_fenced_after_reclaim(env: Env, outcome: Any) -> None:
    await env.register()
    r1 = rid(await env.claim(1))
    env.clock.advance(LEASE + 1)
    c1b = await env.claim(1)
    r2 = rid(c1b)
    assert r2 != r1
    held = await env.held()
    with raises("stale_owner"):
        await env.result(1, outcome, "old-run", reservation_id=r1)
    assert await env.held() == held
    assert await env.newest_outcome() is None
    await env.launched(1, "new-run", r2)
    assert await env.held() == Held(active_run_id="new-run")


async def test_atomic_buffered_restore(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    await env.claim(2)
    await env.result(1, "completed")
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    r = rid(answer.claim)
    assert await env.held() == Held(active_run_id=r)
    await env.store.restore_pending("daily", 2, r)
    assert await env.held() == Held(pending_at=2)
    assert await env.newest_outcome() == "buffered"
    again = await env.store.claim_pending("daily", expected_revision=1)
    assert again is not None
    r_prime = rid(again.claim)
    await env.store.set_pending("daily", 3)
    dump = await env.backdoor.dump()
    with raises("stale_owner", "pending restoration no longer owns reservation"):
        await env.store.restore_pending("daily", 2, r)
    assert await env.backdoor.dump() == dump
    await env.store.restore_pending("daily", 2, r_prime)
    assert await env.held() == Held(pending_at=3)


async def test_restore_requires_matching_occurrence_and_unfinished_row(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    with raises("stale_owner"):
        await env.store.restore_pending("daily", 2, rid(c1))
    await env.result(1, "skipped", reservation_id=rid(c1))
    await env.backdoor.set_columns("daily", active_run_id=rid(c1))
    with raises("stale_owner"):
        await env.store.restore_pending("daily", 1, rid(c1))


async def test_terminal_result_naming_another_run(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    await env.launched(1, "run", c1)
    ledger = await env.ledger()
    with raises("stale_owner"):
        await env.result(1, "completed", "other-run")
    assert await env.ledger() == ledger
    assert await env.held() == Held(active_run_id="run")
    await env.result(1, "completed")
    await env.result(1, "completed", "run")
    with raises("stale_owner"):
        await env.result(1, "completed", "other-run")
    assert await env.held() == Held()
    with raises("stale_owner"):
        await env.launched(1, "late-run", c1)
    assert [(r.outcome, r.run_id) for r in await env.ledger()] == [("completed", "run")]


async def test_repeats_are_no_ops(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    await env.launched(1, "run-1", c1)
    await env.result(1, "failed", "run-1", error="exit 1")
    dump = await env.backdoor.dump()
    await env.result(1, "failed", error="different")  # outcome equal: nothing changes
    await env.result(1, "failed", "run-1")
    assert await env.backdoor.dump() == dump


async def test_launched_row_without_run_id(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.backdoor.put_fire("daily", 1, "launched", None)
    c2 = await env.claim(2)
    await env.result(1, "completed")
    assert await env.held() == Held(active_run_id=rid(c2))


async def test_atomic_rollback(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    await env.claim(2)
    await env.result(1, "completed")
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    r = rid(answer.claim)
    held = await env.held()
    dump = await env.backdoor.dump()
    await env.backdoor.fail_pending_writes(True)
    with raises("store", "trigger store write failed") as caught:
        await env.store.restore_pending("daily", 2, r)
    assert caught.error is not None
    assert caught.error.__cause__ is not None
    assert await env.held() == held
    assert await env.backdoor.dump() == dump
    await env.backdoor.fail_pending_writes(False)
    await env.store.restore_pending("daily", 2, r)
    assert await env.held() == Held(pending_at=2)


async def test_failed_claim_writes_nothing(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    dump = await env.backdoor.dump()
    await env.backdoor.fail_pending_writes(True)
    with raises("store", "trigger store write failed"):
        await env.claim(2)  # buffer: ledger row, cursor, then the failing pending write
    assert await env.backdoor.dump() == dump
    await env.backdoor.fail_pending_writes(False)
    assert (await env.claim(2)).action == "buffer"


async def test_holder_survives_skip_and_buffer_results(env: Env) -> None:
    await env.register(overlap="buffer-one")
    c1 = await env.claim(1)
    await env.claim(2)
    await env.register(overlap="skip")
    assert await env.claim(3, revision=2) == Claim(claimed=True, action="skip")
    await env.launched(1, "run-1", c1)
    await env.result(2, "buffered")
    await env.result(3, "skipped")
    assert await env.store.active_run("daily") == "run-1"
    await env.result(1, "completed", "run-1")
    assert await env.store.active_run("daily") is None


@pytest.mark.parametrize(("first", "later"), [(1, 2), (10, 20)])
async def test_cursor_never_backwards(env: Env, first: int, later: int) -> None:
    await env.register()
    await env.launched(first, f"run-{first}", await env.claim(first))
    assert (await env.claim(later)).action == "skip"
    assert await env.cursor() == later
    await env.result(first, "completed", f"run-{first}")
    assert await env.cursor() == later


async def test_terminal_without_run_id_keeps_run_id(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    await env.result(1, "failed", error="boom")
    assert [(r.outcome, r.run_id, r.error) for r in await env.ledger()] == [
        ("failed", "run-1", "boom")
    ]


async def test_reservation_owner_reports_skip(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    await env.result(1, "failed", error="could not start")  # owner = the reservation holder
    assert await env.held() == Held()
    assert await env.cursor() == 1
    assert [(r.outcome, r.error) for r in await env.ledger()] == [("failed", "could not start")]
    del c1


async def test_set_pending_coalesces(env: Env) -> None:
    await env.register()
    for value in (20, 10, 30):
        await env.store.set_pending("daily", value)
    assert await env.pending() == 30
    await env.register(id="other")
    for value in (20, 10):
        await env.store.set_pending("other", value)
    assert await env.pending("other") == 20


async def test_restore_pending_coalesces(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    await env.store.set_pending("daily", 5)
    await env.store.restore_pending("daily", 1, rid(c1))
    assert await env.held() == Held(pending_at=5)


async def test_active_occurrence(env: Env) -> None:
    await env.register()
    c7 = await env.claim(7)
    assert await env.store.active_occurrence("daily", rid(c7)) == 7
    assert await env.store.active_occurrence("daily", reservation_id("daily", 8)) == 8
    await env.launched(7, "run-7", c7)
    assert await env.store.active_occurrence("daily", "run-7") == 7
    assert await env.store.active_occurrence("daily", "run-missing") is None
    await env.result(7, "completed")
    assert await env.store.active_occurrence("daily", "run-7") is None


async def test_active_occurrence_greatest_launched(env: Env) -> None:
    await env.register(id="other")
    await env.register()
    await env.backdoor.put_fire("daily", 3, "launched", "run-x")
    await env.backdoor.put_fire("daily", 9, "launched", "run-x")
    await env.backdoor.put_fire("daily", 12, "completed", "run-x")
    await env.backdoor.put_fire("other", 20, "launched", "run-x")
    assert await env.store.active_occurrence("daily", "run-x") == 9


async def test_clear_active_is_a_compare_and_swap(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    await env.store.clear_active("daily", "run-2")
    assert await env.held() == Held(active_run_id="run-1")
    await env.store.clear_active("daily", "run-1")
    assert await env.held() == Held()
    await env.store.clear_active("absent", "run-1")
    c2 = await env.claim(2)
    await env.store.clear_active("daily", rid(c2))
    dump = await env.backdoor.dump()
    assert dump["tt_triggers"][0][12:14] == (None, None)  # holder and claim time cleared


async def test_active_run_rearms_and_recovers(env: Env) -> None:
    await env.register()
    await env.claim(1)
    env.clock.advance(LEASE - 1)
    assert (await env.held()).active_run_id is not None
    env.clock.advance(1)
    assert await env.store.active_run("daily") is None
    assert await env.held() == Held(pending_at=1)
    # the claim time belongs to its reservation
    dump = await env.backdoor.dump()
    assert dump["tt_triggers"][0][12:14] == (None, None)


async def test_active_run_keeps_a_run_holder_forever(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    env.clock.advance(100 * LEASE)
    assert await env.store.active_run("daily") == "run-1"


async def test_inspect_never_expires(env: Env) -> None:
    await env.register(overlap="buffer-one")
    assert await env.held() == Held()
    c1 = await env.claim(1)
    assert await env.held() == Held(active_run_id=rid(c1))
    await env.claim(2)
    await env.launched(1, "run-1", c1)
    assert await env.held() == Held(active_run_id="run-1", pending_at=2)
    env.clock.advance(LEASE + 1)
    assert await env.held() == Held(active_run_id="run-1", pending_at=2)
    c3 = await env.claim(3)
    del c3
    held = Held(active_run_id=(await env.held()).active_run_id, pending_at=3)
    env.clock.advance(LEASE + 1)
    assert await env.held() == held


async def test_history_of_results(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    page = await env.store.history(HistoryQuery(outcome="launched"))
    assert [(r.occurrence, r.run_id) for r in page.items] == [(1, "run-1")]


async def test_record_result_never_reads_the_store_clock(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract gives "now" to register, the claims, active_run and heartbeat only; a
    result is settled by what it says, so recording one must not read the clock (issue 21).
    Checked alone and in a group-commit batch of results."""
    await env.register()
    first = await env.claim(1)
    reads = 0
    real = env.clock.now_ms

    def counted() -> int:
        nonlocal reads
        reads += 1
        return real()

    monkeypatch.setattr(env.clock, "now_ms", counted)
    await env.launched(1, "run-1", first)
    await env.store.record_result(
        Result(trigger_id="daily", occurrence=1, outcome="completed", run_id="run-1")
    )
    assert reads == 0
    monkeypatch.setattr(env.clock, "now_ms", real)
    claims = [await env.claim(o, trigger_id=t) for o, t in ((2, "daily"),)]
    monkeypatch.setattr(env.clock, "now_ms", counted)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.launched, 2, "run-2", claims[0])
        nursery.start_soon(env.store.heartbeat, "host-a")
    assert reads == 1  # the heartbeat's, once, even when it shares a batch with a result
