"""``MemoryRunStore``: the run store kept in a dict (tests, simulations, single processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import trio

from .._errors import RunStoreError
from .._identities import BOUNDARY_STAMP_LENGTH
from ._base import RunStoreBase
from ._decide import Decision, is_claimable
from ._owner import HEARTBEAT_STALE_AFTER_MS

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from .._clock import WallClock
    from ._models import Created, Existing, RunRow

__all__ = ["MemoryRunStore"]

OutcomeT = TypeVar("OutcomeT")


class MemoryRunStore(RunStoreBase):
    """A :class:`~trio_triggers.RunStore` in memory.

    Every call passes through exactly one checkpoint *before* its read-decide-write, and there
    is no checkpoint between the read and the write, so each operation is atomic under Trio
    and cancellable like the database stores.
    """

    def __init__(
        self, *, clock: WallClock | None = None, stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS
    ) -> None:
        super().__init__(clock=clock, stale_after_ms=stale_after_ms)
        self._rows: dict[str, RunRow] = {}
        self._keys: dict[str, str] = {}

    async def _atomic(
        self, method: str, run_id: str, decide: Callable[[RunRow | None], Decision[OutcomeT]]
    ) -> OutcomeT:
        await trio.lowlevel.checkpoint()
        decision = decide(self._rows.get(run_id))
        if decision.row is not None:
            self._rows[run_id] = decision.row
        return decision.outcome

    async def _create(
        self,
        run_id: str,
        idempotency_key: str | None,
        decide: Callable[[RunRow | None, bool], Decision[Created | Existing] | None],
    ) -> Created | Existing:
        await trio.lowlevel.checkpoint()
        by_key = None
        if idempotency_key is not None and idempotency_key in self._keys:
            by_key = self._rows[self._keys[idempotency_key]]
        decision = decide(by_key, run_id in self._rows)
        if decision is None:
            raise RunStoreError("constraint", "create", "a run with that run_id already exists")
        if decision.row is not None:
            self._rows[run_id] = decision.row
            if idempotency_key is not None:
                self._keys[idempotency_key] = run_id
        return decision.outcome

    async def _get(self, run_id: str) -> RunRow | None:
        await trio.lowlevel.checkpoint()
        return self._rows.get(run_id)

    async def _list(
        self,
        statuses: Collection[str] | None,
        limit: int | None,
        claimable_at: int | None,
        *,
        newest_first: bool = False,
        trigger_id: str | None = None,
    ) -> list[RunRow]:
        await trio.lowlevel.checkpoint()
        rows = sorted(
            self._rows.values(),
            key=lambda r: (r.created_at_ms, r.run_id),
            reverse=newest_first,
        )
        if trigger_id is not None:
            prefix = f"{trigger_id}:"
            rows = [
                r
                for r in rows
                if r.idempotency_key is not None
                and r.idempotency_key.startswith(prefix)
                and len(r.idempotency_key) == len(prefix) + BOUNDARY_STAMP_LENGTH
            ]
        if statuses is not None:
            wanted = set(statuses)
            rows = [r for r in rows if r.status in wanted]
        if claimable_at is not None:
            rows = [r for r in rows if is_claimable(r, claimable_at, self._stale_after_ms)]
        return rows if limit is None else rows[:limit]

    def __repr__(self) -> str:
        return f"MemoryRunStore(runs={len(self._rows)})"
