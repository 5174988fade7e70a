"""Exception groups at the package's boundaries: one exception out of every public call.

Trio nurseries wrap whatever escapes them in a ``BaseExceptionGroup``. Where a nursery is an
implementation detail (``open_scheduler``, a tick, ``LocalRunner.serve``, ``hold_lease``), its
background tasks isolate their own failures, so a group that escapes holds at most one real
error and the cancellations it caused. The contract (``api.md``: "every async public call
raises at most one exception") asks for that error bare. Two questions, two functions:

* :func:`one_exception` *collapses* an escaping group into the one exception it stands for
  (:func:`representative`: the first real error, else the first ``Cancelled``);
* :func:`only_cancelled` asks whether a group is *only* cancellations, and answers the first
  one (a caller that re-raises it lets Trio's cancellation machinery see a bare ``Cancelled``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["leaves", "one_exception", "only_cancelled", "representative"]


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """Every exception of ``group`` that is not itself a group, depth first, in order."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(leaves(exc))
        else:
            found.append(exc)
    return found


def representative(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception that stands for ``group``.

    A real failure (anything but ``trio.Cancelled``) wins over cancellations, so a
    ``KeyboardInterrupt`` is not hidden behind the cancellations it caused; among several real
    failures the first one wins; a group of cancellations only is represented by its first.
    """
    found = leaves(group)
    for exc in found:
        if not isinstance(exc, trio.Cancelled):
            return exc
    return found[0]


def only_cancelled(group: BaseExceptionGroup[BaseException]) -> trio.Cancelled | None:
    """The first ``Cancelled`` of a group made only of ``Cancelled`` (``None`` otherwise)."""
    found = leaves(group)
    if not all(isinstance(exc, trio.Cancelled) for exc in found):
        return None
    first = found[0]
    assert isinstance(first, trio.Cancelled)
    return first


@contextlib.contextmanager
def one_exception() -> Iterator[None]:
    """Re-raise the :func:`representative` of an escaping group bare.

    The exception keeps its own chaining: ``__cause__``, ``__context__`` and
    ``__suppress_context__`` are what they were inside the group (raising it here would
    otherwise make the group, which contains it, its ``__context__``). Anything that is not a
    group passes through untouched.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = representative(group)
        context, suppress = leaf.__context__, leaf.__suppress_context__
        try:
            raise leaf
        finally:
            leaf.__context__ = context
            leaf.__suppress_context__ = suppress
            del leaf
