"""The per-trigger fields in the config file, in ``add``'s flags and in ``next``: jitter, the
window, and pausing after failures (docs/config.md, ``[[triggers]]``; docs/quickstart.md,
section 5; docs/declarations.md, "Jitter, windows and pausing after failures")."""

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


# --- the same fields as flags of `add` ---------------------------------------------------------

ADD = ["add", "--id", "t", "--flow", "echo", "--cron", "*/5 * * * *", "--tz", "UTC"]

BAD_FLAGS = {
    "jitter_negative": (["--jitter", "-1"], "jitter"),
    "jitter_over_a_day": (["--jitter", "86401"], "jitter"),
    "jitter_not_a_number": (["--jitter", "ten"], "jitter"),
    "jitter_with_a_unit": (["--jitter", "30s"], "jitter"),
    "jitter_nan": (["--jitter", "nan"], "jitter"),
    "start_at_without_offset": (["--start-at", "2026-01-01T00:00:00"], "start_at"),
    "start_at_a_date_only": (["--start-at", "2026-01-01"], "start_at"),
    "start_at_not_a_date": (["--start-at", "tomorrow"], "start_at"),
    "start_at_epoch_number": (["--start-at", "1800000000000"], "start_at"),
    "end_at_without_offset": (["--end-at", "2026-01-01T00:00:00"], "end_at"),
    "end_at_before_start_at": (
        ["--start-at", "2026-02-01T00:00:00Z", "--end-at", "2026-01-01T00:00:00Z"],
        "end_at",
    ),
    "pause_after_zero": (["--pause-after-failures", "0"], "pause_after_failures"),
    "pause_after_over_the_limit": (["--pause-after-failures", "1001"], "pause_after_failures"),
    "pause_after_not_int": (["--pause-after-failures", "2.5"], "pause_after_failures"),
}


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_add_refuses_a_bad_flag_by_its_name_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, field = BAD_FLAGS[case]
    db = tmp_path / "state.sqlite"
    assert main([*ADD, "--db", str(db), *flags]) == 2
    flag = "--" + field.replace("_", "-")
    prefix = f"trio-triggers: error: {flag}: invalid_trigger: "
    err = capsys.readouterr().err
    assert err.startswith(prefix + f"Trigger declaration is invalid at {field}: "), err
    assert err.count("\n") == 1
    assert not db.exists()


def test_add_flag_messages_are_the_declarations_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same words as a bad key of the file, under the flag's name (as --max-catch-up).
    db = str(tmp_path / "state.sqlite")
    cases = [
        (["--jitter", "ten"], "--jitter", "jitter: expected a number of seconds"),
        (
            ["--pause-after-failures", "0"],
            "--pause-after-failures",
            "pause_after_failures: expected null or an integer from 1 to 1000",
        ),
        (
            ["--start-at", "2026-02-01T00:00:00Z", "--end-at", "2026-01-01T00:00:00Z"],
            "--end-at",
            "end_at: must not be before start_at",
        ),
    ]
    for flags, flag, detail in cases:
        assert main([*ADD, "--db", db, *flags]) == 2
        assert capsys.readouterr().err == (
            f"trio-triggers: error: {flag}: invalid_trigger: "
            f"Trigger declaration is invalid at {detail}\n"
        )


def test_add_flags_declare_what_the_same_keys_of_a_file_declare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        FLOWS
        + TRIGGER
        + 'timezone = "UTC"\njitter = 12.5\nstart_at = "2026-01-01T01:00:00+01:00"\n'
        + 'end_at = "2026-12-31T23:59:59Z"\npause_after_failures = 3\n'
    )
    (declared,) = load_config(config).triggers
    flags = ["--jitter", "12.5", "--start-at", "2026-01-01T01:00:00+01:00"]
    flags += ["--end-at", "2026-12-31T23:59:59Z", "--pause-after-failures", "3"]
    db = str(tmp_path / "state.sqlite")
    added = run_json(capsys, *ADD, "--db", db, *flags)
    assert isinstance(added, dict)
    assert (added["jitter"], added["start_at"], added["end_at"]) == (
        12.5,
        1_767_225_600_000,
        1_798_761_599_000,
    )
    assert added["pause_after_failures"] == 3

    async def stored() -> Trigger:
        async with open_stores(db, clock=SystemWallClock()) as (store, _runs):
            registered = await store.get("t")
            assert registered is not None
            return registered.declaration

    assert trio.run(stored) == declared
    # Adding the same again writes nothing; without the flags it would change them.
    assert main([*ADD, "--db", db, *flags]) == 0
    assert "already registered as given (revision 1)" in capsys.readouterr().out
    assert main([*ADD, "--db", db]) == 2
    err = capsys.readouterr().err
    assert "jitter: 12.5 -> 0.0" in err
    assert "pause_after_failures: 3 -> null" in err
    assert trio.run(stored) == declared


def test_add_without_the_flags_keeps_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    added = run_json(capsys, *ADD, "--db", str(tmp_path / "state.sqlite"))
    assert isinstance(added, dict)
    assert [added[k] for k in ("jitter", "start_at", "end_at", "pause_after_failures")] == [
        0.0,
        None,
        None,
        None,
    ]
