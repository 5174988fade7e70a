"""``trio_triggers._watch``: trio_util's AsyncValue behind a typed, read-only view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trio_triggers._watch import Published, move_on_when

if TYPE_CHECKING:
    from trio_triggers import Watched


async def test_wait_value_returns_at_once_when_it_already_holds() -> None:
    published = Published(3)
    assert await published.view.wait_value(3) == 3
    assert await published.view.wait_value(lambda n: n > 2) == 3


async def test_wait_value_wakes_on_the_matching_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    published: Published[int | None] = Published(None)
    seen: list[int | None] = []

    async def waiter() -> None:
        seen.append(await published.view.wait_value(lambda v: v is not None and v >= 2))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        published.set(1)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []
        published.set(5)
    assert seen == [5]


async def test_wait_transition_and_the_boolean_flag() -> None:
    flag = Published.flag()
    view: Watched[bool] = flag.view
    assert view.value is False
    got: list[tuple[bool, bool]] = []

    async def waiter() -> None:
        got.append(await view.wait_transition(True))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        flag.set(True)
    assert got == [(True, False)]
    assert repr(view) == "Watched(True)"


async def test_the_view_cannot_be_written() -> None:
    view = Published(1).view
    assert not hasattr(view, "set")
    try:
        view.value = 2  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a Watched value must be read-only")


async def test_move_on_when_ends_the_block_when_the_function_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    event = trio.Event()

    async def set_later() -> None:
        await trio.sleep(1)
        event.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(set_later)
        async with move_on_when(event.wait) as scope:
            await trio.sleep(10)
    assert scope.cancelled_caught
    assert trio.current_time() == 1
