"""The owner's half of the lease: ``heartbeat_loop`` and ``hold_lease`` (``ownership.md`` §11-§12).

Two tasks share one nursery: *pulses* renew the stamp every interval; the *deadline* watches the
write tolerance independently, so a stalled write can never hide the expiry. Expiry is
serialised by a lock and judged on a reading taken after the lock, so two overdue timers settle
with one ``reconfirm``. The first task to end records its exception and cancels the nursery; the
exception is raised bare after the nursery has closed (never an ``ExceptionGroup``).

``hold_lease`` also gives the body's cancel scope a *Trio deadline* at the work limit (the last
confirmed stamp plus :func:`work_limit_ms` of the store's ``stale_after_ms``), moved on by every
confirmed renewal. A process that was stopped (``SIGSTOP``, a debugger, a host stall) past that
moment wakes with the deadline already expired: Trio cancels the body in the same scheduling pass
that resumes its sleeps, before any of its code runs, instead of letting it work on until a
heartbeat round trip reports the lost fence.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import NoReturn, final

import trio

from .._clock import SystemWallClock, WallClock
from .._errors import LeaseLost, RunStoreError
from .._groups import only_cancelled
from ._models import FenceLost, NotFound, RunStore, Updated
from ._owner import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_STALE_AFTER_MS,
    HEARTBEAT_WRITE_TOLERANCE_MS,
    OwnerId,
    check_owner,
    durable_text_problem,
    invalid,
)

__all__ = ["Lease", "heartbeat_loop", "hold_lease", "work_limit_ms"]

log = logging.getLogger("trio_triggers.ownership")

Callback = Callable[[int], Awaitable[object]]

_I = HEARTBEAT_INTERVAL_MS
_T = HEARTBEAT_WRITE_TOLERANCE_MS


def work_limit_ms(stale_after_ms: int) -> int:
    """How long after its last confirmed stamp an owner may still work (``ownership.md``).

    ``T + I`` (20 000 ms) for the contract's 30 s lease, the instant by which the loop has
    lapsed anyway; a store with a shorter ``stale_after_ms`` (a test knob) keeps the same
    proportion, two thirds, so the owner stops a third of the lease before any peer may take
    the run over (2 000 ms for a 3 s lease).
    """
    return min(_T + _I, stale_after_ms - stale_after_ms // 3)


def pulse_interval_ms(stale_after_ms: int) -> int:
    """The pulse cadence: :data:`HEARTBEAT_INTERVAL_MS`, or a quarter of the work limit when
    that is shorter (a short test lease), so that one failed or slow write never spends the
    whole limit."""
    return max(1, min(_I, work_limit_ms(stale_after_ms) // 4))


def _stale_after_ms(run_store: object) -> int:
    value = getattr(run_store, "stale_after_ms", HEARTBEAT_STALE_AFTER_MS)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return HEARTBEAT_STALE_AFTER_MS
    return value


class _State:
    """The loop's mutable state, shared by the pulse and deadline tasks (and the Lease view)."""

    __slots__ = ("ended", "expiry", "failing", "lapsed", "last_confirmed_ms", "on_confirm")

    def __init__(self, start_ms: int) -> None:
        self.last_confirmed_ms: int = start_ms
        self.failing: bool = False
        self.lapsed: bool = False
        self.expiry: trio.Lock = trio.Lock()
        self.ended: BaseException | None = None
        self.on_confirm: Callable[[], None] | None = None  # hold_lease: move the body's deadline

    def confirm(self, sent_ms: int) -> None:
        self.last_confirmed_ms = max(self.last_confirmed_ms, sent_ms)
        self.failing = False
        if self.on_confirm is not None:
            self.on_confirm()


@final
class Lease:
    """A read-only view of a held lease (yielded by :func:`hold_lease`)."""

    __slots__ = ("_owner", "_run_id", "_state")

    def __init__(self, run_id: str, owner: OwnerId, state: _State) -> None:
        self._run_id = run_id
        self._owner = owner
        self._state = state

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def owner(self) -> OwnerId:
        return self._owner

    @property
    def last_confirmed_ms(self) -> int:
        """The newest stamp the store confirmed (or the loop's start reading); never decreases."""
        return self._state.last_confirmed_ms

    def __repr__(self) -> str:
        return f"Lease(run_id={self._run_id!r}, last_confirmed_ms={self.last_confirmed_ms})"


def _validate(method: str, run_id: object, owner: object) -> None:
    problem = durable_text_problem(run_id, "run_id")
    if problem is not None:
        raise invalid(method, problem)
    check_owner(method, owner, "owner")


class _Heartbeat:
    """One heartbeat loop over the shared :class:`_State`, in its named steps: :meth:`run` the
    two tasks, :meth:`_pulses` and :meth:`_pulse` the renewals, :meth:`_deadline` the watch of
    the write tolerance, and :meth:`_expire`, :meth:`_reconfirm` and :meth:`_lapse` the one
    settlement of an overdue stamp (``ownership.md`` §11)."""

    __slots__ = (
        "_clock",
        "_interval_s",
        "_on_lapse",
        "_on_reconfirm",
        "_owner",
        "_run_id",
        "_state",
        "_store",
    )

    def __init__(
        self,
        state: _State,
        run_store: RunStore,
        run_id: str,
        owner: OwnerId,
        clock: WallClock,
        on_reconfirm: Callback | None,
        on_lapse: Callback | None,
    ) -> None:
        self._state = state
        self._store = run_store
        self._run_id = run_id
        self._owner = owner
        self._clock = clock
        self._on_reconfirm = on_reconfirm
        self._on_lapse = on_lapse
        self._interval_s = pulse_interval_ms(_stale_after_ms(run_store)) / 1000

    @property
    def interval_s(self) -> float:
        return self._interval_s

    async def run(self, *, first_pulse_now: bool = False) -> NoReturn:
        """Run the pulses and the deadline in one nursery until one of them ends. The first to
        end records why and cancels the other; that reason is raised bare once the nursery has
        closed, so a caller never meets an ``ExceptionGroup``.

        ``first_pulse_now``: the caller has already waited out the first interval (``hold_lease``
        starts the loop only then), so the first pulse is due at once."""
        state = self._state
        pulses = self._pulses_now if first_pulse_now else self._pulses
        try:
            async with trio.open_nursery() as nursery:

                async def run(task: Callable[[], Awaitable[None]]) -> None:
                    try:
                        await task()
                    except Exception as exc:  # LeaseLost or a defect; Cancelled passes through
                        if state.ended is None:
                            state.ended = exc
                        nursery.cancel_scope.cancel()

                nursery.start_soon(run, pulses)
                nursery.start_soon(run, self._deadline)
        except BaseExceptionGroup as group:
            cancelled = only_cancelled(group)
            if cancelled is not None:
                raise cancelled from None
            raise
        ended = state.ended
        if ended is None:  # pragma: no cover - the tasks only end by recording an exception
            raise RuntimeError("heartbeat_loop ended without a reason")
        raise ended

    async def _pulses(self) -> None:
        """Renew the stamp every interval; a stamp already past the write tolerance is settled
        by :meth:`_expire` instead, never by one more plain heartbeat."""
        await trio.sleep(self._interval_s)
        await self._pulses_now()

    async def _pulses_now(self) -> None:
        """:meth:`_pulses` with its first interval already waited out."""
        while True:
            now = self._clock.now_ms()
            if now - self._state.last_confirmed_ms >= _T:
                await self._expire()
            else:
                await self._pulse(now)
            await trio.sleep(self._interval_s)

    async def _pulse(self, now: int) -> None:
        """One heartbeat write. A store error is tolerated (logged once per failing spell): the
        deadline judges how long; a lost fence or a missing row ends the loop at once."""
        state = self._state
        try:
            outcome = await self._store.heartbeat(self._run_id, self._owner, now)
        except RunStoreError as exc:
            if not state.failing:
                log.warning(
                    "run heartbeat write failed", extra={"run_id": self._run_id, "code": exc.code}
                )
                state.failing = True
            return
        if isinstance(outcome, Updated):
            state.confirm(now)
        elif isinstance(outcome, FenceLost):
            raise LeaseLost(self._run_id, reason="fence_lost")
        elif isinstance(outcome, NotFound):
            raise LeaseLost(self._run_id, reason="not_found")
        else:
            raise TypeError(f"heartbeat returned {type(outcome).__name__}, not an outcome")

    async def _deadline(self) -> None:
        """Watch the write tolerance apart from the pulses, so that a stalled heartbeat write
        can never hide the expiry."""
        state = self._state
        while True:
            if state.lapsed:
                await trio.sleep_forever()  # the lapsing expiry is about to end the loop
            remaining = state.last_confirmed_ms + _T - self._clock.now_ms()
            if remaining <= 0:
                await self._expire()
                continue
            await trio.sleep(min(remaining, _I) / 1000)

    async def _expire(self) -> None:
        """Settle an overdue stamp exactly once: under the expiry lock and on a reading taken
        after it, so two overdue timers make one ``reconfirm``; lapse unless it renewed."""
        state = self._state
        async with state.expiry:
            if state.lapsed:
                return  # another expiry already ended the loop: never a second reconfirm
            now = self._clock.now_ms()  # a fresh reading, taken after the lock
            if now - state.last_confirmed_ms < _T:
                return  # the other path already renewed
            unconfirmed = now - state.last_confirmed_ms
            renewed, cause = await self._reconfirm(now, unconfirmed)
            if not renewed:
                await self._lapse(unconfirmed, cause)

    async def _reconfirm(self, now: int, unconfirmed: int) -> tuple[bool, BaseException | None]:
        """One ``reconfirm`` bounded by the interval, then ``on_reconfirm`` bounded by what is
        left of the renewed tolerance: renewed only when both finish in time (a result that
        arrives too late is not fresh evidence). Also answers the failure that stopped it,
        which becomes the lapse's cause."""
        cause: BaseException | None = None
        outcome: object = None
        with trio.move_on_after(_I / 1000):
            try:
                outcome = await self._store.reconfirm(self._run_id, self._owner, now)
            except Exception as exc:  # a store error or a defect: not renewed
                cause = exc
        if not isinstance(outcome, Updated):
            return False, cause
        self._state.confirm(now)
        left = self._state.last_confirmed_ms + _T - self._clock.now_ms()
        if left <= 0:
            return False, None
        if self._on_reconfirm is None:
            return True, None
        with trio.move_on_after(left / 1000):
            try:
                await self._on_reconfirm(unconfirmed)
            except Exception as exc:
                return False, exc
            return True, None
        return False, None

    async def lapse_after_deadline(self) -> LeaseLost:
        """The body's work limit passed before the loop lapsed (``hold_lease``): the same
        lapse (log, ``on_lapse`` once), answered instead of raised."""
        ended = self._state.ended
        if isinstance(ended, LeaseLost):  # the loop ended too, cancelled before it could tell
            return ended
        unconfirmed = self._clock.now_ms() - self._state.last_confirmed_ms
        if self._state.lapsed:  # the loop's own lapse was interrupted: never a second on_lapse
            return LeaseLost(self._run_id, reason="lapsed", unconfirmed_ms=unconfirmed)
        try:
            await self._lapse(unconfirmed, None)
        except LeaseLost as exc:
            return exc

    async def _lapse(self, unconfirmed: int, cause: BaseException | None) -> NoReturn:
        """End the loop as lapsed: mark it (so no second expiry reconfirms), tell ``on_lapse``
        (its failure is logged, never raised over the lapse) and raise :class:`LeaseLost`."""
        run_id = self._run_id
        log.warning(
            "run lease lapsed; interrupting owned work",
            extra={"run_id": run_id, "unconfirmed_ms": unconfirmed},
        )
        self._state.lapsed = True
        if self._on_lapse is not None:
            try:
                await self._on_lapse(unconfirmed)
            except Exception:
                log.error(
                    "run lease lapse callback failed", extra={"run_id": run_id}, exc_info=True
                )
        raise LeaseLost(run_id, reason="lapsed", unconfirmed_ms=unconfirmed) from cause


async def heartbeat_loop(
    run_store: RunStore,
    run_id: str,
    owner: OwnerId,
    *,
    clock: WallClock | None = None,
    on_reconfirm: Callback | None = None,
    on_lapse: Callback | None = None,
) -> NoReturn:
    """Hold ``owner``'s lease on ``run_id`` until it is lost; then raise :class:`LeaseLost`.

    Pulses every :data:`HEARTBEAT_INTERVAL_MS`; tolerates store errors for
    :data:`HEARTBEAT_WRITE_TOLERANCE_MS`, then makes one bounded ``reconfirm`` and lapses if it
    does not renew. A lost fence ends the loop at once. Pass the clock the store uses.
    """
    _validate("heartbeat_loop", run_id, owner)
    chosen = clock if clock is not None else SystemWallClock()
    state = _State(chosen.now_ms())
    await _Heartbeat(state, run_store, run_id, owner, chosen, on_reconfirm, on_lapse).run()


def _limit_work(state: _State, scope: trio.CancelScope, clock: WallClock, limit_ms: int) -> None:
    """Give ``scope`` its deadline at ``limit_ms`` after the last confirmed stamp, and move it on
    at every confirmation. The deadline is in Trio's clock (which a stopped process also sees
    jump): the wall reading only says how much of the limit is left now."""

    def place() -> None:
        left_ms = state.last_confirmed_ms + limit_ms - clock.now_ms()
        scope.deadline = trio.current_time() + left_ms / 1000

    place()
    state.on_confirm = place


@asynccontextmanager
async def hold_lease(
    run_store: RunStore,
    run_id: str,
    owner: OwnerId,
    *,
    clock: WallClock | None = None,
    on_reconfirm: Callback | None = None,
    on_lapse: Callback | None = None,
) -> AsyncIterator[Lease]:
    """Run :func:`heartbeat_loop` beside the body; cancel the body when ownership goes.

    Raises :class:`LeaseLost` (the body's own exception, if any, as ``__context__``) once the
    loop has ended; otherwise a body exception propagates as itself. Never an
    ``ExceptionGroup``.

    The body's cancel scope has a Trio deadline at :func:`work_limit_ms` after the last
    confirmed stamp (moved on by every renewal): past it the body is cancelled and
    ``LeaseLost(reason="lapsed")`` raised even if the loop never had the chance to notice (the
    process was stopped), so a woken owner never resumes owned work it may have lost.
    """
    _validate("hold_lease", run_id, owner)
    chosen = clock if clock is not None else SystemWallClock()
    state = _State(chosen.now_ms())
    lease = Lease(run_id, owner, state)
    loop_exc: BaseException | None = None
    body_exc: BaseException | None = None
    outer: BaseException | None = None
    body_scope = trio.CancelScope()
    _limit_work(state, body_scope, chosen, work_limit_ms(_stale_after_ms(run_store)))
    heartbeat = _Heartbeat(state, run_store, run_id, owner, chosen, on_reconfirm, on_lapse)

    async def supervisor() -> None:
        nonlocal loop_exc
        try:
            # Nothing of the loop acts before its first pulse (the deadline's first look is at
            # the same instant), so it starts only then: a run shorter than an interval, the
            # common case at a thousand runs a second, never builds its tasks at all.
            await trio.sleep(heartbeat.interval_s)
            await heartbeat.run(first_pulse_now=True)
        except Exception as exc:
            loop_exc = exc
            body_scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervisor)
            with body_scope:
                try:
                    yield lease
                except BaseException as exc:
                    body_exc = exc
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        cancelled = only_cancelled(group)
        if cancelled is None:  # pragma: no cover - the supervisor never lets an error out
            raise
        outer = cancelled
    except trio.Cancelled as exc:
        outer = exc
    if body_exc is not None and not isinstance(body_exc, Exception | trio.Cancelled):
        raise body_exc  # KeyboardInterrupt, SystemExit, ...: never hidden behind LeaseLost
    if loop_exc is None and outer is None and body_scope.cancel_called:
        loop_exc = await heartbeat.lapse_after_deadline()  # the work limit passed first
    if loop_exc is not None:
        if isinstance(body_exc, Exception):
            loop_exc.__context__ = body_exc
        raise loop_exc
    if body_exc is not None:
        raise body_exc
    if outer is not None:
        raise outer
