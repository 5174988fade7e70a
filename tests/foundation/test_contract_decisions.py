"""Where the contract contradicts itself, the choice we made (docs/departures.md), tested."""

from __future__ import annotations

import msgspec
import pytest

from trio_triggers import RegisteredTrigger, Trigger

FIELD_ORDER = (
    "id",
    "flow_id",
    "input",
    "cron",
    "timezone",
    "overlap",
    "catch_up",
    "max_catch_up",
    "enabled",
    # our additions, after the contract's fields (docs/declarations.md, "Jitter, windows and
    # pausing after failures")
    "jitter",
    "start_at",
    "end_at",
    "pause_after_failures",
)


def test_trigger_is_keyword_only_in_the_documented_field_order() -> None:
    """api.md writes ``Trigger(id, flow_id, input, cron, ...)`` but also says every model is
    ``kw_only``: the signature gives the field order and defaults, construction is by keyword."""
    assert tuple(field.name for field in msgspec.structs.fields(Trigger)) == FIELD_ORDER
    with pytest.raises(TypeError):
        Trigger("t", "f", None, "* * * * *")  # type: ignore[call-arg]
    made = Trigger(id="t", flow_id="f", input=None, cron="* * * * *")
    assert (made.timezone, made.overlap, made.catch_up, made.max_catch_up, made.enabled) == (
        None,
        "skip",
        "none",
        0,
        True,
    )


def test_registered_trigger_is_keyword_only_too() -> None:
    with pytest.raises(TypeError):
        RegisteredTrigger("t", "f", None, "* * * * *", revision=1)  # type: ignore[call-arg]
    assert tuple(f.name for f in msgspec.structs.fields(RegisteredTrigger))[: len(FIELD_ORDER)] == (
        FIELD_ORDER
    )
