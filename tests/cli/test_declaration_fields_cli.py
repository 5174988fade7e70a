"""The per-trigger fields in the config file and in ``next``: jitter, the window, and pausing
after failures (docs/config.md, ``[[triggers]]``; docs/declarations.md, "Jitter, windows and
pausing after failures")."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import trio

from trio_triggers import SystemWallClock
from trio_triggers._cron import Cron
from trio_triggers._databases import open_stores
from trio_triggers._declarations import Trigger
from trio_triggers._policies import launch_at
from trio_triggers.cli import main
from trio_triggers.cli._config import ConfigError, load_config

if TYPE_CHECKING:
    from pathlib import Path

FLOWS = """
[flows.echo]
command = ["cat"]
"""

TRIGGER = """
[[triggers]]
id = "t"
flow = "echo"
cron = "*/5 * * * *"
"""

BAD = {
    "jitter_negative": ("jitter = -1", "jitter", "invalid_trigger"),
    "jitter_over_a_day": ("jitter = 86401", "jitter", "invalid_trigger"),
    "jitter_not_a_number": ("jitter = 'ten'", "jitter", "invalid_value"),
    "start_at_without_offset": ("start_at = '2026-01-01T00:00:00'", "start_at", "invalid_trigger"),
    "start_at_local_toml_datetime": (
        "start_at = 2026-01-01T00:00:00",
        "start_at",
        "invalid_trigger",
    ),
    "start_at_not_a_date": ("start_at = 'tomorrow'", "start_at", "invalid_trigger"),
    "start_at_epoch_number": ("start_at = 1800000000000", "start_at", "invalid_value"),
    "end_at_before_start_at": (
        "start_at = '2026-02-01T00:00:00Z'\nend_at = '2026-01-01T00:00:00Z'",
        "end_at",
        "invalid_trigger",
    ),
    "pause_after_zero": ("pause_after_failures = 0", "pause_after_failures", "invalid_trigger"),
    "pause_after_not_int": ("pause_after_failures = 2.5", "pause_after_failures", "invalid_value"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_field_is_refused_at_its_path_and_nothing_is_written(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, field, code = BAD[case]
    config = tmp_path / "triggers.toml"
    config.write_text(FLOWS + TRIGGER + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert (info.value.field, info.value.code) == (f'triggers[id="t"].{field}', code)
    db = tmp_path / "state.sqlite"
    assert main(["run", "--config", str(config), "--db", str(db)]) == 2
    assert f'triggers[id="t"].{field}: {code}: ' in capsys.readouterr().err
    assert not db.exists()


def test_good_fields_decode_in_text_and_as_toml_date_times(tmp_path: Path) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        FLOWS
        + TRIGGER
        + "jitter = 12.5\nstart_at = '2026-01-01T01:00:00+01:00'\n"
        + "end_at = 2026-12-31T23:59:59Z\npause_after_failures = 3\n"
    )
    (trigger,) = load_config(config).triggers
    assert trigger.jitter == 12.5
    assert trigger.start_at == 1_767_225_600_000  # 2026-01-01T00:00:00Z
    assert trigger.end_at == 1_798_761_599_000
    assert trigger.pause_after_failures == 3


def test_next_shows_the_jittered_launch_instants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "state.sqlite")

    async def register() -> None:
        async with open_stores(db, clock=SystemWallClock()) as (store, _runs):
            for trigger_id, jitter in (("jittered", 50), ("plain", 0)):
                await store.register(
                    Trigger.make(
                        {
                            "id": trigger_id,
                            "flow_id": "echo",
                            "input": {},
                            "cron": "* * * * *",
                            "jitter": jitter,
                        }
                    )
                )

    trio.run(register)
    assert main(["next", "jittered", "--db", db, "-n", "4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    cron = Cron.parse("* * * * *", None, now=0)
    assert len(rows) == 4
    for row in rows:
        expected = launch_at("jittered", 50_000, cron, row["occurrence"])
        assert row["launch_at"] == expected
        assert 0 <= row["launch_at"] - row["occurrence"] < 50_000
    assert any(row["launch_at"] > row["occurrence"] for row in rows)
    assert main(["next", "jittered", "--db", db, "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all("launches " in line and " s)" in line for line in lines)
    # A trigger without jitter shows what it always showed.
    assert main(["next", "plain", "--db", db, "-n", "2", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert all(set(row) == {"occurrence", "occurrence_iso"} for row in plain)
