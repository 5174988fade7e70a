"""One exception out of every public call (``triggers.md`` §1.6, ``trio-design.md`` §5).

Trio nurseries wrap what escapes them in an ``ExceptionGroup``. Where a nursery is an
implementation detail, its background tasks never raise an ``Exception`` (they isolate their
failures), so at most one real error is present; this helper re-raises it bare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

__all__ = ["one_exception"]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found


def pick(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to raise in place of ``group``.

    A real failure (anything but ``trio.Cancelled``) wins over cancellations, so a
    ``KeyboardInterrupt`` is not hidden behind the cancellations it caused; among several,
    the first one wins.
    """
    leaves = _leaves(group)
    for exc in leaves:
        if not isinstance(exc, trio.Cancelled):
            return exc
    return leaves[0]


@contextlib.contextmanager
def one_exception() -> Iterator[None]:
    """Re-raise the single meaningful exception of an escaping group, unwrapped."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = pick(group)
        context, suppress = leaf.__context__, leaf.__suppress_context__
        try:
            raise leaf
        finally:
            leaf.__context__ = context
            leaf.__suppress_context__ = suppress
            del leaf
