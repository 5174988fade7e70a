"""One cache of parsed cron expressions, keyed by (expression, timezone), for every reader."""

from __future__ import annotations

import pytest

from trio_triggers import Cron, TriggerError
from trio_triggers._store._attention import parsed_cron


def test_parse_answers_one_shared_instance_per_expression_and_zone() -> None:
    first = Cron.parse("*/5 * * * *", "Europe/Paris")
    assert Cron.parse("*/5 * * * *", "Europe/Paris", now=123_456) is first
    assert parsed_cron("*/5 * * * *", "Europe/Paris") is first  # the attention index's reader
    assert Cron.parse("*/5 * * * *", "UTC") is not first  # the zone is part of the key


def test_a_str_subclass_is_kept_as_given_and_not_cached() -> None:
    class Expression(str):
        pass

    cron = Cron.parse(Expression("0 * * * *"))
    assert type(cron.expression) is Expression
    assert Cron.parse("0 * * * *") == cron


def test_errors_are_raised_every_time_not_cached() -> None:
    for _ in range(2):
        with pytest.raises(TriggerError, match="segments") as info:
            Cron.parse("* * *")
        assert info.value.code == "invalid_cron"
    assert parsed_cron("* * *", None) is None


def test_the_satisfiability_probe_still_runs_per_call() -> None:
    for _ in range(2):
        with pytest.raises(TriggerError) as info:
            Cron.parse("0 0 30 2 *")
        assert info.value.code == "unsatisfiable_cron"
