"""The embedded default runner: durable runs in ``tt_runs`` (``product.md`` §1).

:class:`LocalRunner` implements the scheduler's ``Runner`` protocol over a ``RunStore``:

* ``start`` creates one run row per idempotency key (``create`` answers the existing row for a
  key it has seen, in any process and after any restart), so the scheduler's at-least-once
  launch attempts all get the same run back;
* worker tasks, at most ``concurrency`` at a time, pick pending runs up with ``claim_and_own``,
  run the registered flow under ``hold_lease`` and finish with ``transition_owned``;
* a run whose owner died is taken over once its lease has expired (``lease_liveness`` plus
  ``same_host_pid_probe`` for owners on this host) and executed again: execution is
  **at-least-once**;
* ``cancel`` records a cancel request; the owning worker notices it within one heartbeat
  interval (at once when the run is owned by this runner), cancels the flow body and records
  ``cancelled``;
* leaving the runner (Ctrl-C, the end of ``async with``) stops running flows and hands their runs
  back as ``suspended`` under their own lease, so the next start picks them up immediately;
* every write on a run's path is treated as possibly committed when it fails: it is retried
  with backoff (``create`` by its idempotency key, the outcome under the run's lease), and
  whether it landed is read from the row, never concluded from the exception
  (docs/local-runner.md, "When a write fails").
"""

from __future__ import annotations

import functools
import heapq
import inspect as _inspect
import logging
import math
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, final, runtime_checkable

import msgspec
import trio

from ._clock import SystemWallClock, WallClock
from ._constants import RESERVATION_PREFIX
from ._errors import LeaseLost, RunStoreError, TriggerError
from ._groups import one_exception
from ._ownership import (
    ATTEMPT_OUTPUT_TAIL,
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_STALE_AFTER_MS,
    OUTPUT_TAIL_BYTES,
    Activated,
    AttemptRecord,
    Created,
    Existing,
    FenceLost,
    GuardFailed,
    LivenessCheck,
    LivenessContext,
    LivenessEvidence,
    NotFound,
    OwnerId,
    RunOutput,
    RunRow,
    RunStore,
    Transitioned,
    TransitionGuard,
    hold_lease,
    lease_liveness,
    probe_from_check,
    same_host_pid_probe,
)
from ._retry import Failure, RetryPolicy
from ._watch import Published, Watched, move_on_when

if TYPE_CHECKING:
    from ._scheduler import RunState, StartRequest

__all__ = [
    "FlowFn",
    "LocalRunner",
    "RunContext",
    "default_liveness",
    "open_local_runner",
]

#: How many finished run ids ``wait_ended`` remembers (a few minutes of a busy runner).
_FINISHED_LATELY: Final = 4096

logger = logging.getLogger("trio_triggers.local_runner")

FlowFn = Callable[[Any, "RunContext"], Awaitable[Any]]
"""A flow: ``async def flow(input, run) -> result`` (the result must be JSON-serialisable)."""

MAX_ERROR_CHARS = 65_536
"""The run store refuses longer error messages (``ownership.md`` §1.7); we truncate first."""

_ACTIVE_STATUSES = frozenset({"pending", "running", "suspended"})
_TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
_SHUTDOWN_GRACE_S = 5.0
_CANDIDATE_LIMIT = 200
#: A failed write is retried after 50 ms, doubling up to 5 s (docs/local-runner.md).
_RETRY_FIRST_S: Final = 0.05
_RETRY_CAP_S: Final = 5.0
#: ``start`` retries ``create`` this many times before answering that it cannot tell.
_CREATE_ATTEMPTS: Final = 4
#: Failures that may have committed (a lost connection, a failed COMMIT): worth a retry.
_TRANSIENT: Final = frozenset({"persistence_failed"})


@final
class RunContext:
    """What a flow receives beside its input: the run's identity, cancellation and progress.

    * ``run_id``, ``flow_id`` and ``idempotency_key`` identify the run;
    * ``state`` is the last progress value saved with :meth:`save_state` (``None`` when nothing
      was saved). A run that is executed again after its owner died starts with the state its
      previous attempt saved, which is how a flow skips work that is already done;
    * ``cancel_requested`` turns true as soon as the runner has seen a cancel request. The flow
      body is then cancelled at its next checkpoint; the flag is for cleanup code;
    * :meth:`record_output` hands the runner what the flow printed; it is written with the
      run's outcome (``RunRow.output_json``, shown by ``trio-triggers show``).
    """

    __slots__ = (
        "_cancel_seen",
        "_output",
        "_save",
        "flow_id",
        "idempotency_key",
        "run_id",
        "state",
    )

    _cancel_seen: trio.Event

    def __init__(
        self,
        *,
        run_id: str,
        flow_id: str,
        idempotency_key: str | None,
        state: Any,
        save: Callable[[str], Awaitable[None]],
        cancel_seen: trio.Event,
    ) -> None:
        self.run_id: str = run_id
        self.flow_id: str = flow_id
        self.idempotency_key: str | None = idempotency_key
        self.state: Any = state
        self._save = save
        self._cancel_seen = cancel_seen  # set by the runner's worker (the event is its own)
        self._output: RunOutput | None = None

    @property
    def cancel_requested(self) -> bool:
        """Whether a cancel request for this run has been observed."""
        return self._cancel_seen.is_set()

    async def save_state(self, state: Any) -> None:
        """Durably record ``state`` (a JSON value) as this run's progress.

        The write is fenced: it succeeds only while this worker still owns the run. If the lease
        is gone the flow is being cancelled anyway.
        """
        try:
            text = msgspec.json.encode(state).decode()
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"run state is not JSON-serialisable: {exc}") from None
        await self._save(text)
        self.state = msgspec.json.decode(text)

    def record_output(self, output: RunOutput) -> None:
        """Keep ``output`` (what the flow printed) to be written with the run's outcome.

        Nothing is written yet: the runner stores it in the same transaction as the result,
        the failure or the cancellation, so a run's output and its end never disagree. A later
        call replaces an earlier one. Text longer than :data:`OUTPUT_TAIL_BYTES` characters is
        cut to its tail (the stream sizes are kept), so a chatty flow cannot make its run's row
        unbounded.
        """
        if not isinstance(output, RunOutput):
            raise TypeError("record_output takes a RunOutput")
        stdout = output.stdout[-OUTPUT_TAIL_BYTES:]
        stderr = output.stderr[-OUTPUT_TAIL_BYTES:]
        self._output = RunOutput(
            stdout=stdout,
            stderr=stderr,
            stdout_bytes=max(output.stdout_bytes, len(output.stdout)),
            stderr_bytes=max(output.stderr_bytes, len(output.stderr)),
        )

    @property
    def output(self) -> RunOutput | None:
        """What :meth:`record_output` kept (``None`` until it is called)."""
        return self._output

    def __repr__(self) -> str:
        return f"RunContext(run_id={self.run_id!r}, flow_id={self.flow_id!r})"


@runtime_checkable
class ClaimableRuns(Protocol):
    """The read a runner needs to find work: runs that may be taken at ``now_ms``.

    ``MemoryRunStore`` and the SQLite and PostgreSQL run stores provide it (an addition to the
    ``RunStore`` contract for the local runner).
    """

    async def find_claimable(self, now_ms: int, *, limit: int | None = 100) -> list[RunRow]: ...

    async def create_owned(
        self,
        run_id: str,
        state_json: str,
        *,
        owner: OwnerId,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> Created | Existing: ...

    async def retry_owned(
        self,
        run_id: str,
        owner: OwnerId,
        *,
        retry_at_ms: int,
        attempt_json: str,
        state_json: str | None = None,
    ) -> Transitioned | FenceLost | NotFound | GuardFailed: ...


def default_liveness(stale_after: float = HEARTBEAT_STALE_AFTER_MS / 1000) -> LivenessCheck:
    """The takeover check of the local runner: alive while the lease is fresh, or while the
    owner's pid exists on this host.

    ``lease_liveness`` is the floor every host can provide (a stale lease alone is enough for
    an owner on another host, whose pid we cannot see); ``same_host_pid_probe`` adds the
    stronger answer for owners on this host: a live pid refuses the takeover even with a stale
    lease (a stalled but living process), a vanished pid confirms the death.
    """
    lease = lease_liveness(stale_after)

    async def check(expected_owner: OwnerId, context: LivenessContext) -> bool:
        if await lease(expected_owner, context):
            return True
        return await same_host_pid_probe(expected_owner, context)

    return check


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _clean_message(text)


def _clean_message(text: str) -> str:
    text = text.replace("\x00", "\\0")
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_ERROR_CHARS:
        text = "..." + text[-(MAX_ERROR_CHARS - 3) :]
    return text


def _duration_s(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TriggerError("invalid_options", f"{name} must be a valid duration", name)
    if not math.isfinite(value) or value <= 0:
        raise TriggerError("invalid_options", f"{name} must be a finite positive duration", name)
    return float(value)


class _Worker:
    """One run being executed: ``cancel_event`` pokes its cancel watcher (a request made in
    this process); ``cancel_seen`` is set once the request has been observed (what the flow's
    ``RunContext.cancel_requested`` reads)."""

    __slots__ = ("cancel_event", "cancel_seen", "context", "failure", "result")

    def __init__(self) -> None:
        self.cancel_event = trio.Event()
        self.cancel_seen = trio.Event()
        self.context: RunContext | None = None
        self.result: Finish | None = None  # the body's outcome, as soon as it has one
        self.failure: Failure | None = None  # what a failed body said about its failure


class _FlowEntry:
    """A registered flow: its callable, its retry policy and the timeout of one attempt."""

    __slots__ = ("fn", "retry", "timeout")

    def __init__(self, fn: FlowFn, retry: RetryPolicy | None, timeout: float | None) -> None:
        self.fn = fn
        self.retry = retry
        self.timeout = timeout


class _RetryPlan:
    """A failed attempt that will be retried: what ``retry_owned`` writes for it."""

    __slots__ = ("attempt", "attempt_json", "retry_at_ms")

    def __init__(self, attempt: int, retry_at_ms: int, attempt_json: str) -> None:
        self.attempt = attempt
        self.retry_at_ms = retry_at_ms
        self.attempt_json = attempt_json


Finish = tuple[Literal["completed", "failed", "cancelled"], str | None, str | None]


@final
class LocalRunner:
    """A durable runner over a ``RunStore``; see the module docs and ``docs/process-death.md``.

    Construct it, register flows, then serve it in a nursery (``await nursery.start(
    runner.serve)``) or use :func:`open_local_runner`. ``start``/``inspect``/``cancel`` work
    without ``serve`` (they only read and write rows), but nothing executes until it serves.

    Options:

    * ``clock``: the wall clock the run store uses (the lease readings must come from it);
    * ``owner``: this engine's fence identity (default ``OwnerId.for_this_process()``);
    * ``concurrency``: how many flows run at once (default 4);
    * ``poll_interval``: seconds between looks for claimable runs when nothing wakes the
      dispatcher (a ``start`` in this process wakes it at once). Default 1 s;
    * ``cancel_poll_interval``: how often an owning worker re-reads its row for a cancel request
      made by another process. Default one heartbeat interval (1 s);
    * ``liveness``: the check consulted before taking over a run whose lease expired (default
      :func:`default_liveness`).
    """

    def __init__(
        self,
        run_store: RunStore,
        flows: Mapping[str, FlowFn] | None = None,
        *,
        clock: WallClock | None = None,
        owner: OwnerId | None = None,
        concurrency: int = 4,
        poll_interval: float = 1.0,
        cancel_poll_interval: float = HEARTBEAT_INTERVAL_MS / 1000,
        liveness: LivenessCheck | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise TriggerError(
                "invalid_options", "concurrency must be a positive integer", "concurrency"
            )
        self._store = run_store
        self._clock: WallClock = clock if clock is not None else SystemWallClock()
        self._owner = owner if owner is not None else OwnerId.for_this_process()
        self._concurrency = concurrency
        self._poll_interval = _duration_s("poll_interval", poll_interval)
        self._cancel_poll_interval = _duration_s("cancel_poll_interval", cancel_poll_interval)
        if liveness is None:
            stale_ms = getattr(run_store, "stale_after_ms", HEARTBEAT_STALE_AFTER_MS)
            liveness = default_liveness(stale_ms / 1000)
        self._liveness = liveness
        self._flows: dict[str, _FlowEntry] = {}
        # Failed attempts whose retry is being written (see _finish_once), and the instants
        # of the next attempts this runner scheduled (the dispatcher wakes at the earliest).
        self._retry_plans: dict[str, _RetryPlan] = {}
        self._retry_wakes: list[int] = []
        self._workers: dict[str, _Worker] = {}
        self._running_count: Published[int] = Published(0)  # len(self._workers), to wait on
        # wait_ended: the waiters per run id, and the runs that finished here lately (so a
        # waiter that arrives just after the end returns at once instead of at its deadline).
        self._end_waiters: dict[str, trio.Event] = {}
        # Runs that ended here lately, with the terminal state this runner wrote (``None``:
        # the row said it had ended, but not through our write).
        self._finished_lately: OrderedDict[str, RunState | None] = OrderedDict()
        self._written: dict[str, RunState | Literal["retry"]] = {}
        # Outcomes a flow reached that are not yet durable (their write kept failing): kept so
        # that whoever writes next (the worker's retries, the hand-back, the dispatcher's repair
        # of a run left running under this owner) writes the outcome, not a re-execution.
        self._unsettled: dict[str, tuple[Finish, str | None]] = {}
        # Runs whose claim may have committed while its answer was lost, and no read since
        # could tell: handed back (if ours) when the runner stops.
        self._unconfirmed: set[str] = set()
        self._wake = trio.Event()
        self._serving = False
        # While serving: the nursery the workers run in, and how many starts are creating a
        # run owned by this runner right now (they count against ``concurrency``).
        self._nursery: trio.Nursery | None = None
        self._owning = 0
        for flow_id, fn in (flows or {}).items():
            self.register(flow_id, fn)

    # --- configuration -------------------------------------------------------------------

    @property
    def owner(self) -> OwnerId:
        """The fence identity this runner's workers own runs under."""
        return self._owner

    @property
    def flows(self) -> Sequence[str]:
        """The registered flow ids, sorted."""
        return sorted(self._flows)

    @property
    def running(self) -> Sequence[str]:
        """Run ids this runner is executing right now."""
        return sorted(self._workers)

    @property
    def running_count(self) -> Watched[int]:
        """How many runs this runner is executing right now, as a value to wait on:
        ``await runner.running_count.wait_value(0)`` (no run in flight) or
        ``wait_value(lambda n: n >= 2)``, instead of polling :attr:`running`."""
        return self._running_count.view

    def register(
        self,
        flow_id: str,
        fn: FlowFn,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> None:
        """Register ``fn`` (``async def fn(input, run)``) under ``flow_id``.

        ``retry`` retries a failed attempt (:class:`RetryPolicy`; ``None``: a failure ends the
        run); ``timeout`` bounds one attempt in seconds: the flow is cancelled when it passes
        (a command flow's whole process group is ended) and the attempt fails with
        ``flow <id> timed out after <t> s`` (docs/failures.md).

        Registering again replaces the callable and its options (new attempts use them). Only
        runs of registered flows are claimed by this runner; other runs in the store are left to
        whoever registers them.
        """
        if not isinstance(flow_id, str) or not flow_id or "\x00" in flow_id:
            raise TriggerError("invalid_options", "flow_id must be a non-empty string", "flow_id")
        if not callable(fn):
            raise TriggerError("invalid_options", f"flow {flow_id} is not callable", "flow")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TriggerError("invalid_options", "retry must be a RetryPolicy", "retry")
        seconds = None if timeout is None else _duration_s("timeout", timeout)
        self._flows[flow_id] = _FlowEntry(fn, retry, seconds)
        self._wake.set()

    def _new_run_id(self) -> str:
        """A fresh run id (replaced in deterministic simulations, whose ids must repeat)."""
        return f"run-{uuid.uuid4().hex}"

    # --- the Runner protocol ---------------------------------------------------------------

    async def start(self, request: StartRequest) -> str:
        """Create (or find) the run for ``request.idempotency_key``; answer its run id."""
        if request.flow_id not in self._flows:
            await trio.lowlevel.checkpoint()
            raise TriggerError("runner", f"LocalRunner has no flow registered as {request.flow_id}")
        try:
            input_json = msgspec.json.encode(request.input).decode()
        except (TypeError, ValueError, OverflowError) as exc:
            raise TriggerError(
                "runner", f"input of {request.idempotency_key} is not JSON-serialisable"
            ) from exc
        # One run id for every attempt: a retry after a create that committed but whose answer
        # was lost finds the row by its key (``Existing``), so the answer is the run that exists.
        run_id = self._new_run_id()
        # With room to execute it, the run is created already running here (one write, and
        # its worker starts now); otherwise ``pending``, for the dispatcher to claim.
        own = self._nursery is not None and self._has_room()
        if own:
            self._owning += 1
        try:
            return await self._create(request, run_id, input_json, own=own)
        finally:
            if own:
                self._owning -= 1

    def _has_room(self) -> bool:
        return len(self._workers) + self._owning < self._concurrency

    async def _create(
        self, request: StartRequest, run_id: str, input_json: str, *, own: bool
    ) -> str:
        create = (
            functools.partial(self._local_store().create_owned, owner=self._owner)
            if own
            else self._store.create
        )
        delay = _RETRY_FIRST_S
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                outcome = await create(
                    run_id,
                    "null",
                    flow_id=request.flow_id,
                    input_json=input_json,
                    idempotency_key=request.idempotency_key,
                )
            except trio.Cancelled:
                if own:
                    self._adopt_later(run_id)  # the create may have committed: look
                raise
            except RunStoreError as exc:
                if exc.code not in _TRANSIENT:
                    raise TriggerError(
                        "runner",
                        f"LocalRunner could not create the run for {request.idempotency_key}",
                    ) from exc
                if attempt == _CREATE_ATTEMPTS - 1:
                    if own:
                        self._adopt_later(run_id)
                    # The run may exist: say so with the code a caller re-arms on (as for a
                    # start that timed out), never the one it records ``failed`` for.
                    raise TriggerError(
                        "runner_timeout",
                        f"LocalRunner could not tell whether the run for "
                        f"{request.idempotency_key} was created (the run store failed)",
                    ) from exc
                logger.warning(
                    "local runner could not create a run; retrying",
                    extra={"idempotency_key": request.idempotency_key, "error": str(exc)},
                )
                await trio.sleep(delay)
                delay = min(delay * 2, _RETRY_CAP_S)
            else:
                row = outcome.row
                if own and row.run_id == run_id:
                    # Ours: created now, or by an earlier try whose answer was lost.
                    self._begin_owned(row)
                else:
                    self._wake.set()
                return row.run_id
        raise AssertionError("unreachable")  # pragma: no cover

    def _begin_owned(self, row: RunRow) -> None:
        """Start a worker for ``row``, which this runner owns (a create or a claim of ours
        committed), unless a worker of ours already executes it."""
        nursery = self._nursery
        if nursery is None or row.run_id in self._workers:
            return
        self._unconfirmed.discard(row.run_id)
        worker = _Worker()
        self._workers[row.run_id] = worker
        self._running_count.set(len(self._workers))
        nursery.start_soon(self._work, row, worker, name=f"run {row.run_id}")

    def _adopt_later(self, run_id: str) -> None:
        """A create of an owned run whose answer was lost: read the row, and execute the run
        if it was created under this owner (otherwise nothing exists, or it is not ours)."""
        nursery = self._nursery
        if nursery is not None:
            self._unconfirmed.add(run_id)
            nursery.start_soon(self._adopt, run_id, name=f"adopt {run_id}")

    async def _adopt(self, run_id: str) -> None:
        delay = _RETRY_FIRST_S
        for _ in range(_CREATE_ATTEMPTS):
            try:
                row = await self._store.get(run_id)
            except RunStoreError as exc:
                if exc.code == "not_found_row":
                    self._unconfirmed.discard(run_id)
                    return
                await trio.sleep(delay)
                delay = min(delay * 2, _RETRY_CAP_S)
                continue
            if (
                row.status == "running"
                and row.owner == self._owner
                and row.run_id not in self._unsettled
            ):
                self._begin_owned(row)
            else:
                self._unconfirmed.discard(run_id)
            return
        # Still unknown: handed back when this runner stops, or repaired once stale.

    async def inspect(self, run_id: str) -> RunState:
        """``pending``/``running``/``suspended`` are ``active``; unknown ids are ``missing``."""
        if not isinstance(run_id, str) or run_id.startswith(RESERVATION_PREFIX) or not run_id:
            await trio.lowlevel.checkpoint()
            return "missing"
        try:
            row = await self._store.get(run_id)
        except RunStoreError as exc:
            if exc.code in ("not_found_row", "invalid_run"):
                return "missing"
            raise TriggerError("runner", f"LocalRunner could not inspect run {run_id}") from exc
        if row.status in _ACTIVE_STATUSES:
            return "active"
        return row.status  # type: ignore[return-value]  # completed | failed | cancelled

    async def cancel(self, run_id: str) -> None:
        """Record a cancel request; the owner stops the flow and records ``cancelled``.

        Idempotent: cancelling a finished or unknown run does nothing.
        """
        if not isinstance(run_id, str) or not run_id or run_id.startswith(RESERVATION_PREFIX):
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._store.request_cancel(run_id, self._clock.now_ms())
        except RunStoreError as exc:
            if exc.code == "invalid_run":
                return
            raise TriggerError("runner", f"LocalRunner could not cancel run {run_id}") from exc
        worker = self._workers.get(run_id)
        if worker is not None:
            worker.cancel_event.set()
        self._wake.set()

    # --- serving ---------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the dispatcher and the workers until cancelled.

        Cancellation stops every running flow; each run is handed back as ``suspended`` (under
        its lease, bounded by a short shielded grace period) so the next runner claims it at
        once. A run whose lease was lost is left to its new owner.
        """
        if self._serving:
            raise RuntimeError("this LocalRunner is already serving")
        self._serving = True
        try:
            with one_exception():
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    await self._dispatch(nursery)
        finally:
            self._nursery = None
            self._serving = False
            for run_id in sorted(self._unconfirmed - set(self._workers)):
                await self._hand_back(run_id)
            self._unconfirmed.clear()

    async def _dispatch(self, nursery: trio.Nursery) -> None:
        failed = 0  # rounds failed in a row: one warning when a spell starts, one when it ends
        began = 0.0
        while True:
            self._wake = trio.Event()
            try:
                await self._claim_round(nursery)
            except (RunStoreError, TriggerError) as exc:
                if failed == 0:
                    began = trio.current_time()
                    logger.warning(
                        "local runner could not look for runs; retrying every poll",
                        extra={"error": str(exc)},
                    )
                else:
                    logger.debug(
                        "local runner still cannot look for runs", extra={"error": str(exc)}
                    )
                failed += 1
            else:
                if failed:
                    logger.warning(
                        "local runner can look for runs again",
                        extra={
                            "failed_rounds": failed,
                            "outage_s": round(trio.current_time() - began, 1),
                        },
                    )
                failed = 0
            with trio.move_on_after(self._next_look_s()):
                await self._wake.wait()

    def _next_look_s(self) -> float:
        """Seconds until the dispatcher looks again: its poll interval, or less when a retry
        this runner scheduled is due sooner."""
        wakes = self._retry_wakes
        if not wakes:
            return self._poll_interval
        now = self._clock.now_ms()
        if wakes[0] <= now:
            while wakes and wakes[0] <= now:
                heapq.heappop(wakes)
            return 0.0
        return min(self._poll_interval, (wakes[0] - now) / 1000)

    def _local_store(self) -> ClaimableRuns:
        store = self._store
        if not isinstance(store, ClaimableRuns):
            raise TypeError(
                f"LocalRunner needs a run store that can list claimable runs and retry them "
                f"(find_claimable, retry_owned); {type(store).__name__} cannot"
            )
        return store

    async def _candidates(self, now_ms: int) -> list[RunRow]:
        return await self._local_store().find_claimable(now_ms, limit=_CANDIDATE_LIMIT)

    async def _claim_round(self, nursery: trio.Nursery) -> None:
        now = self._clock.now_ms()
        # The runs to claim this round, claimed together below: their claims share the run
        # store's transactions (group commit) instead of taking one each, in turn.
        planned: list[tuple[RunRow, int, LivenessEvidence | None]] = []
        for row in await self._candidates(now):
            if row.flow_id not in self._flows or row.run_id in self._workers:
                continue
            if row.claim is not None and row.claimed_at_ms is not None:
                # a two-phase claimant died between claim and activate: clear its claim
                now = self._clock.now_ms()
                probe = probe_from_check(self._liveness, row.claimed_at_ms)
                evidence = await probe(row.claim, self._owner, now)
                if evidence is not None:
                    await self._store.recover_claim(
                        row.run_id, row.claim, row.claimed_at_ms, self._owner, now, evidence
                    )
                    self._wake.set()
                continue
            cancel_only = row.cancel_requested_at_ms is not None
            if (
                not cancel_only
                and len(self._workers) + self._owning + len(planned) >= self._concurrency
            ):
                continue
            if row.status == "running" and row.owner == self._owner:
                # Ours, stale, and no worker of ours executes it (one whose last writes failed
                # gave up): settle it now, as nobody else may while this owner is alive.
                await self._repair_orphan(row.run_id)
                continue
            now = self._clock.now_ms()
            evidence = None
            if row.status == "running":
                if row.owner is None:
                    continue
                probe = probe_from_check(self._liveness, row.heartbeat_at_ms)
                evidence = await probe(row.owner, self._owner, now)
                if evidence is None:
                    continue  # the owner is (or may be) alive: leave it alone
            planned.append((row, now, evidence))
        if not planned:
            return
        taken: list[RunRow | None] = [None] * len(planned)

        async def claim(index: int, row: RunRow, now: int, evidence: Any) -> None:
            taken[index] = await self._claim_and_own(row, now, evidence)

        if len(planned) == 1:
            await claim(0, *planned[0])
        else:
            async with trio.open_nursery() as claims:
                for index, (row, now, evidence) in enumerate(planned):
                    claims.start_soon(claim, index, row, now, evidence)
        for (candidate, _, _), got in zip(planned, taken, strict=True):
            if got is None:
                continue
            if candidate.status == "running":  # the candidate, not ``got``: a claim of ours
                # whose answer was lost comes back ``running`` under this owner: no takeover
                logger.warning(
                    "local runner took over a run whose owner died",
                    extra={"run_id": candidate.run_id, "previous_owner": str(candidate.owner)},
                )
            self._begin_owned(got)

    async def _claim_and_own(
        self, row: RunRow, now: int, evidence: LivenessEvidence | None
    ) -> RunRow | None:
        """Take ``row``; answer the row to execute, or ``None`` when it is not ours.

        Shielded: once sent, the claim may commit whatever happens to this task (a cancelled
        call into a worker thread still finishes), so its answer is always awaited and a run
        taken during a stop gets a worker, which hands it back at once. A failure is not an
        answer either: the row says whether the claim landed.
        """
        with trio.CancelScope(shield=True):
            try:
                outcome = await self._store.claim_and_own(
                    row.run_id, row, self._owner, now, evidence
                )
            except RunStoreError as exc:
                if exc.code not in _TRANSIENT:
                    raise
                delay = _RETRY_FIRST_S
                for _ in range(_CREATE_ATTEMPTS):
                    try:
                        current = await self._store.get(row.run_id)
                    except RunStoreError:
                        await trio.sleep(delay)
                        delay = min(delay * 2, _RETRY_CAP_S)
                        continue
                    if current.status == "running" and current.owner == self._owner:
                        return current
                    return None
                # Unknown: maybe ours. Handed back when this runner stops (or settled by the
                # dispatcher's repair once its lease is stale) so it never waits out a lease.
                self._unconfirmed.add(row.run_id)
                return None
        return row if isinstance(outcome, Activated) else None

    async def _repair_orphan(self, run_id: str) -> None:
        """Settle a run left ``running`` under this owner with no worker: write the outcome
        its flow reached if one is kept, otherwise hand it back as ``suspended``."""
        kept = self._unsettled.get(run_id)
        self._unconfirmed.discard(run_id)
        try:
            if kept is not None:
                done = await self._finish_once(run_id, *kept)
                if done:
                    self._unsettled.pop(run_id, None)
                    self._ended_or_retried(run_id)
                    self._retry_plans.pop(run_id, None)
                    logger.warning(
                        "local runner recorded a run's outcome late", extra={"run_id": run_id}
                    )
                return
            outcome = await self._store.transition_owned(run_id, self._owner, "suspended")
        except RunStoreError as exc:
            logger.warning(
                "local runner could not settle a run it had left running",
                extra={"run_id": run_id, "error": str(exc)},
            )
            return
        if isinstance(outcome, Transitioned):
            logger.warning(
                "local runner handed back a run it had left running", extra={"run_id": run_id}
            )
            self._wake.set()

    # --- one run ---------------------------------------------------------------------------

    async def _work(self, row: RunRow, worker: _Worker) -> None:
        run_id = row.run_id
        owner = self._owner
        store = self._store
        finished = False

        async def save(text: str) -> None:
            outcome = await store.transition_owned(run_id, owner, "running", state_json=text)
            if not isinstance(outcome, Transitioned):
                if isinstance(outcome, NotFound):
                    raise LeaseLost(run_id, "not_found")
                raise LeaseLost(run_id, "fence_lost")

        # A new execution: whatever an earlier one of this run kept unwritten here was written
        # or lost with the lease since (the row was not running under us when we claimed it).
        self._unsettled.pop(run_id, None)
        self._retry_plans.pop(run_id, None)
        began_at_ms = self._clock.now_ms()
        try:
            # A worker started while the runner stops (its claim committed during the stop)
            # hands the run back before its flow starts.
            await trio.lowlevel.checkpoint()
            with one_exception():
                async with hold_lease(store, run_id, owner, clock=self._clock):
                    entry = self._flows[row.flow_id or ""]
                    context = RunContext(
                        run_id=run_id,
                        flow_id=row.flow_id or "",
                        idempotency_key=row.idempotency_key,
                        state=msgspec.json.decode(row.state_json),
                        save=save,
                        cancel_seen=worker.cancel_seen,
                    )
                    worker.context = context
                    if row.cancel_requested_at_ms is not None:
                        result: Finish = ("cancelled", None, "cancel requested before the run")
                        await store.acknowledge_cancel(run_id, owner, self._clock.now_ms())
                    else:
                        input_value = (
                            msgspec.json.decode(row.input_json) if row.input_json else None
                        )
                        result = await self._run_body(entry, input_value, context, worker)
                    # The body's last await: the outcome, with what the flow printed.
                    output = context.output
                    output_json = None if output is None else msgspec.json.encode(output).decode()
                    self._plan_retry(row, entry, result, worker, began_at_ms, output)
                    self._unsettled[run_id] = (result, output_json)
                    finished = await self._finish(run_id, result, output_json)
        except LeaseLost as exc:
            if exc.reason != "lapsed":
                self._unsettled.pop(run_id, None)  # another owner has it: not ours to write
            if not finished:
                logger.warning(
                    "local runner lost the lease of a run; its flow was stopped",
                    extra={"run_id": run_id, "reason": exc.reason},
                )
        except (RunStoreError, TriggerError) as exc:
            logger.error(
                "local runner could not record a run's outcome",
                extra={"run_id": run_id, "error": str(exc)},
            )
        finally:
            await self._work_ended(row, worker, finished, began_at_ms)

    async def _work_ended(
        self, row: RunRow, worker: _Worker, finished: bool, began_at_ms: int
    ) -> None:
        """A worker's last step: hand back what it could not finish, signal what ended."""
        run_id = row.run_id
        if not finished and run_id not in self._unsettled and worker.result is not None:
            # The flow ended as the runner was being stopped: write its outcome rather
            # than executing it again (or its retry, when the policy retries it).
            output = worker.context.output if worker.context is not None else None
            text = None if output is None else msgspec.json.encode(output).decode()
            entry = self._flows.get(row.flow_id or "")
            if entry is not None and run_id not in self._retry_plans:
                self._plan_retry(row, entry, worker.result, worker, began_at_ms, output)
            self._unsettled[run_id] = (worker.result, text)
        if not finished:
            finished = await self._hand_back(run_id)
        if finished:
            self._unsettled.pop(run_id, None)
            self._ended_or_retried(run_id)
        if run_id not in self._unsettled:  # else kept for the repair that writes it later
            self._retry_plans.pop(run_id, None)
        self._written.pop(run_id, None)
        self._workers.pop(run_id, None)
        self._running_count.set(len(self._workers))
        self._wake.set()

    def _plan_retry(
        self,
        row: RunRow,
        entry: _FlowEntry,
        result: Finish,
        worker: _Worker,
        began_at_ms: int,
        output: RunOutput | None,
    ) -> None:
        """Decide whether a failed attempt is retried; if so keep what ``retry_owned`` writes.

        Retried when the flow has a policy, the attempt is not its last and the failure is one
        the policy retries (a cancelled run never is)."""
        policy = entry.retry
        status, _, error = result
        if policy is None or status != "failed" or worker.failure is None:
            return
        attempt = row.attempt
        if attempt >= policy.max_attempts or not policy.retries(worker.failure):
            return
        now = self._clock.now_ms()
        retry_at = now + policy.delay_ms(attempt, row.run_id)
        kept = None
        if output is not None:
            kept = RunOutput(
                stdout=output.stdout[-ATTEMPT_OUTPUT_TAIL:],
                stderr=output.stderr[-ATTEMPT_OUTPUT_TAIL:],
                stdout_bytes=output.stdout_bytes,
                stderr_bytes=output.stderr_bytes,
            )
        record = AttemptRecord(
            attempt=attempt,
            started_at_ms=began_at_ms,
            ended_at_ms=now,
            error=error or "failed",
            retry_at_ms=retry_at,
            output=kept,
        )
        self._retry_plans[row.run_id] = _RetryPlan(
            attempt, retry_at, msgspec.json.encode(record).decode()
        )

    def _ended_or_retried(self, run_id: str) -> None:
        """A run's outcome landed: its end, or (a retry was written) a wait for the next
        attempt, which the dispatcher wakes for."""
        if self._written.get(run_id) == "retry":
            plan = self._retry_plans.get(run_id)
            if plan is not None:
                heapq.heappush(self._retry_wakes, plan.retry_at_ms)
                logger.info(
                    "local runner will retry a failed run",
                    extra={"run_id": run_id, "attempt": plan.attempt, "at_ms": plan.retry_at_ms},
                )
            self._written.pop(run_id, None)
            return
        self._ended(run_id)

    def _ended(self, run_id: str) -> None:
        written = self._written.pop(run_id, None)
        self._finished_lately[run_id] = None if written == "retry" else written
        while len(self._finished_lately) > _FINISHED_LATELY:
            self._finished_lately.popitem(last=False)
        waiters = self._end_waiters.pop(run_id, None)
        if waiters is not None:
            waiters.set()

    async def wait_ended(self, run_id: str) -> RunState | None:
        """Return once ``run_id`` has finished in this runner (:class:`RunEndSignal`).

        This is how a scheduler in the same process settles a run within milliseconds of its
        end instead of at its next inspection. A run this runner never executes keeps the
        caller waiting (the scheduler bounds the wait with its ``run_poll_interval``); a run
        handed back unfinished (shutdown, a lost lease) is not an end. Answers the terminal
        state this runner wrote for it (its transition committed), or ``None`` when the run's
        row said it had ended otherwise.
        """
        if run_id in self._finished_lately:
            await trio.lowlevel.checkpoint()
            return self._finished_lately[run_id]
        event = self._end_waiters.get(run_id)
        if event is None:
            event = self._end_waiters[run_id] = trio.Event()
        try:
            await event.wait()
            return self._finished_lately.get(run_id)
        finally:
            # The last waiter gone: forget the event (a later waiter makes a new one).
            if (
                not event.is_set()
                and self._end_waiters.get(run_id) is event
                and not event.statistics().tasks_waiting
            ):
                del self._end_waiters[run_id]

    async def _hand_back(self, run_id: str) -> bool:
        """Leave an unfinished run for the next runner; answer whether it ended instead.

        An outcome the flow reached but could not write yet is written now; otherwise the run
        goes back as ``suspended`` so the next runner claims it at once. Both are retried within
        a short shielded grace, and a failure is settled by reading the row. What cannot be
        written in the grace stays ``running`` under this owner, whose dispatcher repairs it
        once its lease is stale (``_repair_orphan``), or a later process takes it over.
        """
        kept = self._unsettled.get(run_id)

        async def hand_back() -> bool:
            if kept is not None:
                return await self._finish_once(run_id, *kept)
            outcome = await self._store.transition_owned(run_id, self._owner, "suspended")
            if isinstance(outcome, Transitioned):
                logger.info("local runner suspended a stopped run", extra={"run_id": run_id})
            return False

        with trio.CancelScope(shield=True), trio.move_on_after(_SHUTDOWN_GRACE_S):
            try:
                written, ended = await self._write_until_settled(
                    "local runner could not hand back a stopped run; retrying", run_id, hand_back
                )
            except RunStoreError:
                pass  # not transient: left to the repair below
            else:
                # Settled by reading the row: the outcome counts as ours only if we had one.
                return ended if written else ended and kept is not None
        logger.warning("local runner could not suspend a stopped run", extra={"run_id": run_id})
        return False

    async def _settled(self, run_id: str) -> bool | None:
        """After a failed write: ``True`` if the run has ended, ``False`` if it is no longer
        this owner's to write, ``None`` when it is still ours (or the read failed too)."""
        try:
            row = await self._store.get(run_id)
        except RunStoreError:
            return None
        if row.status in _TERMINAL_STATUSES:
            return True
        plan = self._retry_plans.get(run_id)
        if plan is not None and row.status == "suspended" and row.attempt > plan.attempt:
            self._written[run_id] = "retry"  # the retry landed: the attempt is recorded
            return True
        if row.status != "running" or row.owner != self._owner:
            return False
        return None

    async def _run_body(
        self, entry: _FlowEntry, input_value: Any, context: RunContext, worker: _Worker
    ) -> Finish:
        result: Finish | None = None
        flow = entry.fn
        limit = math.inf if entry.timeout is None else entry.timeout
        # The body runs until it ends, a cancel request is seen or its timeout passes,
        # whichever comes first.
        with one_exception():
            async with move_on_when(self._watch_cancel, context, worker):
                try:
                    with trio.move_on_after(limit) as attempt_scope:
                        value = flow(input_value, context)
                        if _inspect.isawaitable(value):
                            value = await value
                        result = ("completed", msgspec.json.encode(value).decode(), None)
                    if attempt_scope.cancelled_caught:
                        result = (
                            "failed",
                            None,
                            f"flow {context.flow_id} timed out after {entry.timeout:g} s",
                        )
                        worker.failure = Failure(timed_out=True)
                except (TypeError, ValueError, OverflowError) as exc:
                    if result is None:
                        result = ("failed", None, _describe(exc))
                        worker.failure = Failure.of(exc)
                except Exception as exc:
                    result = ("failed", None, _describe(exc))
                    worker.failure = Failure.of(exc)
                worker.result = result
        if context.cancel_requested:
            return ("cancelled", None, "cancel requested")
        if result is None:  # pragma: no cover - the body scope is only cancelled by a request
            return ("cancelled", None, "cancel requested")
        return result

    async def _watch_cancel(self, context: RunContext, worker: _Worker) -> None:
        """Return once a cancel request for the run has been seen (and acknowledged)."""
        run_id = context.run_id
        while True:
            with trio.move_on_after(self._cancel_poll_interval):
                await worker.cancel_event.wait()
            try:
                row = await self._store.get(run_id)
            except RunStoreError:
                continue
            if row.cancel_requested_at_ms is not None:
                worker.cancel_seen.set()
                with suppress(RunStoreError):
                    await self._store.acknowledge_cancel(run_id, self._owner, self._clock.now_ms())
                return

    async def _finish(self, run_id: str, result: Finish, output_json: str | None) -> bool:
        """Write the outcome, retried with backoff until it lands (under the run's lease, which
        the heartbeat keeps while the store recovers); a failure is settled by reading the row:
        a write whose answer was lost may have committed."""
        _, ended = await self._write_until_settled(
            "local runner could not record a run's outcome; retrying",
            run_id,
            lambda: self._finish_once(run_id, result, output_json),
        )
        return ended

    async def _write_until_settled(
        self, failing: str, run_id: str, write: Callable[[], Awaitable[bool]]
    ) -> tuple[bool, bool]:
        """``write()`` retried with backoff (50 ms doubling to 5 s) while the store fails
        transiently, until it answers or the row shows the write is no longer needed.

        Answers ``(True, write's answer)``, or ``(False, True/False)`` when the row settled it
        (:meth:`_settled`: the run ended / is no longer this owner's). The first failure is a
        warning (``failing``), the retries after it debug lines: an outage of the store is one
        line per run, not one per attempt. A failure that is not transient propagates.
        """
        delay = _RETRY_FIRST_S
        level = logging.WARNING
        while True:
            try:
                return True, await write()
            except RunStoreError as exc:
                if exc.code not in _TRANSIENT:
                    raise
                logger.log(level, failing, extra={"run_id": run_id, "error": str(exc)})
                level = logging.DEBUG
            await trio.sleep(delay)
            delay = min(delay * 2, _RETRY_CAP_S)
            settled = await self._settled(run_id)
            if settled is not None:
                return False, settled

    async def _finish_once(self, run_id: str, result: Finish, output_json: str | None) -> bool:
        status, result_json, error = result
        plan = self._retry_plans.get(run_id) if status == "failed" else None
        if plan is not None:
            retried = await self._local_store().retry_owned(
                run_id, self._owner, retry_at_ms=plan.retry_at_ms, attempt_json=plan.attempt_json
            )
            if isinstance(retried, Transitioned):
                self._written[run_id] = "retry"
                return True
            if not isinstance(retried, GuardFailed):
                return False
            # A cancel request arrived: a requested cancellation wins over the retry.
            return await self._cancel_instead(
                run_id, "cancel requested before the run's next attempt", output_json
            )
        guard = TransitionGuard(cancel_requested="present" if status == "cancelled" else "absent")
        outcome = await self._store.transition_owned(
            run_id,
            self._owner,
            status,
            result_json=result_json,
            error=error,
            guard=guard,
            output_json=output_json,
        )
        if isinstance(outcome, Transitioned):
            self._written[run_id] = status
            return True
        if isinstance(outcome, GuardFailed):
            # A cancel request arrived after the flow ended: a requested cancellation wins.
            return await self._cancel_instead(
                run_id, "cancel requested before the run's outcome was recorded", output_json
            )
        return False

    async def _cancel_instead(self, run_id: str, why: str, output_json: str | None) -> bool:
        """Record ``cancelled`` for a run whose outcome (or retry) write was refused by its
        guard because a cancel request arrived: a requested cancellation wins."""
        outcome = await self._store.transition_owned(
            run_id,
            self._owner,
            "cancelled",
            error=why,
            guard=TransitionGuard(cancel_requested="present"),
            output_json=output_json,
        )
        if isinstance(outcome, Transitioned):
            self._written[run_id] = "cancelled"
            return True
        return False


@asynccontextmanager
async def open_local_runner(
    run_store: RunStore,
    flows: Mapping[str, FlowFn] | None = None,
    **options: Any,
) -> AsyncIterator[LocalRunner]:
    """``async with open_local_runner(store, flows, clock=...) as runner:`` serves the runner
    in a nursery for the duration of the block (options as for :class:`LocalRunner`).

    Leaving the block stops the workers; unfinished runs are handed back as ``suspended``.
    """
    runner = LocalRunner(run_store, flows, **options)
    with one_exception():
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            try:
                yield runner
            finally:
                nursery.cancel_scope.cancel()
