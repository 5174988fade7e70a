"""Owners, snapshots and small builders shared by the ownership tests (``ownership.md`` §4.6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_triggers._ownership import (
    Activated,
    Created,
    EvidenceKind,
    LivenessEvidence,
    OwnerId,
    RunRow,
    RunSnapshot,
    RunStoreBase,
)

if TYPE_CHECKING:
    from .backends import ManualClock

A = OwnerId(host_id="host-a", pid=101, nonce="owner-a")
B = OwnerId(host_id="host-a", pid=202, nonce="owner-b")
C = OwnerId(host_id="host-b", pid=303, nonce="owner-c")
PENDING = RunSnapshot(status="pending", owner=None, heartbeat_at_ms=None)


def ev(owner: OwnerId, at: int, kind: EvidenceKind) -> LivenessEvidence:
    return LivenessEvidence(expected_owner=owner, checked_at_ms=at, kind=kind)


def running_snapshot(owner: OwnerId, stamp: int) -> RunSnapshot:
    return RunSnapshot(status="running", owner=owner, heartbeat_at_ms=stamp)


async def created(store: RunStoreBase, run_id: str = "r", state_json: str = "{}") -> RunRow:
    outcome = await store.create(run_id, state_json)
    assert isinstance(outcome, Created)
    return outcome.row


async def running(
    store: RunStoreBase, clock: ManualClock, run_id: str = "r", owner: OwnerId = A, at: int = 0
) -> RunRow:
    """Create ``run_id`` and have ``owner`` activate it at ``at`` (store clock set to ``at``)."""
    clock.set(at)
    row = await created(store, run_id)
    assert await store.claim_and_own(run_id, row, owner, at) == Activated()
    return await store.get(run_id)


async def dump(store: RunStoreBase) -> list[RunRow]:
    return await store.list_runs()
