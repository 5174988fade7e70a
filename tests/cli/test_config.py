"""Config validation: every problem exits with status 2, names file and field, writes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trio_triggers.cli import main
from trio_triggers.cli._config import ConfigError, load_config

GOOD_FLOWS = """
[flows.echo]
command = ["cat"]
"""

GOOD_TRIGGER = """
[[triggers]]
id = "t"
flow = "echo"
cron = "*/5 * * * * *"
timezone = "UTC"
"""

CASES = {
    "unknown_top_key": (
        "colour = 'blue'\n" + GOOD_FLOWS + GOOD_TRIGGER,
        "colour",
        "unknown_key",
    ),
    "unknown_trigger_key": (
        GOOD_FLOWS + GOOD_TRIGGER + "flavour = 'x'\n",
        'triggers[id="t"].flavour',
        "unknown_key",
    ),
    "bad_cron": (
        GOOD_FLOWS + GOOD_TRIGGER.replace("*/5 * * * * *", "61 * * * *"),
        'triggers[id="t"].cron',
        "invalid_cron",
    ),
    "unsatisfiable_cron": (
        GOOD_FLOWS + GOOD_TRIGGER.replace("*/5 * * * * *", "0 0 30 2 *"),
        'triggers[id="t"].cron',
        "unsatisfiable_cron",
    ),
    "unknown_timezone": (
        GOOD_FLOWS + GOOD_TRIGGER.replace('"UTC"', '"Mars/Olympus_Mons"'),
        'triggers[id="t"].timezone',
        "invalid_cron",
    ),
    "duplicate_ids": (
        GOOD_FLOWS + GOOD_TRIGGER + GOOD_TRIGGER,
        "triggers[1].id",
        "duplicate_trigger",
    ),
    "flow_does_not_import": (
        "[flows.py]\npython = 'no_such_module_for_tt:flow'\n" + GOOD_TRIGGER,
        "flows.py.python",
        "flow_import",
    ),
    "flow_attribute_missing": (
        "[flows.py]\npython = 'json:no_such_function'\n" + GOOD_TRIGGER,
        "flows.py.python",
        "flow_import",
    ),
    "flow_not_async": (
        "[flows.py]\npython = 'json:dumps'\n" + GOOD_TRIGGER,
        "flows.py.python",
        "invalid_flow",
    ),
    "command_not_a_list": (
        "[flows.echo]\ncommand = 'echo hello'\n" + GOOD_TRIGGER,
        "flows.echo.command",
        "invalid_flow",
    ),
    "command_empty": (
        "[flows.echo]\ncommand = []\n" + GOOD_TRIGGER,
        "flows.echo.command",
        "invalid_flow",
    ),
    "flow_with_both_kinds": (
        "[flows.echo]\ncommand = ['cat']\npython = 'json:dumps'\n" + GOOD_TRIGGER,
        "flows.echo",
        "invalid_flow",
    ),
    "unknown_flow_reference": (
        GOOD_FLOWS + GOOD_TRIGGER.replace('flow = "echo"', 'flow = "nope"'),
        'triggers[id="t"].flow',
        "unknown_flow",
    ),
    "bad_overlap": (
        GOOD_FLOWS + GOOD_TRIGGER + "overlap = 'sometimes'\n",
        'triggers[id="t"].overlap',
        "invalid_value",
    ),
    "wrong_type": (
        "[runner]\nconcurrency = 'many'\n" + GOOD_FLOWS + GOOD_TRIGGER,
        "runner.concurrency",
        "invalid_value",
    ),
    "missing_cron": (
        GOOD_FLOWS + "[[triggers]]\nid = 't'\nflow = 'echo'\n",
        'triggers[id="t"].cron',
        "missing_key",
    ),
    "toml_syntax": (GOOD_FLOWS + "[[triggers]\n", "line 4", "syntax"),
    "input_not_json": (
        GOOD_FLOWS + GOOD_TRIGGER + "input = { when = 1979-05-27T07:32:00Z }\n",
        'triggers[id="t"].input',
        "invalid_trigger",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_exits_2_names_file_and_field_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, field, code = CASES[case]
    config = tmp_path / "triggers.toml"
    config.write_text(text)
    db = tmp_path / "state.sqlite"
    status = main(["run", "--config", str(config), "--db", str(db)])
    err = capsys.readouterr().err
    assert status == 2
    assert re.search(rf"{re.escape(str(config))}(:\d+)?: {re.escape(field)}: {code}: ", err), err
    assert not db.exists()
    assert not (tmp_path / "trio-triggers.sqlite").exists()


def test_good_config_decodes_with_defaults(tmp_path: Path) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(GOOD_FLOWS + GOOD_TRIGGER)
    loaded = load_config(config)
    (trigger,) = loaded.triggers
    assert trigger.id == "t"
    assert trigger.flow_id == "echo"
    assert trigger.input == {}
    assert trigger.overlap == "skip"
    assert loaded.config.runner.concurrency == 4


def test_example_config_is_valid() -> None:
    example = Path(__file__).parents[2] / "examples" / "triggers.toml"
    loaded = load_config(example)
    assert {t.id for t in loaded.triggers} == {"echo-every-5s", "report-every-5s", "broken-nightly"}
    assert set(loaded.python_flows) == {"report"}


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent.toml")
    assert info.value.code == "unreadable"


def test_read_commands_need_an_existing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "none.sqlite"
    assert main(["list", "--db", str(db)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not db.exists()


def test_add_with_bad_cron_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.sqlite"
    status = main(["add", "--db", str(db), "--id", "a", "--flow", "f", "--cron", "nope"])
    assert status == 2
    assert "--cron: invalid_cron" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize(
    ("db", "shown"),
    [
        ("postgresql://tt:secret@db.example:5432/app", "postgresql://tt:***@db.example:5432/app"),
        ("postgres://tt@db/app", "postgres://tt@db/app"),
        (
            "postgresql://db/app?user=tt&password=s%40cret&sslmode=require",
            "postgresql://db/app?user=tt&password=***&sslmode=require",
        ),
        ("postgresql://a:b:c@h1,h2/app", "postgresql://a:***@h1,h2/app"),
        ("/var/lib/app/triggers.sqlite", "/var/lib/app/triggers.sqlite"),
    ],
)
def test_a_dsn_is_printed_without_its_password(db: str, shown: str) -> None:
    from trio_triggers._databases import shown_db

    assert shown_db(db) == shown
