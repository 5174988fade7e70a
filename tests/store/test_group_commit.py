"""Group commit: concurrent claims and results share transactions without changing answers.

SQL stores (SQLite, PostgreSQL) run the ``claim_fire`` and ``record_result`` calls that arrive
together in one transaction (``_store/_group_commit.py``, ``GroupCommit``); the memory store runs
each alone. Every test here runs on every backend and asserts the same answers and the same
durable state, plus, where the store batches, that a batch was in fact formed.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from trio_triggers import ThreadExecutor, TriggerError
from trio_triggers._store import Claim, HistoryQuery, Result
from trio_triggers._store._sqlite_store import open_sqlite_trigger_store
from trio_triggers.testing import AutojumpGuardExecutor

from .backends import ManualClock
from .helpers import Env, declaration, raises

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path


def batch_sizes(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[int] | None:
    """Record the size of each batch the store runs (``None``: the store never batches)."""
    store: Any = env.store
    if not getattr(store, "_batching", False):
        return None
    sizes: list[int] = []
    original = store._run_batch

    async def spy(bodies: Sequence[Any], **hints: Any) -> Any:
        sizes.append(len(bodies))
        return await original(bodies, **hints)

    monkeypatch.setattr(store, "_run_batch", spy)
    return sizes


async def together(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Start every call in one nursery; answer each one's value or raised TriggerError."""
    answers: list[Any] = [None] * len(calls)

    async def one(index: int) -> None:
        try:
            answers[index] = await calls[index]()
        except TriggerError as error:
            answers[index] = error

    async with trio.open_nursery() as nursery:
        for index in range(len(calls)):
            nursery.start_soon(one, index)
    return answers


async def test_concurrent_claims_share_a_transaction_and_each_gets_its_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"t{k:02d}" for k in range(12)]
    for trigger_id in ids:
        await env.register(id=trigger_id)
    sizes = batch_sizes(env, monkeypatch)
    claims = await together(*(lambda t=t: env.claim(7, trigger_id=t) for t in ids))
    for trigger_id, claim in zip(ids, claims, strict=True):
        assert isinstance(claim, Claim)
        assert claim.claimed
        assert claim.action == "fire"
        assert claim.reservation_id is not None
        assert trigger_id in claim.reservation_id
        assert (await env.held(trigger_id)).active_run_id == claim.reservation_id
    if sizes is not None:
        assert sum(sizes) == len(ids) - 1 or sum(sizes) == len(ids)  # the first may run alone
        assert max(sizes) > 1
    # The same answers a second time, all duplicates (and nothing new is written).
    before = await env.backdoor.dump()
    again = await together(*(lambda t=t: env.claim(7, trigger_id=t) for t in ids))
    assert all(isinstance(c, Claim) and not c.claimed for c in again)
    assert await env.backdoor.dump() == before


async def test_a_refused_call_in_a_batch_changes_no_other_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    for trigger_id in ("a", "b", "c"):
        await env.register(id=trigger_id)
    claimed = await env.claim(5, trigger_id="b")
    assert claimed.claimed
    await env.launched(5, "run-b", claimed, tid="b")
    before_b = (await env.ledger("b"), await env.held("b"))
    sizes = batch_sizes(env, monkeypatch)
    answers = await together(
        lambda: env.claim(9, trigger_id="a"),
        # ``stale_owner``: a terminal result for a run that does not hold the occurrence.
        lambda: env.result(5, "completed", "someone-else", tid="b"),
        lambda: env.claim(9, trigger_id="absent"),
        lambda: env.claim(9, trigger_id="c"),
    )
    a, b, absent, c = answers
    assert isinstance(a, Claim)
    assert a.claimed
    assert isinstance(c, Claim)
    assert c.claimed
    assert isinstance(b, TriggerError)
    assert b.code == "stale_owner"
    assert isinstance(absent, TriggerError)
    assert absent.code == "unknown_trigger"
    assert (await env.ledger("b"), await env.held("b")) == before_b
    assert [r.occurrence for r in await env.ledger("a")] == [9]
    assert [r.occurrence for r in await env.ledger("c")] == [9]
    if sizes is not None:
        assert sizes
        assert max(sizes) > 1


async def test_a_database_failure_fails_the_whole_batch_and_writes_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register(id="plain")
    await env.register(id="buffered", overlap="buffer-one")
    first = await env.claim(5, trigger_id="buffered")
    await env.launched(5, "run-1", first, tid="buffered")
    before = await env.backdoor.dump()
    await env.backdoor.fail_pending_writes(True)  # buffering writes pending_at_ms: it fails
    sizes = batch_sizes(env, monkeypatch)
    plain, buffered = await together(
        lambda: env.claim(9, trigger_id="plain"),
        lambda: env.claim(9, trigger_id="buffered"),
    )
    await env.backdoor.fail_pending_writes(False)
    assert isinstance(buffered, TriggerError)
    assert (buffered.code, buffered.message) == ("store", "trigger store write failed")
    assert buffered.__cause__ is not None
    if sizes is not None and max(sizes, default=0) > 1:
        # One transaction: the plain claim was rolled back with it, as a store error.
        assert isinstance(plain, TriggerError)
        assert (plain.code, plain.message) == ("store", "trigger store write failed")
        assert plain is not buffered
        assert await env.backdoor.dump() == before
    else:
        assert isinstance(plain, Claim)
        assert plain.claimed
    # Whatever failed is owed again: the next claims succeed.
    assert (await env.claim(9, trigger_id="buffered")).action == "buffer"
    again = await env.claim(9, trigger_id="plain")
    assert again.claimed == isinstance(plain, TriggerError)


async def test_concurrent_claims_of_one_occurrence_reserve_it_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register(id="x")
    sizes = batch_sizes(env, monkeypatch)
    claims = await together(*(lambda: env.claim(3, trigger_id="x") for _ in range(5)))
    assert all(isinstance(claim, Claim) for claim in claims)
    assert [claim.claimed for claim in claims].count(True) == 1
    assert [r.occurrence for r in await env.ledger("x")] == [3]
    if sizes is not None:
        assert max(sizes) > 1


async def test_bad_arguments_in_a_batch_fail_alone(env: Env) -> None:
    await env.register(id="ok")
    bad = Result(trigger_id="ok", occurrence=-1.5, outcome="completed")  # type: ignore[arg-type]
    good, refused = await together(
        lambda: env.claim(4, trigger_id="ok"),
        lambda: env.store.record_result(bad),
    )
    assert isinstance(good, Claim)
    assert good.claimed
    assert isinstance(refused, TriggerError)
    assert refused.code == "invalid_options"
    with raises("invalid_options", path="occurrence"):
        await env.store.record_result(bad)


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
async def test_a_caller_cancelled_while_queued_writes_nothing(
    tmp_path: Path, threaded: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """While a batch waits out a busy database, a queued caller that is cancelled leaves the
    queue: its claim is never written, and the leader's claim commits once the lock is gone.
    (Simulated time: the busy back-off and the test's pauses are Trio sleeps.)"""
    path = str(tmp_path / "busy.db")
    executor = AutojumpGuardExecutor(ThreadExecutor(), autojump_clock) if threaded else None
    async with open_sqlite_trigger_store(path, clock=ManualClock(), executor=executor) as store:
        for trigger_id in ("leader", "quitter"):
            await store.register(declaration(id=trigger_id))
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        answers: dict[str, Any] = {}

        async def leader() -> None:
            answers["leader"] = await store.claim_fire("leader", 5, expected_revision=1)

        async def quitter(scope: trio.CancelScope) -> None:
            with scope:
                answers["quitter"] = await store.claim_fire("quitter", 5, expected_revision=1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader)
            await trio.sleep(0.05)  # the leader's batch is waiting out the busy database
            scope = trio.CancelScope()
            nursery.start_soon(quitter, scope)
            await trio.sleep(0.05)  # queued behind it
            scope.cancel()
            await trio.sleep(0.05)
            blocker.execute("ROLLBACK")
        blocker.close()
        assert "quitter" not in answers
        assert answers["leader"].claimed
        with trio.fail_after(60):  # (a queue left holding the quitter would hang here)
            await store.claim_fire("leader", 6, expected_revision=1)  # the next batch ...
        assert (await store.inspect("quitter")).active_run_id is None
        assert (await store.history(HistoryQuery(trigger_id="quitter"))).items == []
        # ... carried only its own call.
        assert [r.occurrence for r in (await store.history()).items] == [6, 5]


async def test_a_trigger_twice_in_a_batch_sees_its_own_earlier_write(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server store reads every batched trigger row ahead; the second call for the same
    trigger must read again (after the first call's writes), not reuse that answer."""
    for trigger_id in ("x", "y"):
        await env.register(id=trigger_id)
    sizes = batch_sizes(env, monkeypatch)
    claims = await together(
        lambda: env.claim(3, trigger_id="x"),
        lambda: env.claim(3, trigger_id="y"),
        lambda: env.claim(3, trigger_id="x"),
        lambda: env.claim(3, trigger_id="y"),
    )
    assert all(isinstance(claim, Claim) for claim in claims)
    assert [claim.claimed for claim in claims].count(True) == 2
    for trigger_id in ("x", "y"):
        assert [r.occurrence for r in await env.ledger(trigger_id)] == [3]
        assert (await env.held(trigger_id)).active_run_id is not None
    if sizes is not None:
        assert max(sizes) > 2
