"""The exception-group helpers of ``trio_triggers._groups``: one exception per public call."""

from __future__ import annotations

import pytest
import trio

from trio_triggers._groups import leaves, one_exception, only_cancelled, representative


def _cancelled() -> trio.Cancelled:
    """A real ``Cancelled`` (Trio forbids constructing one directly)."""
    caught: list[trio.Cancelled] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled as exc:
                caught.append(exc)
                raise

    trio.run(main)
    return caught[0]


def test_leaves_flattens_nested_groups_in_order() -> None:
    a, b, c = ValueError("a"), KeyError("b"), OSError("c")
    group = BaseExceptionGroup("outer", [a, BaseExceptionGroup("inner", [b]), c])
    assert leaves(group) == [a, b, c]


def test_representative_prefers_a_real_error_over_cancellations() -> None:
    cancelled = _cancelled()
    interrupt = KeyboardInterrupt()
    group = BaseExceptionGroup("g", [cancelled, BaseExceptionGroup("n", [interrupt])])
    assert representative(group) is interrupt


def test_representative_of_several_errors_is_the_first() -> None:
    first, second = ValueError("first"), ValueError("second")
    assert representative(ExceptionGroup("g", [first, second])) is first


def test_representative_of_cancellations_only_is_the_first() -> None:
    first, second = _cancelled(), _cancelled()
    assert representative(BaseExceptionGroup("g", [first, second])) is first


def test_only_cancelled_answers_the_first_cancellation() -> None:
    first, second = _cancelled(), _cancelled()
    nested = BaseExceptionGroup("g", [BaseExceptionGroup("n", [first]), second])
    assert only_cancelled(nested) is first


def test_only_cancelled_is_none_when_a_real_error_is_present() -> None:
    group = BaseExceptionGroup("g", [_cancelled(), ValueError("boom")])
    assert only_cancelled(group) is None


def test_one_exception_raises_the_error_bare_with_its_own_chaining() -> None:
    cause = OSError("cause")
    error = ValueError("boom")
    error.__cause__ = cause
    error.__context__ = cause
    with pytest.raises(ValueError, match="boom") as info, one_exception():
        raise ExceptionGroup("g", [error])
    assert info.value is error
    assert info.value.__cause__ is cause
    assert info.value.__context__ is cause  # not the group that held it


def test_one_exception_leaves_a_plain_exception_alone() -> None:
    with pytest.raises(KeyError), one_exception():
        raise KeyError("plain")


def test_one_exception_collapses_a_nursery_group() -> None:
    async def main() -> None:
        async def fail() -> None:
            raise ValueError("from a task")

        with one_exception():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail)
                await trio.sleep_forever()

    with pytest.raises(ValueError, match="from a task"):
        trio.run(main)
