"""The run-store conformance suite (``ownership.md`` §6, §10, §14), over every backend.

The ``store`` fixture is parametrized over ``backends.BACKENDS``; the clock is a hand-set
``ManualClock`` that is both the store clock and the source of the callers' readings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import trio

from trio_triggers import RunStoreError
from trio_triggers._identities import idempotency_key
from trio_triggers._ownership import (
    Abandoned,
    Activated,
    AlreadyClaimed,
    AlreadyRequested,
    AttemptRecord,
    CancelAcknowledgement,
    CancelRequested,
    ClaimChanged,
    Claimed,
    ClaimFresh,
    ClaimLost,
    Created,
    EvidenceKind,
    EvidenceRequired,
    Existing,
    FenceLost,
    GuardFailed,
    HeartbeatFresh,
    LivenessUnconfirmed,
    NotFound,
    Recovered,
    RunRow,
    RunSnapshot,
    RunStoreBase,
    SnapshotChanged,
    Terminal,
    Transitioned,
    TransitionGuard,
    Updated,
    WaitingToRetry,
    lease_liveness,
    probe_from_check,
)

from .helpers import PENDING, A, B, C, created, dump, ev, running, running_snapshot

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .backends import ManualClock

# --- create / get ----------------------------------------------------------------------------


async def test_create_reads_back_exactly(store: RunStoreBase, clock: ManualClock) -> None:
    clock.set(1234)
    state = '{ "cursor" : 1,  "note": "h\\u00e9 é" }'
    outcome = await store.create(
        "r", state, flow_id="flow", input_json="[1, 2.50, null]", idempotency_key="k"
    )
    assert isinstance(outcome, Created)
    row = await store.get("r")
    assert row == outcome.row
    assert row == RunRow(
        run_id="r",
        status="pending",
        created_at_ms=1234,
        state_json=state,
        flow_id="flow",
        input_json="[1, 2.50, null]",
        idempotency_key="k",
    )
    assert row.snapshot == PENDING


async def test_create_with_existing_key_returns_it_and_writes_nothing(
    store: RunStoreBase, clock: ManualClock
) -> None:
    first = await store.create("r1", "{}", flow_id="f", idempotency_key="k")
    assert isinstance(first, Created)
    await store.claim_and_own("r1", first.row, A, 0)
    before = await dump(store)
    again = await store.create("r2", '{"other":1}', flow_id="g", idempotency_key="k")
    assert again == Existing(row=await store.get("r1"))
    assert again.row.status == "running"
    assert await dump(store) == before
    with pytest.raises(RunStoreError) as info:
        await store.get("r2")
    assert info.value.code == "not_found_row"


async def test_create_duplicate_run_id_is_a_constraint(store: RunStoreBase) -> None:
    await created(store, "r")
    with pytest.raises(RunStoreError) as info:
        await store.create("r", "{}", idempotency_key="fresh-key")
    assert (info.value.code, info.value.method) == ("constraint", "create")
    # the failed create wrote nothing, not even its key
    assert isinstance(await store.create("r2", "{}", idempotency_key="fresh-key"), Created)


async def test_create_owned_begins_the_first_attempt_in_the_same_write(
    store: RunStoreBase, clock: ManualClock
) -> None:
    clock.set(5000)
    outcome = await store.create_owned(
        "r", "{}", owner=A, flow_id="flow", input_json="[1]", idempotency_key="k"
    )
    assert isinstance(outcome, Created)
    row = await store.get("r")
    assert row == outcome.row
    assert (row.status, row.owner, row.attempts) == ("running", A, 1)
    assert (row.created_at_ms, row.started_at_ms, row.heartbeat_at_ms) == (5000, 5000, 5000)
    # Owned as a claim would own it: a second owner cannot take it while its heartbeat is
    # fresh, and the owner's fenced writes are accepted.
    assert not isinstance(await store.claim_and_own("r", row, B, 5001), Activated)
    assert isinstance(await store.transition_owned("r", A, "completed"), Transitioned)


async def test_create_owned_with_a_known_key_answers_the_row_unchanged(
    store: RunStoreBase,
) -> None:
    first = await store.create("r1", "{}", flow_id="f", idempotency_key="k")
    assert isinstance(first, Created)
    before = await dump(store)
    again = await store.create_owned("r2", "{}", owner=B, flow_id="f", idempotency_key="k")
    assert again == Existing(row=first.row)
    assert again.row.status == "pending"  # not taken by the second create
    assert await dump(store) == before


async def test_create_owned_validates_its_owner(store: RunStoreBase) -> None:
    with pytest.raises(RunStoreError) as info:
        await store.create_owned("r", "{}", owner="not an owner")  # type: ignore[arg-type]
    assert (info.value.code, info.value.method) == ("invalid_run", "create_owned")
    with pytest.raises(RunStoreError):
        await store.get("r")


async def test_get_unknown_is_not_found_row(store: RunStoreBase) -> None:
    with pytest.raises(RunStoreError) as info:
        await store.get("missing")
    assert str(info.value) == "not_found_row: RunStore.get: no run with that run_id"


# --- claim / activate / abandon --------------------------------------------------------------


async def test_claim_activate_two_phases(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store)
    clock.set(5)
    assert await store.claim("r", row, A, 5) == Claimed(claimed_at_ms=5)
    claimed = await store.get("r")
    assert (claimed.status, claimed.claim, claimed.claimed_at_ms, claimed.owner) == (
        "pending",
        A,
        5,
        None,
    )
    assert await store.claim("r", row, B, 5) == AlreadyClaimed()
    clock.set(7)
    assert await store.activate("r", A, 5, row) == Activated()
    active = await store.get("r")
    assert active.snapshot == running_snapshot(A, 7)
    assert (active.started_at_ms, active.claim, active.claimed_at_ms) == (7, None, None)
    # the grant is spent (invariant 5)
    assert await store.activate("r", A, 5, row) == ClaimLost()


async def test_claim_loss_classification(store: RunStoreBase, clock: ManualClock) -> None:
    assert await store.claim("missing", PENDING, A, 0) == NotFound()
    await running(store, clock, "r", A, 0)
    # a running row is never claimable by claim: fresh -> HeartbeatFresh, stale -> changed
    clock.set(30_000)
    assert await store.claim("r", PENDING, B, 30_000) == HeartbeatFresh()
    clock.set(31_000)
    assert await store.claim("r", PENDING, B, 31_000) == SnapshotChanged()
    snap = running_snapshot(A, 0)
    assert await store.claim("r", snap, B, 31_000) == SnapshotChanged()
    # a terminal row: SnapshotChanged
    assert await store.transition_owned("r", A, "completed") == Transitioned()
    done = await store.get("r")
    assert await store.claim("r", done, B, 31_000) == SnapshotChanged()


async def test_claim_on_changed_snapshot(store: RunStoreBase) -> None:
    await created(store)
    suspended = RunSnapshot(status="suspended", owner=None, heartbeat_at_ms=None)
    assert await store.claim("r", suspended, A, 0) == SnapshotChanged()


async def test_activate_refusals(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store)
    assert await store.activate("missing", A, 0, row) == ClaimLost()
    assert await store.activate("r", A, 0, row) == ClaimLost()  # no claim at all
    assert await store.claim("r", row, A, 3) == Claimed(claimed_at_ms=3)
    assert await store.activate("r", A, 4, row) == ClaimLost()  # another timestamp
    assert await store.activate("r", B, 3, row) == ClaimLost()  # another identity
    # a losing activate never clears a claim it does not hold (invariant 6)
    assert (await store.get("r")).claim == A
    wrong = RunSnapshot(status="suspended", owner=None, heartbeat_at_ms=None)
    assert await store.activate("r", A, 3, wrong) == SnapshotChanged()
    after = await store.get("r")
    assert (after.status, after.claim, after.claimed_at_ms) == ("pending", None, None)


async def test_abandon_claim(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store)
    assert await store.claim("r", row, A, 3) == Claimed(claimed_at_ms=3)
    assert await store.abandon_claim("r", B, 3) == ClaimLost()
    assert await store.abandon_claim("r", A, 4) == ClaimLost()
    assert await store.abandon_claim("missing", A, 3) == ClaimLost()
    assert (await store.get("r")).claim == A
    assert await store.abandon_claim("r", A, 3) == Abandoned()
    assert (await store.get("r")) == row
    assert await store.abandon_claim("r", A, 3) == ClaimLost()


async def test_abandon_a_steal_claim_keeps_the_stale_owner(
    store: RunStoreBase, clock: ManualClock
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    assert await store.steal(
        "r", snap0, C, 31_000, ev(A, 31_000, "cross-host-unreachable-stale")
    ) == Claimed(claimed_at_ms=31_000)
    assert await store.abandon_claim("r", C, 31_000) == Abandoned()
    row = await store.get("r")
    assert (row.snapshot, row.claim) == (snap0, None)


async def test_started_at_written_once(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock, at=10)
    clock.set(20)
    assert await store.transition_owned("r", A, "suspended") == Transitioned()
    suspended = await store.get("r")
    assert (suspended.status, suspended.started_at_ms, suspended.finished_at_ms) == (
        "suspended",
        10,
        None,
    )
    clock.set(30)
    assert await store.claim("r", suspended, B, 30) == Claimed(claimed_at_ms=30)
    clock.set(40)
    assert await store.activate("r", B, 30, suspended) == Activated()
    again = await store.get("r")
    assert (again.started_at_ms, again.heartbeat_at_ms, again.owner) == (10, 40, B)


# --- claim_and_own (§10.8) --------------------------------------------------------------------


async def test_claim_and_own_worked_examples(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    assert await store.claim_and_own("r", snap0, B, 0) == HeartbeatFresh()
    clock.set(31_000)
    assert await store.claim_and_own("r", snap0, B, 31_000) == EvidenceRequired()
    assert await store.claim_and_own("r", snap0, B, 31_000) == EvidenceRequired()
    outcome = await store.claim_and_own("r", snap0, B, 31_000, ev(A, 31_000, "same-host-pid-dead"))
    assert outcome == Activated()
    row = await store.get("r")
    assert row.snapshot == running_snapshot(B, 31_000)
    assert row.started_at_ms == 0
    assert await store.heartbeat("r", A, 31_000) == FenceLost()


async def test_claim_and_own_reowning_own_stale_run(
    store: RunStoreBase, clock: ManualClock
) -> None:
    await running(store, clock)
    clock.set(30_001)
    mine = running_snapshot(A, 0)
    assert await store.claim_and_own("r", mine, A, 30_000) == HeartbeatFresh()
    assert await store.claim_and_own("r", mine, A, 30_001) == Activated()
    assert (await store.get("r")).heartbeat_at_ms == 30_001


async def test_claim_and_own_losses(store: RunStoreBase, clock: ManualClock) -> None:
    assert await store.claim_and_own("missing", PENDING, A, 0) == NotFound()
    row = await created(store)
    assert await store.claim("r", row, B, 0) == Claimed(claimed_at_ms=0)
    assert await store.claim_and_own("r", row, A, 0) == AlreadyClaimed()
    # step 0 with a claimed row reports the row loss, not EvidenceRequired
    await running(store, clock, "s", A, 0)
    snap = running_snapshot(A, 0)
    clock.set(31_000)
    assert await store.steal("s", snap, C, 31_000, ev(A, 31_000, "lease-expired")) == Claimed(
        claimed_at_ms=31_000
    )
    assert await store.claim_and_own("s", snap, B, 31_000) == AlreadyClaimed()
    # a moved row without evidence: SnapshotChanged (the row no longer matches)
    other = running_snapshot(A, 5)
    assert await store.claim_and_own("s", other, B, 31_000) == AlreadyClaimed()
    await running(store, clock, "t", A, 31_000)
    clock.set(62_000)
    assert await store.claim_and_own("t", running_snapshot(A, 1), B, 62_000) == SnapshotChanged()


async def test_concurrent_claim_and_own_exactly_one_wins(
    store: RunStoreBase, clock: ManualClock
) -> None:
    row = await created(store)
    results: list[object] = []

    async def contender(owner: Any) -> None:
        results.append(await store.claim_and_own("r", row, owner, 0))

    async with trio.open_nursery() as nursery:
        for owner in (A, B, C):
            nursery.start_soon(contender, owner)
    assert results.count(Activated()) == 1
    assert all(isinstance(r, HeartbeatFresh | SnapshotChanged | Activated) for r in results)
    assert len(results) == 3


async def test_concurrent_claims_exactly_one_granted(store: RunStoreBase) -> None:
    row = await created(store)
    results: list[object] = []

    async def contender(owner: Any) -> None:
        results.append(await store.claim("r", row, owner, 0))

    async with trio.open_nursery() as nursery:
        for owner in (A, B, C):
            nursery.start_soon(contender, owner)
    assert results.count(Claimed(claimed_at_ms=0)) == 1
    assert sorted(type(r).__name__ for r in results) == [
        "AlreadyClaimed",
        "AlreadyClaimed",
        "Claimed",
    ]


# --- steal (§10.9) ----------------------------------------------------------------------------


async def test_steal_worked_examples(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    assert await store.steal("r", snap0, B, 0, ev(A, 0, "same-host-pid-dead")) == HeartbeatFresh()
    clock.set(31_000)
    assert await store.claim("r", snap0, C, 31_000) == SnapshotChanged()
    assert (
        await store.steal("r", snap0, C, 31_000, ev(B, 31_000, "cross-host-unreachable-stale"))
        == LivenessUnconfirmed()
    )
    assert await store.steal(
        "r", snap0, C, 31_000, ev(A, 31_000, "cross-host-unreachable-stale")
    ) == Claimed(claimed_at_ms=31_000)
    row = await store.get("r")
    assert (row.status, row.owner, row.heartbeat_at_ms, row.claim) == ("running", A, 0, C)
    # the previous owner keeps the fence until activation: its heartbeat still succeeds
    assert await store.heartbeat("r", A, 31_000) == Updated()
    assert await store.activate("r", C, 31_000, snap0) == SnapshotChanged()
    row = await store.get("r")
    assert (row.owner, row.heartbeat_at_ms, row.claim) == (A, 31_000, None)


async def test_steal_then_activate(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    evidence = ev(A, 31_000, "cross-host-unreachable-stale")
    assert await store.steal("r", snap0, C, 31_000, evidence) == Claimed(claimed_at_ms=31_000)
    assert await store.activate("r", C, 31_000, snap0) == Activated()
    assert await store.heartbeat("r", A, 31_001) == FenceLost()
    assert await store.heartbeat("r", C, 31_001) == Updated()
    assert await store.transition_owned("r", A, "completed") == FenceLost()


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (29_999, HeartbeatFresh()),
        (30_000, HeartbeatFresh()),
        (30_001, Claimed(claimed_at_ms=30_001)),
    ],
)
@pytest.mark.parametrize("kind", ["same-host-pid-dead", "lease-expired"])
async def test_steal_staleness_boundary(
    store: RunStoreBase, clock: ManualClock, at: int, expected: object, kind: Any
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(at)
    assert await store.steal("r", snap0, B, at, ev(A, at, kind)) == expected


async def test_steal_lease_expired_from_another_host(
    store: RunStoreBase, clock: ManualClock
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(30_001)
    assert await store.steal("r", snap0, C, 30_001, ev(C, 30_001, "lease-expired")) == (
        LivenessUnconfirmed()
    )
    assert await store.steal("r", snap0, C, 30_001, ev(A, 30_001, "lease-expired")) == Claimed(
        claimed_at_ms=30_001
    )


async def test_steal_evidence_must_be_taken_at_the_call(
    store: RunStoreBase, clock: ManualClock
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(40_000)
    for at in (39_999, 40_001):
        kinds: tuple[EvidenceKind, ...] = ("same-host-pid-dead", "lease-expired")
        for kind in kinds:
            outcome = await store.steal("r", snap0, B, 40_000, ev(A, at, kind))
            assert outcome == LivenessUnconfirmed()
    # the kind's host relation
    assert await store.steal(
        "r", snap0, B, 40_000, ev(A, 40_000, "cross-host-unreachable-stale")
    ) == (LivenessUnconfirmed())
    assert await store.steal("r", snap0, C, 40_000, ev(A, 40_000, "same-host-pid-dead")) == (
        LivenessUnconfirmed()
    )
    # a snapshot that is not running never matches evidence
    assert await store.steal("r", PENDING, B, 40_000, ev(A, 40_000, "lease-expired")) == (
        LivenessUnconfirmed()
    )
    assert (await store.get("r")).claim is None


async def test_steal_terminal_and_moved_rows(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    assert await store.transition_owned("r", A, "failed", error="boom") == Transitioned()
    clock.set(31_000)
    evidence = ev(A, 31_000, "lease-expired")
    assert await store.steal("r", snap0, B, 31_000, evidence) == SnapshotChanged()
    done = await store.get("r")
    assert await store.steal("r", done, B, 31_000, evidence) == LivenessUnconfirmed()
    assert await store.steal("missing", snap0, B, 31_000, evidence) == NotFound()


async def test_steal_on_stolen_row_is_already_claimed(
    store: RunStoreBase, clock: ManualClock
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    assert await store.steal("r", snap0, B, 31_000, ev(A, 31_000, "lease-expired")) == Claimed(
        claimed_at_ms=31_000
    )
    assert await store.steal("r", snap0, C, 31_000, ev(A, 31_000, "lease-expired")) == (
        AlreadyClaimed()
    )


# --- recover_claim (§10.10) ---------------------------------------------------------------------


async def test_recover_claim_worked_example(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store)
    assert await store.claim("r", row, A, 0) == Claimed(claimed_at_ms=0)
    assert (
        await store.recover_claim("r", A, 0, B, 0, ev(A, 0, "same-host-pid-dead")) == ClaimFresh()
    )
    clock.set(31_000)
    assert await store.claim("r", row, B, 31_000) == AlreadyClaimed()
    assert (
        await store.recover_claim("r", A, 0, B, 31_000, ev(C, 31_000, "same-host-pid-dead"))
        == LivenessUnconfirmed()
    )
    evidence = ev(A, 31_000, "same-host-pid-dead")
    assert await store.recover_claim("r", A, 0, B, 31_000, evidence) == Recovered()
    assert await store.recover_claim("r", A, 0, B, 31_000, evidence) == ClaimChanged()
    assert await store.claim("r", row, B, 31_000) == Claimed(claimed_at_ms=31_000)
    assert await store.recover_claim("missing", A, 0, B, 31_000, evidence) == NotFound()


@pytest.mark.parametrize(
    ("at", "expected"), [(29_999, ClaimFresh()), (30_000, ClaimFresh()), (30_001, Recovered())]
)
async def test_recover_claim_boundary(
    store: RunStoreBase, clock: ManualClock, at: int, expected: object
) -> None:
    row = await created(store)
    assert await store.claim("r", row, A, 0) == Claimed(claimed_at_ms=0)
    clock.set(at)
    assert await store.recover_claim("r", A, 0, C, at, ev(A, at, "lease-expired")) == expected


# --- heartbeat / reconfirm (§10.11, §10.12) -----------------------------------------------------


async def test_heartbeat_worked_example(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock, at=100)
    clock.set(300)
    assert await store.heartbeat("r", A, 200) == Updated()
    assert (await store.get("r")).heartbeat_at_ms == 200
    assert await store.heartbeat("r", A, 150) == Updated()
    assert (await store.get("r")).heartbeat_at_ms == 200
    assert await store.heartbeat("r", A, 250) == Updated()
    for bad in (-1, 1.5, float("nan")):
        with pytest.raises(RunStoreError) as info:
            await store.heartbeat("r", A, bad)  # type: ignore[arg-type]
        assert info.value.code == "invalid_run"
    assert (await store.get("r")).heartbeat_at_ms == 250
    assert await store.heartbeat("missing", A, 300) == NotFound()
    assert await store.heartbeat("r", B, 300) == FenceLost()
    assert await store.transition_owned("r", A, "suspended") == Transitioned()
    assert await store.heartbeat("r", A, 300) == FenceLost()


async def test_reconfirm_worked_example(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    assert await store.reconfirm("missing", A, 0) == NotFound()
    assert await store.reconfirm("r", B, 0) == FenceLost()
    clock.set(100)
    assert await store.reconfirm("r", A, 100) == Updated()
    assert await store.reconfirm("r", A, 50) == Updated()
    assert (await store.get("r")).heartbeat_at_ms == 100
    clock.set(30_101)
    assert await store.steal(
        "r", running_snapshot(A, 100), C, 30_101, ev(A, 30_101, "cross-host-unreachable-stale")
    ) == Claimed(claimed_at_ms=30_101)
    # a pending steal claim defeats reconfirm, but not heartbeat
    assert await store.reconfirm("r", A, 30_101) == FenceLost()
    assert (await store.get("r")).heartbeat_at_ms == 100
    assert snap0 != running_snapshot(A, 100)
    assert await store.activate("r", C, 30_101, running_snapshot(A, 100)) == Activated()
    clock.set(30_102)
    assert await store.reconfirm("r", A, 30_102) == FenceLost()
    assert await store.reconfirm("r", C, 30_102) == Updated()


async def test_heartbeat_ignores_a_pending_claim(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    await store.steal("r", snap0, C, 31_000, ev(A, 31_000, "lease-expired"))
    assert await store.heartbeat("r", A, 31_000) == Updated()


async def test_reconfirm_and_steal_race_exactly_one_wins(
    store: RunStoreBase, clock: ManualClock
) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    results: dict[str, object] = {}

    async def steal() -> None:
        results["steal"] = await store.steal("r", snap0, C, 31_000, ev(A, 31_000, "lease-expired"))

    async def reconfirm() -> None:
        results["reconfirm"] = await store.reconfirm("r", A, 31_000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(steal)
        nursery.start_soon(reconfirm)
    assert (results["steal"], results["reconfirm"]) in [
        (HeartbeatFresh(), Updated()),
        (Claimed(claimed_at_ms=31_000), FenceLost()),
    ]


# --- transition_owned (§10.13) ----------------------------------------------------------------


async def test_transition_owned_worked_examples(store: RunStoreBase, clock: ManualClock) -> None:
    assert await store.transition_owned("missing", A, "failed") == NotFound()
    await running(store, clock)
    assert await store.transition_owned("r", A, "running", state_json='{"cursor":1}') == (
        Transitioned()
    )
    assert await store.transition_owned("r", A, "running") == Transitioned()
    row = await store.get("r")
    assert (row.state_json, row.status, row.owner) == ('{"cursor":1}', "running", A)
    assert await store.transition_owned("r", B, "completed") == FenceLost()


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
async def test_terminal_transitions(store: RunStoreBase, clock: ManualClock, status: Any) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    await store.steal("r", snap0, B, 31_000, ev(A, 31_000, "same-host-pid-dead"))
    clock.set(0)
    if status == "completed":
        outcome = await store.transition_owned("r", A, status, result_json='{"ok": true}')
    else:
        outcome = await store.transition_owned("r", A, status, error="it broke")
    assert outcome == Transitioned()
    row = await store.get("r")
    assert (row.status, row.finished_at_ms, row.owner, row.heartbeat_at_ms, row.claim) == (
        status,
        0,
        None,
        None,
        None,
    )
    assert row.claimed_at_ms is None
    if status == "completed":
        assert (row.result_json, row.error) == ('{"ok": true}', None)
    else:
        assert (row.result_json, row.error) == (None, "it broke")
    assert await store.claim("r", row.snapshot, B, 0) == SnapshotChanged()
    assert await store.claim_and_own("r", row.snapshot, B, 0) == SnapshotChanged()
    assert await store.transition_owned("r", A, "running") == FenceLost()


async def test_suspend_clears_a_steal_claim(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    clock.set(31_000)
    await store.steal("r", snap0, B, 31_000, ev(A, 31_000, "same-host-pid-dead"))
    assert await store.transition_owned("r", A, "suspended", state_json="[1]") == Transitioned()
    row = await store.get("r")
    assert (row.status, row.claim, row.finished_at_ms, row.owner, row.state_json) == (
        "suspended",
        None,
        None,
        None,
        "[1]",
    )
    assert await store.claim("r", row, B, 31_000) == Claimed(claimed_at_ms=31_000)


async def test_transition_guard(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock)
    absent = TransitionGuard(cancel_requested="absent")
    present = TransitionGuard(cancel_requested="present")
    assert await store.transition_owned("r", A, "running", guard=present) == GuardFailed()
    assert await store.request_cancel("r", 5) == CancelRequested(requested_at_ms=5)
    assert await store.transition_owned("r", A, "completed", guard=absent) == GuardFailed()
    assert (await store.get("r")).status == "running"
    assert await store.transition_owned("r", A, "cancelled", guard=present) == Transitioned()
    assert (await store.get("r")).status == "cancelled"


# --- request_cancel / acknowledge_cancel (§10.14, §10.15) -------------------------------------


async def test_request_cancel_worked_example(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock)
    assert await store.request_cancel("r", 7) == CancelRequested(requested_at_ms=7)
    assert await store.request_cancel("r", 9) == AlreadyRequested(requested_at_ms=7)
    await running(store, clock, "done")
    assert await store.transition_owned("done", A, "completed") == Transitioned()
    assert await store.request_cancel("done", 7) == Terminal(status="completed")
    assert (await store.get("done")).cancel_requested_at_ms is None
    assert await store.request_cancel("missing", 7) == NotFound()
    # no skew bound on request_cancel's reading
    await created(store, "p")
    assert await store.request_cancel("p", 8_000_000_000_000) == CancelRequested(
        requested_at_ms=8_000_000_000_000
    )


async def test_acknowledge_cancel_worked_example(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock)
    assert await store.acknowledge_cancel("r", A, 10) is False  # no request yet
    await store.request_cancel("r", 5)
    assert await store.acknowledge_cancel("r", A, 11) is True
    assert await store.acknowledge_cancel("r", A, 12) is True
    assert (await store.get("r")).cancel_acknowledgement == CancelAcknowledgement(
        observed_at_ms=11, owner=A
    )
    assert await store.acknowledge_cancel("r", B, 13) is False
    assert await store.acknowledge_cancel("missing", A, 13) is False
    await created(store, "p")
    await store.request_cancel("p", 5)
    assert await store.acknowledge_cancel("p", A, 13) is False  # not running


# --- the skew bound (§10.2, invariant 11) -------------------------------------------------------


async def test_skew_bound_on_every_lease_reading(store: RunStoreBase, clock: ManualClock) -> None:
    snap0 = (await running(store, clock)).snapshot
    row = await created(store, "p")
    clock.set(0)
    calls: dict[str, Callable[[int], Awaitable[object]]] = {
        "claim": lambda t: store.claim("p", row, B, t),
        "claim_and_own": lambda t: store.claim_and_own("r", snap0, B, t),
        "steal": lambda t: store.steal("r", snap0, B, t, ev(A, t, "lease-expired")),
        "recover_claim": lambda t: store.recover_claim("p", A, 0, B, t, ev(A, t, "lease-expired")),
        "heartbeat": lambda t: store.heartbeat("r", A, t),
        "reconfirm": lambda t: store.reconfirm("r", A, t),
    }
    for method, call in calls.items():
        before = await dump(store)
        with pytest.raises(RunStoreError) as info:
            await call(10_001)
        assert str(info.value) == (
            f"invalid_run: RunStore.{method}: "
            "now_ms is more than the skew allowance ahead of the store clock"
        )
        assert await dump(store) == before
    # exactly +K is judged normally
    assert await store.heartbeat("r", A, 10_000) == Updated()
    assert (await store.get("r")).heartbeat_at_ms == 10_000
    assert await store.steal("r", snap0, B, 10_000, ev(A, 10_000, "lease-expired")) == (
        HeartbeatFresh()  # judged normally: the stamp 10 000 is fresh
    )
    assert await store.claim("p", row, B, 10_000) == Claimed(claimed_at_ms=10_000)
    # readings behind the store clock are always admitted
    clock.set(1_000_000)
    assert await store.heartbeat("r", A, 5) == Updated()
    # tokens and request readings carry no skew bound
    assert await store.activate("p", B, 9_000_000_000_000, row) == ClaimLost()
    assert await store.abandon_claim("p", B, 9_000_000_000_000) == ClaimLost()


# --- additions for the local runner ------------------------------------------------------------


async def test_list_runs_and_find_claimable(store: RunStoreBase, clock: ManualClock) -> None:
    clock.set(1)
    await created(store, "pending")
    await running(store, clock, "fresh", A, 2)
    await running(store, clock, "stale", A, 3)
    await running(store, clock, "done", A, 4)
    assert await store.transition_owned("done", A, "completed") == Transitioned()
    clock.set(5)
    claimed_row = await created(store, "claimed")
    assert await store.claim("claimed", claimed_row, B, 5) == Claimed(claimed_at_ms=5)
    clock.set(30_004)
    assert await store.heartbeat("fresh", A, 30_004) == Updated()
    names = [r.run_id for r in await store.list_runs()]
    assert names == ["pending", "fresh", "stale", "done", "claimed"]
    assert [r.run_id for r in await store.list_runs(statuses=["running"], limit=1)] == ["fresh"]
    assert [r.run_id for r in await store.find_claimable(30_004)] == ["pending", "stale"]
    assert [r.run_id for r in await store.find_claimable(30_003)] == ["pending"]
    assert [r.run_id for r in await store.find_claimable(30_006, limit=5)] == [
        "pending",
        "stale",
        "claimed",
    ]
    with pytest.raises(RunStoreError):
        await store.list_runs(statuses=["bogus"])  # type: ignore[list-item]


async def test_attempts_count_each_start_by_an_owner(
    store: RunStoreBase, clock: ManualClock
) -> None:
    clock.set(1)
    row = await created(store, "r")
    assert row.attempts == 0
    assert await store.claim_and_own("r", row.snapshot, A, 1) == Activated()
    assert (await store.get("r")).attempts == 1
    assert await store.heartbeat("r", A, 2) == Updated()
    assert (await store.get("r")).attempts == 1  # a heartbeat is not a new attempt
    # A suspends the run; B claims it and activates it: the second attempt.
    assert await store.transition_owned("r", A, "suspended") == Transitioned()
    clock.set(40_000)
    parked = await store.get("r")
    assert await store.claim("r", parked, B, 40_000) == Claimed(claimed_at_ms=40_000)
    assert await store.activate("r", B, 40_000, parked.snapshot) == Activated()
    again = await store.get("r")
    assert (again.attempts, again.owner) == (2, B)
    assert await store.transition_owned("r", B, "completed") == Transitioned()
    assert (await store.get("r")).attempts == 2


async def test_list_runs_newest_first_and_by_trigger(
    store: RunStoreBase, clock: ManualClock
) -> None:
    # Keys as the scheduler makes them ("<trigger_id>:<iso>"), a trigger id that is a prefix
    # of another ("a" and "a:b"), a caller's own key and no key at all.
    keys = {
        "r1": idempotency_key("a", 3_600_000),
        "r2": idempotency_key("a:b", 3_600_000),
        "r3": idempotency_key("a", 7_200_000),
        "r4": "a:my-own-key",
        "r5": None,
    }
    for at, (run_id, key) in enumerate(keys.items(), start=1):
        clock.set(at)
        await store.create(run_id, "{}", flow_id="f", idempotency_key=key)
    before = await dump(store)
    newest = [r.run_id for r in await store.list_runs(newest_first=True)]
    assert newest == ["r5", "r4", "r3", "r2", "r1"]
    assert [r.run_id for r in await store.list_runs(trigger_id="a")] == ["r1", "r3"]
    assert [r.run_id for r in await store.list_runs(trigger_id="a:b")] == ["r2"]
    assert [
        r.run_id for r in await store.list_runs(trigger_id="a", newest_first=True, limit=1)
    ] == ["r3"]
    assert await store.list_runs(trigger_id="a", statuses=["running"]) == []
    assert await store.list_runs(trigger_id="nobody") == []
    for bad in ("", 7):
        with pytest.raises(RunStoreError) as info:
            await store.list_runs(trigger_id=bad)  # type: ignore[arg-type]
        assert info.value.code == "invalid_run"
    assert await dump(store) == before


# --- typical sequences (§10.16) -----------------------------------------------------------------


async def test_typical_start_sequence(store: RunStoreBase, clock: ManualClock) -> None:
    clock.set(50)
    created_ = await store.create(
        "run-1", "{}", flow_id="f", input_json='{"x":1}', idempotency_key="key"
    )
    again = await store.create(
        "run-2", "{}", flow_id="f", input_json='{"x":1}', idempotency_key="key"
    )
    assert isinstance(again, Existing)
    assert again.row == created_.row
    now = clock.now_ms()
    assert await store.claim_and_own(again.row.run_id, again.row, A, now) == Activated()
    assert await store.transition_owned("run-1", A, "completed", result_json="3") == (
        Transitioned()
    )
    assert (await store.get("run-1")).result_json == "3"


async def test_outcomes_are_tagged_structs() -> None:
    assert msgspec.json.encode(Claimed(claimed_at_ms=3)) == b'{"type":"Claimed","claimed_at_ms":3}'
    assert msgspec.json.encode(NotFound()) == b'{"type":"NotFound"}'
    match Claimed(claimed_at_ms=3):
        case Claimed(claimed_at_ms=t):
            assert t == 3


async def test_typical_takeover_of_a_stale_run(store: RunStoreBase, clock: ManualClock) -> None:
    await running(store, clock)
    for now, expected in ((30_000, HeartbeatFresh()), (30_001, Activated())):
        clock.set(now)
        row = await store.get("r")
        assert row.owner is not None
        probe = probe_from_check(lease_liveness(), row.heartbeat_at_ms)
        evidence = await probe(row.owner, C, now)
        if now == 30_000:
            assert evidence is None  # the check still answers alive
        else:
            assert evidence == ev(A, now, "cross-host-unreachable-stale")
        assert await store.claim_and_own("r", row, C, now, evidence) == expected
    assert (await store.get("r")).owner == C


async def test_typical_stuck_claim(store: RunStoreBase, clock: ManualClock) -> None:
    row = await created(store)
    assert await store.claim("r", row, A, 0) == Claimed(claimed_at_ms=0)
    clock.set(30_001)
    stuck = await store.get("r")
    assert stuck.claim is not None
    assert stuck.claimed_at_ms is not None
    probe = probe_from_check(lease_liveness(), stuck.claimed_at_ms)
    evidence = await probe(stuck.claim, B, 30_001)
    assert evidence == ev(A, 30_001, "same-host-pid-dead")
    outcome = await store.recover_claim("r", stuck.claim, stuck.claimed_at_ms, B, 30_001, evidence)
    assert outcome == Recovered()
    assert await store.claim("r", row, B, 30_001) == Claimed(claimed_at_ms=30_001)
    assert await store.activate("r", B, 30_001, row) == Activated()


async def test_output_is_written_with_the_outcome_and_read_back(
    store: RunStoreBase, clock: ManualClock
) -> None:
    from trio_triggers import OUTPUT_TAIL_BYTES, RunOutput

    clock.set(1)
    row = await created(store, "r")
    assert row.output_json is None
    assert await store.claim_and_own("r", row.snapshot, A, 1) == Activated()
    output = RunOutput(stdout="out\n", stderr="é\n", stdout_bytes=9000, stderr_bytes=3)
    text = msgspec.json.encode(output).decode()
    # Output goes with a terminal transition only; a bad value writes nothing.
    with pytest.raises(RunStoreError) as info:
        await store.transition_owned("r", A, "suspended", output_json=text)
    assert info.value.code == "invalid_run"
    for bad in (
        "[]",
        '{"stdout": 1}',
        '{"stdout": "x", "bogus": 1}',
        '{"stdout": "abc", "stdout_bytes": 2}',
        msgspec.json.encode({"stderr": "x" * (OUTPUT_TAIL_BYTES + 1)}).decode(),
        "not json",
    ):
        with pytest.raises(RunStoreError) as info:
            await store.transition_owned("r", A, "failed", error="boom", output_json=bad)
        assert info.value.code == "invalid_run", bad
    assert (await store.get("r")).status == "running"
    assert await store.transition_owned("r", A, "failed", error="boom", output_json=text) == (
        Transitioned()
    )
    done = await store.get("r")
    assert done.output_json is not None
    assert msgspec.json.decode(done.output_json, type=RunOutput) == output
    assert (await store.list_runs())[0].output_json == done.output_json


# --- the wait between two attempts (failures.md, retry_owned) ----------------------------------

_RETRY_AT = 20_000


async def _waiting_to_retry(store: RunStoreBase, clock: ManualClock) -> RunRow:
    """``r`` begun by A at 1 000, its attempt failed at 2 000 and retried at ``_RETRY_AT``."""
    clock.set(1_000)
    row = await created(store, "r")
    assert await store.claim_and_own("r", row.snapshot, A, 1_000) == Activated()
    clock.set(2_000)
    failed = AttemptRecord(
        attempt=1, started_at_ms=1_000, ended_at_ms=2_000, error="boom", retry_at_ms=_RETRY_AT
    )
    attempt_json = msgspec.json.encode(failed).decode()
    assert await store.retry_owned("r", A, retry_at_ms=_RETRY_AT, attempt_json=attempt_json) == (
        Transitioned()
    )
    waiting = await store.get("r")
    assert (waiting.status, waiting.owner, waiting.retry_at_ms) == ("suspended", None, _RETRY_AT)
    assert waiting.attempt_log == [failed]
    return waiting


async def test_claim_and_own_refuses_a_run_waiting_to_retry(
    store: RunStoreBase, clock: ManualClock
) -> None:
    # find_claimable hides a waiting run, so a runner never asks; this is the store's own
    # refusal, the one a caller holding an older listing (or another process) runs into.
    waiting = await _waiting_to_retry(store, clock)
    before = await dump(store)
    for now in (2_000, _RETRY_AT - 1):
        clock.set(now)
        outcome = await store.claim_and_own("r", waiting.snapshot, B, now)
        assert outcome == WaitingToRetry(retry_at_ms=_RETRY_AT), now
        assert await dump(store) == before, now
    assert await store.find_claimable(_RETRY_AT - 1) == []
    # at the instant the wait is over: B begins the second attempt, the log kept
    clock.set(_RETRY_AT)
    assert [r.run_id for r in await store.find_claimable(_RETRY_AT)] == ["r"]
    assert await store.claim_and_own("r", waiting.snapshot, B, _RETRY_AT) == Activated()
    again = await store.get("r")
    assert again.snapshot == running_snapshot(B, _RETRY_AT)
    assert (again.attempts, again.started_at_ms, again.retry_at_ms) == (2, 1_000, None)
    assert again.attempt_log == waiting.attempt_log


async def test_the_two_phase_claim_refuses_a_run_waiting_to_retry(
    store: RunStoreBase, clock: ManualClock
) -> None:
    # The same rule on the claim + activate path: a claim granted now would let ``activate``
    # begin the next attempt before its instant.
    waiting = await _waiting_to_retry(store, clock)
    before = await dump(store)
    clock.set(_RETRY_AT - 1)
    outcome = await store.claim("r", waiting.snapshot, B, _RETRY_AT - 1)
    assert outcome == WaitingToRetry(retry_at_ms=_RETRY_AT)
    assert await dump(store) == before
    clock.set(_RETRY_AT)
    claimed = await store.claim("r", waiting.snapshot, B, _RETRY_AT)
    assert isinstance(claimed, Claimed)
    assert await store.activate("r", B, claimed.claimed_at_ms, waiting.snapshot) == Activated()
    assert (await store.get("r")).attempts == 2


async def test_a_cancel_request_ends_the_wait_to_retry(
    store: RunStoreBase, clock: ManualClock
) -> None:
    # failures.md: a cancel request made while a run waits ends it at once, as cancelled. The
    # run must be taken before its retry instant so that an owner can record the outcome.
    waiting = await _waiting_to_retry(store, clock)
    clock.set(3_000)
    assert await store.request_cancel("r", 3_000) == CancelRequested(requested_at_ms=3_000)
    assert [r.run_id for r in await store.find_claimable(3_000)] == ["r"]
    assert await store.claim_and_own("r", waiting.snapshot, B, 3_000) == Activated()
    taken = await store.get("r")
    assert (taken.owner, taken.retry_at_ms, taken.cancel_requested_at_ms) == (B, None, 3_000)
    guard = TransitionGuard(cancel_requested="present")
    assert await store.transition_owned("r", B, "cancelled", guard=guard) == Transitioned()
    done = await store.get("r")
    assert (done.status, done.finished_at_ms, done.attempt_log) == (
        "cancelled",
        3_000,
        waiting.attempt_log,
    )


async def test_retry_owned_loses_to_a_cancel_request(
    store: RunStoreBase, clock: ManualClock
) -> None:
    await running(store, clock, "r", A, 1_000)
    assert await store.request_cancel("r", 1_500) == CancelRequested(requested_at_ms=1_500)
    before = await dump(store)
    failed = AttemptRecord(
        attempt=1, started_at_ms=1_000, ended_at_ms=2_000, error="boom", retry_at_ms=_RETRY_AT
    )
    attempt_json = msgspec.json.encode(failed).decode()
    outcome = await store.retry_owned("r", A, retry_at_ms=_RETRY_AT, attempt_json=attempt_json)
    assert outcome == GuardFailed()
    assert await dump(store) == before
