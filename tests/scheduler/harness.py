"""Test doubles for the scheduler tests: a scripted runner and a store wrapper (§18.1).

Private to these tests; ``trio_triggers.testing`` has the public equivalents.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from trio_triggers._clock import TrioWallClock
from trio_triggers._declarations import RegisteredTrigger, Trigger
from trio_triggers._errors import TriggerError
from trio_triggers._store._models import (
    Claim,
    Dropped,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    PendingClaim,
    Result,
    SchedulerHeartbeat,
)
from trio_triggers._wake import notify_registered

if TYPE_CHECKING:
    from trio_triggers._scheduler import RunState, Scheduler, StartRequest
    from trio_triggers._store._protocol import TriggerStore

H = 3_600_000
MIN = 60_000
LEASE = 300_000

Hook = Callable[..., Awaitable[Any]]
ListedRows = list[Listed]
EnabledRows = list[RegisteredTrigger]


def hourly(
    overlap: str = "skip",
    catch_up: str = "one",
    max_catch_up: int = 3,
    *,
    id: str = "hourly",
    cron: str = "0 * * * *",
    enabled: bool = True,
) -> Trigger:
    return Trigger(
        id=id,
        flow_id="flow",
        input={"source": "schedule"},
        cron=cron,
        timezone="UTC",
        overlap=overlap,  # type: ignore[arg-type]
        catch_up=catch_up,  # type: ignore[arg-type]
        max_catch_up=max_catch_up,
        enabled=enabled,
    )


def registered(
    trigger: Trigger, *, revision: int = 1, last_fired_at: int | None = None
) -> RegisteredTrigger:
    return RegisteredTrigger.of(trigger, revision=revision, last_fired_at=last_fired_at)


def key(trigger_id: str, occurrence: int) -> str:
    from trio_triggers._identities import idempotency_key

    return idempotency_key(trigger_id, occurrence)


class ScriptedRunner:
    """The runner fixture of §18.1.

    ``start`` appends the request to ``starts`` and answers ``run-<len(starts)>`` (or, with
    ``dedup=True``, the run it already created for that key), adding it to ``active``;
    ``inspect(r)`` appends to ``inspected`` and answers ``"active"`` while ``r`` is active, else
    ``states.get(r, default_state)``; ``cancel(r)`` appends to ``cancelled`` and deactivates ``r``.
    """

    def __init__(self, *, dedup: bool = False) -> None:
        self.starts: list[StartRequest] = []
        self.active: set[str] = set()
        self.inspected: list[str] = []
        self.cancelled: list[str] = []
        self.states: dict[str, RunState] = {}
        self.default_state: RunState = "completed"
        self.fail_starts: list[BaseException] = []
        self.fail_inspects: list[BaseException] = []
        self.fail_cancels: list[BaseException] = []
        self.start_hook: Hook | None = None
        self.inspect_hook: Hook | None = None
        self.cancel_hook: Hook | None = None
        self.dedup = dedup
        self.by_key: dict[str, str] = {}
        self.finish_at_once = False
        self.record_start_first = True

    @property
    def keys(self) -> list[str]:
        return [request.idempotency_key for request in self.starts]

    def stop(self, run_id: str, state: RunState = "completed") -> None:
        self.active.discard(run_id)
        self.states[run_id] = state

    def stop_all(self, state: RunState = "completed") -> None:
        for run_id in list(self.active):
            self.stop(run_id, state)

    async def start(self, request: StartRequest) -> str:
        if self.record_start_first:
            self.starts.append(request)
        await trio.lowlevel.checkpoint()
        answer = None
        if self.start_hook is not None:
            answer = await self.start_hook(request)
        if not self.record_start_first:
            self.starts.append(request)
        if answer is not None:
            return str(answer)
        if self.fail_starts:
            raise self.fail_starts.pop(0)
        if self.dedup and request.idempotency_key in self.by_key:
            return self.by_key[request.idempotency_key]
        run_id = f"run-{len(self.starts)}"
        self.by_key[request.idempotency_key] = run_id
        if not self.finish_at_once:
            self.active.add(run_id)
        return run_id

    async def inspect(self, run_id: str) -> RunState:
        self.inspected.append(run_id)
        await trio.lowlevel.checkpoint()
        if self.inspect_hook is not None:
            await self.inspect_hook(run_id)
        if self.fail_inspects:
            raise self.fail_inspects.pop(0)
        if run_id in self.active:
            return "active"
        return self.states.get(run_id, self.default_state)

    async def cancel(self, run_id: str) -> None:
        self.cancelled.append(run_id)
        await trio.lowlevel.checkpoint()
        if self.cancel_hook is not None:
            await self.cancel_hook(run_id)
        if self.fail_cancels:
            raise self.fail_cancels.pop(0)
        self.active.discard(run_id)
        self.states.setdefault(run_id, "cancelled")


class RecordingStore:
    """Wraps a store: records every call (before delegating), injects failures and overrides.

    * ``fail[name]``: exceptions raised by the next calls of ``name`` (popped in order);
    * ``override[name]``: an async callable used instead of the inner method;
    * ``before[name]``: an async callable awaited (with the call's arguments) before delegating.
    """

    def __init__(self, inner: TriggerStore) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.fail: dict[str, list[BaseException]] = {}
        self.override: dict[str, Hook] = {}
        self.before: dict[str, Hook] = {}

    def names(self, *only: str) -> list[str]:
        return [name for name, _, _ in self.calls if not only or name in only]

    def count(self, name: str) -> int:
        return sum(1 for n, _, _ in self.calls if n == name)

    def args_of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args, _ in self.calls if n == name]

    def kwargs_of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, _, kwargs in self.calls if n == name]

    @property
    def results(self) -> list[Result]:
        return [args[0] for n, args, _ in self.calls if n == "record_result"]

    def outcomes(self) -> list[str]:
        return [r.outcome for r in self.results]

    def claim_occurrences(self) -> list[int]:
        return [args[1] for n, args, _ in self.calls if n == "claim_fire"]

    def claim_revisions(self, name: str = "claim_fire") -> list[int]:
        return [kw["expected_revision"] for n, _, kw in self.calls if n == name]

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((name, args, kwargs))
        hook = self.before.get(name)
        if hook is not None:
            await hook(*args, **kwargs)
        failures = self.fail.get(name)
        if failures:
            raise failures.pop(0)
        override = self.override.get(name)
        if override is not None:
            return await override(*args, **kwargs)
        return await getattr(self.inner, name)(*args, **kwargs)

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        result: RegisteredTrigger = await self._call("register", trigger)
        notify_registered(self)  # a wrapper is a store of its own: it wakes its schedulers
        return result

    async def get(self, trigger_id: str) -> RegisteredTrigger | None:
        result: RegisteredTrigger | None = await self._call("get", trigger_id)
        return result

    async def list(self) -> ListedRows:
        result: ListedRows = await self._call("list")
        return result

    async def list_enabled(self) -> EnabledRows:
        result: EnabledRows = await self._call("list_enabled")
        return result

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Dropped | None = None,
    ) -> Claim:
        result: Claim = await self._call(
            "claim_fire",
            trigger_id,
            occurrence,
            expected_revision=expected_revision,
            resume_buffered=resume_buffered,
            dropped=dropped,
        )
        return result

    async def claim_pending(
        self, trigger_id: str, *, expected_revision: int
    ) -> PendingClaim | None:
        result: PendingClaim | None = await self._call(
            "claim_pending", trigger_id, expected_revision=expected_revision
        )
        return result

    async def record_result(self, result: Result) -> None:
        await self._call("record_result", result)

    async def restore_pending(self, trigger_id: str, occurrence: int, reservation_id: str) -> None:
        await self._call("restore_pending", trigger_id, occurrence, reservation_id)

    async def set_pending(self, trigger_id: str, occurrence: int) -> None:
        await self._call("set_pending", trigger_id, occurrence)

    async def active_run(self, trigger_id: str) -> str | None:
        result: str | None = await self._call("active_run", trigger_id)
        return result

    async def active_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        result: int | None = await self._call("active_occurrence", trigger_id, run_id)
        return result

    async def clear_active(self, trigger_id: str, run_id: str) -> None:
        await self._call("clear_active", trigger_id, run_id)

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        result: HistoryPage = await self._call("history", query)
        return result

    async def prune_fires(self, older_than: int) -> int:
        result: int = await self._call("prune_fires", older_than)
        return result

    async def inspect(self, trigger_id: str) -> Held:
        result: Held = await self._call("inspect", trigger_id)
        return result

    async def heartbeat(self, host: str) -> None:
        await self._call("heartbeat", host)

    async def last_heartbeat(self) -> SchedulerHeartbeat | None:
        result: SchedulerHeartbeat | None = await self._call("last_heartbeat")
        return result


class Sim:
    """Simulated wall time: ``TrioWallClock(0)`` measured from when the Sim was made."""

    def __init__(self) -> None:
        self.clock = TrioWallClock(0)
        self.base = trio.current_time()

    def now(self) -> int:
        return self.clock.now_ms()

    async def advance_to(self, wall_ms: int) -> None:
        await trio.sleep_until(self.base + wall_ms / 1000)

    async def advance(self, ms: int) -> None:
        await self.advance_to(self.now() + ms)

    async def tick(self, scheduler: Scheduler, at: int | None = None) -> None:
        """Advance to ``at`` (if given), tick, then let spawned tasks run."""
        if at is not None:
            await self.advance_to(at)
        await scheduler.run_once()
        await trio.testing.wait_all_tasks_blocked()


async def seed(
    store: TriggerStore, trigger: Trigger, outcome: str, runner: ScriptedRunner | None = None
) -> RegisteredTrigger:
    """§18.1 ``seed``: register, claim 0, then record ``outcome`` at 0."""
    await store.register(trigger)
    claim = await store.claim_fire(trigger.id, 0, expected_revision=1)
    assert claim.claimed
    assert claim.reservation_id is not None
    if outcome == "launched":
        if runner is not None:
            runner.active.add("seed")
        await store.record_result(
            Result(
                trigger_id=trigger.id,
                occurrence=0,
                outcome="launched",
                run_id="seed",
                reservation_id=claim.reservation_id,
            )
        )
    else:
        await store.record_result(
            Result(trigger_id=trigger.id, occurrence=0, outcome=outcome)  # type: ignore[arg-type]
        )
    current = await store.get(trigger.id)
    assert current is not None
    assert current.last_fired_at == 0
    return current


async def seed_fired(store: TriggerStore, trigger: Trigger) -> RegisteredTrigger:
    return await seed(store, trigger, "skipped")


def store_error(message: str = "store down") -> TriggerError:
    return TriggerError("store", message)


async def newest(store: TriggerStore, trigger_id: str = "hourly") -> tuple[Any, ...]:
    page = await store.history(HistoryQuery(trigger_id=trigger_id, limit=1))
    row = page.items[0]
    return (row.occurrence, row.outcome, row.run_id)


async def ledger(store: TriggerStore, trigger_id: str = "hourly") -> dict[int, tuple[Any, ...]]:
    page = await store.history(HistoryQuery(trigger_id=trigger_id))
    return {row.occurrence: (row.outcome, row.run_id) for row in page.items}


def const(value: Any) -> Hook:
    """An async callable answering ``value`` whatever it is given."""

    async def answer(*args: Any, **kwargs: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return value

    return answer


def raising(error: BaseException) -> Hook:
    """An async callable that always raises ``error``."""

    async def fail(*args: Any, **kwargs: Any) -> Any:
        await trio.lowlevel.checkpoint()
        raise error

    return fail


def fire_claim(trigger_id: str = "hourly", occurrence: int = 0) -> Claim:
    from trio_triggers._identities import mint_reservation_id

    return Claim(
        claimed=True, action="fire", reservation_id=mint_reservation_id(trigger_id, occurrence)
    )


async def claim_fire_answering_fire(
    trigger_id: str,
    occurrence: int,
    *,
    expected_revision: int,
    resume_buffered: bool = False,
    dropped: Dropped | None = None,
) -> Claim:
    await trio.lowlevel.checkpoint()
    return fire_claim(trigger_id, occurrence)


class UnavailableStore:
    """A §19 ``NoopTriggerStore`` stand-in: every method raises ``<method> is unavailable``."""

    def __getattr__(self, name: str) -> Any:
        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            await trio.lowlevel.checkpoint()
            raise TriggerError("store", f"{name} is unavailable")

        return unavailable
