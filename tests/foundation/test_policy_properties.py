"""Properties of catch-up (§5.2) and due occurrences (§6.2, invariant 33), by hypothesis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given, settings, strategies as st

from trio_triggers import (
    Cron,
    RegisteredTrigger,
    Trigger,
    TriggerError,
    catch_up_occurrences,
    due_occurrences,
)

from ._util import MIN, H

if TYPE_CHECKING:
    from trio_triggers._declarations import CatchUp

BASE = 1_772_900_000_000  # early March 2026, days before the US spring-forward
CRONS = [
    ("0 * * * *", "UTC"),
    ("30 * * * *", "America/Los_Angeles"),
    ("30 2 * * *", "America/Los_Angeles"),
    ("*/20 * * * *", "Australia/Lord_Howe"),
    ("0 9 * * 1-5", "+05:30"),
]
POLICIES: list[CatchUp] = ["none", "one", "all"]
instants = st.integers(BASE, BASE + 10 * 24 * H)


@settings(max_examples=150, deadline=None)
@given(
    schedule=st.sampled_from(CRONS),
    policy=st.sampled_from(POLICIES),
    bound=st.integers(0, 30),
    last=st.one_of(st.none(), instants),
    now=instants,
)
def test_catch_up_properties(
    schedule: tuple[str, str], policy: CatchUp, bound: int, last: int | None, now: int
) -> None:
    cron = Cron.parse(*schedule)
    try:
        owed = catch_up_occurrences(policy, bound, last, now, cron)
    except TriggerError as error:
        assert error.code == "catch_up_bound_exceeded"
        assert policy != "none"
        return
    assert owed == sorted(set(owed))
    assert len(owed) <= (bound if policy == "all" else min(bound, 1) if policy == "one" else 0)
    for occurrence in owed:
        assert last is not None
        assert last < occurrence <= now


@settings(max_examples=200, deadline=None)
@given(
    schedule=st.sampled_from(CRONS),
    policy=st.sampled_from(POLICIES),
    bound=st.integers(0, 30),
    last=st.one_of(st.none(), instants),
    observed=st.one_of(st.none(), instants),
    now=instants,
)
def test_due_properties(
    schedule: tuple[str, str],
    policy: CatchUp,
    bound: int,
    last: int | None,
    observed: int | None,
    now: int,
) -> None:
    cron_text, zone = schedule
    trigger = RegisteredTrigger.of(
        Trigger(
            id="t",
            flow_id="f",
            input=None,
            cron=cron_text,
            timezone=zone,
            catch_up=policy,
            max_catch_up=bound,
        ),
        revision=1,
        last_fired_at=last,
    )
    due = due_occurrences(trigger, now, observed)
    current = Cron.parse(cron_text, zone).previous_at_or_before(now)
    found = due.occurrences
    assert found == sorted(set(found))
    assert all(o <= current <= now for o in found)
    if observed is not None:
        assert all(o > observed for o in found)
        assert due.watermark == max(observed, current)
        if current > observed:
            assert found[-1] == current  # after first sight the current boundary is owed
    else:
        assert due.watermark == current
        if last is None:
            assert found == []
        else:
            assert all(o > last for o in found)
    limit = {"none": 1, "one": 2, "all": bound + 1}[policy]
    assert len(found) <= limit


def test_a_poll_a_minute_later_owes_nothing_new() -> None:
    trigger = RegisteredTrigger.of(
        Trigger(id="t", flow_id="f", input=None, cron="0 * * * *", timezone="UTC"),
        revision=1,
        last_fired_at=BASE,
    )
    first = due_occurrences(trigger, BASE + 3 * H, None)
    again = due_occurrences(trigger, BASE + 3 * H + MIN, first.watermark)
    assert again.occurrences == []
    assert again.watermark == first.watermark
