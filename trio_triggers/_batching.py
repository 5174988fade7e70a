"""Group commit: concurrent single-row writes of one store share a transaction.

:class:`GroupCommit` queues the calls of tasks that run alongside each other and carries them
in one transaction: the trigger store's claims and results (``_store/_group_commit.py`` builds
its group) and the SQLite run store's creates, claims and transitions. A store supplies the
two transactions (:class:`BatchingStore`): many bodies in one, or one body alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Sequence

__all__ = ["BatchItemFailed", "BatchingStore", "GroupCommit", "never_needs_now", "run_each"]


class BatchItemFailed(Exception):
    """A body of a batch raised (``__cause__``); the batch's transaction was rolled back.

    Backends raise it for every exception of a body except their driver's errors, which fail
    the whole batch as the store's write error.
    """


class BatchingStore(Protocol):
    """The two transactions a store gives its :class:`GroupCommit`."""

    async def _run_batch(
        self, bodies: Sequence[Any], *, hints: Sequence[Any] = (), now: bool = True
    ) -> builtins.list[Any]:
        """Run ``bodies`` in order in ONE write transaction; a body's exception rolls it back
        and raises :class:`BatchItemFailed` from it, the transaction's own raises the store's
        write error."""
        ...

    async def _run_alone(self, method: Any, body: Any) -> Any:
        """Run ``body`` in a transaction of its own (the group has yielded already)."""
        ...


class _Queued:
    """One call waiting for (or carried by) a group transaction."""

    __slots__ = (
        "body",
        "error",
        "finished",
        "hint",
        "key",
        "method",
        "promoted",
        "taken",
        "value",
        "wake",
    )

    def __init__(self, method: str, key: str, body: Any, hint: Any) -> None:
        self.method = method
        self.key = key
        self.body = body
        self.hint = hint
        self.taken = False  # carried by a transaction (its answer will come)
        self.finished = False  # answered
        self.promoted = False  # asked to lead the next transaction
        self.wake = trio.Event()  # set when answered or promoted
        self.value: object = None
        self.error: BaseException | None = None


class GroupCommit:
    """Coalesces concurrent single-row writes of one store into shared transactions.

    A caller queues its call. If no transaction is being led, it becomes the *leader*: it yields
    once (so the calls made by the tasks running alongside it join), takes every queued call,
    runs them in one transaction ordered by their key, a trigger's or a run's id (stable, so one
    row's calls keep their order, and two processes lock rows in the same order, so their
    batches cannot deadlock) and wakes every caller with its own answer at once. Calls that
    arrive meanwhile wait; when the transaction ends, the first of them is promoted to lead the
    next one with all of them. So the batch is exactly the calls that arrived while the previous
    one ran: one call alone is a transaction of one, and a thousand launch tasks settling at
    once share a handful.

    Semantics are those of the calls run one transaction each, in the batch's order:

    * if a body raises anything but a database error (a refusal such as ``stale_owner``, a
      corrupt row, a bad argument), the batch is rolled back *before commit* and every call
      runs again in its own transaction, so one call's refusal never changes another call's
      answer;
    * if the database fails (a lost connection, a failed commit), every call of the batch
      raises the store's write error, as each would have alone: nothing of a rolled-back
      batch is durable, and a failed commit leaves the outcome unknown exactly as it does for
      a single call. (Retrying each call alone would make every caller wait out the outage.)

    A caller cancelled while still queued leaves the queue untouched by its write (passing the
    lead on if it had been promoted); once its call is carried by a transaction it waits for
    the answer (like a call in a worker thread, which cannot be abandoned) and then sees the
    cancellation.
    """

    def __init__(
        self,
        store: BatchingStore,
        *,
        needs_now: Callable[[str], bool],
        copy_failure: Callable[[BaseException, str], BaseException],
    ) -> None:
        self._store = store
        self._needs_now = needs_now
        self._copy_failure = copy_failure
        self._queue: list[_Queued] = []
        self._leading = False

    async def call(self, method: str, key: str, body: Any, hint: Any) -> Any:
        item = _Queued(method, key, body, hint)
        self._queue.append(item)
        try:
            if not self._leading:
                self._leading = True
                item.promoted = True
                await trio.lowlevel.checkpoint()  # let the calls of runnable peers join
            else:
                await item.wake.wait()
            if not item.finished:
                assert item.promoted
                assert not item.taken
                await self._lead()
        except trio.Cancelled:
            if not item.taken:
                self._queue.remove(item)
                if item.promoted:
                    self._hand_off()
                raise
            with trio.CancelScope(shield=True):
                while not item.finished:
                    item.wake = trio.Event()  # (a promotion may have set the old one)
                    await item.wake.wait()
            raise
        # A leader cancelled while its transaction ran sees the cancellation now, like a caller
        # of a worker-thread transaction (the write committed whole; its outcome is unknown).
        await trio.lowlevel.checkpoint_if_cancelled()
        if item.error is not None:
            raise item.error
        return item.value

    def _hand_off(self) -> None:
        """End the current lead; promote the first queued call to lead the next batch."""
        self._leading = False
        if self._queue:
            first = self._queue[0]
            self._leading = True
            first.promoted = True
            first.wake.set()

    async def _lead(self) -> None:
        batch = sorted(self._queue, key=lambda queued: queued.key)
        self._queue = []
        for item in batch:
            item.taken = True
        # The calls are taken: their answers must be delivered even if the leader is cancelled.
        with trio.CancelScope(shield=True):
            try:
                await self._execute(batch)
            finally:
                for item in batch:
                    item.finished = True
                    item.wake.set()
                self._hand_off()

    async def _execute(self, batch: builtins.list[_Queued]) -> None:
        store = self._store
        if len(batch) > 1:
            try:
                values = await store._run_batch(
                    [item.body for item in batch],
                    hints=[item.hint for item in batch],
                    now=any(self._needs_now(item.method) for item in batch),
                )
            except BatchItemFailed:
                pass  # a refusal, rolled back before commit: run each call on its own, below
            except BaseException as exc:
                for item in batch:
                    item.error = self._copy_failure(exc, item.method)
                return
            else:
                for item, value in zip(batch, values, strict=True):
                    item.value = value
                return
        for item in batch:
            try:
                item.value = await store._run_alone(item.method, item.body)
            except BaseException as exc:
                item.error = exc


def never_needs_now(method: str) -> bool:
    """``needs_now`` of a store whose writes take their own clock readings (the run stores)."""
    return False


def run_each(
    bodies: Sequence[Any],
    call: Callable[[Any], Any],
    database_errors: type[BaseException] | tuple[type[BaseException], ...],
) -> builtins.list[Any]:
    """``call(body)`` for each body of a batch, in order, on its one open transaction.

    The driver's ``database_errors`` propagate (the whole batch fails as each call would have);
    any other exception is a refusal: :class:`BatchItemFailed`, so the batch rolls back and
    every call runs alone.
    """
    values: builtins.list[Any] = []
    for body in bodies:
        try:
            values.append(call(body))
        except database_errors:
            raise
        except Exception as exc:
            raise BatchItemFailed() from exc
    return values
