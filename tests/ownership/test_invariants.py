"""Random operation sequences: the stores agree, and the §14 invariants hold after every step.

Each example applies one random sequence to a ``MemoryRunStore`` and to an inline SQLite store
(sharing one hand-set clock), compares every outcome and every row, and checks the row
invariants and the cross-step invariants (started once, terminal forever, monotonic stamps,
first writer wins on cancellation) after each step.
"""

from __future__ import annotations

from typing import Any

import trio
from hypothesis import given, settings, strategies as st

from trio_triggers import RunStoreError
from trio_triggers._ownership import (
    HEARTBEAT_SKEW_ALLOWANCE_MS,
    Activated,
    Claimed,
    LivenessEvidence,
    MemoryRunStore,
    OwnerId,
    RunRow,
    RunStoreBase,
    Updated,
    open_sqlite_run_store,
)
from trio_triggers._ownership._models import TERMINAL_STATUSES

from .backends import ManualClock

OWNERS = [
    OwnerId(host_id="h1", pid=1, nonce="a"),
    OwnerId(host_id="h1", pid=2, nonce="b"),
    OwnerId(host_id="h2", pid=3, nonce="c"),
]
RUNS = ["r0", "r1"]
KINDS = ["same-host-pid-dead", "cross-host-unreachable-stale", "lease-expired"]


def lease_step(op: str) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        st.just(op),
        st.sampled_from(RUNS),
        st.sampled_from([3, 3, 3, 0, 1, 2]),  # who: 3 = the row's owner or claimant
        st.sampled_from([0, 0, -1, -5_000, HEARTBEAT_SKEW_ALLOWANCE_MS]),  # reading offset
        st.sampled_from([None, *KINDS]),  # evidence kind (or none)
        st.sampled_from([False, False, False, True]),  # stale snapshot / token / instant
    )


tick = st.tuples(st.just("tick"), st.sampled_from([0, 1, 999, 10_000, 29_999, 30_001]))
transition = st.tuples(
    st.just("transition"),
    st.sampled_from(RUNS),
    st.sampled_from([3, 3, 3, 0, 1, 2]),
    st.sampled_from(["running", "running", "suspended", "completed", "failed", "cancelled"]),
)
LEASE_OPS = ["claim", "claim_and_own", "steal", "recover", "activate", "abandon", "heartbeat"]
step = st.one_of(
    tick,
    tick,
    transition,
    st.tuples(st.just("request_cancel"), st.sampled_from(RUNS)),
    *(lease_step(op) for op in [*LEASE_OPS, "claim_and_own", "steal", "reconfirm", "ack"]),
)


def check_row(row: RunRow) -> None:
    """§6.4 row invariants."""
    assert (row.status == "running") == (row.owner is not None) == (row.heartbeat_at_ms is not None)
    assert (row.claim is None) == (row.claimed_at_ms is None)
    if row.claim is not None:
        assert row.status in ("pending", "suspended", "running")
    assert (row.finished_at_ms is not None) == (row.status in TERMINAL_STATUSES)
    assert (row.started_at_ms is None) == (row.status == "pending")
    if row.cancel_acknowledgement is not None:
        assert row.cancel_requested_at_ms is not None
    if row.result_json is not None:
        assert row.status == "completed"
    if row.error is not None:
        assert row.status in ("failed", "cancelled")


def check_step(before: RunRow | None, after: RunRow | None, op: str, outcome: object) -> None:
    """Cross-step invariants 3, 4, 7, 9, 27."""
    if before is None:
        return
    assert after is not None
    if before.status in TERMINAL_STATUSES:
        assert after == before  # terminal rows never change
    if after.status == "pending":
        assert before.status == "pending"
    if before.started_at_ms is not None:
        assert after.started_at_ms == before.started_at_ms
    if after.owner != before.owner:
        assert (op in ("activate", "claim_and_own") and outcome == Activated()) or (
            op == "transition" and after.owner is None
        )
    if op in ("claim", "steal"):
        assert (after.status, after.owner, after.heartbeat_at_ms) == (
            before.status,
            before.owner,
            before.heartbeat_at_ms,
        )
    if op in ("heartbeat", "reconfirm") and before.heartbeat_at_ms is not None:
        assert after.heartbeat_at_ms is None or after.heartbeat_at_ms >= before.heartbeat_at_ms
    if before.cancel_requested_at_ms is not None:
        assert after.cancel_requested_at_ms == before.cancel_requested_at_ms
    if before.cancel_acknowledgement is not None:
        assert after.cancel_acknowledgement == before.cancel_acknowledgement


def who(index: int, view: RunRow | None) -> OwnerId:
    if index < len(OWNERS):
        return OWNERS[index]
    if view is not None and view.owner is not None:
        return view.owner
    if view is not None and view.claim is not None:
        return view.claim
    return OWNERS[0]


async def apply(
    store: RunStoreBase, item: tuple[Any, ...], clock: ManualClock, view: RunRow | None, old: Any
) -> object:
    op = item[0]
    if op == "create":
        try:
            return type(await store.create(item[1], "{}")).__name__
        except RunStoreError as exc:
            return exc.code
    if op == "request_cancel":
        return await store.request_cancel(item[1], clock.now_ms())
    if op == "transition":
        _, run, index, to = item
        extra: dict[str, Any] = {}
        if to == "completed":
            extra = {"result_json": "1"}
        elif to in ("failed", "cancelled"):
            extra = {"error": "e"}
        return await store.transition_owned(run, who(index, view), to, **extra)
    _, run, index, offset, kind, skewed = item
    me = who(index, view)
    if op in ("claim", "claim_and_own", "steal") and index == len(OWNERS):
        me = OWNERS[(OWNERS.index(me) + 1) % len(OWNERS)] if view and view.owner else me
    now = max(0, clock.now_ms() + offset)
    snapshot: Any = old if (skewed and old is not None) else view
    if snapshot is None:
        snapshot = RunRow(run_id=run, status="pending", created_at_ms=0, state_json="{}")
    subject = snapshot.owner if op != "recover" else (view.claim if view else None)
    evidence = None
    if kind is not None and subject is not None:
        at = now + 1 if skewed else now
        evidence = LivenessEvidence(expected_owner=subject, checked_at_ms=at, kind=kind)
    token = view.claimed_at_ms if view is not None and view.claimed_at_ms is not None else now
    if skewed:
        token += 1
    try:
        if op == "claim":
            return await store.claim(run, snapshot, me, now)
        if op == "claim_and_own":
            return await store.claim_and_own(run, snapshot, me, now, evidence)
        if op == "activate":
            return await store.activate(run, me, token, snapshot)
        if op == "abandon":
            return await store.abandon_claim(run, me, token)
        if op == "heartbeat":
            return await store.heartbeat(run, me, now)
        if op == "reconfirm":
            return await store.reconfirm(run, me, now)
        if op == "ack":
            return await store.acknowledge_cancel(run, me, now)
        fallback = LivenessEvidence(expected_owner=me, checked_at_ms=now, kind="lease-expired")
        if op == "steal":
            return await store.steal(run, snapshot, me, now, evidence or fallback)
        stale = view.claim if view is not None and view.claim is not None else me
        return await store.recover_claim(run, stale, token, me, now, evidence or fallback)
    except RunStoreError as exc:
        return exc.code


async def run_sequence(steps: list[tuple[Any, ...]]) -> None:
    clock = ManualClock(0)
    memory = MemoryRunStore(clock=clock)
    async with open_sqlite_run_store(":memory:", clock=clock) as sqlite:
        previous: dict[str, RunRow | None] = dict.fromkeys(RUNS)
        prefix: list[tuple[Any, ...]] = [("create", run) for run in RUNS]
        prefix.append(("claim_and_own", "r0", 0, 0, None, False))  # start with one owned run
        for item in prefix + steps:
            if item[0] == "tick":
                clock.set(clock.now_ms() + item[1])
                continue
            run = item[1]
            rows = {r.run_id: r for r in await memory.list_runs()}
            view = rows.get(run)
            got = await apply(memory, item, clock, view, previous[run])
            expected = await apply(sqlite, item, clock, view, previous[run])
            assert got == expected, item
            after_rows = await memory.list_runs()
            assert after_rows == await sqlite.list_runs()
            for row in after_rows:
                check_row(row)
            after = {r.run_id: r for r in after_rows}.get(run)
            check_step(view, after, item[0], got)
            if item[0] in ("heartbeat", "reconfirm") and got == Updated() and view is not None:
                assert after is not None
                assert view.heartbeat_at_ms is not None
                now = max(0, clock.now_ms() + item[3])
                assert after.heartbeat_at_ms == max(view.heartbeat_at_ms, now)
            if isinstance(got, Claimed):
                assert after is not None
                assert after.claimed_at_ms == got.claimed_at_ms
            previous[run] = view


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=5, max_size=50))
def test_random_sequences_agree_and_keep_the_invariants(steps: list[tuple[Any, ...]]) -> None:
    trio.run(run_sequence, steps)
