"""Counters of the run store (``ownership.md`` §13.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from trio_triggers import RunStoreError
from trio_triggers._ownership._base import outcome_tag

from .helpers import PENDING, A, B, created, ev, running

if TYPE_CHECKING:
    from trio_triggers._ownership import RunStoreBase

    from .backends import ManualClock


def test_outcome_tags() -> None:
    from trio_triggers._ownership import AlreadyClaimed, HeartbeatFresh, LivenessUnconfirmed

    assert outcome_tag(AlreadyClaimed()) == "already_claimed"
    assert outcome_tag(HeartbeatFresh()) == "heartbeat_fresh"
    assert outcome_tag(LivenessUnconfirmed()) == "liveness_unconfirmed"


async def test_counters(store: RunStoreBase, clock: ManualClock, recorder: Any) -> None:
    await running(store, clock)
    row = await created(store, "p")
    await store.claim("p", row, B, 0)
    await store.claim("p", row, B, 0)
    await store.steal("r", (await store.get("r")).snapshot, B, 0, ev(A, 5, "lease-expired"))
    with pytest.raises(RunStoreError):
        await store.claim("p", PENDING, B, -1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.heartbeat("r", A, 0)
    await store.heartbeat("r", A, 0)
    await store.reconfirm("r", B, 0)
    await store.transition_owned("r", A, "completed", result_json="1")
    await store.transition_owned("r", A, "completed")
    claims = "trio_triggers.run_claims"
    assert recorder.counter_total(claims, op="claim_and_own", outcome="activated") == 1
    assert recorder.counter_total(claims, op="claim", outcome="claimed") == 1
    assert recorder.counter_total(claims, op="claim", outcome="already_claimed") == 1
    assert recorder.counter_total(claims, op="claim", outcome="failure") == 1
    assert recorder.counter_total(claims, op="steal", outcome="liveness_unconfirmed") == 1
    beats = "trio_triggers.run_heartbeats"
    assert recorder.counter_total(beats, op="heartbeat", outcome="interrupt") == 1
    assert recorder.counter_total(beats, op="heartbeat", outcome="updated") == 1
    assert recorder.counter_total(beats, op="reconfirm", outcome="fence_lost") == 1
    transitions = "trio_triggers.run_transitions"
    assert recorder.counter_total(transitions, to="completed", outcome="transitioned") == 1
    assert recorder.counter_total(transitions, to="completed", outcome="fence_lost") == 1
    assert recorder.counter_total("trio_triggers.run_throughput") == 1
