"""The scheduler: ``open_scheduler``, the tick, the launch task and its monitor.

``triggers.md`` §12 is the contract; the pseudo-code there is followed step by step and the
section numbers are quoted next to the code that implements them. The whole task tree is here:

* ``open_scheduler`` opens the **scheduler nursery**. It owns every launch task; leaving the
  block cancels them, which only detaches them (their ``finally`` blocks edit memory, never the
  store or the runner).
* ``run_once`` holds a lock and processes the listed triggers in a per-tick nursery: rows
  that may call the runner at most ``concurrency`` at a time, rows that can only claim all at
  once (so a batching store commits their claims together). It never waits for a launch: each
  granted claim takes its entry and spawns a launch task that will enter the entry's scope.
* ``serve`` ticks forever, sleeping until the earliest next occurrence among the enabled
  triggers (capped by ``poll_interval``), or until :meth:`Scheduler.wake` is called.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, final

import msgspec
import trio

from .. import _instrument as instrument, _wake
from .._clock import SystemWallClock, WallClock
from .._constants import PRUNE_INTERVAL_MS
from .._cron import Cron
from .._errors import TriggerError, describe_error
from .._groups import one_exception
from .._identities import idempotency_key, is_reservation, iso, reservation_occurrence
from .._policies import DueOccurrences, due_occurrences, next_launches
from .._store._models import (
    Claim,
    ClaimAction,
    Dropped,
    Fire,
    FireRecord,
    Held,
    HistoryQuery,
    Listed,
    ManualFire,
    ManualRequest,
    Outcome,
    Result,
)
from .._store._protocol import AttentionStore, BackfillStore, TriggerStore
from .._watch import Published, Watched
from ._hook import NO_HOOK, SchedulerHook
from ._options import SchedulerOptions, Settings, validate_options, validate_poll_interval
from ._runner import RUN_STATES, RunEndSignal, Runner, RunState, StartRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from .._declarations import Overlap, RegisteredTrigger, Trigger
    from .._store._attention import DueRow

__all__ = ["PRUNE_INTERVAL_MS", "Fired", "Scheduler", "end_result", "open_scheduler"]

#: The longest a launch task holds its ledger record back for a claim pass in flight.
CLAIMS_FIRST_WAIT_S = 0.25
_TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

logger = logging.getLogger("trio_triggers.scheduler")

INSPECTION_ATTEMPTS = 4
#: How many rows of a tick are processed at once when they can only claim (see _claims_only).
CLAIM_WIDTH = 1024
#: The most due rows one indexed tick takes (a fuller backlog is served by the next tick, at
#: once).
DUE_BATCH = 256
#: How long the due rows a tick takes stay out of other schedulers' reads. Every write the
#: processing makes to a row re-computes its exact instant; a row the processing writes nothing
#: to (a claim that failed) comes back after this, to whichever scheduler reads first.
TAKE_HOLD_MS = 5_000
MAX_INSPECTION_PAUSE_MS = 60_000
#: A failed compensation is retried after 50 ms, doubling up to 5 s (docs/scheduler.md,
#: "A failed compensation is retried"); in a tick's path at most this many times.
COMPENSATION_FIRST_PAUSE_S = 0.05
COMPENSATION_MAX_PAUSE_S = 5.0
TICK_COMPENSATION_ATTEMPTS = 4
LAUNCH_RECORD_ATTEMPTS = 5
#: After a failed tick the loop waits 100 ms, doubling up to 5 s (or ``poll_interval`` if that
#: is shorter), before the next: a store that is down is not hammered, and one that is back is
#: used within seconds (docs/scheduler.md, "The supervisor loop and wake-on-deadline").
TICK_RETRY_FIRST_PAUSE_S = 0.1
TICK_RETRY_MAX_PAUSE_S = 5.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Owned:
    """What this process believes it owns for one trigger (§12.3): one row of ``owned()``.

    ``scope`` is the cancel scope of a live launch task (a live monitor owns the entry);
    ``None`` means nobody in this process watches it. ``occurrence is None`` marks a foreign
    run whose occurrence is unknown.
    """

    occurrence: int | None
    run_id: str
    scope: trio.CancelScope | None


class Fired(msgspec.Struct, frozen=True, kw_only=True):
    """What a manual fire ("run now", :meth:`Scheduler.fire`) did (docs/operations.md).

    ``occurrence`` is the fire's ledger instant (off-grid: never a whole second) and ``key``
    its idempotency key. ``action`` is what the overlap decision made of it (``fire``,
    ``supersede``, ``skip``, ``buffer``), ``None`` when ``repeated``: the key named an earlier
    fire, which is answered as it stands and nothing new runs. ``outcome`` and ``run_id`` are
    the ledger row's when the call returned: ``launched`` with the run's id once a ``fire`` or
    ``supersede`` has started its run, ``skipped``, ``buffered`` (it runs when the held run
    ends), ``failed`` (the runner refused), or ``None`` while its launch is still owed (it
    was re-armed; a serving scheduler launches it).
    """

    trigger_id: str
    occurrence: int
    key: str
    action: ClaimAction | None
    repeated: bool = False
    outcome: Outcome | None = None
    run_id: str | None = None


class _Launched:
    """Set once a launch task has recorded ``launched`` (or ended without it)."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = trio.Event()


class _StaleRevision(Exception):
    """``claim_fire`` answered ``revision_mismatch`` (private control flow of §12.6)."""

    def __init__(self, error: TriggerError) -> None:
        super().__init__(error.message)
        self.error = error


def _carrying(
    claim_once: Callable[[RegisteredTrigger, int, Dropped | None], Awaitable[None]],
    due: DueOccurrences,
) -> Callable[[RegisteredTrigger, int], Awaitable[None]]:
    """The claim of a poll's first occurrence: it carries what the catch-up gave up before it
    (counted by the store only if that claim is granted, docs/operations.md)."""
    if due.dropped_after is None or not (due.catch_up_missed or due.bound_missed):
        return lambda trigger, occurrence: claim_once(trigger, occurrence, None)
    dropped = Dropped(
        after=due.dropped_after, catch_up=due.catch_up_missed, catch_up_bound=due.bound_missed
    )
    return lambda trigger, occurrence: claim_once(trigger, occurrence, dropped)


def _claimed_mark(held: Held | None) -> int | None:
    """The latest occurrence ``held`` shows as claimed (reserved or pending), if any."""
    if held is None:
        return None
    marks = [held.pending_at] if held.pending_at is not None else []
    if held.active_run_id is not None:
        reserved = reservation_occurrence(held.active_run_id)
        if reserved is not None:
            marks.append(reserved)
    return max(marks) if marks else None


def end_result(trigger_id: str, occurrence: int, run_id: str, state: RunState) -> Result:
    """Map a stopped run state to the result that settles its occurrence (§12.4)."""
    if state == "completed":
        return Result(
            trigger_id=trigger_id, occurrence=occurrence, outcome="completed", run_id=run_id
        )
    if state == "cancelled":
        error = f"Run {run_id} was cancelled"
    elif state == "missing":
        error = f"Run {run_id} is unknown to the runner"
    else:
        error = f"Run {run_id} failed"
    return Result(
        trigger_id=trigger_id, occurrence=occurrence, outcome="failed", run_id=run_id, error=error
    )


def _copy_input(value: Any) -> Any:
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


@final
class Scheduler:
    """One scheduler instance; obtain it from :func:`open_scheduler`."""

    def __init__(
        self,
        store: TriggerStore,
        runner: Runner,
        options: SchedulerOptions,
        settings: Settings,
        clock: WallClock,
        nursery: trio.Nursery,
        hook: SchedulerHook = NO_HOOK,
    ) -> None:
        self._store = store
        self._hook = hook  # testing only (_hook.py)
        self._runner = runner
        self._options = options
        self._settings = settings
        self._clock = clock
        self._nursery = nursery
        self._owned: dict[str, Owned] = {}
        self._observed: dict[str, int] = {}
        self._lock = trio.Lock()
        self._last_pruned_at: int | None = None
        self._closed = False
        self._wake_event = trio.Event()
        self._next_due: dict[str, int] = {}
        self._superseding: dict[tuple[str, int | None], trio.Event] = {}
        # The attention index (docs/scheduler.md, "What a tick reads"):
        self._indexed = isinstance(store, AttentionStore) and not settings.listing
        # Records wait for a claim pass only where they would queue for its transactions.
        self._claims_first = getattr(store, "shares_transactions", False) is True
        self._next_attention: int | None = None
        self._next_sweep_at: int | None = None
        self._more_due = False
        self._registered_at: dict[str, int] = {}
        # Triggers with a manual fire buffered here under an overlap override: the end of the
        # held run wakes the loop for them as it does for a buffer-one trigger.
        self._wake_after_end: set[str] = set()
        # Claim passes in flight (``_process_rows``) and the event set when there are none:
        # launch tasks write their ledger records after the claims (see ``_after_claims``).
        self._claiming = 0
        self._claims_idle = trio.Event()
        self._claims_idle.set()
        # What an application or a test waits on (docs/scheduler.md, "Waiting on a scheduler"):
        self._next_attention_value: Published[int | None] = Published(None)
        self._idle_value = Published.flag(False)
        self._heartbeat_failing = False

    # ------------------------------------------------------------------ public surface

    @property
    def store(self) -> TriggerStore:
        return self._store

    @property
    def runner(self) -> Runner:
        return self._runner

    @property
    def options(self) -> SchedulerOptions:
        return self._options

    def watermark(self, trigger_id: str) -> int | None:
        """This instance's watermark for a trigger (``None`` before first sight)."""
        return self._observed.get(trigger_id)

    def owned(self) -> dict[str, Owned]:
        """A copy of the in-memory ownership table (trigger id → :class:`Owned`)."""
        return dict(self._owned)

    @property
    def host(self) -> str:
        """The host this instance claims fires as (``options.host``)."""
        return self._settings.host

    def next_due_at(self) -> int | None:
        """When the next tick has work: on an indexed store the earliest attention instant
        (read after the last tick), else the earliest next occurrence among the enabled
        triggers of the last tick. (The recovery sweep runs on the first tick after it is
        due; ``poll_interval`` bounds how long that can be.)"""
        if self._indexed:
            if self._more_due:
                return self._clock.now_ms()
            return self._next_attention
        return min(self._next_due.values(), default=None)

    @property
    def next_attention(self) -> Watched[int | None]:
        """When the next tick has work (epoch ms, ``None``: nothing scheduled), as a value to
        wait on: :meth:`next_due_at` as it stood after the last tick (a backlog that the tick
        left due reads as that tick's instant). ``await s.next_attention.wait_value(MIN)``."""
        return self._next_attention_value.view

    @property
    def idle(self) -> Watched[bool]:
        """Whether ``serve`` is asleep between ticks (waiting for :attr:`next_attention`, the
        poll cap or a wake). ``False`` while a tick runs, before ``serve`` starts and after it
        ends. ``await s.idle.wait_value(True)``: the scheduler has caught up."""
        return self._idle_value.view

    def wake(self) -> None:
        """Make ``serve`` tick now instead of sleeping until the next deadline.

        Synchronous and cheap; call it from any task of the same Trio run. A registration does
        it for you: the store's ``register`` calls :func:`trio_triggers.notify_registered`, as
        every built-in store (and every ``trio_triggers.testing`` wrapper) does.
        """
        self._wake_event.set()

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        """``await self.store.register(trigger)``: a convenience, nothing more.

        The wake-up belongs to the store (its ``register`` notifies every scheduler opened on
        it, docs/scheduler.md "Who wakes the loop"), so this does not wake anything itself.
        """
        return await self._store.register(trigger)

    async def run_once(self) -> None:
        """One tick (§12.5): heartbeat, hourly prune, listing, per-trigger processing."""
        if self._closed:
            raise RuntimeError("run_once called after its open_scheduler block has exited")
        async with self._lock:
            started = trio.current_time()
            try:
                with instrument.span("Scheduler.run_once", {"host": self._settings.host}):
                    await self._hook.around_tick(self._tick)
            finally:
                self._publish_next_attention()
                instrument.record_histogram(
                    instrument.TICK_DURATION_MS, (trio.current_time() - started) * 1000
                )

    def _publish_next_attention(self) -> None:
        self._next_attention_value.set(self.next_due_at())

    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """The supervisor loop (§12.15), waking on the earliest deadline.

        Validates ``poll_interval`` before reporting itself started. A failed tick is logged
        and the loop goes on; cancellation ends it.
        """
        poll_ms = validate_poll_interval(self._options)
        task_status.started()
        cap = min(TICK_RETRY_MAX_PAUSE_S, poll_ms / 1000)
        pause = min(TICK_RETRY_FIRST_PAUSE_S, cap)
        failed = 0
        failing_since = 0.0
        host = self._settings.host
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                # One line (with the traceback) when an outage begins, one when it ends; the
                # failures between are debug lines. Without the pause a tick that fails at
                # once (the store is down) would be retried at once, since what is due stays
                # due: a busy loop and a flood of tracebacks.
                if not failed:
                    failing_since = trio.current_time()
                    logger.error(
                        "A trigger scheduler tick failed",
                        exc_info=True,
                        extra={"host": host, "error": describe_error(exc), "retrying": "backoff"},
                    )
                else:
                    logger.debug(
                        "A trigger scheduler tick failed again", exc_info=True, extra={"host": host}
                    )
                failed += 1
                self._idle_value.set(True)
                try:
                    await trio.sleep(pause)
                finally:
                    self._idle_value.set(False)
                pause = min(pause * 2, cap)
                continue
            if failed:
                logger.warning(
                    "A trigger scheduler tick succeeded again",
                    extra={
                        "host": host,
                        "failed_ticks": failed,
                        "outage_s": round(trio.current_time() - failing_since, 1),
                    },
                )
                failed = 0
                pause = min(TICK_RETRY_FIRST_PAUSE_S, cap)
            self._idle_value.set(True)
            try:
                await self._sleep_until_due(poll_ms)
            finally:
                self._idle_value.set(False)

    # ------------------------------------------------------------------ supervisor sleep

    async def _sleep_until_due(self, poll_ms: int) -> None:
        # Sleep until the earliest next occurrence (a wall-clock instant) or the poll cap,
        # re-reading the wall clock after every wake-up: a wall clock can jump.
        poll_deadline = trio.current_time() + poll_ms / 1000
        reread = self._indexed
        while not self._wake_event.is_set():
            remaining = poll_deadline - trio.current_time()
            due = self.next_due_at()
            if due is not None:
                until_due = (due - self._clock.now_ms()) / 1000
                if until_due <= 0 and reread and not self._more_due:
                    # The instant read after the tick may be stale: this process's own
                    # launches (still in flight then) have since moved their rows. One
                    # indexed read, once, instead of a tick that would find nothing.
                    reread = False
                    with contextlib.suppress(Exception):
                        store = self._store
                        assert isinstance(store, AttentionStore)
                        self._next_attention = await store.next_attention()
                    self._publish_next_attention()
                    continue
                if until_due <= 0:
                    return
                # A floored wall clock can read 1 ms early after an exact sleep: never
                # sleep less than a millisecond, then re-check.
                remaining = min(remaining, max(until_due, 0.001))
            if remaining <= 0:
                return
            with trio.move_on_after(remaining):
                await self._wake_event.wait()

    # ------------------------------------------------------------------ helpers (§12.4)

    async def _record(self, result: Result, trigger: RegisteredTrigger | None = None) -> None:
        if (
            trigger is not None
            and trigger.pause_after_failures is not None
            and result.outcome == "failed"
            and result.by is None
        ):
            # Who records it, should this failure pause the trigger (pause_after_failures).
            result = msgspec.structs.replace(result, by=f"scheduler {self._settings.host}")
        await self._store.record_result(result)
        instrument.add_counter(instrument.FIRES, 1, {"outcome": result.outcome})

    async def _deadline(self, what: str, timeout_ms: int, fn: Callable[[], Awaitable[T]]) -> T:
        with trio.move_on_after(timeout_ms / 1000):
            return await fn()
        raise TriggerError("runner_timeout", f"{what} did not answer within {timeout_ms} ms")

    async def _call_start(self, request: StartRequest) -> str:
        try:
            return await self._deadline(
                f"Runner.start for {request.idempotency_key}",
                self._settings.start_timeout_ms,
                lambda: self._runner.start(request),
            )
        except TriggerError:
            raise
        except Exception as exc:
            # A runner's own bug or a library it calls: a refused start like any other, so the
            # failure path settles the boundary now (it used to leave the reservation holding
            # the trigger until its lease ran out, every boundary meanwhile skipped).
            raise TriggerError(
                "runner",
                f"Runner.start for {request.idempotency_key} raised {type(exc).__name__}: {exc}",
            ) from exc

    async def _call_inspect(self, run_id: str) -> RunState:
        state = await self._deadline(
            f"Runner.inspect for run {run_id}",
            self._settings.inspect_timeout_ms,
            lambda: self._runner.inspect(run_id),
        )
        if not isinstance(state, str) or state not in RUN_STATES:
            raise TriggerError(
                "runner", f"Runner.inspect for run {run_id} answered an unknown state {state!r}"
            )
        return state

    async def _call_cancel(self, run_id: str) -> None:
        await self._deadline(
            f"Runner.cancel for run {run_id}",
            self._settings.cancel_timeout_ms,
            lambda: self._runner.cancel(run_id),
        )

    async def _isolated(
        self,
        work: str,
        fn: Callable[[], Awaitable[object]],
        extra: dict[str, object],
        level: int = logging.ERROR,
    ) -> bool:
        """Isolated work (§1.6): failures are logged and swallowed, cancellation propagates.
        Answers whether ``fn`` succeeded."""
        try:
            await fn()
        except Exception:
            logger.log(level, "A trigger %s failed", work, exc_info=True, extra=extra)
            return False
        return True

    async def _compensate(
        self,
        work: str,
        write: Callable[[], Awaitable[object]],
        settled: Callable[[Held], bool],
        trigger_id: str,
        extra: dict[str, object],
        *,
        attempts: int | None = None,
    ) -> None:
        """A compensation that must land: ``write`` retried with backoff until it does, or
        until the trigger's held state shows it is no longer needed (``settled``). A failed
        write may have committed (its answer lost), so the store's state, not the exception,
        says whether to try again. ``attempts`` bounds it where a tick waits on it (then the
        reservation lease is the last line of defence); a launch task retries until the
        scheduler closes. Cancellation propagates."""
        pause = COMPENSATION_FIRST_PAUSE_S
        attempt = 0
        while True:
            attempt += 1
            try:
                await write()
                return
            except Exception as exc:
                failure = exc
            with contextlib.suppress(Exception):
                if settled(await self._store.inspect(trigger_id)):
                    return
            transient = isinstance(failure, TriggerError) and failure.code == "store"
            if not transient or (attempts is not None and attempt >= attempts):
                logger.error("A trigger %s failed", work, exc_info=failure, extra=extra)
                return
            logger.warning(
                "A trigger %s failed; retrying",
                work,
                exc_info=failure if attempt == 1 else None,
                extra=dict(extra, attempt=str(attempt)),
            )
            await trio.sleep(pause)
            pause = min(pause * 2, COMPENSATION_MAX_PAUSE_S)

    # ---- in-memory ownership (§12.3)

    def _take(self, trigger_id: str, entry: Owned) -> None:
        self._owned[trigger_id] = entry

    def _update(
        self,
        trigger_id: str,
        occurrence: int | None,
        *,
        run_id: str | None = None,
        detach: bool = False,
    ) -> None:
        current = self._owned.get(trigger_id)
        if current is None or current.occurrence != occurrence:
            return
        if run_id is not None:
            current = replace(current, run_id=run_id)
        if detach:
            current = replace(current, scope=None)
        self._owned[trigger_id] = current

    def _remove(self, trigger_id: str, occurrence: int | None) -> None:
        current = self._owned.get(trigger_id)
        if current is not None and current.occurrence == occurrence:
            del self._owned[trigger_id]

    def _observe(self, trigger_id: str, occurrence: int) -> None:
        current = self._observed.get(trigger_id)
        if current is None or occurrence > current:
            self._observed[trigger_id] = occurrence

    # ------------------------------------------------------------------ run now

    async def fire(
        self,
        trigger_id: str,
        *,
        key: str | None = None,
        input: object = msgspec.UNSET,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> Fired:
        """Fire ``trigger_id`` now, by hand (docs/operations.md, "Run now").

        The store claims a manual ledger row in one transaction (``claim_manual``: the
        trigger's overlap policy, or ``overlap`` for this fire only) and this scheduler
        dispatches the claim exactly as a boundary's: ``skip``/``buffer`` are recorded, a
        ``fire``/``supersede`` launches through the runner (with ``input``, or the trigger's
        input) and is then monitored like any run. Returns once the launch is recorded (or
        failed). The cursor never moves. A ``key`` given again answers the earlier fire and
        runs nothing. Refusals come from the store (``unknown_trigger``,
        ``trigger_disabled``, ``trigger_paused``, ``key_conflict``, ``invalid_options``).
        """
        claim_manual = getattr(self._store, "claim_manual", None)
        if claim_manual is None:
            raise TriggerError(
                "invalid_options",
                f"{type(self._store).__name__} has no manual fires: run now needs one of the "
                "built-in stores (memory, SQLite, PostgreSQL)",
            )
        made: ManualFire = await claim_manual(
            trigger_id, key=key, input=input, overlap=overlap, by=by
        )
        claim = made.claim
        if made.repeated or not claim.claimed:
            return Fired(
                trigger_id=made.trigger_id,
                occurrence=made.occurrence,
                key=made.request.key,
                action=None,
                repeated=made.repeated,
                outcome=made.outcome,
                run_id=made.run_id,
            )
        if claim.action == "buffer":
            self._wake_after_end.add(made.trigger_id)  # whatever the trigger's own policy
        launched = _Launched()
        await self._dispatch_claimed(
            made.trigger, made.occurrence, claim, manual=made.request, launched=launched
        )
        if claim.action in ("fire", "supersede"):
            await launched.event.wait()
        row = await self._fire_row(made.trigger_id, made.occurrence)
        return Fired(
            trigger_id=made.trigger_id,
            occurrence=made.occurrence,
            key=made.request.key,
            action=claim.action,
            outcome=row.outcome if row is not None else made.outcome,
            run_id=row.run_id if row is not None else None,
        )

    async def _fire_row(self, trigger_id: str, occurrence: int) -> FireRecord | None:
        """The ledger row ``(trigger_id, occurrence)`` (the history page that starts at it)."""
        query = HistoryQuery(
            trigger_id=trigger_id,
            cursor=Fire(trigger_id=trigger_id, occurrence=occurrence + 1),
            limit=1,
        )
        rows = (await self._store.history(query)).items
        return rows[0] if rows and rows[0].occurrence == occurrence else None

    # ------------------------------------------------------------------ the tick (§12.5)

    async def _tick(self) -> None:
        host = self._settings.host
        # Wake-ups that arrive from here on need another tick; earlier ones are served by
        # this one (its listing is read below).
        self._wake_event = trio.Event()
        # A heartbeat that keeps failing is one warning, not one per tick (the tick itself
        # reports the outage).
        level = logging.DEBUG if self._heartbeat_failing else logging.WARNING
        self._heartbeat_failing = not await self._isolated(
            "heartbeat", lambda: self._store.heartbeat(host), {"host": host}, level
        )
        now = self._clock.now_ms()
        if self._last_pruned_at is None or now - self._last_pruned_at >= PRUNE_INTERVAL_MS:
            self._last_pruned_at = now
            cutoff = now - self._settings.fire_retention_ms
            await self._isolated(
                "fire ledger prune",
                lambda: self._store.prune_fires(cutoff),
                {"host": host},
                logging.WARNING,
            )
        if self._indexed:
            await self._tick_indexed(now)
            return
        listing = await self._store.list()
        await self._process_rows(listing, collect_next_due=True)

    async def _tick_indexed(self, now: int) -> None:
        """A tick that reads only what needs attention (docs/scheduler.md)."""
        store = self._store
        assert isinstance(store, AttentionStore)
        due = await store.due(now, limit=DUE_BATCH, hold_ms=TAKE_HOLD_MS)
        self._more_due = len(due) >= DUE_BATCH
        rows: list[DueRow] = list(due)
        # The recovery sweep: every row that holds something, every recovery_interval, and on
        # every tick while this process keeps an entry nobody watches (a run it adopted or
        # whose monitor detached: the listing tick inspected those once per tick too).
        unwatched = any(entry.scope is None for entry in self._owned.values())
        if unwatched or self._next_sweep_at is None or now >= self._next_sweep_at:
            self._next_sweep_at = now + self._settings.recovery_interval_ms
            seen = {row.row.trigger_id for row in rows}
            for held in await store.holding():
                local = self._owned.get(held.row.trigger_id)
                if (
                    held.row.trigger_id in seen
                    or (local is not None and local.scope is not None)
                    or (local is None and is_reservation(held.row.active_run_id))
                ):
                    # Already in this tick; or a live monitor here watches it; or a
                    # reservation of another scheduler, whose lease expiry is in the index.
                    continue
                rows.append(held)
        for row in rows:
            if row.registered_at is not None:
                self._registered_at[row.row.trigger_id] = row.registered_at
        await self._process_rows([row.row for row in rows], collect_next_due=False)
        self._next_attention = await store.next_attention()

    async def _process_rows(self, listing: list[Listed], *, collect_next_due: bool) -> None:
        next_due: dict[str, int] = {}
        rows = iter(listing)
        slots = trio.CapacityLimiter(self._settings.concurrency)

        async def worker() -> None:
            # The workers share one iterator, so rows begin in listing order and each row is
            # processed by exactly one task. A row that may call the runner (it holds or may
            # hold a run: inspection, recovery, cancellation) takes one of ``concurrency``
            # slots; a row that can only claim does not, so the claims of a whole tick are in
            # flight together and a batching store commits them in a few transactions.
            for row in rows:
                if self._claims_only(row):
                    await self._process_row(row, next_due if collect_next_due else None)
                else:
                    async with slots:
                        await self._process_row(row, next_due if collect_next_due else None)

        width = min(max(self._settings.concurrency, CLAIM_WIDTH), len(listing))
        if self._claims_idle.is_set():
            self._claims_idle = trio.Event()
        self._claiming += 1
        try:
            with one_exception():
                async with trio.open_nursery() as nursery:
                    for _ in range(width):
                        nursery.start_soon(worker)
        finally:
            self._claiming -= 1
            # Still catching up (the due read was full: the next tick follows at once): the
            # records keep waiting for its claims too, within their bound.
            if self._claiming == 0 and not self._more_due:
                self._claims_idle.set()
        if collect_next_due:
            self._next_due = next_due

    def _claims_only(self, row: Listed) -> bool:
        """Whether processing ``row`` can only read and claim (no runner call is expected).

        True when nothing is held for the trigger, neither in the store's listing nor in this
        process: recovery and the pending slot then make no calls (§12.7-§12.8), and a claim
        that finds nobody holding the trigger fires. (A peer may reserve it in between; then
        the claim answers ``skip``/``buffer``, or a ``supersede`` of a run that this row's
        processing cancels, bounded by ``cancel_timeout`` like any other runner call.)
        """
        if row.trigger is None:
            return True  # a row that failed to decode is only logged
        if row.active_run_id is not None or row.trigger_id in self._owned:
            return False
        return row.pending_at is None or not row.trigger.schedulable

    async def _process_row(self, row: Listed, next_due: dict[str, int] | None) -> None:
        trigger = row.trigger
        if row.error is not None or trigger is None:
            logger.error(
                "A trigger tick failed", exc_info=row.error, extra={"trigger_id": row.trigger_id}
            )
            return
        try:
            await self.process_trigger(
                trigger, Held(active_run_id=row.active_run_id, pending_at=row.pending_at)
            )
        except Exception:
            logger.error(
                "A trigger tick failed", exc_info=True, extra={"trigger_id": row.trigger_id}
            )
        if trigger.schedulable and next_due is not None:
            upcoming = self._next_occurrence(trigger)
            backfill = trigger.backfill
            if backfill is not None and backfill.running and row.pending_at is None:
                upcoming = self._clock.now_ms()  # its next step is due at once (a listing tick)
            if upcoming is not None:
                next_due[trigger.id] = upcoming

    def _next_occurrence(self, trigger: RegisteredTrigger) -> int | None:
        """The trigger's next occurrence after now (for the wake-on-deadline sleep)."""
        # (Cheap per trigger: ``Cron`` remembers the current gap between occurrences per
        # expression, and ``Cron.parse`` answers from the package's one cache of parsed crons.)
        now = self._clock.now_ms()
        try:
            if trigger.jitter_ms or trigger.start_at is not None or trigger.end_at is not None:
                # Jitter and the window: the next launch instant (docs/declarations.md,
                # "Jitter, windows and pausing after failures").
                launches = next_launches(trigger, now, count=1)
                return launches[0][1] if launches else None
            upcoming = Cron.parse(trigger.cron, trigger.timezone, now=now).next(now)
        except TriggerError:
            return None
        return upcoming

    # ------------------------------------------------------------------ §12.6

    async def process_trigger(
        self, trigger: RegisteredTrigger, held: Held | None, refreshed: bool = False
    ) -> None:
        """Per-trigger processing (§12.6); raises what the tick isolates."""
        with instrument.span("Scheduler.process_trigger", {"trigger_id": trigger.id}):
            await self._process_trigger(trigger, held, refreshed)

    async def _process_trigger(
        self, trigger: RegisteredTrigger, held: Held | None, refreshed: bool
    ) -> None:
        now = self._clock.now_ms()
        running = await self._resolve_active(trigger, held)
        if not trigger.schedulable:
            return  # disabled or paused: recovery only, never new work
        if running is None or trigger.overlap == "supersede":
            await self._resume_pending(trigger, held)
        due = due_occurrences(trigger, now, self._watermark_of(trigger, now, held))
        claim_first = _carrying(self._claim_once, due)
        dispatched: int | None = None
        interrupted = False
        stale = False
        for index, occurrence in enumerate(due.occurrences):
            claim = claim_first if index == 0 else self._claim_once
            try:
                await self._hook.around_claim(claim, trigger, occurrence)
            except _StaleRevision:
                stale = True
                break
            except Exception:
                logger.error(
                    "A trigger dispatch of occurrence %s failed",
                    occurrence,
                    exc_info=True,
                    extra={"trigger_id": trigger.id, "occurrence": occurrence},
                )
                # Nothing is claimed past a failed claim, on every tick (indexed or listing):
                # a later claim would move the durable cursor past a boundary that is still
                # owed, and a process that stopped before its retry would lose it for good
                # (docs/scheduler.md, "Nothing is claimed past a failed claim").
                interrupted = True
                break
            dispatched = occurrence
        if stale:
            if dispatched is not None:
                self._observe(trigger.id, dispatched)
            if refreshed:
                return
            current = await self._store.get(trigger.id)
            if current is None or current.revision == trigger.revision:
                return
            await self.process_trigger(current, None, refreshed=True)
            return
        if not interrupted:
            self._observe(trigger.id, due.watermark)
        elif dispatched is not None:
            self._observe(trigger.id, dispatched)
        await self._backfill_step(trigger)

    async def _backfill_step(self, trigger: RegisteredTrigger) -> None:
        """One step of the trigger's running backfill (docs/operations.md, "Backfill").

        After the schedule's own occurrences, so that a backfill never takes a boundary's
        place. The store decides the step in one transaction (the ordinary claim under the
        backfill's overlap policy, and the progress moved on); a step another scheduler took
        first is answered not claimed. A fenced step is left to the next tick, which reads the
        row again.
        """
        backfill = trigger.backfill
        store = self._store
        if backfill is None or backfill.next is None or not backfill.running:
            return
        if not isinstance(store, BackfillStore):
            return
        occurrence = backfill.next
        try:
            claim = await store.backfill_step(
                trigger.id, occurrence, expected_revision=trigger.revision
            )
        except TriggerError as err:
            if err.code in ("revision_mismatch", "trigger_disabled"):
                return
            raise
        if claim.claimed:
            await self._dispatch_claimed(trigger, occurrence, claim)

    def _watermark_of(
        self, trigger: RegisteredTrigger, now: int, held: Held | None = None
    ) -> int | None:
        """The watermark ``due_occurrences`` counts from (§6.1's ``observed``).

        On an indexed store, where several schedulers share the rows and each sees a row only
        when it needs attention, two rules make the answer independent of who looked last:

        * the fire cursor is a floor under this scheduler's watermark: what the cursor has
          passed was taken care of by some scheduler (the tick never claims past a failed
          claim, so the cursor never passes an owed boundary);
        * a trigger that has never fired was observed when it was registered
          (``registered_at_ms``): a scheduler seeing it for the first time owes the boundaries
          since then, as a scheduler running at the registration would have.

        On the listing tick the watermark is this instance's own, with one addition: a
        trigger whose cursor has not moved yet but which holds a claimed occurrence (its
        reservation, or the pending slot a failed launch restored it to) has fired, so a first
        sight counts from that occurrence instead of owing nothing (docs/scheduler.md, "A
        claimed occurrence is a first sight's floor").
        """
        observed = self._observed.get(trigger.id)
        if not self._indexed:
            if observed is None and trigger.last_fired_at is None:
                return _claimed_mark(held)
            return observed
        cursor = trigger.last_fired_at
        if observed is not None:
            return cursor if cursor is not None and cursor > observed else observed
        if cursor is not None:
            return None  # §6.1's first sight of a trigger that has fired
        registered_at = self._registered_at.get(trigger.id)
        if registered_at is None:
            return None
        try:
            cron = Cron.parse(trigger.cron, trigger.timezone, now=now)
            return cron.previous_at_or_before(registered_at)
        except TriggerError:
            return None

    # ------------------------------------------------------------------ §12.7

    async def _stored_active(self, trigger: RegisteredTrigger, held: Held | None) -> str | None:
        if held is not None and held.active_run_id is None:
            return None
        return await self._store.active_run(trigger.id)

    async def _inspect_stored(self, run_id: str) -> RunState:
        if is_reservation(run_id):
            return "active"  # the runner is never asked about a reservation
        return await self._call_inspect(run_id)

    async def _occurrence_of(self, trigger: RegisteredTrigger, run_id: str) -> int | None:
        parsed = reservation_occurrence(run_id)
        if parsed is not None:
            return parsed
        return await self._store.active_occurrence(trigger.id, run_id)

    async def _settle_recovered(
        self, trigger: RegisteredTrigger, occurrence: int | None, run_id: str, state: RunState
    ) -> None:
        if occurrence is None:
            await self._store.clear_active(trigger.id, run_id)
            return
        try:
            await self._record(end_result(trigger.id, occurrence, run_id, state))
        except TriggerError as err:
            if err.code != "stale_owner":
                raise
            # Another party has already settled or superseded the occurrence.

    async def _recover_stored(self, trigger: RegisteredTrigger, run_id: str) -> Owned | None:
        occurrence = await self._occurrence_of(trigger, run_id)
        state = await self._inspect_stored(run_id)
        if state != "active":
            await self._settle_recovered(trigger, occurrence, run_id, state)
            return None
        entry = Owned(occurrence, run_id, None)
        self._take(trigger.id, entry)
        return entry

    async def _resolve_active(self, trigger: RegisteredTrigger, held: Held | None) -> Owned | None:
        local = self._owned.get(trigger.id)
        if local is not None:
            if local.scope is not None:
                return local  # a live monitor owns it: no reads at all
            if not is_reservation(local.run_id):
                state = await self._inspect_stored(local.run_id)
                if state == "active":
                    return local
                await self._settle_recovered(trigger, local.occurrence, local.run_id, state)
                self._remove(trigger.id, local.occurrence)
            else:
                stored = await self._stored_active(trigger, held)
                if stored is None:
                    self._remove(trigger.id, local.occurrence)
                    return None
                if stored == local.run_id:
                    return local
                self._remove(trigger.id, local.occurrence)
                return await self._recover_stored(trigger, stored)
        stored = await self._stored_active(trigger, held)
        return None if stored is None else await self._recover_stored(trigger, stored)

    # ------------------------------------------------------------------ §12.8

    async def _resume_pending(self, trigger: RegisteredTrigger, held: Held | None) -> None:
        if held is not None and held.pending_at is None and held.active_run_id is None:
            return
        current = trigger
        try:
            pending = await self._store.claim_pending(
                trigger.id, expected_revision=current.revision
            )
        except TriggerError as err:
            if err.code != "revision_mismatch":
                raise
            fresh = await self._store.get(trigger.id)
            if fresh is None or fresh.revision == current.revision:
                raise
            current = fresh  # used for this dispatch only
            pending = await self._store.claim_pending(
                trigger.id, expected_revision=current.revision
            )
        if pending is None or not pending.claim.claimed:
            return
        claim = pending.claim
        occurrence = pending.occurrence
        try:
            await self._dispatch_claimed(
                current, occurrence, claim, resume_buffered=True, manual=pending.manual
            )
        except Exception:
            if claim.action in ("fire", "supersede"):
                reservation = claim.reservation_id or ""

                async def compensate() -> None:
                    await self._store.restore_pending(trigger.id, occurrence, reservation)

                def settled(held: Held) -> bool:
                    return held.active_run_id != reservation

            else:

                async def compensate() -> None:
                    await self._store.set_pending(trigger.id, occurrence)

                def settled(held: Held) -> bool:
                    return held.pending_at == occurrence

            await self._compensate(
                "buffered launch compensation",
                compensate,
                settled,
                trigger.id,
                {"trigger_id": trigger.id, "occurrence": occurrence},
                attempts=TICK_COMPENSATION_ATTEMPTS,
            )
            raise

    # ------------------------------------------------------------------ §12.9

    async def _claim_once(
        self, trigger: RegisteredTrigger, occurrence: int, dropped: Dropped | None = None
    ) -> None:
        try:
            claim = await self._store.claim_fire(
                trigger.id, occurrence, expected_revision=trigger.revision, dropped=dropped
            )
        except TriggerError as err:
            if err.code == "revision_mismatch":
                raise _StaleRevision(err) from err
            raise
        if not claim.claimed:
            return
        await self._dispatch_claimed(trigger, occurrence, claim)

    async def _dispatch_claimed(
        self,
        trigger: RegisteredTrigger,
        occurrence: int,
        claim: Claim,
        resume_buffered: bool = False,
        *,
        manual: ManualRequest | None = None,
        launched: _Launched | None = None,
    ) -> None:
        """Dispatch a granted claim (§12.9): record ``skip``/``buffer``, or take the entry and
        spawn the launch task. ``manual`` is a manual fire's request (its run's input);
        ``launched`` is set once the launch task has recorded ``launched`` or given up."""
        action = claim.action
        if action == "skip":
            await self._record(
                Result(trigger_id=trigger.id, occurrence=occurrence, outcome="skipped")
            )
            return
        if action == "buffer":
            await self._record(
                Result(trigger_id=trigger.id, occurrence=occurrence, outcome="buffered")
            )
            return
        reservation = claim.reservation_id
        if action not in ("fire", "supersede") or reservation is None:
            raise TriggerError("store", f"claim for trigger {trigger.id} has an unusable shape")
        if action == "supersede" and claim.active_run_id is not None:
            displaced = claim.active_run_id
            local = self._owned.get(trigger.id)
            if local is not None and local.run_id == displaced:
                prior = local
            else:
                prior = Owned(await self._occurrence_of(trigger, displaced), displaced, None)
            await self._cancel_active(
                trigger, prior, occurrence, reservation, queue=not resume_buffered
            )
        # The entry is taken here, before the dispatch returns, with the scope its launch task
        # will enter: a cancel of the entry (a supersede) reaches the task even before it runs.
        # (``start_soon`` rather than ``nursery.start``: nothing is awaited before the entry
        # exists, and a tick that launches a thousand runs pays a spawn, not a handshake, each.)
        scope = trio.CancelScope()
        self._take(trigger.id, Owned(occurrence, reservation, scope))
        self._nursery.start_soon(
            self._launch_task,
            trigger,
            occurrence,
            reservation,
            resume_buffered,
            scope,
            manual,
            launched,
        )

    # ------------------------------------------------------------------ §12.10

    async def _cancel_active(
        self,
        trigger: RegisteredTrigger,
        prior: Owned,
        replacement: int,
        reservation: str,
        queue: bool,
    ) -> None:
        is_run = not is_reservation(prior.run_id)
        # While the prior run is being cancelled and recorded ``superseded``, its own monitor
        # (if it lives in this process) must not settle it as ``failed`` ("was cancelled")
        # from the cancellation we are causing: it waits for this gate (see _launch_task).
        gate = (trigger.id, prior.occurrence)
        if prior.scope is not None and is_run:
            self._superseding[gate] = trio.Event()
        try:
            try:
                if is_run:
                    await self._call_cancel(prior.run_id)
                if prior.occurrence is not None and is_run:
                    await self._record(
                        Result(
                            trigger_id=trigger.id,
                            occurrence=prior.occurrence,
                            outcome="superseded",
                            run_id=prior.run_id,
                        )
                    )
            except Exception:
                # The replacement's reservation holds the trigger and nobody launches it: give
                # it back as pending (also when only ``superseded`` failed to be written), so
                # the next tick launches the replacement instead of waiting out the lease.
                if queue:
                    await self._compensate(
                        "supersede compensation",
                        lambda: self._store.restore_pending(trigger.id, replacement, reservation),
                        lambda held: held.active_run_id != reservation,
                        trigger.id,
                        {"trigger_id": trigger.id, "occurrence": replacement},
                        attempts=TICK_COMPENSATION_ATTEMPTS,
                    )
                raise
            if prior.scope is not None:
                prior.scope.cancel()
            self._remove(trigger.id, prior.occurrence)
        finally:
            event = self._superseding.pop(gate, None)
            if event is not None:
                event.set()

    # ------------------------------------------------------------------ §12.11

    async def _launch_task(
        self,
        trigger: RegisteredTrigger,
        occurrence: int,
        reservation: str,
        preserve_buffered: bool,
        scope: trio.CancelScope,
        manual: ManualRequest | None = None,
        launched: _Launched | None = None,
    ) -> None:
        run_id: str | None = None
        launch_recorded = False
        completed = False
        with scope:
            try:
                try:
                    run_id = await self._timed_start(trigger, occurrence, manual)
                    self._update(trigger.id, occurrence, run_id=run_id)
                    await self._after_claims()
                    await self._record_launched(trigger.id, occurrence, run_id, reservation)
                    launch_recorded = True
                    if launched is not None:
                        launched.event.set()
                    state = await self._monitor(trigger, run_id, just_started=True)
                    if state is None:
                        return  # detached after inspection retries
                    gate = self._superseding.get((trigger.id, occurrence))
                    if gate is not None:
                        # A supersede is cancelling this run; if it records ``superseded`` it
                        # cancels our scope while we wait, otherwise we settle as usual.
                        await gate.wait()
                    await self._after_claims()
                    await self._record(end_result(trigger.id, occurrence, run_id, state), trigger)
                    completed = True
                    if (
                        trigger.overlap == "buffer-one"
                        or trigger.id in self._wake_after_end
                        or (trigger.backfill is not None and trigger.backfill.running)
                    ):
                        self._wake_after_end.discard(trigger.id)
                        self.wake()  # a buffered occurrence (or a backfill's) may now be owed
                except TriggerError as err:
                    await self._handle_launch_failure(
                        err,
                        trigger,
                        occurrence,
                        reservation,
                        run_id,
                        launch_recorded,
                        preserve_buffered,
                    )
                except Exception:
                    extra: dict[str, object] = {"trigger_id": trigger.id, "occurrence": occurrence}
                    if run_id is not None:
                        extra["run_id"] = run_id
                    message = (
                        "A trigger run monitor failed"
                        if launch_recorded
                        else "A trigger launch failed"
                    )
                    logger.error(message, exc_info=True, extra=extra)
            finally:
                if launched is not None:
                    launched.event.set()  # recorded, or given up: the caller reads the row
                if launch_recorded and not completed:
                    self._update(
                        trigger.id, occurrence, detach=True
                    )  # keep ownership for the next tick
                else:
                    self._remove(trigger.id, occurrence)

    async def _after_claims(self) -> None:
        """Let a claim pass in flight finish first (at most ``CLAIMS_FIRST_WAIT_S``).

        At a boundary shared by a thousand triggers, the claims of the tick and the launch
        tasks' ``launched`` and ``completed`` records all queue for the same transactions; a
        record written before the tick's last claim only delays that claim's launch (the
        boundary's lateness), while a record written a few milliseconds later changes nothing
        (the reservation holds the trigger meanwhile). So a launch task waits for the claims of
        a pass in flight, bounded so that back-to-back ticks never hold a record back longer.
        Only on a store whose writes share transactions (``shares_transactions``): elsewhere a
        record does not delay a claim's commit.
        """
        if self._claims_first and not self._claims_idle.is_set():
            with trio.move_on_after(CLAIMS_FIRST_WAIT_S):
                await self._claims_idle.wait()

    async def _record_launched(
        self, trigger_id: str, occurrence: int, run_id: str, reservation: str
    ) -> None:
        """Write ``launched`` (the reservation becomes the run), retried while the store fails
        for a moment. The run exists now, so giving the boundary back (re-arming it) would let
        a later attempt whose start is refused record ``failed`` beside a run that completes:
        the row is what says whether a failed write committed (the trigger held by
        ``run_id``), never the exception (docs/scheduler.md, "A failed compensation is
        retried"). After ``LAUNCH_RECORD_ATTEMPTS`` the last error goes to the failure path,
        which re-arms the boundary (the run is found again by its idempotency key)."""
        result = Result(
            trigger_id=trigger_id,
            occurrence=occurrence,
            outcome="launched",
            run_id=run_id,
            reservation_id=reservation,
        )
        pause = COMPENSATION_FIRST_PAUSE_S
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._record(result)
                return
            except TriggerError as exc:
                if exc.code != "store" or attempt >= LAUNCH_RECORD_ATTEMPTS:
                    raise
                failure = exc
            try:
                if (await self._store.inspect(trigger_id)).active_run_id == run_id:
                    return  # it committed; only its answer was lost
            except Exception:
                logger.debug("A held-state read after a failed launch record failed", exc_info=True)
            logger.warning(
                "A trigger launch record failed; retrying",
                exc_info=failure if attempt == 1 else None,
                extra={"trigger_id": trigger_id, "run_id": run_id, "attempt": str(attempt)},
            )
            await trio.sleep(pause)
            pause = min(pause * 2, COMPENSATION_MAX_PAUSE_S)

    async def _timed_start(
        self, trigger: RegisteredTrigger, occurrence: int, manual: ManualRequest | None = None
    ) -> str:
        # A manual fire's run gets its own input; its key is the ledger row's, like a
        # boundary's (the off-grid instant makes it unique), so a re-armed launch finds the
        # same run instead of starting a second one.
        request = StartRequest(
            flow_id=trigger.flow_id,
            input=_copy_input(manual.input if manual is not None else trigger.input),
            idempotency_key=idempotency_key(trigger.id, occurrence),
        )
        started = trio.current_time()
        try:
            with instrument.span(
                "Scheduler.launch", {"trigger_id": trigger.id, "occurrence": iso(occurrence)}
            ):
                return await self._call_start(request)
        finally:
            instrument.record_histogram(
                instrument.LAUNCH_DURATION_MS, (trio.current_time() - started) * 1000
            )

    # ------------------------------------------------------------------ §12.12

    async def _monitor(
        self, trigger: RegisteredTrigger, run_id: str, *, just_started: bool = False
    ) -> RunState | None:
        if just_started and isinstance(self._runner, RunEndSignal):
            # A run this scheduler has just started is active: a runner that tells when its
            # runs end is waited on first, and spared an inspection that would only say
            # "active" (one read per launch). A start that answered a run which had ended
            # already (an earlier process launched it) is inspected after the poll interval.
            told = await self._until_next_look(run_id)
            if told is not None:
                return told
        while True:
            state = await self._inspect_run(trigger, run_id)
            if state is None:
                return None
            if state != "active":
                return state
            told = await self._until_next_look(run_id)
            if told is not None:
                return told  # the runner's own committed write: no inspection needed

    async def _until_next_look(self, run_id: str) -> RunState | None:
        """Wait ``run_poll_interval``, or less when the runner says the run ended; answer the
        terminal state the runner says it wrote, if it says one."""
        poll = self._settings.run_poll_interval_ms / 1000
        runner = self._runner
        if not isinstance(runner, RunEndSignal):
            await trio.sleep(poll)
            return None
        deadline = trio.current_time() + poll
        with trio.move_on_at(deadline):
            try:
                told = await runner.wait_ended(run_id)
            except Exception:
                logger.debug("A runner's wait_ended failed", exc_info=True)
                await trio.sleep_until(deadline)
            else:
                if told in _TERMINAL:
                    return told
        return None

    async def _inspect_run(self, trigger: RegisteredTrigger, run_id: str) -> RunState | None:
        for k in range(INSPECTION_ATTEMPTS):
            try:
                return await self._call_inspect(run_id)
            except Exception:
                # The first failure says why (with the traceback); the retries after it are
                # debug lines, and giving up is a warning of its own: a database outage with
                # runs in flight is one line per run, not one per run and attempt.
                logger.log(
                    logging.WARNING if k == 0 else logging.DEBUG,
                    "A trigger run inspection failed",
                    exc_info=True,
                    extra={"trigger_id": trigger.id, "run_id": run_id, "attempt": str(k + 1)},
                )
                if k == INSPECTION_ATTEMPTS - 1:
                    logger.warning(
                        "A trigger run monitor detached after inspection retries",
                        extra={"trigger_id": trigger.id, "run_id": run_id},
                    )
                    return None
                pause_ms = min(self._settings.run_poll_interval_ms * 2**k, MAX_INSPECTION_PAUSE_MS)
                await trio.sleep(pause_ms / 1000)
        return None  # pragma: no cover

    # ------------------------------------------------------------------ §12.13

    async def _handle_launch_failure(
        self,
        err: TriggerError,
        trigger: RegisteredTrigger,
        occurrence: int,
        reservation: str,
        run_id: str | None,
        launch_recorded: bool,
        preserve_buffered: bool,
    ) -> None:
        base: dict[str, object] = {"trigger_id": trigger.id, "occurrence": occurrence}
        with_run = dict(base, run_id=run_id) if run_id is not None else base
        error_info = (type(err), err, err.__traceback__)
        if launch_recorded:
            # 1: the end result could not be written; the next tick re-inspects and settles.
            logger.error(
                "A trigger run monitor could not persist completion",
                exc_info=error_info,
                extra=with_run,
            )
            return
        if err.code == "stale_owner" and run_id is not None:
            # 2: another attempt owns the occurrence, or it was superseded.
            logger.warning(
                "A trigger launch lost its reservation", exc_info=error_info, extra=with_run
            )
            losing = run_id

            async def reconcile() -> None:
                held = await self._store.inspect(trigger.id)
                holder = held.active_run_id
                if holder == reservation:
                    # Our own reservation still holds the trigger, yet the store refused our
                    # ``launched``: the occurrence's row was settled under it (never ours to
                    # launch). Nobody else will convert this reservation, and its lease would
                    # release it without re-arming (the row is settled), so until then every
                    # boundary would be skipped behind it. Give it back now, then cancel the
                    # run that has no boundary (docs/scheduler.md, "A lost launch").
                    await self._store.clear_active(trigger.id, reservation)
                    await self._call_cancel(losing)
                    return
                if holder == losing or (
                    is_reservation(holder) and reservation_occurrence(holder) == occurrence
                ):
                    return  # an idempotent retry has adopted (or will adopt) the run
                await self._call_cancel(losing)

            await self._isolated("losing run reconciliation", reconcile, with_run)
            return
        if preserve_buffered or run_id is not None or err.code == "runner_timeout":
            # 3 (a resumed pending occurrence) and 4 (the start may have happened): re-arm.
            work = "buffered launch compensation" if preserve_buffered else "launch compensation"
            logger.error("A trigger launch failed", exc_info=error_info, extra=with_run)
            await self._compensate(
                work,
                lambda: self._store.restore_pending(trigger.id, occurrence, reservation),
                lambda held: held.active_run_id != reservation,
                trigger.id,
                base,
            )
            return
        # 5: the runner refused before producing a run. Recording ``failed`` gives the
        # reservation back; until it lands the reservation would hide every later boundary, so
        # it is retried (docs/scheduler.md, "A failed compensation is retried").
        logger.error("A trigger launch failed", exc_info=error_info, extra=base)
        await self._compensate(
            "launch failure record",
            lambda: self._record(
                Result(
                    trigger_id=trigger.id,
                    occurrence=occurrence,
                    outcome="failed",
                    error=err.message,
                    run_id=reservation,
                ),
                trigger,
            ),
            lambda held: held.active_run_id != reservation,
            trigger.id,
            base,
        )


@contextlib.asynccontextmanager
async def open_scheduler(
    store: TriggerStore,
    runner: Runner,
    *,
    options: SchedulerOptions | None = None,
    clock: WallClock | None = None,
    _hook: SchedulerHook = NO_HOOK,
) -> AsyncIterator[Scheduler]:
    """Open a scheduler whose launch tasks live as long as the ``async with`` block.

    Validates the options first (``invalid_options`` with ``path`` = the option name).
    Leaving the block detaches every launch task and monitor: no run is cancelled, nothing is
    recorded, the store is not touched. The next scheduler on the same store re-attaches.
    ``_hook`` is for ``trio_triggers.testing`` only (``_scheduler/_hook.py``).
    """
    opts = options if options is not None else SchedulerOptions()
    settings = validate_options(opts)
    wall = clock if clock is not None else SystemWallClock()
    with one_exception():
        async with trio.open_nursery() as nursery:
            scheduler = Scheduler(store, runner, opts, settings, wall, nursery, _hook)
            unsubscribe = _wake.subscribe(store, scheduler.wake)
            try:
                yield scheduler
            finally:
                unsubscribe()
                scheduler._closed = True
                nursery.cancel_scope.cancel()
