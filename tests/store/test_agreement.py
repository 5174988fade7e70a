"""Random call sequences: every backend gives the same answers and the same rows (§20.1 #16),
and the durable-state invariants of §20.1 hold after every call."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import trio
from hypothesis import given, settings, strategies as st

from trio_triggers import TriggerError
from trio_triggers._store import HistoryQuery, Result

from .backends import BACKENDS, Dump, ManualClock, Opened, normalize
from .helpers import LEASE, declaration

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

TRIGGERS = ("a", "b")
_OCC = st.integers(min_value=1, max_value=5)
_TID = st.sampled_from(TRIGGERS)
_OPS = st.one_of(
    st.tuples(st.just("claim"), _TID, _OCC, st.booleans()),
    st.tuples(st.just("claim_pending"), _TID),
    st.tuples(st.just("launched"), _TID, st.integers(0, 6), st.sampled_from(["r1", "r2", " "])),
    st.tuples(
        st.just("result"),
        _TID,
        _OCC,
        st.sampled_from(["completed", "failed", "skipped", "buffered", "superseded"]),
        st.sampled_from([None, "r1", "r2"]),
        st.sampled_from([None, "last"]),
    ),
    st.tuples(st.just("restore"), _TID, st.integers(0, 6)),
    st.tuples(st.just("set_pending"), _TID, _OCC),
    st.tuples(st.just("active_run"), _TID),
    st.tuples(st.just("clear_active"), _TID, st.sampled_from(["r1", "r2", "last"])),
    st.tuples(st.just("advance"), st.sampled_from([1, LEASE - 1, LEASE, LEASE + 1])),
    st.tuples(st.just("prune"), st.integers(0, 7)),
    st.tuples(st.just("reregister"), _TID, st.sampled_from(["skip", "buffer-one", "supersede"])),
    st.tuples(st.just("history"), st.sampled_from([None, 1, 2])),
)


class Driver:
    """Runs one operation on one store, remembering that store's own reservation ids."""

    def __init__(self, opened: Opened, clock: ManualClock) -> None:
        self.opened = opened
        self.clock = clock
        self.granted: list[tuple[str, int, str]] = []
        self.revision = dict.fromkeys(TRIGGERS, 1)

    def _reservation(self, tid: str, index: int) -> tuple[int, str] | None:
        mine = [(o, r) for t, o, r in self.granted if t == tid]
        return mine[index % len(mine)] if mine else None

    def _last(self, tid: str) -> str | None:
        found = self._reservation(tid, -1)
        return found[1] if found else None

    async def run(self, op: tuple[Any, ...]) -> Any:
        store = self.opened.store
        kind = op[0]
        try:
            if kind == "claim":
                _, tid, occ, resume = op
                claim = await store.claim_fire(
                    tid, occ, expected_revision=self.revision[tid], resume_buffered=resume
                )
                if claim.reservation_id is not None:
                    self.granted.append((tid, occ, claim.reservation_id))
                return claim
            if kind == "claim_pending":
                answer = await store.claim_pending(op[1], expected_revision=self.revision[op[1]])
                if answer is not None and answer.claim.reservation_id is not None:
                    self.granted.append((op[1], answer.occurrence, answer.claim.reservation_id))
                return answer
            if kind == "launched":
                _, tid, index, run_id = op
                found = self._reservation(tid, index)
                if found is None:
                    return None
                occ, reservation = found
                return await store.record_result(
                    Result(
                        trigger_id=tid,
                        occurrence=occ,
                        outcome="launched",
                        run_id=f"{run_id}-{tid}",
                        reservation_id=reservation,
                    )
                )
            if kind == "result":
                _, tid, occ, outcome, run_id, reservation = op
                return await store.record_result(
                    Result(
                        trigger_id=tid,
                        occurrence=occ,
                        outcome=outcome,
                        run_id=None if run_id is None else f"{run_id}-{tid}",
                        reservation_id=self._last(tid) if reservation else None,
                    )
                )
            if kind == "restore":
                found = self._reservation(op[1], op[2])
                if found is None:
                    return None
                return await store.restore_pending(op[1], found[0], found[1])
            if kind == "set_pending":
                return await store.set_pending(op[1], op[2])
            if kind == "active_run":
                return await store.active_run(op[1])
            if kind == "clear_active":
                run_id = self._last(op[1]) if op[2] == "last" else f"{op[2]}-{op[1]}"
                return await store.clear_active(op[1], run_id or "none")
            if kind == "advance":
                self.clock.advance(op[1])
                return None
            if kind == "prune":
                return await store.prune_fires(op[1])
            if kind == "reregister":
                registered = await store.register(declaration(id=op[1], overlap=op[2]))
                self.revision[op[1]] = registered.revision
                return registered
            if kind == "history":
                return await store.history(HistoryQuery(limit=op[1]))
        except TriggerError as error:
            return ("error", error.code, error.message, error.path)
        raise AssertionError(op)


def check_invariants(before: Dump, after: Dump, op: tuple[Any, ...]) -> None:
    old = {row[0]: row for row in before["tt_triggers"]}
    for row in after["tt_triggers"]:
        tid, cursor, pending, holder, claimed_at = row[0], row[10], row[11], row[12], row[13]
        previous = old.get(tid)
        if previous is not None:
            # 1. the cursor never decreases and never becomes None again
            if previous[10] is not None:
                assert cursor is not None, (op, previous, row)
                assert cursor >= previous[10], (op, previous, row)
            # 11. the pending slot only moves forward; it is cleared only by claim_pending
            if previous[11] is not None:
                if pending is None:
                    assert op[0] == "claim_pending", (op, previous, row)
                else:
                    assert pending >= previous[11], (op, previous, row)
        # 9. a claim timestamp belongs to its reservation
        if claimed_at is not None:
            assert isinstance(holder, str)
            assert holder.startswith("trigger-reservation:")
        # 2. the cursor covers fired work
        for fire in after["tt_trigger_fires"]:
            if fire[0] == tid and fire[2] in (
                "launched",
                "skipped",
                "buffered",
                "completed",
                "failed",
            ):
                assert cursor is not None, (op, row, fire)
                assert cursor >= fire[1], (op, row, fire)
    # 3. ledger outcomes only move forward
    old_fires = {(f[0], f[1]): f for f in before["tt_trigger_fires"]}
    allowed: dict[object, set[object]] = {
        None: {None, "launched", "completed", "skipped", "buffered", "superseded", "failed"},
        "buffered": {"buffered", "launched", "completed", "skipped", "superseded", "failed"},
        "launched": {"launched", "completed", "failed", "superseded"},
    }
    for fire in after["tt_trigger_fires"]:
        prior = old_fires.get((fire[0], fire[1]))
        if prior is None:
            continue
        assert fire[2] in allowed.get(prior[2], {prior[2]}), (op, prior, fire)
        # 4. a launched row's run id never changes
        if prior[2] == "launched":
            assert fire[3] == prior[3], (op, prior, fire)


@settings(max_examples=60)
@given(ops=st.lists(_OPS, min_size=1, max_size=40))
def test_backends_agree_and_invariants_hold(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]
) -> None:
    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            drivers: list[Driver] = []
            for backend in BACKENDS[:2]:  # memory and SQLite (threaded adds nothing here)
                clock = ManualClock(0)
                path: Path = tmp_path_factory.mktemp(backend.name)
                opened = await stack.enter_async_context(backend.open(clock, path))
                for tid in TRIGGERS:
                    await opened.store.register(declaration(id=tid, overlap="buffer-one"))
                drivers.append(Driver(opened, clock))
            dumps = [await d.opened.backdoor.dump() for d in drivers]
            for op in ops:
                answers = [normalize(repr(await d.run(op))) for d in drivers]
                assert answers[0] == answers[1], op
                new = [await d.opened.backdoor.dump() for d in drivers]
                assert normalize(new[0]) == normalize(new[1]), op
                check_invariants(dumps[0], new[0], op)
                dumps = new

    trio.run(main)
