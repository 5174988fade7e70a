"""``open_triggers``: the whole durable stack for a Trio application in one call.

A durable "call my function every 2 seconds" needs a trigger store, a run store, a runner that
executes flows, and a scheduler that claims boundaries and launches runs. Each is a separate
piece on purpose (a test swaps any of them; a second process may run only the runner), but an
application wants them wired the one way that is right for one process:

* both stores on **one database** (a SQLite file by default, or a ``postgresql://`` DSN), so a
  run and the ledger row that launched it are backed up, restored and failed over together;
* the embedded :class:`~trio_triggers.LocalRunner` executing the flows registered with
  :meth:`Triggers.flow`, and the scheduler launching through it;
* one :meth:`Triggers.serve` for ``await nursery.start(app.serve)``: when it returns from
  ``start`` both are serving; cancelling it stops both cleanly (runs in flight are handed back
  as ``suspended`` and the next process resumes them; nothing is recorded as failed).

Everything stays Trio-structured: no thread of our own, no global loop, no background task
outside the caller's nursery.
"""

from __future__ import annotations

import datetime
import inspect
import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, TypeVar, final, overload

import msgspec
import trio

from ._clock import SystemWallClock, WallClock
from ._databases import open_stores
from ._declarations import CatchUp, Overlap, RegisteredTrigger, Trigger
from ._errors import RunStoreError, TriggerError
from ._groups import one_exception
from ._identities import BOUNDARY_STAMP_LENGTH, idempotency_key
from ._json import JsonValue
from ._local_runner import FlowFn, LocalRunner
from ._operations import (
    backfill_trigger,
    cancel_backfill,
    operator_name,
    pause_trigger,
    resume_trigger,
)
from ._ownership import AttemptRecord, OwnerId, RunOutput, RunRow, RunStatus, RunStore
from ._ownership._base import RunStoreBase
from ._ownership._models import AlreadyRequested, CancelRequested, NotFound, Terminal
from ._scheduler import Fired, Scheduler, SchedulerOptions, open_scheduler
from ._scheduler._options import validate_options, validate_poll_interval
from ._store import HistoryPage, HistoryQuery, Outcome, Resumed, ResumePoint, TriggerStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Collection

    from ._retry import RetryPolicy

__all__ = ["DEFAULT_DATABASE", "RunReport", "Triggers", "open_triggers"]

#: The SQLite file ``open_triggers()`` uses when no database is named (relative to the cwd).
DEFAULT_DATABASE: Final = "trio-triggers.sqlite"

F = TypeVar("F", bound=FlowFn)

_ISO_LENGTH: Final = BOUNDARY_STAMP_LENGTH
#: How many runs ``Triggers.list_runs`` and ``trio-triggers runs`` list unless told otherwise.
DEFAULT_RUNS_LIMIT: Final = 50


class RunReport(msgspec.Struct, frozen=True, kw_only=True):
    """One run as an application reads it: what ran, for which boundary, and how it ended.

    ``error`` is the flow's own error text (``"ValueError: bad input"``, or a command's exit
    status and output tail), which the fire ledger does not carry: the ledger says *that* a
    run failed, the run says *why*. Instants are epoch milliseconds (UTC).
    """

    run_id: str
    status: RunStatus
    flow_id: str | None
    trigger_id: str | None
    """The trigger whose boundary launched the run (``None`` for a run started another way)."""
    occurrence: int | None
    """The cron boundary the run is for, epoch ms (``None`` as for ``trigger_id``)."""
    created_at: int
    started_at: int | None
    finished_at: int | None
    owner: OwnerId | None
    """The process executing it right now (``None`` unless ``status == "running"``)."""
    attempts: int
    """How many times an owner began executing it: 1 for a run that ran once, 2 after a peer
    took over from an owner that died, and so on (0 while it has never started)."""
    input: JsonValue
    result: JsonValue
    """The flow's return value once ``completed`` (``None`` before, or for another status)."""
    error: str | None
    cancel_requested_at: int | None
    idempotency_key: str | None
    output: RunOutput | None = None
    """What the flow printed (the tail of each stream, for a command flow), recorded with the
    run's outcome; ``None`` while the run has not ended or when its flow recorded nothing."""
    attempt: int = 1
    """The number of its current (or last) attempt under its flow's retry policy."""
    attempt_log: tuple[AttemptRecord, ...] = ()
    """The attempts that failed and were retried, each with its error and output tail."""
    retry_at: int | None = None
    """While it waits between two attempts: when the next one may begin (epoch ms)."""

    @classmethod
    def of(cls, row: RunRow) -> RunReport:
        """The report of one run-store row."""
        trigger_id, occurrence = _boundary_of(row.idempotency_key)
        return cls(
            run_id=row.run_id,
            status=row.status,
            flow_id=row.flow_id,
            trigger_id=trigger_id,
            occurrence=occurrence,
            created_at=row.created_at_ms,
            started_at=row.started_at_ms,
            finished_at=row.finished_at_ms,
            owner=row.owner,
            attempts=row.attempts,
            input=_decoded(row.input_json),
            result=_decoded(row.result_json),
            error=row.error,
            cancel_requested_at=row.cancel_requested_at_ms,
            idempotency_key=row.idempotency_key,
            output=_output_of(row.output_json),
            attempt=row.attempt,
            attempt_log=tuple(row.attempt_log),
            retry_at=row.retry_at_ms,
        )


def _output_of(text: str | None) -> RunOutput | None:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=RunOutput)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # written by something newer or other than this library: not ours to read


def _decoded(text: str | None) -> JsonValue:
    if text is None:
        return None
    try:
        value: JsonValue = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text
    return value


def _boundary_of(key: str | None) -> tuple[str | None, int | None]:
    """``(trigger_id, occurrence)`` of a scheduled run's key ``"<trigger_id>:<iso>"``.

    The key is parsed back only when it round-trips exactly through :func:`idempotency_key`,
    so a key made another way (a caller's own) is never misread as a boundary.
    """
    if key is None or len(key) <= _ISO_LENGTH + 1 or key[-_ISO_LENGTH - 1] != ":":
        return None, None
    trigger_id, stamp = key[: -_ISO_LENGTH - 1], key[-_ISO_LENGTH:]
    try:
        parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None, None
    delta = parsed.replace(tzinfo=datetime.UTC) - _EPOCH
    occurrence = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if idempotency_key(trigger_id, occurrence) != key:
        return None, None
    return trigger_id, occurrence


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@final
class Triggers:
    """The durable stack of one database, opened by :func:`open_triggers`.

    Register flows with :meth:`flow`, triggers with :meth:`schedule`, then serve with
    ``await nursery.start(app.serve)``. The pieces stay reachable for everything else:
    :attr:`store` (the trigger store), :attr:`runs` (the run store), :attr:`runner` (the
    :class:`~trio_triggers.LocalRunner`) and :attr:`scheduler`.
    """

    def __init__(
        self,
        store: TriggerStore,
        runs: RunStore,
        runner: LocalRunner,
        scheduler: Scheduler,
        clock: WallClock | None = None,
    ) -> None:
        self._store = store
        self._clock: WallClock = clock if clock is not None else SystemWallClock()
        self._runs = runs
        self._runner = runner
        self._scheduler = scheduler
        self._flow_names: dict[int, str] = {}

    @property
    def store(self) -> TriggerStore:
        """The trigger store: declarations, claims, the fire ledger."""
        return self._store

    @property
    def runs(self) -> RunStore:
        """The run store: one row per run, its lease, its result or error."""
        return self._runs

    @property
    def runner(self) -> LocalRunner:
        """The embedded runner executing this application's flows."""
        return self._runner

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler launching through :attr:`runner`."""
        return self._scheduler

    # --- flows -------------------------------------------------------------------------

    @overload
    def flow(self, name: F, /) -> F: ...

    @overload
    def flow(
        self,
        name: str | None = None,
        /,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Callable[[F], F]: ...

    def flow(
        self,
        name: str | F | None = None,
        /,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> F | Callable[[F], F]:
        """Register ``async def fn(input, run)`` as a flow; its name defaults to ``fn.__name__``.

        Use it as ``@app.flow``, ``@app.flow()`` or ``@app.flow("name")``, or call it as
        ``app.flow("name")(fn)``. The function is returned unchanged, and may be passed to
        :meth:`schedule` in place of its name. ``retry`` and ``timeout`` are the flow's
        :class:`~trio_triggers.RetryPolicy` and the seconds one attempt may take
        (``@app.flow(retry=RetryPolicy(max_attempts=3), timeout=30)``; docs/failures.md).
        """
        if callable(name):
            return self._register_flow(None, name, None, None)

        def decorate(fn: F) -> F:
            return self._register_flow(name, fn, retry, timeout)

        return decorate

    def _register_flow(
        self, name: str | None, fn: F, retry: RetryPolicy | None, timeout: float | None
    ) -> F:
        if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
            raise TriggerError(
                "invalid_options",
                f"flow {name or fn!r} must be an async function (input, run)",
                "flow",
            )
        flow_id = name if name is not None else getattr(fn, "__name__", None)
        if not isinstance(flow_id, str):
            raise TriggerError("invalid_options", "give the flow a name: flow(name)", "flow")
        self._runner.register(flow_id, fn, retry=retry, timeout=timeout)
        self._flow_names[_key(fn)] = flow_id
        return fn

    # --- triggers ----------------------------------------------------------------------

    async def schedule(
        self,
        trigger_id: str,
        flow: str | FlowFn,
        *,
        cron: str,
        timezone: str | None = None,
        input: JsonValue = None,
        overlap: Overlap = "skip",
        catch_up: CatchUp = "none",
        max_catch_up: int = 0,
        enabled: bool = True,
        jitter: float | datetime.timedelta = 0,
        start_at: datetime.datetime | str | int | None = None,
        end_at: datetime.datetime | str | int | None = None,
        pause_after_failures: int | None = None,
    ) -> RegisteredTrigger:
        """Register (or update) a trigger of ``flow`` (a flow name or a registered function).

        The declaration is validated before anything is written (``TriggerError`` with the
        offending field's ``path``); registering the same declaration again changes nothing;
        a serving scheduler sees a new or changed trigger at once.
        """
        if isinstance(flow, str):
            flow_id = flow
        else:
            registered = self._flow_names.get(_key(flow))
            if registered is None:
                raise TriggerError(
                    "invalid_trigger",
                    f"{flow!r} is not a registered flow: decorate it with @app.flow first",
                    "flow_id",
                )
            flow_id = registered
        trigger = Trigger.make(
            {
                "id": trigger_id,
                "flow_id": flow_id,
                "input": input,
                "cron": cron,
                "timezone": timezone,
                "overlap": overlap,
                "catch_up": catch_up,
                "max_catch_up": max_catch_up,
                "enabled": enabled,
                "jitter": jitter,
                "start_at": start_at,
                "end_at": end_at,
                "pause_after_failures": pause_after_failures,
            }
        )
        return await self._store.register(trigger)

    # --- operator state (docs/operations.md) -------------------------------------------

    async def pause(
        self, trigger_id: str, *, note: str | None = None, by: str | None = None
    ) -> RegisteredTrigger:
        """Pause ``trigger_id``: nothing new starts until :meth:`resume`; runs it holds settle.

        The pause is operator state, not part of the declaration: :meth:`schedule` (or a config
        file applied again) leaves it in place. ``by`` defaults to ``user@host``. Pausing a
        paused trigger keeps its pause time (a new ``note`` replaces the old one).
        """
        return await pause_trigger(self._store, trigger_id, note=note, by=by)

    async def resume(self, trigger_id: str, *, point: ResumePoint) -> Resumed:
        """End ``trigger_id``'s pause from a stated ``point``.

        ``"now"``: what fell due while paused is skipped (counted in ``Resumed.skipped``, never
        fired) and the next boundary after now fires; ``"policy"``: it is owed under the
        trigger's catch-up policy, exactly as after downtime.
        """
        return await resume_trigger(self._store, trigger_id, point=point)

    # --- run now (docs/operations.md) ---------------------------------------------------

    async def fire(
        self,
        trigger_id: str,
        *,
        input: JsonValue | msgspec.UnsetType = msgspec.UNSET,
        key: str | None = None,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> Fired:
        """Fire ``trigger_id`` now, by hand, outside its schedule (a manual fire).

        It goes through the same claim as a scheduled boundary (the trigger's overlap policy,
        or ``overlap`` for this fire only) and, when it fires, the same launch: the run gets
        ``input`` (default: the trigger's input). It is recorded in the history as manual
        (``FireRecord.manual_key``) and never moves the schedule's cursor. Give a ``key`` to
        make a retried request safe: the same key answers the first fire and runs nothing
        (a key names one fire in the whole store: another trigger's key is ``key_conflict``).
        ``by`` defaults to ``user@host``. A disabled or paused trigger is refused
        (``trigger_disabled``, ``trigger_paused``); nothing is written then.
        """
        return await self._scheduler.fire(
            trigger_id, key=key, input=input, overlap=overlap, by=by or operator_name()
        )

    async def backfill(
        self,
        trigger_id: str,
        *,
        start: int,
        end: int,
        max_boundaries: int | None = None,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> RegisteredTrigger:
        """Fire ``trigger_id``'s own boundaries in ``[start, end]`` (epoch ms), in order.

        Starts a durable backfill (:class:`~trio_triggers.Backfill`, on the answer's
        ``backfill``) that the schedulers carry out one boundary at a time, each launched with
        its scheduled idempotency key; a boundary already in the ledger is passed over. Its
        boundaries are claimed under ``overlap`` (default: the trigger's policy; ``buffer-one``
        runs them one after another). At most ``max_boundaries`` (default 1 000, at most
        100 000). ``end`` may not be in the future nor past the schedule's own progress. It
        waits while the trigger is paused or disabled. Refusals are typed errors
        (``TriggerError``) with nothing written (docs/operations.md, "Backfill").
        """
        return await backfill_trigger(
            self._store,
            trigger_id,
            start=start,
            end=end,
            max_boundaries=max_boundaries,
            overlap=overlap,
            by=by,
        )

    async def cancel_backfill(self, trigger_id: str) -> RegisteredTrigger:
        """Stop ``trigger_id``'s running backfill (what it fired stays fired)."""
        return await cancel_backfill(self._store, trigger_id)

    # --- serving -----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the runner and the scheduler until cancelled (``await nursery.start(app.serve)``).

        ``start`` returns once both serve. Cancelling stops both: the scheduler detaches from
        its runs without recording anything, and each flow in flight is cancelled and handed
        back as ``suspended`` under its lease, for the next process to resume.
        """
        with one_exception():
            async with trio.open_nursery() as nursery:
                await nursery.start(self._runner.serve)
                await nursery.start(self._scheduler.serve)
                task_status.started()

    # --- readers -----------------------------------------------------------------------

    async def history(
        self,
        *,
        trigger_id: str | None = None,
        run_id: str | None = None,
        outcome: Outcome | None = None,
        limit: int | None = None,
    ) -> HistoryPage:
        """The fire ledger, newest first (the trigger store's :class:`HistoryPage`)."""
        return await self._store.history(
            HistoryQuery(trigger_id=trigger_id, run_id=run_id, outcome=outcome, limit=limit)
        )

    async def run(self, run_id: str) -> RunReport | None:
        """A run's state, timings, owner, result and the flow's own error; ``None`` if unknown."""
        try:
            row = await self._runs.get(run_id)
        except RunStoreError as exc:
            if exc.code == "not_found_row":
                return None
            raise
        return RunReport.of(row)

    async def cancel(self, run_id: str) -> RunReport:
        """Ask for ``run_id`` to be cancelled; the report of the run as the request found it.

        The request is durable (it is a column of the run's row), so it reaches the run's
        owner wherever it runs: this application's runner stops the flow at once, another
        process's within one heartbeat interval (1 s), and records ``cancelled``; the
        scheduler then settles the boundary in the ledger as ``failed`` with the error
        ``Run <run_id> was cancelled``. A run no worker has started yet (``pending``, or
        ``suspended`` by a shutdown) is recorded ``cancelled`` by the first runner that picks
        it up, without running its flow.

        The returned report says which case it was: an active status (``pending``,
        ``running``, ``suspended``) with ``cancel_requested_at`` set means the request is
        recorded (a repeated cancel keeps the first request's instant); an ended status
        (``completed``, ``failed``, ``cancelled``) means the run had already ended and nothing
        was written. An unknown id raises ``RunStoreError`` with code ``not_found_row``
        (``invalid_run`` for a string that cannot be a run id), writing nothing.
        """
        return await cancel_run(self._runs, run_id, self._clock, self._runner)

    async def list_runs(
        self,
        *,
        trigger_id: str | None = None,
        statuses: Collection[RunStatus] | None = None,
        limit: int | None = DEFAULT_RUNS_LIMIT,
    ) -> list[RunReport]:
        """Runs newest first: all of them, or those launched for ``trigger_id``'s boundaries,
        optionally only some statuses; at most ``limit`` (``None``: no bound)."""
        store = self._runs
        if not isinstance(store, RunStoreBase):  # every store open_triggers opens is one
            raise TypeError(f"{type(store).__name__} cannot list runs")
        rows = await store.list_runs(
            statuses=statuses, limit=limit, newest_first=True, trigger_id=trigger_id
        )
        return [RunReport.of(row) for row in rows]


def _key(fn: object) -> int:
    return id(fn)


async def cancel_run(
    runs: RunStore, run_id: str, clock: WallClock, runner: LocalRunner | None = None
) -> RunReport:
    """Record a cancel request for ``run_id`` in ``runs``; the report of the run as it stood.

    What :meth:`Triggers.cancel` and ``trio-triggers cancel`` share. ``runner`` (this process's
    :class:`~trio_triggers.LocalRunner`, when there is one) is told as well, so a run it owns
    stops at once instead of at its worker's next read of the row.

    * unknown id: ``RunStoreError`` ``not_found_row`` (a malformed one: ``invalid_run``), and
      nothing is written;
    * a run that has ended (``completed``/``failed``/``cancelled``): its report as it is, and
      nothing is written (cancelling is idempotent, as ``Runner.cancel`` must be);
    * otherwise (``pending``/``running``/``suspended``): the request is recorded (the first
      request's instant is kept) and the report is the run as the request found it, with
      ``cancel_requested_at`` set: its status is still active, the owner records
      ``cancelled`` within one heartbeat interval, and a run no worker has started yet is
      recorded ``cancelled`` without running by the first runner that picks it up.
    """
    before = await runs.get(run_id)  # unknown: not_found_row; malformed: invalid_run
    outcome = await runs.request_cancel(run_id, clock.now_ms())
    if isinstance(outcome, NotFound):  # deleted between the two calls
        raise RunStoreError("not_found_row", "cancel", f"no run {run_id!r}")
    if isinstance(outcome, Terminal):
        ended = before if before.status in _ENDED else await runs.get(run_id)
        return RunReport.of(ended)
    assert isinstance(outcome, CancelRequested | AlreadyRequested)
    if runner is not None:
        await runner.cancel(run_id)  # pokes its worker; the request itself is already written
    return RunReport.of(
        msgspec.structs.replace(before, cancel_requested_at_ms=outcome.requested_at_ms)
    )


_ENDED: Final = frozenset(("completed", "failed", "cancelled"))


@asynccontextmanager
async def open_triggers(
    database: str | os.PathLike[str] = DEFAULT_DATABASE,
    *,
    clock: WallClock | None = None,
    options: SchedulerOptions | None = None,
    concurrency: int = 4,
    owner: OwnerId | None = None,
) -> AsyncIterator[Triggers]:
    """Open both stores of ``database``, a LocalRunner and a scheduler; yield a :class:`Triggers`.

    ``database`` is a SQLite file path (created if missing; ``":memory:"`` for a throwaway
    one) or a ``postgresql://`` DSN (needs the ``[postgres]`` extra). ``clock`` is the wall
    clock of every store and of the scheduler (default the system clock; pass a
    :class:`~trio_triggers.TrioWallClock` to run the application under ``MockClock``).
    ``options`` are the scheduler's (default ``SchedulerOptions()``: the LocalRunner tells the
    scheduler when a run ends, so a finished run settles at once whatever
    ``run_poll_interval`` is); ``concurrency`` bounds the flows running at once; ``owner`` is
    the runner's fence identity (default: this process).

    Options are validated before the database is opened, so a bad one raises ``TriggerError``
    (code ``invalid_options``, ``path`` the option) and writes nothing. Leaving the block closes
    everything; serve inside it with ``await nursery.start(app.serve)``.
    """
    opts = options if options is not None else SchedulerOptions()
    validate_options(opts)
    validate_poll_interval(opts)  # the scheduler checks it when it serves; we check it now
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TriggerError(
            "invalid_options", "concurrency must be a positive integer", "concurrency"
        )
    db = os.fspath(database)
    if not isinstance(db, str) or not db:
        raise TriggerError("invalid_options", "database must be a file path or a DSN", "database")
    wall: WallClock = clock if clock is not None else SystemWallClock()
    with one_exception():
        async with open_stores(db, clock=wall) as (store, runs):
            runner = LocalRunner(runs, clock=wall, owner=owner, concurrency=concurrency)
            async with open_scheduler(store, runner, options=opts, clock=wall) as scheduler:
                app = Triggers(store, runs, runner, scheduler, wall)
                yield app
