"""Manual fires ("run now", issue 16) on every store: ``claim_manual``.

A manual fire is a ledger row at an off-grid instant (never a whole second, so never a
boundary's row), with its key, its run's input and who asked; it is claimed in the same
transaction exactly as a scheduled boundary (the overlap policy, or an override for this fire),
and nothing it does ever moves the cursor. Bad arguments are typed errors and write nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trio_triggers._identities import is_manual_reservation, reservation_occurrence
from trio_triggers._store import HistoryQuery
from trio_triggers._store._engine import EngineStore

from .helpers import LEASE, Env, declaration, raises

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


async def held_run(env: Env, **changes: Any) -> None:
    """``daily`` (hourly) holding run ``r1`` of boundary H, the cursor at H."""
    env.clock.value = H
    await engine(env).register(hourly(**changes))
    claim = await env.claim(H)
    await env.launched(H, "r1", claim)
    assert await env.cursor() == H


async def test_a_fire_with_nothing_held_reserves_an_off_grid_row_and_never_moves_the_cursor(
    env: Env,
) -> None:
    store = engine(env)
    env.clock.value = H // 2  # a whole second: the row goes one millisecond earlier
    await store.register(hourly())
    fired = await store.claim_manual("daily", key="k1", input={"n": 1}, by="ops@host")
    occurrence = H // 2 - 1
    assert (fired.occurrence, fired.repeated, fired.outcome) == (occurrence, False, None)
    assert fired.request.key == "k1"
    assert fired.request.input == {"n": 1}
    assert fired.request.by == "ops@host"
    claim = fired.claim
    assert (claim.claimed, claim.action, claim.active_run_id) == (True, "fire", None)
    assert is_manual_reservation(claim.reservation_id)
    assert reservation_occurrence(claim.reservation_id) == occurrence
    assert (await env.held()).active_run_id == claim.reservation_id
    [row] = await env.ledger()
    assert (row.occurrence, row.outcome, row.manual_key) == (occurrence, None, "k1")
    await env.launched(occurrence, "run-m", claim)
    await env.result(occurrence, "completed", "run-m")
    [row] = await env.ledger()
    assert (row.outcome, row.run_id, row.manual_key) == ("completed", "run-m", "k1")
    assert await env.cursor() is None  # never moved: the next boundary is still owed
    assert (await env.held()).active_run_id is None
    assert await instant(env) == H


async def test_without_input_the_run_gets_the_triggers_input_and_a_key_is_made_up(
    env: Env,
) -> None:
    store = engine(env)
    env.clock.value = 1_234  # not a whole second: the row is at the request's instant
    await store.register(hourly(input={"from": "trigger"}))
    fired = await store.claim_manual("daily")
    assert fired.occurrence == 1_234
    assert fired.request.input == {"from": "trigger"}
    assert fired.request.key.startswith("manual-")
    assert fired.request.by is None
    [row] = await env.ledger()
    assert row.manual_key == fired.request.key


async def test_a_key_used_again_answers_the_earlier_fire_and_writes_nothing(env: Env) -> None:
    store = engine(env)
    env.clock.value = 5_500
    await store.register(hourly())
    first = await store.claim_manual("daily", key="once", input=[1])
    before = await env.backdoor.dump()
    env.clock.value = 9_500
    again = await store.claim_manual("daily", key="once", input=[2], overlap="supersede")
    assert again.repeated
    assert again.occurrence == first.occurrence
    assert again.request.input == [1]  # the first request's, not the retry's
    assert (again.claim.claimed, again.outcome, again.run_id) == (False, None, None)
    assert await env.backdoor.dump() == before
    await env.launched(first.occurrence, "run-1", first.claim)
    settled = await store.claim_manual("daily", key="once")
    assert (settled.outcome, settled.run_id) == ("launched", "run-1")


async def test_refusals_are_typed_and_write_nothing(env: Env) -> None:
    store = engine(env)
    env.clock.value = 5_500
    await store.register(hourly())
    await store.register(hourly(id="other"))
    await store.claim_manual("other", key="theirs")
    before = await env.backdoor.dump()
    with raises("unknown_trigger", "unknown trigger nope"):
        await store.claim_manual("nope", key="k")
    with raises("key_conflict", path="key"):
        await store.claim_manual("daily", key="theirs")
    for bad in ("", "   ", "x" * 201, "a\x00b", 7):
        with raises("invalid_options", path="key"):
            await store.claim_manual("daily", key=bad)  # type: ignore[arg-type]
    with raises("invalid_options", path="input"):
        await store.claim_manual("daily", input={"f": float("nan")})
    with raises("invalid_options", path="input"):
        await store.claim_manual("daily", input=object())
    with raises("invalid_options", path="overlap"):
        await store.claim_manual("daily", overlap="queue")  # type: ignore[arg-type]
    with raises("invalid_options", path="by"):
        await store.claim_manual("daily", by="a\x00b")
    assert await env.backdoor.dump() == before
    await store.register(hourly(enabled=False))
    before = await env.backdoor.dump()
    with raises("trigger_disabled"):
        await store.claim_manual("daily", key="k")
    assert await env.backdoor.dump() == before
    await store.register(hourly())
    await store.pause("daily", note="hold")
    before = await env.backdoor.dump()
    with raises("trigger_paused"):
        await store.claim_manual("daily", key="k")
    assert await env.backdoor.dump() == before
    await store.resume("daily", point="policy")
    assert (await store.claim_manual("daily", key="k")).claim.claimed  # the key is still free


async def test_a_failure_inside_the_transaction_writes_nothing(env: Env) -> None:
    store = engine(env)
    await held_run(env, overlap="buffer-one")
    before = await env.backdoor.dump()
    await env.backdoor.fail_pending_writes(True)
    env.clock.value = H + 10_500
    with raises("store"):
        await store.claim_manual("daily", key="k")  # the buffer's pending write fails
    await env.backdoor.fail_pending_writes(False)
    assert await env.backdoor.dump() == before
    fired = await store.claim_manual("daily", key="k")  # nothing of it was kept
    assert fired.claim.action == "buffer"


async def test_held_under_skip_the_fire_is_recorded_skipped(env: Env) -> None:
    store = engine(env)
    await held_run(env)
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="k")
    assert (fired.claim.claimed, fired.claim.action, fired.outcome) == (True, "skip", "skipped")
    assert await env.newest_outcome() == "skipped"
    await env.result(fired.occurrence, "skipped")  # the scheduler's report: a harmless repeat
    assert await env.cursor() == H
    assert (await env.held()).active_run_id == "r1"


async def test_held_under_buffer_one_the_fire_waits_and_keeps_its_input(env: Env) -> None:
    store = engine(env)
    await held_run(env, overlap="buffer-one")
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="k", input={"why": "now"})
    assert (fired.claim.action, fired.outcome) == ("buffer", "buffered")
    await env.result(fired.occurrence, "buffered")
    assert await env.pending() == fired.occurrence
    assert await env.cursor() == H
    await env.result(H, "completed", "r1")
    pending = await store.claim_pending("daily", expected_revision=1)
    assert pending is not None
    assert pending.occurrence == fired.occurrence
    assert pending.manual is not None
    assert (pending.manual.key, pending.manual.input) == ("k", {"why": "now"})
    assert pending.claim.action == "fire"
    assert is_manual_reservation(pending.claim.reservation_id)
    await env.launched(fired.occurrence, "run-m", pending.claim)
    await env.result(fired.occurrence, "completed", "run-m")
    assert await env.cursor() == H
    assert await env.pending() is None


async def test_held_under_supersede_the_fire_displaces_the_run(env: Env) -> None:
    store = engine(env)
    await held_run(env, overlap="supersede")
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="k")
    claim = fired.claim
    assert (claim.action, claim.active_run_id) == ("supersede", "r1")
    assert (await env.held()).active_run_id == claim.reservation_id
    await env.result(H, "superseded", "r1")
    await env.launched(fired.occurrence, "run-m", claim)
    assert (await env.held()).active_run_id == "run-m"
    assert await env.cursor() == H


async def test_an_override_applies_to_this_fire_only(env: Env) -> None:
    store = engine(env)
    await held_run(env)  # the trigger's policy is skip
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="a", overlap="supersede")
    assert (fired.claim.action, fired.claim.active_run_id) == ("supersede", "r1")
    got = await store.get("daily")
    assert got is not None
    assert got.overlap == "skip"
    buffered = await store.claim_manual("daily", key="b", overlap="buffer-one")
    assert buffered.claim.action == "buffer"
    assert await env.pending() == buffered.occurrence


async def test_fires_in_one_millisecond_take_the_next_free_off_grid_instants(env: Env) -> None:
    store = engine(env)
    await store.register(hourly(overlap="buffer-one"))
    env.clock.value = 2 * H + 2  # the first instants after the whole second 2H
    answers = [await store.claim_manual("daily", key=f"k{n}") for n in range(3)]
    assert [a.occurrence for a in answers] == [2 * H + 2, 2 * H + 1, 2 * H - 1]
    assert all(a.occurrence % 1000 for a in answers)
    rows = (await store.history(HistoryQuery(trigger_id="daily"))).items
    assert sorted(r.manual_key or "" for r in rows) == ["k0", "k1", "k2"]


async def test_a_manual_reservation_is_no_base_for_the_next_boundary(env: Env) -> None:
    store = engine(env)
    env.clock.value = 0
    await store.register(hourly())
    # Boundary H has come but no scheduler has claimed it yet; a manual fire just after it
    # must not hide it (a boundary's reservation there would mean "H is taken care of").
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="k")
    assert fired.claim.action == "fire"
    assert await instant(env) == H
    claim = await env.claim(H)
    assert claim.action == "skip"  # the manual run holds it: the boundary meets the policy
    assert await env.cursor() == H


async def test_an_expired_manual_reservation_is_re_armed_with_its_input(env: Env) -> None:
    store = engine(env)
    env.clock.value = H + 10_500
    await store.register(hourly())
    fired = await store.claim_manual("daily", key="k", input="mine")
    env.clock.value += LEASE
    assert await store.active_run("daily") is None  # the launcher died: re-armed
    assert await env.pending() == fired.occurrence
    assert await env.cursor() is None
    pending = await store.claim_pending("daily", expected_revision=1)
    assert pending is not None
    assert pending.manual is not None
    assert pending.manual.input == "mine"
    await env.launched(fired.occurrence, "run-m", pending.claim)
    await env.result(fired.occurrence, "failed", "run-m", error="boom")
    assert await env.cursor() is None


async def test_history_marks_manual_rows_and_their_instants_sort_with_boundaries(
    env: Env,
) -> None:
    store = engine(env)
    await held_run(env)
    env.clock.value = H + 10_500
    fired = await store.claim_manual("daily", key="k")
    rows = await env.ledger()
    assert [(r.occurrence, r.manual_key) for r in rows] == [(fired.occurrence, "k"), (H, None)]
    encoded = msgspec.json.decode(msgspec.json.encode(rows[0]))
    assert encoded["manual_key"] == "k"


def test_the_pure_rules_leave_the_cursor_alone_for_a_manual_row() -> None:
    from trio_triggers._store import Result
    from trio_triggers._store._decision import (
        AdvanceCursor,
        ClaimSnapshot,
        FireState,
        decide,
        off_grid,
        plan_result,
    )

    assert [off_grid(t) for t in (1, 999, 1000, 61_000)] == [1, 999, 999, 60_999]
    snapshot = ClaimSnapshot(
        trigger_id="t",
        occurrence=1_500,
        expected_revision=1,
        resume_buffered=False,
        revision=1,
        enabled=True,
        overlap="buffer-one",
        active="run-1",
        active_claimed_at=None,
        pending=None,
        existing_fire=None,
        active_fire=None,
        reservation_id="trigger-reservation:t:manual-x:1500",
        claimed_at=1_500,
    )
    boundary = decide(snapshot)
    manual = decide(msgspec.structs.replace(snapshot, manual=True))
    assert any(isinstance(w, AdvanceCursor) for w in boundary.writes)
    assert not any(isinstance(w, AdvanceCursor) for w in manual.writes)
    assert manual.claim == boundary.claim
    result = Result(trigger_id="t", occurrence=1_500, outcome="completed", run_id="run-2")
    launched = FireState(outcome="launched", run_id="run-2")
    assert any(isinstance(w, AdvanceCursor) for w in plan_result(result, launched, "run-2"))
    manual_row = FireState(outcome="launched", run_id="run-2", manual=True)
    assert not any(isinstance(w, AdvanceCursor) for w in plan_result(result, manual_row, "run-2"))
