"""Random store behaviour under ``hold_lease``: the owner-loop invariants 18-23 always hold.

Each example scripts every heartbeat and reconfirm call (answer and delay), runs a body under
``hold_lease`` in simulated time, and checks: the body stops no later than
``last_confirmed + T + I``; ``last_confirmed_ms`` never decreases and only takes values that
were sent in calls answered ``Updated`` (or the start reading); at most one ``reconfirm`` is
in flight; ``on_lapse`` runs exactly once for a lapse and never otherwise; the write-failure
warning appears at most once per outage.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from trio_triggers import LeaseLost, RunStoreError, TrioWallClock
from trio_triggers._ownership import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    FenceLost,
    NotFound,
    Updated,
    hold_lease,
)

from .helpers import A

DELAYS = [0, 0, 10, 500, 999, 1_000, 1_500, 5_000, 35_000]
beat = st.tuples(
    st.sampled_from(["ok"] * 4 + ["fail"] * 4 + ["hang", "fence"]), st.sampled_from(DELAYS)
)
confirm = st.tuples(
    st.sampled_from(["ok", "ok", "fail", "hang", "fence", "not-found"]), st.sampled_from(DELAYS)
)


OUTCOMES: list[str] = []  # how the examples ended (inspected by the last assertion)


class Script:
    def __init__(self, beats: list[tuple[str, int]], confirms: list[tuple[str, int]]) -> None:
        self.beats = list(beats)
        self.confirms = list(confirms)
        self.sent_ok: set[int] = set()
        self.events: list[str] = []
        self.reconfirms_in_flight = 0
        self.max_in_flight = 0
        self.reconfirm_calls = 0

    async def _answer(self, kind: str, delay: int, now_ms: int) -> object:
        await trio.sleep(delay / 1000)
        if kind == "hang":
            await trio.sleep_forever()
        if kind == "fail":
            self.events.append("fail")
            raise RunStoreError("persistence_failed", "heartbeat", "scripted")
        if kind == "fence":
            return FenceLost()
        if kind == "not-found":
            return NotFound()
        self.sent_ok.add(now_ms)
        self.events.append("confirm")
        return Updated()

    async def heartbeat(self, run_id: str, owner: object, now_ms: int) -> object:
        kind, delay = self.beats.pop(0) if self.beats else ("ok", 0)
        return await self._answer(kind, delay, now_ms)

    async def reconfirm(self, run_id: str, owner: object, now_ms: int) -> object:
        kind, delay = self.confirms.pop(0) if self.confirms else ("fail", 0)
        self.reconfirm_calls += 1
        self.reconfirms_in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.reconfirms_in_flight)
        try:
            if kind == "fail":
                await trio.sleep(delay / 1000)
                raise RunStoreError("persistence_failed", "reconfirm", "scripted")
            return await self._answer(kind, delay, now_ms)
        finally:
            self.reconfirms_in_flight -= 1


class Events(logging.Handler):
    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "run heartbeat write failed":
            self.events.append("warn")


async def scenario(script: Script, receipt_ms: int | None) -> None:
    wall = TrioWallClock(0)
    lapses: list[int] = []
    seen: list[int] = []
    stop: dict[str, int] = {}

    async def on_lapse(unconfirmed: int) -> None:
        lapses.append(unconfirmed)

    async def on_reconfirm(unconfirmed: int) -> None:
        if receipt_ms is not None:
            await trio.sleep(receipt_ms / 1000)

    outcome: Any = "completed"
    try:
        async with hold_lease(
            script,  # type: ignore[arg-type]
            "r",
            A,
            clock=wall,
            on_lapse=on_lapse,
            on_reconfirm=on_reconfirm if receipt_ms is not None else None,
        ) as lease:
            try:
                while wall.now_ms() < 120_000:
                    seen.append(lease.last_confirmed_ms)
                    await trio.sleep(0.2)
            finally:
                stop["at"] = wall.now_ms()
                stop["confirmed"] = lease.last_confirmed_ms
    except LeaseLost as lost:
        outcome = lost
    OUTCOMES.append(outcome if isinstance(outcome, str) else outcome.reason)
    assert seen == sorted(seen)  # invariant 19: never decreases
    assert set(seen) <= script.sent_ok | {0}  # ... and only takes sent, confirmed values
    assert script.max_in_flight <= 1  # invariant 20
    if isinstance(outcome, LeaseLost) and outcome.reason == "lapsed":
        assert lapses == [outcome.unconfirmed_ms]  # invariant 21
        # invariant 18: stopped no later than last confirmed + T + I
        assert (
            stop["at"] - stop["confirmed"] <= HEARTBEAT_WRITE_TOLERANCE_MS + HEARTBEAT_INTERVAL_MS
        )
    else:
        assert lapses == []
    # invariant 23: no two warnings without a confirmed renewal in between
    warned = False
    for event in script.events:
        if event == "warn":
            assert not warned
            warned = True
        elif event == "confirm":
            warned = False


@settings(max_examples=150, deadline=None)
@given(
    st.lists(beat, max_size=40),
    st.lists(confirm, max_size=6),
    st.sampled_from([None, None, 0, 500, 1_001, 18_500, 40_000]),
)
def test_owner_loop_invariants(
    beats: list[tuple[str, int]], confirms: list[tuple[str, int]], receipt_ms: int | None
) -> None:
    script = Script(beats, confirms)
    handler = Events(script.events)
    logger = logging.getLogger("trio_triggers.ownership")
    logger.addHandler(handler)
    try:
        trio.run(scenario, script, receipt_ms, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        logger.removeHandler(handler)
