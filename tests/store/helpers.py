"""Shared vocabulary of the store tests: the ``daily`` trigger and the example shorthands."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from trio_triggers import TriggerError
from trio_triggers._constants import RESERVATION_LEASE_MS
from trio_triggers._declarations import RegisteredTrigger, Trigger
from trio_triggers._store import Claim, FireRecord, Held, Result, TriggerStore

if TYPE_CHECKING:
    from .backends import Backdoor, Backend, ManualClock, Opened

LEASE = RESERVATION_LEASE_MS

DAILY: dict[str, Any] = {
    "id": "daily",
    "flow_id": "flow",
    "input": {"nested": [1, "two", None], "enabled": True},
    "cron": "0 0 * * *",
    "overlap": "skip",
    "catch_up": "none",
    "max_catch_up": 1,
}


def declaration(**changes: Any) -> Trigger:
    return Trigger.make({**DAILY, **changes})


def reservation_pattern(trigger_id: str, occurrence: int) -> re.Pattern[str]:
    return re.compile(rf"^trigger-reservation:{re.escape(trigger_id)}:[^:]+:{occurrence}$")


def raises(code: str, message: str | None = None, path: str | None = None) -> Any:
    """``pytest.raises(TriggerError)`` checking code (and message/path when given)."""
    return _Raises(code, message, path)


class _Raises:
    def __init__(self, code: str, message: str | None, path: str | None) -> None:
        self.code, self.message, self.path = code, message, path
        self._cm: Any = None
        self.error: TriggerError | None = None

    def __enter__(self) -> _Raises:
        self._cm = pytest.raises(TriggerError)
        self._info = self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool:
        handled: bool = self._cm.__exit__(*exc)
        error = self._info.value
        assert error.code == self.code, (error.code, error.message)
        if self.message is not None:
            assert error.message == self.message
        if self.path is not None:
            assert error.path == self.path
        self.error = error
        return handled


@dataclass
class Env:
    backend: Backend
    clock: ManualClock
    opened: Opened

    @property
    def store(self) -> TriggerStore:
        return self.opened.store

    @property
    def backdoor(self) -> Backdoor:
        return self.opened.backdoor

    async def register(self, **changes: Any) -> RegisteredTrigger:
        return await self.store.register(declaration(**changes))

    async def claim(
        self,
        occurrence: int,
        *,
        trigger_id: str = "daily",
        revision: int = 1,
        resume_buffered: bool = False,
    ) -> Claim:
        return await self.store.claim_fire(
            trigger_id, occurrence, expected_revision=revision, resume_buffered=resume_buffered
        )

    async def launched(
        self, occurrence: int, run_id: str | None, claim: Claim | str | None, *, tid: str = "daily"
    ) -> None:
        reservation = claim.reservation_id if isinstance(claim, Claim) else claim
        await self.store.record_result(
            Result(
                trigger_id=tid,
                occurrence=occurrence,
                outcome="launched",
                run_id=run_id,
                reservation_id=reservation,
            )
        )

    async def result(
        self,
        occurrence: int,
        outcome: Any,
        run_id: str | None = None,
        *,
        reservation_id: str | None = None,
        error: str | None = None,
        tid: str = "daily",
    ) -> None:
        await self.store.record_result(
            Result(
                trigger_id=tid,
                occurrence=occurrence,
                outcome=outcome,
                run_id=run_id,
                reservation_id=reservation_id,
                error=error,
            )
        )

    async def held(self, trigger_id: str = "daily") -> Held:
        return await self.store.inspect(trigger_id)

    async def ledger(self, trigger_id: str | None = "daily") -> list[FireRecord]:
        from trio_triggers._store import HistoryQuery

        return (await self.store.history(HistoryQuery(trigger_id=trigger_id))).items

    async def newest_outcome(self, trigger_id: str = "daily") -> Any:
        return (await self.ledger(trigger_id))[0].outcome

    async def pending(self, trigger_id: str = "daily") -> int | None:
        return (await self.held(trigger_id)).pending_at

    async def cursor(self, trigger_id: str = "daily") -> int | None:
        registered = await self.store.get(trigger_id)
        assert registered is not None
        return registered.last_fired_at


def rec(
    occurrence: int,
    outcome: Any = None,
    run_id: str | None = None,
    error: str | None = None,
    trigger_id: str = "daily",
) -> FireRecord:
    return FireRecord(
        trigger_id=trigger_id, occurrence=occurrence, outcome=outcome, run_id=run_id, error=error
    )
