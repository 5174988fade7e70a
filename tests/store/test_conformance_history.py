"""Conformance: history, paging and pruning (§9.14, §9.15)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given, settings, strategies as st

from trio_triggers._store import Fire, FireRecord, Held, HistoryPage, HistoryQuery

from .backends import BACKENDS, Backend, ManualClock
from .helpers import Env, declaration, raises, rec


async def test_ledger_read(env: Env) -> None:
    await env.register()
    await env.launched(1, "run-1", await env.claim(1))
    assert (await env.claim(2)).action == "skip"
    await env.result(1, "failed", "run-1", error="exit 1")
    await env.claim(3)
    expected = [rec(3), rec(2, "skipped"), rec(1, "failed", "run-1", "exit 1")]
    page = await env.store.history(HistoryQuery(trigger_id="daily"))
    assert page == HistoryPage(items=expected, next_cursor=None)
    assert (await env.store.history(HistoryQuery(run_id="run-1"))).items == [expected[2]]
    assert (await env.store.history(HistoryQuery(outcome="skipped"))).items == [expected[1]]
    assert (await env.store.history(HistoryQuery(trigger_id="other"))).items == []
    assert await env.store.history() == page
    both = HistoryQuery(trigger_id="daily", outcome="failed", run_id="run-1")
    assert (await env.store.history(both)).items == [expected[2]]
    assert (await env.store.history(HistoryQuery(outcome="failed", run_id="x"))).items == []


async def test_paging_across_triggers(env: Env) -> None:
    await env.register(id="a")
    await env.register(id="b")
    for tid in ("a", "b"):
        for occurrence in (5, 3):
            await env.store.claim_fire(tid, occurrence, expected_revision=1)
    first = await env.store.history(HistoryQuery(limit=3))
    assert [(r.trigger_id, r.occurrence) for r in first.items] == [("b", 5), ("a", 5), ("b", 3)]
    assert first.next_cursor == Fire(trigger_id="b", occurrence=3)
    second = await env.store.history(HistoryQuery(limit=3, cursor=first.next_cursor))
    assert [(r.trigger_id, r.occurrence) for r in second.items] == [("a", 3)]
    assert second.next_cursor is None
    four = await env.store.history(HistoryQuery(limit=4))
    assert len(four.items) == 4
    assert four.next_cursor is None


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, 2**53, "3", None])
async def test_history_limit(env: Env, limit: Any) -> None:
    await env.register()
    await env.claim(1)
    if limit is None:
        assert len((await env.store.history(HistoryQuery(limit=limit))).items) == 1
        return
    with raises("invalid_options", path="limit") as caught:
        await env.store.history(HistoryQuery(limit=limit))
    assert caught.error is not None
    assert caught.error.message == (
        f"history limit must be a positive safe integer, received {limit!r}"
    )


async def test_history_limit_zero_message(env: Env) -> None:
    with raises(
        "invalid_options", "history limit must be a positive safe integer, received 0", "limit"
    ):
        await env.store.history(HistoryQuery(limit=0))


async def test_history_checks_limit_before_anything(env: Env) -> None:
    await env.backdoor.break_tables()
    with raises("invalid_options", path="limit"):
        await env.store.history(HistoryQuery(limit=-1))


@pytest.mark.usefixtures("memory_only")
async def test_history_corrupt_outcome_is_a_read_failure(env: Env) -> None:
    await env.register()
    await env.backdoor.put_fire("daily", 1, "exploded")
    with raises("store", "trigger store read failed"):
        await env.store.history()


async def test_prune(env: Env) -> None:
    await env.register(overlap="buffer-one")
    await env.launched(1, "run-1", await env.claim(1))
    await env.result(1, "completed", "run-1")
    await env.launched(2, "run-2", await env.claim(2))
    assert (await env.claim(3)).action == "buffer"
    assert await env.store.prune_fires(4) == 1
    assert [r.occurrence for r in (await env.store.history()).items] == [3, 2]
    assert await env.held() == Held(active_run_id="run-2", pending_at=3)
    with raises(
        "invalid_options", "prune cutoff must be a safe integer, received 1.5", "older_than"
    ):
        await env.store.prune_fires(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("cutoff", [1.5, 2**53, -(2**53), "10", None, False])
async def test_prune_cutoff_out_of_range_writes_nothing(env: Env, cutoff: Any) -> None:
    await env.register()
    await env.result(1, "skipped", reservation_id=(await env.claim(1)).reservation_id)
    dump = await env.backdoor.dump()
    with raises("invalid_options", path="older_than") as caught:
        await env.store.prune_fires(cutoff)
    assert caught.error is not None
    assert caught.error.message == f"prune cutoff must be a safe integer, received {cutoff!r}"
    assert await env.backdoor.dump() == dump


async def test_prune_keeps_protected_rows(env: Env) -> None:
    await env.register(overlap="buffer-one")
    rows = [
        (1, None, None),  # unfinished (claimed)
        (2, "launched", "run-2"),  # launched
        (3, "buffered", None),  # unfinished (buffered)
        (4, "completed", "run-4"),  # protected: pending slot
        (5, "completed", "holder"),  # protected: the holder's run id
        (6, "failed", None),  # deleted
        (7, "skipped", None),  # deleted
        (8, "superseded", "x"),  # deleted
        (9, "completed", None),  # deleted: NULL never protects
        (100, "completed", "late"),  # not older than the cutoff
    ]
    for occurrence, outcome, run_id in rows:
        await env.backdoor.put_fire("daily", occurrence, outcome, run_id)
    await env.backdoor.set_columns("daily", pending_at_ms=4, active_run_id="holder")
    assert await env.store.prune_fires(100) == 4
    left = [r.occurrence for r in (await env.store.history()).items]
    assert left == [100, 5, 4, 3, 2, 1]
    assert await env.store.prune_fires(100) == 0
    assert await env.store.prune_fires(-(2**53) + 1) == 0


async def test_prune_is_per_trigger(env: Env) -> None:
    await env.register(id="a")
    await env.register(id="b")
    await env.backdoor.put_fire("a", 1, "completed", "run")
    await env.backdoor.put_fire("b", 1, "completed", "run")
    await env.backdoor.set_columns("a", active_run_id="run")
    assert await env.store.prune_fires(2) == 1
    assert [r.trigger_id for r in (await env.store.history()).items] == ["a"]


# --- paging against a simple model (hypothesis) -------------------------------------------

_OUTCOMES = st.sampled_from([None, "launched", "completed", "skipped", "buffered", "failed"])
_ROW = st.tuples(
    st.sampled_from(["a", "b", "bb", "c"]),
    st.integers(min_value=-3, max_value=6),
    _OUTCOMES,
    st.sampled_from([None, "r1", "r2"]),
)


def _model(rows: dict[tuple[str, int], tuple[Any, Any]], query: HistoryQuery) -> list[FireRecord]:
    records = [
        FireRecord(trigger_id=tid, occurrence=occ, outcome=outcome, run_id=run_id)
        for (tid, occ), (outcome, run_id) in rows.items()
        if (query.trigger_id is None or tid == query.trigger_id)
        and (query.run_id is None or run_id == query.run_id)
        and (query.outcome is None or outcome == query.outcome)
    ]
    return sorted(records, key=lambda r: (-r.occurrence, [-ord(ch) for ch in r.trigger_id] + [1]))


@pytest.mark.parametrize("backend", [b.param() for b in BACKENDS[:2]])
@settings(max_examples=40)
@given(
    rows=st.lists(_ROW, max_size=25),
    limit=st.integers(min_value=1, max_value=7),
    trigger_filter=st.sampled_from([None, "a", "bb"]),
    run_filter=st.sampled_from([None, "r1"]),
    outcome_filter=st.sampled_from([None, "completed", "launched"]),
)
def test_paging_has_no_gaps_or_repeats(
    backend: Backend,
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[str, int, Any, Any]],
    limit: int,
    trigger_filter: str | None,
    run_filter: str | None,
    outcome_filter: Any,
) -> None:
    table = {(tid, occ): (outcome, run_id) for tid, occ, outcome, run_id in rows}
    base = HistoryQuery(trigger_id=trigger_filter, run_id=run_filter, outcome=outcome_filter)
    expected = _model(table, base)

    async def main() -> None:
        async with backend.open(ManualClock(0), tmp_path_factory.mktemp("paging")) as opened:
            for tid in ("a", "b", "bb", "c"):
                await opened.store.register(declaration(id=tid))
            for (tid, occ), (outcome, run_id) in table.items():
                await opened.backdoor.put_fire(tid, occ, outcome, run_id)
            unpaged = await opened.store.history(base)
            assert unpaged.items == expected
            assert unpaged.next_cursor is None
            pages: list[FireRecord] = []
            cursor: Fire | None = None
            for _ in range(len(expected) + 2):
                query = HistoryQuery(
                    trigger_id=trigger_filter,
                    run_id=run_filter,
                    outcome=outcome_filter,
                    cursor=cursor,
                    limit=limit,
                )
                got = await opened.store.history(query)
                assert len(got.items) <= limit
                pages.extend(got.items)
                if got.next_cursor is None:
                    break
                assert len(got.items) == limit
                last = got.items[-1]
                assert got.next_cursor == Fire(
                    trigger_id=last.trigger_id, occurrence=last.occurrence
                )
                cursor = got.next_cursor
            assert pages == expected

    trio.run(main)


def test_model_sort_matches_code_points() -> None:
    rows = {("b", 1): (None, None), ("bb", 1): (None, None), ("a", 1): (None, None)}
    got = [r.trigger_id for r in _model(rows, HistoryQuery())]
    assert got == ["bb", "b", "a"]
