"""Catch-up (§5.3), due occurrences (§6.3), overlap (§7) and next occurrences (§14.1)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import msgspec
import pytest

from trio_triggers import (
    MAX_SAFE_INTEGER,
    Cron,
    DueOccurrences,
    RegisteredTrigger,
    Trigger,
    TriggerError,
    catch_up_occurrences,
    due_occurrences,
    next_occurrences,
    overlap_decision,
    pending_after,
)
from trio_triggers._constants import MISSED_COUNT_LIMIT

from ._util import H, z

if TYPE_CHECKING:
    from trio_triggers._declarations import CatchUp

START = z("2026-01-01T00:00Z")
HOURLY = Cron.parse("0 * * * *", "UTC")


@pytest.mark.parametrize(
    ("policy", "bound", "expected"),
    [
        ("none", 3, []),
        ("one", 3, [START + 3 * H]),
        ("all", 3, [START + H, START + 2 * H, START + 3 * H]),
        ("one", 1, [START + 3 * H]),
    ],
)
def test_catch_up_table(policy: CatchUp, bound: int, expected: list[int]) -> None:
    assert catch_up_occurrences(policy, bound, START, START + 3 * H, HOURLY) == expected


@pytest.mark.parametrize(
    ("policy", "bound", "message"),
    [
        ("all", 2, "missed 3 occurrences; max_catch_up is 2"),
        ("one", 0, "missed 1 occurrence; max_catch_up is 0"),
        ("all", 0, "missed 1 occurrence; max_catch_up is 0"),
    ],
)
def test_catch_up_breaches(policy: CatchUp, bound: int, message: str) -> None:
    with pytest.raises(TriggerError) as info:
        catch_up_occurrences(policy, bound, START, START + 3 * H, HOURLY)
    assert info.value.code == "catch_up_bound_exceeded"
    assert info.value.message == message


def test_catch_up_counts_only_what_the_bounded_search_found() -> None:
    with pytest.raises(TriggerError) as info:
        catch_up_occurrences("all", 5, START, START + 100 * H, HOURLY)
    assert info.value.message == "missed 6 occurrences; max_catch_up is 5"


@pytest.mark.parametrize("policy", ["one", "all"])
def test_catch_up_nothing_missed(policy: CatchUp) -> None:
    now = START + 3 * H
    assert catch_up_occurrences(policy, 0, now, now, HOURLY) == []


@pytest.mark.parametrize("policy", ["one", "all"])
def test_catch_up_never_fired(policy: CatchUp) -> None:
    assert catch_up_occurrences(policy, 3, None, START + 3 * H, HOURLY) == []


@pytest.mark.parametrize("bound", [math.nan, 1.5, -1, True, 2**53])
@pytest.mark.parametrize(("policy", "last"), [("none", START), ("all", None), ("one", START)])
def test_catch_up_bad_bound(bound: object, policy: CatchUp, last: int | None) -> None:
    with pytest.raises(TriggerError) as info:
        catch_up_occurrences(policy, bound, last, START + 3 * H, HOURLY)  # type: ignore[arg-type]
    assert info.value.code == "catch_up_bound_exceeded"
    assert info.value.path == "max_catch_up"
    assert info.value.message == (
        f"max_catch_up must be a non-negative safe integer, received {bound!r}"
    )


def test_catch_up_unsafe_limit() -> None:
    with pytest.raises(TriggerError) as info:
        catch_up_occurrences("all", MAX_SAFE_INTEGER, START, START + 3 * H, HOURLY)
    assert (info.value.code, info.value.path) == ("invalid_options", "limit")


def _hourly(
    last: int | None, policy: CatchUp = "all", bound: int = 3, trigger_id: str = "hourly"
) -> RegisteredTrigger:
    return RegisteredTrigger.of(
        Trigger(
            id=trigger_id,
            flow_id="flow",
            input=None,
            cron="0 * * * *",
            timezone="UTC",
            catch_up=policy,
            max_catch_up=bound,
        ),
        revision=1,
        last_fired_at=last,
    )


NOW = 3 * H + H // 2
ANY = (None, 0, 2 * H)


@pytest.mark.parametrize(
    ("last", "observed", "policy", "bound", "occurrences", "watermark"),
    [
        (None, None, "all", 3, [], 3 * H),
        (0, None, "all", 3, [H, 2 * H, 3 * H], 3 * H),
        (0, None, "one", 3, [3 * H], 3 * H),
        (0, None, "none", 3, [3 * H], 3 * H),
        (3 * H, None, "none", 0, [], 3 * H),
        *[(last, 3 * H, "all", 3, [], 3 * H) for last in ANY],
        *[(last, 4 * H, "all", 3, [], 4 * H) for last in ANY],
        *[(last, H, "all", 3, [2 * H, 3 * H], 3 * H) for last in ANY],
        *[(last, H, "none", 0, [3 * H], 3 * H) for last in ANY],
        (0, H, "one", 3, [2 * H, 3 * H], 3 * H),
    ],
)
def test_due_table(
    caplog: pytest.LogCaptureFixture,
    last: int | None,
    observed: int | None,
    policy: CatchUp,
    bound: int,
    occurrences: list[int],
    watermark: int,
) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_triggers"):
        due = due_occurrences(_hourly(last, policy, bound), NOW, observed)
    assert (due.occurrences, due.watermark) == (occurrences, watermark)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("last", "observed", "policy", "bound", "catch_up", "over_bound"),
    [
        # first sight from the cursor at 0: the backlog is H and 2H (3H is the current one)
        (0, None, "all", 3, 0, 0),
        (0, None, "one", 3, 2, 0),  # on first sight "one" keeps the current boundary
        (0, None, "none", 3, 2, 0),
        (0, None, "all", 1, 0, 2),  # over the bound: what "all" would have run
        (0, None, "one", 0, 2, 0),  # the current boundary runs whatever the bound
        # from a watermark
        (None, H, "none", 0, 1, 0),
        (None, 0, "one", 3, 1, 0),  # H given up, 2H kept
        (None, 0, "one", 0, 1, 1),  # H by the policy, 2H (which it would keep) by the bound
        (None, 0, "all", 1, 0, 2),
        (None, 3 * H, "none", 0, 0, 0),  # nothing new
    ],
)
def test_due_counts_what_it_gives_up(
    last: int | None,
    observed: int | None,
    policy: CatchUp,
    bound: int,
    catch_up: int,
    over_bound: int,
) -> None:
    due = due_occurrences(_hourly(last, policy, bound), NOW, observed)
    assert (due.catch_up_missed, due.bound_missed) == (catch_up, over_bound)
    if catch_up or over_bound:
        assert due.dropped_after == (last if observed is None else observed)
        assert due.dropped_after is not None
        assert due.dropped_after < due.occurrences[0]


def test_a_resume_floor_is_not_a_catch_up_drop() -> None:
    resumed = msgspec.structs.replace(_hourly(0, "none"), resume_after=2 * H + 5)
    due = due_occurrences(resumed, NOW, 0)
    assert due.occurrences == [3 * H]
    assert (due.catch_up_missed, due.bound_missed) == (0, 0)  # a resume from now counted them


def test_the_count_of_a_long_outage_is_bounded() -> None:
    every_second = RegisteredTrigger.of(
        Trigger(id="s", flow_id="f", input=None, cron="* * * * * *", timezone="UTC"),
        revision=1,
    )
    due = due_occurrences(every_second, 300_000_000, 0)  # ~300 000 boundaries behind
    assert due.catch_up_missed == MISSED_COUNT_LIMIT


@pytest.mark.parametrize("observed", [None, 0])
def test_due_bound_breached(caplog: pytest.LogCaptureFixture, observed: int | None) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_triggers"):
        due = due_occurrences(_hourly(0, "all", 1), NOW, observed)
    assert due == DueOccurrences(
        occurrences=[3 * H], watermark=3 * H, dropped_after=0, bound_missed=2
    )
    [record] = caplog.records
    assert record.getMessage() == "A trigger abandoned catch-up work beyond its bound"
    assert record.levelno == logging.WARNING
    assert record.trigger_id == "hourly"  # type: ignore[attr-defined]
    assert record.name.startswith("trio_triggers")


def test_due_invalid_bound_is_abandoned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_triggers"):
        due = due_occurrences(_hourly(0, "all", -1), NOW, None)
    assert due.occurrences == [3 * H]
    assert len(caplog.records) == 1


@pytest.mark.parametrize("observed", [None, 0])
def test_due_unsafe_bound_is_not_abandoned(observed: int | None) -> None:
    with pytest.raises(TriggerError) as info:
        due_occurrences(_hourly(0, "all", MAX_SAFE_INTEGER), NOW, observed)
    assert (info.value.code, info.value.path) == ("invalid_options", "limit")


def test_due_cron_errors_propagate() -> None:
    broken = RegisteredTrigger.of(
        Trigger(id="x", flow_id="f", input=None, cron="0 0 30 2 *", timezone="UTC"), revision=1
    )
    with pytest.raises(TriggerError) as info:
        due_occurrences(broken, NOW, None)
    assert info.value.code == "unsatisfiable_cron"


@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("pending", [None, 5])
def test_overlap_table(running: bool, pending: int | None) -> None:
    expected = {"skip": "skip", "buffer-one": "buffer", "supersede": "supersede"}
    for policy in ("skip", "buffer-one", "supersede"):
        answer = overlap_decision(policy, running=running, pending=pending, due=7)
        assert answer == (expected[policy] if running else "fire")


def test_pending_after() -> None:
    assert pending_after(20, 10) == 20
    assert pending_after(20, 30) == 30
    assert pending_after(None, 7) == 7


def test_next_occurrences() -> None:
    trigger = _hourly(None)
    assert next_occurrences(trigger, H + 1) == [2 * H, 3 * H, 4 * H, 5 * H, 6 * H]
    assert next_occurrences(trigger, H) == [2 * H, 3 * H, 4 * H, 5 * H, 6 * H]
    assert next_occurrences(trigger.schedule, H - 1) == [H, 2 * H, 3 * H, 4 * H, 5 * H]
