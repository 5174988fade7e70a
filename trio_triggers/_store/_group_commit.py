"""Group commit, the trigger store's side: concurrent single-trigger writes share a transaction.

The queue is :class:`~trio_triggers._batching.GroupCommit`; a backend that sets ``_batching``
runs each batch with :func:`run_bodies` on one open transaction of its own (its ``_run_batch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._batching import BatchItemFailed, GroupCommit
from .._errors import TriggerError
from ._codec import failure_for
from ._index import Attending, refresh
from ._protocol import CLOCK_METHODS

if TYPE_CHECKING:
    import builtins
    from collections.abc import Sequence

    from ._backend import Body, StoreTx
    from ._engine import EngineStore

__all__ = ["BatchItemFailed", "GroupCommit", "run_bodies", "trigger_group"]


def run_bodies(
    tx: StoreTx,
    bodies: Sequence[Body],
    now: int,
    database_errors: type[BaseException] | tuple[type[BaseException], ...],
) -> builtins.list[Any]:
    """Run a batch's bodies in order on one open transaction (a backend's ``_run_batch``).

    The driver's ``database_errors`` propagate (the whole batch fails as a store error); any
    other exception of a body becomes :class:`BatchItemFailed` (each call then runs alone).
    """
    values: builtins.list[Any] = []
    attended = Attending(tx)
    for body in bodies:
        try:
            values.append(body(attended, now))
        except database_errors:
            raise
        except Exception as exc:
            raise BatchItemFailed() from exc
    try:
        refresh(tx, attended.touched)  # once for the whole batch (one read on a server)
    except database_errors:
        raise
    except Exception as exc:
        raise BatchItemFailed() from exc
    return values


def _copy_failure(exc: BaseException, method: str) -> BaseException:
    """A fresh error per caller for a whole-batch failure (each raise gets its own traceback)."""
    if isinstance(exc, TriggerError):
        error = TriggerError(exc.code, exc.message, path=exc.path)
        error.__cause__ = exc.__cause__
        return error
    if isinstance(exc, Exception):
        error = failure_for(method)
        error.__cause__ = exc
        return error
    return exc


def trigger_group(store: EngineStore) -> GroupCommit:
    """The group commit of a batching trigger store (``_batching`` set): its bodies are the
    store's ``(tx, now)`` bodies, a batch reads the clock when one of its calls needs it, and a
    whole-batch failure is each caller's own store error."""
    return GroupCommit(store, needs_now=CLOCK_METHODS.__contains__, copy_failure=_copy_failure)
