"""The store front: every public method of a trigger store, over a backend's ``_run``.

:class:`EngineStore` checks and snapshots the arguments, picks the method body (:mod:`._bodies`,
:mod:`._index`) and runs it as one transaction of the backend; single-trigger writes of a
backend that batches share transactions (:mod:`._group_commit`). How to write a backend, and
what it must implement, is :mod:`._backend`.
"""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from .. import _instrument as instrument
from .._constants import is_safe_integer
from .._cron import Cron
from .._declarations import overlap_override
from .._errors import TriggerError
from .._json import JsonValueError, copy_json, encode_json
from .._wake import notify_registered
from ._bodies import (
    body_active_occurrence,
    body_active_run,
    body_backfill_step,
    body_cancel_backfill,
    body_claim_fire,
    body_claim_manual,
    body_claim_pending,
    body_clear_active,
    body_get,
    body_history,
    body_inspect,
    body_last_heartbeat,
    body_list,
    body_list_enabled,
    body_pause,
    body_record_result,
    body_register,
    body_register_many,
    body_remove,
    body_restore_pending,
    body_resume,
    body_set_pending,
    body_start_backfill,
)
from ._codec import EncodedTrigger, check_text, encode_trigger, storable
from ._decision import CountMissed, check_history_limit, check_manual_key, check_prune_cutoff
from ._group_commit import trigger_group
from ._index import attending, body_due, body_holding, body_next_attention
from ._models import (
    MISSED_REASONS,
    Claim,
    Dropped,
    Held,
    HistoryPage,
    HistoryQuery,
    Listed,
    ManualFire,
    PendingClaim,
    Result,
    Resumed,
    ResumePoint,
    SchedulerHeartbeat,
)
from ._protocol import CLOCK_METHODS, Method

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from .._batching import GroupCommit
    from .._clock import WallClock
    from .._declarations import Overlap, RegisteredTrigger, Trigger
    from ._attention import DueRow
    from ._backend import Body, Hint, StoreTx

__all__ = ["EngineStore", "report_missed"]

T = TypeVar("T")


def report_missed(trigger_id: str, missed: CountMissed | None) -> None:
    """Add a committed transaction's :class:`CountMissed` to the ``trio_triggers.missed``
    counter, one sample per reason it counts (docs/operations.md)."""
    if missed is None:
        return
    for reason in MISSED_REASONS:
        count: int = getattr(missed, reason)
        if count:
            instrument.add_counter(
                instrument.MISSED, count, {"reason": reason, "trigger_id": trigger_id}
            )


class EngineStore:
    """The public methods of every store; a backend supplies :meth:`_run`.

    ``_run(method, body, now=...)`` runs ``body(tx, now)`` as one transaction of ``method``:
    read-only methods may use a read transaction. ``now`` says whether the body needs the
    store's clock (read once, when the transaction starts); otherwise the body gets ``0``.
    Failures of the backend become ``failure_for(method)`` with the driver error as cause;
    ``TriggerError``\\ s pass through unchanged.
    """

    _clock: WallClock
    #: Whether the backend implements :meth:`_run_batch` (group commit of hot writes).
    _batching: bool = False

    @property
    def shares_transactions(self) -> bool:
        """Whether concurrent single-trigger writes share transactions here (group commit):
        then a scheduler keeps its ledger records out of a claim pass's transactions."""
        return self._batching

    _group: GroupCommit | None = None

    async def _run(
        self, method: Method, body: Callable[[StoreTx, int], T], *, now: bool = False
    ) -> T:
        raise NotImplementedError

    async def _run_alone(self, method: Method, body: Body) -> Any:
        """``_run(method, body, now=...)`` for a call of a group transaction of one.

        The group has already yielded (its cancellation point), so a backend may skip the
        checkpoint its ``_run`` takes first.
        """
        return await self._run(method, body, now=method in CLOCK_METHODS)

    async def _run_batch(
        self, bodies: Sequence[Body], *, hints: Sequence[Hint] = (), now: bool = True
    ) -> builtins.list[Any]:
        """Run ``bodies`` in order in ONE write transaction (``now`` read once, at its start,
        when ``now`` is set: some body of the batch needs the store's clock).

        ``hints[i]`` names the ``(trigger_id, occurrence)`` body ``i`` reads first, when known:
        a server backend reads (and locks) them all in one round trip before the bodies run.

        If a body raises, roll back and raise :class:`BatchItemFailed` from it; a failure of
        the transaction itself (begin, commit) raises the store's write error.
        """
        raise NotImplementedError

    async def _write(
        self,
        method: Method,
        key: str,
        body: Callable[[StoreTx, int], T],
        occurrence: object = None,
    ) -> T:
        """Run a single-trigger write, sharing a transaction with concurrent ones if batching."""
        body = attending(body)
        if not self._batching:
            return await self._run(method, body, now=method in CLOCK_METHODS)
        group = self._group
        if group is None:
            group = self._group = trigger_group(self)
        safe = isinstance(key, str) and storable(key)
        hint: Hint = (key, occurrence) if safe and is_safe_integer(occurrence) else None
        value: T = await group.call(method, key if safe else "", body, hint)
        return value

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        encoded = encode_trigger(trigger)  # the snapshot, before the first checkpoint
        registered = await self._run(
            "register", attending(lambda tx, now: body_register(tx, encoded, now)), now=True
        )
        notify_registered(self)  # wake this process's schedulers of this store (serve's sleep)
        return registered

    async def register_many(self, triggers: Iterable[Trigger]) -> builtins.list[RegisteredTrigger]:
        """Register every declaration in ONE transaction, in order.

        Each is validated and snapshotted first (a bad one refuses the whole call, which then
        writes nothing). A declaration equal to the stored one is left alone: no revision bump,
        so a scheduler's claims are not fenced by re-applying an unchanged config. The others
        are registered as :meth:`register` would. Answers the registered rows, in order.
        """
        encoded: list[tuple[EncodedTrigger, Cron]] = []
        with _collector_paused():
            for trigger in triggers:
                one = encode_trigger(trigger)
                # (The declaration's own check has just parsed this expression: a cache hit.)
                encoded.append((one, Cron.parse(one.cron, one.timezone)))
        seen: set[str] = set()
        for one, _ in encoded:
            if one.trigger_id in seen:
                raise TriggerError(
                    "invalid_trigger",
                    f"trigger {one.trigger_id} is declared twice in one registration",
                    path="id",
                )
            seen.add(one.trigger_id)
        registered = await self._run(
            "register_many",
            attending(lambda tx, now: body_register_many(tx, encoded, now)),
            now=True,
        )
        notify_registered(self)
        return registered

    # --- operator state (docs/operations.md) -------------------------------------------

    async def pause(
        self, trigger_id: str, *, note: str | None = None, by: str | None = None
    ) -> RegisteredTrigger:
        """Pause ``trigger_id``: no new work until :meth:`resume` (held runs still settle).

        Operator state beside the declaration: re-registering the trigger (a config file
        applied again) leaves the pause in place. Pausing a paused trigger keeps its pause time;
        a ``note`` given then replaces the note (and ``by``). The revision grows, so a claim a
        scheduler decided before the pause is fenced. Unknown id: ``unknown_trigger``.
        """
        for name, value in (("note", note), ("by", by)):
            if value is not None and not isinstance(value, str):
                raise TriggerError("invalid_options", f"{name} must be text", path=name)
        return await self._run(
            "pause", attending(lambda tx, now: body_pause(tx, trigger_id, note, by, now)), now=True
        )

    async def remove(self, trigger_id: str) -> RegisteredTrigger:
        """Retire ``trigger_id``: disabled, marked removed (``removed_at``), history kept.

        The store has no delete; a registration that enables the trigger again (``enable``, or
        a config file that still declares it) brings it back and clears the mark.
        """
        removed = await self._run(
            "remove", attending(lambda tx, now: body_remove(tx, trigger_id, now)), now=True
        )
        notify_registered(self)
        return removed

    async def resume(self, trigger_id: str, *, point: ResumePoint) -> Resumed:
        """End ``trigger_id``'s pause, picking up from ``point`` (see :class:`Resumed`).

        ``"now"``: every occurrence up to the store's now is skipped (counted, never fired);
        ``"policy"``: they are owed under the trigger's catch-up policy, as after downtime.
        Resuming a trigger that is not paused changes nothing (``was_paused`` false).
        """
        resumed = await self._run(
            "resume", attending(lambda tx, now: body_resume(tx, trigger_id, point, now)), now=True
        )
        report_missed(trigger_id, CountMissed(paused=resumed.skipped))
        notify_registered(self)  # its attention may have come: wake this process's schedulers
        return resumed

    # --- manual fires ("run now", docs/operations.md) ------------------------------------

    async def claim_manual(
        self,
        trigger_id: str,
        *,
        key: str | None = None,
        input: object = msgspec.UNSET,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> ManualFire:
        """Fire ``trigger_id`` now, by hand: one transaction writes a manual ledger row and
        claims it exactly as a scheduled boundary is claimed (see :class:`ManualFire`).

        The row's occurrence is the store's now made off-grid (never a whole second, so never
        a boundary's row; moved back, never forward) and it never moves the cursor. ``key``
        makes the fire idempotent: a key used before for this trigger answers that fire
        (``repeated``) and writes nothing; a key of another trigger's fire raises
        ``key_conflict``; without one a key is made up.
        ``input`` (any JSON value) is what the run gets, the trigger's own input when not
        given. ``overlap`` applies to this claim only, in place of the trigger's policy.
        Refusals (nothing written): ``unknown_trigger``, ``trigger_disabled``,
        ``trigger_paused``, ``invalid_options`` (``key``, ``input``, ``overlap``, ``by``).
        The caller launches a ``fire``/``supersede`` claim as the scheduler does.
        """
        chosen_key = check_manual_key(key)
        overlap = overlap_override(overlap)
        if by is not None and (not isinstance(by, str) or not storable(by)):
            raise TriggerError("invalid_options", "by must be storable text", path="by")
        input_json: str | None = None
        if input is not msgspec.UNSET:
            try:
                input_json = encode_json(copy_json(input))
            except JsonValueError as exc:
                raise TriggerError(
                    "invalid_options", f"input is not a JSON value: {exc.detail}", path="input"
                ) from exc
        fired, missed = await self._run(
            "claim_manual",
            attending(
                lambda tx, now: body_claim_manual(
                    tx, trigger_id, chosen_key, input_json, by, overlap, now
                )
            ),
            now=True,
        )
        report_missed(trigger_id, missed)  # a buffered fire may push a boundary out of the slot
        return fired

    # --- backfill (docs/operations.md, "Backfill") ----------------------------------------

    async def start_backfill(
        self,
        trigger_id: str,
        *,
        start: int,
        end: int,
        max_boundaries: int | None = None,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> RegisteredTrigger:
        """Start a backfill of ``trigger_id``'s boundaries in ``[start, end]`` (epoch ms).

        The schedulers carry it out, one boundary per step (:meth:`backfill_step`). Refused
        with ``invalid_options`` (``path`` names the argument) and nothing written: ``end``
        before ``start`` or after the store's now or past the schedule's own progress, no
        boundary in the interval, more than ``max_boundaries`` (default 1 000, at most
        100 000), a backfill already running. Unknown id: ``unknown_trigger``.
        """
        arguments = (start, end, max_boundaries, overlap)
        started = await self._run(
            "start_backfill",
            attending(lambda tx, now: body_start_backfill(tx, trigger_id, arguments, by, now)),
            now=True,
        )
        notify_registered(self)  # its attention has come: wake this process's schedulers
        return started

    async def cancel_backfill(self, trigger_id: str) -> RegisteredTrigger:
        """Stop ``trigger_id``'s running backfill (what it fired stays fired); without a
        running one, change nothing. Unknown id: ``unknown_trigger``."""
        return await self._run(
            "cancel_backfill",
            attending(lambda tx, _: body_cancel_backfill(tx, trigger_id)),
        )

    async def backfill_step(
        self, trigger_id: str, occurrence: int, *, expected_revision: int
    ) -> Claim:
        """Take ``occurrence``, the running backfill's next boundary: the ordinary claim
        (under the backfill's overlap policy) and the progress moved on, in one transaction.

        Not claimed when the boundary is already in the ledger (the progress moves on) or
        when the step may not run (another step took it first, paused, a buffered occurrence
        waits: nothing written). Fenced like ``claim_fire`` (``revision_mismatch``,
        ``trigger_disabled``).
        """
        claim, missed = await self._run(
            "backfill_step",
            attending(
                lambda tx, now: body_backfill_step(
                    tx, trigger_id, occurrence, expected_revision, now
                )
            ),
            now=True,
        )
        report_missed(trigger_id, missed)  # a step is a claim: it may count what it gives up
        return claim

    # --- the attention index (docs/store.md, "The attention index") ---------------------

    async def due(self, now: int, *, limit: int = 1024, hold_ms: int = 0) -> builtins.list[DueRow]:
        """The rows whose attention instant is at or before ``now``, earliest first.

        At most ``limit`` rows. With ``hold_ms`` the rows answered are *taken*: their instant
        moves to ``now + hold_ms`` in the same transaction, so a concurrent scheduler's ``due``
        does not answer them again; the taker's next write to a row re-computes its instant,
        and a row the taker writes nothing to comes back after ``hold_ms``. On PostgreSQL the
        read skips rows another transaction has locked (``FOR UPDATE SKIP LOCKED``), so
        concurrent schedulers take disjoint rows.
        """
        if not is_safe_integer(now):
            raise TriggerError(
                "invalid_options", f"now must be a safe integer, received {now!r}", path="now"
            )
        for name, value in (("limit", limit), ("hold_ms", hold_ms)):
            if not is_safe_integer(value) or value < (1 if name == "limit" else 0):
                raise TriggerError(
                    "invalid_options",
                    f"{name} must be a {'positive' if name == 'limit' else 'non-negative'} "
                    f"safe integer, received {value!r}",
                    path=name,
                )
        return await self._run("due", lambda tx, _: body_due(tx, now, limit, hold_ms))

    async def next_attention(self) -> int | None:
        """The earliest attention instant of any row (``None`` when no row needs any)."""
        return await self._run("next_attention", lambda tx, _: body_next_attention(tx))

    async def holding(self) -> builtins.list[DueRow]:
        """Every row with a holder (a reservation or a run), by id: the recovery sweep's read."""
        return await self._run("holding", lambda tx, _: body_holding(tx))

    async def get(self, trigger_id: str) -> RegisteredTrigger | None:
        return await self._run("get", lambda tx, _: body_get(tx, trigger_id))

    async def list(self) -> builtins.list[Listed]:
        return await self._run("list", lambda tx, _: body_list(tx))

    async def list_enabled(self) -> builtins.list[RegisteredTrigger]:
        return await self._run("list_enabled", lambda tx, _: body_list_enabled(tx))

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Dropped | None = None,
    ) -> Claim:
        """Claim ``occurrence`` (§9.6). ``dropped``: what the caller's catch-up gave up just
        before it, counted with this claim only if it is granted (see :class:`Dropped`)."""
        claim, missed = await self._write(
            "claim_fire",
            trigger_id,
            lambda tx, now: body_claim_fire(
                tx, trigger_id, occurrence, expected_revision, resume_buffered, now, dropped
            ),
            occurrence,
        )
        report_missed(trigger_id, missed)
        return claim

    async def claim_pending(
        self, trigger_id: str, *, expected_revision: int
    ) -> PendingClaim | None:
        pending, missed = await self._run(
            "claim_pending",
            attending(lambda tx, now: body_claim_pending(tx, trigger_id, expected_revision, now)),
            now=True,
        )
        report_missed(trigger_id, missed)
        return pending

    async def record_result(self, result: Result) -> None:
        # The store's clock is read for a failure only, here in Trio (a worker thread cannot
        # read a Trio clock): the time of the pause it may cause (pause_after_failures). A
        # result is otherwise settled by what it says, without the clock.
        at = self._clock.now_ms() if getattr(result, "outcome", None) == "failed" else 0
        await self._write(
            "record_result",
            getattr(result, "trigger_id", ""),
            lambda tx, _: body_record_result(tx, result, at),
            getattr(result, "occurrence", None),
        )

    async def restore_pending(self, trigger_id: str, occurrence: int, reservation_id: str) -> None:
        _, missed = await self._run(
            "restore_pending",
            attending(
                lambda tx, _: body_restore_pending(tx, trigger_id, occurrence, reservation_id)
            ),
        )
        report_missed(trigger_id, missed)

    async def set_pending(self, trigger_id: str, occurrence: int) -> None:
        _, missed = await self._run(
            "set_pending", attending(lambda tx, _: body_set_pending(tx, trigger_id, occurrence))
        )
        report_missed(trigger_id, missed)

    async def active_run(self, trigger_id: str) -> str | None:
        holder, missed = await self._run(
            "active_run", attending(lambda tx, now: body_active_run(tx, trigger_id, now)), now=True
        )
        report_missed(trigger_id, missed)
        return holder

    async def active_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        return await self._run(
            "active_occurrence", lambda tx, _: body_active_occurrence(tx, trigger_id, run_id)
        )

    async def clear_active(self, trigger_id: str, run_id: str) -> None:
        await self._run(
            "clear_active", attending(lambda tx, _: body_clear_active(tx, trigger_id, run_id))
        )

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        chosen = query if query is not None else HistoryQuery()
        check_history_limit(chosen.limit)
        return await self._run("history", lambda tx, _: body_history(tx, chosen))

    async def prune_fires(self, older_than: int) -> int:
        cutoff = check_prune_cutoff(older_than)
        return await self._run("prune_fires", lambda tx, _: tx.prune(cutoff))

    async def inspect(self, trigger_id: str) -> Held:
        return await self._run("inspect", lambda tx, _: body_inspect(tx, trigger_id))

    async def heartbeat(self, host: str) -> None:
        check_text(host, "host")
        await self._run("heartbeat", lambda tx, now: tx.heartbeat(host, now), now=True)

    async def last_heartbeat(self) -> SchedulerHeartbeat | None:
        return await self._run("last_heartbeat", lambda tx, _: body_last_heartbeat(tx))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a batch is built (no await inside).

    Checking a million declarations allocates millions of objects that all stay alive (parsed
    expressions, the batch's tuples), so the collector's thresholds keep being crossed and
    each full collection walks every one of them for nothing: a third of the time of a
    100 000-trigger registration (bench/sparse.py). Nothing built here is garbage until the
    call returns, so collecting later loses nothing; the collector's state is restored as it
    was, even when a declaration is refused.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
