"""Conformance: claims, the reservation lease and the worked examples of §9.6-§9.7, §9.11, §10.5."""

from __future__ import annotations

import re

import trio

from trio_triggers._store import Claim, Held, PendingClaim

from .helpers import LEASE, Env, raises, reservation_pattern

MALFORMED = "trigger-reservation:daily:not-a-number"


def reserved(claim: Claim, occurrence: int, action: str = "fire", tid: str = "daily") -> str:
    assert claim.claimed, claim
    assert claim.action == action, claim
    assert claim.reservation_id is not None
    assert reservation_pattern(tid, occurrence).match(claim.reservation_id), claim
    if action == "fire":
        assert claim.active_run_id is None
    return claim.reservation_id


# --- §10.5 worked examples -----------------------------------------------------------------


async def test_skip_duplicate_claim_and_reclaim_after_lease(env: Env) -> None:
    await env.register()
    r1 = reserved(await env.claim(1), 1)
    assert await env.held() == Held(active_run_id=r1)
    assert await env.claim(1) == Claim(claimed=False)
    env.clock.advance(LEASE + 1)
    r1b = reserved(await env.claim(1), 1)
    assert r1b != r1
    assert await env.held() == Held(active_run_id=r1b)


async def test_skip_expired_occurrence_is_rearmed(env: Env) -> None:
    await env.register()
    await env.claim(1)
    env.clock.advance(LEASE + 1)
    r2 = reserved(await env.claim(2), 2)
    assert await env.held() == Held(active_run_id=r2, pending_at=1)


async def test_buffer_one_resume_buffered(env: Env) -> None:
    await env.register(overlap="buffer-one")
    reserved(await env.claim(1), 1)
    assert await env.claim(2) == Claim(claimed=True, action="buffer")
    ledger = await env.ledger()
    assert ledger[0].occurrence == 2
    assert ledger[0].outcome == "buffered"
    assert await env.cursor() == 2
    assert await env.pending() == 2
    assert await env.claim(2) == Claim(claimed=False)
    await env.result(1, "completed")
    reserved(await env.claim(2, resume_buffered=True), 2)
    assert await env.pending() == 2


async def test_supersede_chain_and_lease_recovery(env: Env) -> None:
    await env.register(overlap="supersede")
    c1 = await env.claim(1)
    await env.launched(1, "run-1", c1)
    c2 = await env.claim(2)
    r2 = reserved(c2, 2, "supersede")
    assert c2.active_run_id == "run-1"
    assert next((r.occurrence, r.run_id) for r in await env.ledger()) == (2, "run-1")
    c3 = await env.claim(3)
    reserved(c3, 3, "supersede")
    assert c3.active_run_id == "run-1"
    ledger = {r.occurrence: r for r in await env.ledger()}
    assert ledger[2].outcome == "superseded"
    assert ledger[3].run_id == "run-1"
    assert r2 != c3.reservation_id
    env.clock.advance(LEASE + 1)
    assert await env.store.active_run("daily") == "run-1"
    assert await env.pending() == 3
    assert await env.store.active_occurrence("daily", "run-1") == 1


async def test_supersede_of_unlaunched_reservation(env: Env) -> None:
    await env.register(overlap="supersede")
    r1 = reserved(await env.claim(1), 1)
    c2 = await env.claim(2)
    reserved(c2, 2, "supersede")
    assert c2.active_run_id == r1
    assert reservation_pattern("daily", 1).match(r1)


async def test_supersede_recovers_predecessor_inside_claim(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.launched(1, "run-1", await env.claim(1))
    await env.claim(2)
    env.clock.advance(LEASE + 1)
    c3 = await env.claim(3)
    reserved(c3, 3, "supersede")
    assert c3.active_run_id == "run-1"


async def test_supersede_invents_no_predecessor(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.claim(1)
    env.clock.advance(LEASE + 1)
    reserved(await env.claim(1), 1, "fire")
    env.clock.advance(LEASE + 1)
    reserved(await env.claim(2), 2, "fire")


async def test_supersede_pending_claim_not_the_holder(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.launched(1, "run-1", await env.claim(1))
    c2 = await env.claim(2)
    assert c2.reservation_id is not None
    await env.store.restore_pending("daily", 2, c2.reservation_id)
    await env.store.clear_active("daily", "run-1")
    c3 = await env.claim(3)
    await env.launched(3, "run-2", c3)
    await env.store.set_pending("daily", 2)
    assert await env.store.claim_pending("daily", expected_revision=1) == PendingClaim(
        occurrence=2, claim=Claim(claimed=False)
    )
    assert await env.pending() == 2


async def test_malformed_live_holder_is_superseded(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.backdoor.set_columns("daily", active_run_id=MALFORMED, active_claimed_at_ms=0)
    c1 = await env.claim(1)
    reserved(c1, 1, "supersede")
    assert c1.active_run_id == MALFORMED


async def test_malformed_live_holder_blocks_skip(env: Env) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", active_run_id=MALFORMED, active_claimed_at_ms=0)
    assert await env.claim(1) == Claim(claimed=True, action="skip")
    assert await env.held() == Held(active_run_id=MALFORMED)


async def test_malformed_expired_holder_released_without_rearm(env: Env) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", active_run_id=MALFORMED, active_claimed_at_ms=None)
    r2 = reserved(await env.claim(2), 2)
    assert await env.held() == Held(active_run_id=r2)


async def test_malformed_holder_lease_and_occurrence(env: Env) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", active_run_id=MALFORMED, active_claimed_at_ms=None)
    assert await env.store.active_occurrence("daily", MALFORMED) is None
    assert await env.store.active_run("daily") is None
    assert await env.held() == Held()


async def test_malformed_live_holder_kept_by_active_run(env: Env) -> None:
    await env.register()
    await env.backdoor.set_columns("daily", active_run_id=MALFORMED, active_claimed_at_ms=0)
    assert await env.store.active_run("daily") == MALFORMED
    env.clock.advance(LEASE)
    assert await env.store.active_run("daily") is None
    assert await env.held() == Held()


async def test_reservation_shaped_run_id_and_null_claim_time(env: Env) -> None:
    await env.register(id="active-null")
    c1 = await env.claim(1, trigger_id="active-null")
    shaped = "trigger-reservation:active-null:x:1"
    with raises(
        "invalid_options", "launched requires a run_id that is not a reservation id", "run_id"
    ):
        await env.launched(1, shaped, c1, tid="active-null")
    # a holder of that shape written directly with no claim time, ledger row not unfinished
    await env.result(1, "skipped", reservation_id=c1.reservation_id, tid="active-null")
    await env.backdoor.set_columns(
        "active-null",
        active_run_id="trigger-reservation:active-null:x:1",
        active_claimed_at_ms=None,
    )
    assert await env.store.active_run("active-null") is None
    assert await env.held("active-null") == Held()
    await env.register(id="claim-null")
    await env.backdoor.set_columns(
        "claim-null", active_run_id="trigger-reservation:claim-null:y:1", active_claimed_at_ms=None
    )
    reserved(await env.claim(2, trigger_id="claim-null"), 2, tid="claim-null")


# --- §9.17 claim examples --------------------------------------------------------------------


async def test_lease_boundary(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    r = reserved(c1, 1)
    env.clock.value = LEASE - 1
    assert await env.store.active_run("daily") == r
    env.clock.value = LEASE + 1
    assert await env.store.active_run("daily") is None
    r_again = reserved(await env.claim(1), 1)
    assert r_again != r


async def test_lease_expires_at_exactly_lease(env: Env) -> None:
    await env.register()
    r = reserved(await env.claim(1), 1)
    env.clock.value = LEASE - 1  # 299 999 ms old: live
    assert await env.store.active_run("daily") == r
    assert await env.claim(2) == Claim(claimed=True, action="skip")
    env.clock.value = LEASE  # exactly 300 000 ms old: expired
    assert await env.store.active_run("daily") is None
    assert await env.held() == Held(pending_at=1)


async def test_claim_sees_lease_expiry_at_exactly_lease(env: Env) -> None:
    await env.register()
    await env.claim(1)
    env.clock.value = LEASE - 1
    assert await env.claim(1) == Claim(claimed=False)
    env.clock.value = LEASE
    reserved(await env.claim(1), 1)


async def test_reclaim_keeps_the_occurrence(env: Env) -> None:
    await env.register()
    await env.claim(1)
    env.clock.advance(LEASE + 1)
    c2 = await env.claim(2)
    assert c2.reservation_id is not None
    assert c2.reservation_id.endswith(":2")
    assert await env.pending() == 1


async def test_claim_pending_clears_one_buffer(env: Env) -> None:
    await env.register(overlap="buffer-one")
    assert await env.store.claim_pending("daily", expected_revision=1) is None
    await env.claim(1)
    assert (await env.claim(2)).action == "buffer"
    await env.result(1, "completed")
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    assert answer.occurrence == 2
    reserved(answer.claim, 2)
    assert await env.pending() is None


async def test_rebuffer_keeps_pending(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.launched(1, "run-1", await env.claim(1))
    assert (await env.claim(2)).action == "buffer"
    await env.result(1, "completed", "run-1")
    reserved(await env.claim(3), 3)
    assert await env.store.claim_pending("daily", expected_revision=1) == PendingClaim(
        occurrence=2, claim=Claim(claimed=True, action="buffer")
    )
    assert await env.pending() == 2


async def test_refused_pending_claim_keeps_pending(env: Env) -> None:
    await env.register()
    c3 = await env.claim(3)
    await env.result(3, "skipped", reservation_id=c3.reservation_id)
    await env.store.set_pending("daily", 3)
    assert await env.store.claim_pending("daily", expected_revision=1) == PendingClaim(
        occurrence=3, claim=Claim(claimed=False)
    )
    assert await env.pending() == 3


async def test_fences_keep_pending(env: Env) -> None:
    await env.register()
    await env.store.set_pending("daily", 4)
    with raises("revision_mismatch"):
        await env.store.claim_pending("daily", expected_revision=2)
    assert await env.pending() == 4
    await env.store.set_pending("daily", 5)
    await env.register(enabled=False)
    with raises("trigger_disabled"):
        await env.store.claim_pending("daily", expected_revision=2)
    assert await env.pending() == 5
    assert (await env.backdoor.dump())["tt_trigger_fires"] == []


async def test_buffered_reservation_expiry(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    await env.claim(2)
    await env.result(1, "completed")
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    assert answer.claim.action == "fire"
    assert await env.pending() is None
    env.clock.advance(LEASE + 1)
    assert await env.store.active_run("daily") is None
    assert await env.pending() == 2


async def test_claim_pending_keeps_raised_slot(env: Env) -> None:
    # The claim's own release of an expired reservation raises the slot to a later occurrence,
    # which the conditional clear keeps.
    await env.register()
    await env.claim(5)
    await env.store.set_pending("daily", 3)
    env.clock.advance(LEASE + 1)
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    assert answer.occurrence == 3
    reserved(answer.claim, 3)
    assert await env.pending() == 5


async def test_resume_buffered_called_directly_never_touches_the_slot(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    await env.claim(2)
    await env.result(1, "completed")
    reserved(await env.claim(2, resume_buffered=True), 2)
    assert await env.pending() == 2


async def test_buffer_resumes_only_when_asked(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.claim(1)
    assert await env.claim(2) == Claim(claimed=True, action="buffer")
    assert await env.claim(2) == Claim(claimed=False)
    await env.result(1, "completed")
    assert await env.claim(2) == Claim(claimed=False)
    reserved(await env.claim(2, resume_buffered=True), 2)
    assert await env.pending() == 2


async def test_concurrent_claims(env: Env) -> None:
    await env.register()
    answers: list[Claim] = []
    async with env.opened.peer() as other:

        async def claim(store: object, occurrence: int) -> None:
            answers.append(await env.store.claim_fire("daily", occurrence, expected_revision=1))

        async def claim_other(occurrence: int) -> None:
            answers.append(await other.claim_fire("daily", occurrence, expected_revision=1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, env.store, 1)
            nursery.start_soon(claim_other, 2)
    assert sorted(str(a.action) for a in answers) == ["fire", "skip"]


async def test_settled_rows_are_never_reclaimed(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    await env.launched(1, "run-1", c1)
    await env.result(1, "completed")
    assert await env.claim(1) == Claim(claimed=False)
    assert await env.claim(1, resume_buffered=True) == Claim(claimed=False)
    env.clock.advance(LEASE + 1)
    assert await env.claim(1) == Claim(claimed=False)


async def test_unfinished_row_without_holder_is_resumable(env: Env) -> None:
    await env.register()
    c1 = await env.claim(1)
    assert c1.reservation_id is not None
    await env.store.clear_active("daily", c1.reservation_id)
    reserved(await env.claim(1), 1)


async def test_resumable_supersede(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.launched(1, "run-1", await env.claim(1))
    c2 = await env.claim(2)
    assert c2.reservation_id is not None
    await env.store.restore_pending("daily", 2, c2.reservation_id)
    assert await env.held() == Held(active_run_id="run-1", pending_at=2)
    # row 2 records run-1 as its predecessor, and run-1 is the holder: resumable
    assert await env.claim(2) == Claim(claimed=False)
    answer = await env.store.claim_pending("daily", expected_revision=1)
    assert answer is not None
    reserved(answer.claim, 2, "supersede")
    assert answer.claim.active_run_id == "run-1"
    assert await env.pending() is None


async def test_expired_supersede_reservation_marks_its_row(env: Env) -> None:
    await env.register(overlap="supersede")
    await env.claim(1)
    env.clock.advance(LEASE + 1)
    reserved(await env.claim(2), 2)
    ledger = {r.occurrence: r.outcome for r in await env.ledger()}
    assert ledger == {1: "superseded", 2: None}
    assert await env.pending() is None


async def test_claims_read_the_clock_for_the_lease_start(env: Env) -> None:
    await env.register()
    env.clock.value = 1_000
    r = reserved(await env.claim(1), 1)
    env.clock.value = 1_000 + LEASE - 1
    assert await env.store.active_run("daily") == r
    env.clock.value = 1_000 + LEASE
    assert await env.store.active_run("daily") is None
    assert re.match(r"^trigger-reservation:daily:", r)
