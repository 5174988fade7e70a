"""The command line as an operator meets it (issue 18 section 2), through real subprocesses:
``--version``, option placement, ``add``'s refusal of an existing id, help texts, ``list``'s
width and its local times, and what ``run --for`` prints at its stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from trio_triggers import __version__
from trio_triggers.cli import build_parser

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX sh and TZ")


def cli(
    *args: str, cwd: Path, tz: str = "UTC", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TZ": tz}
    return subprocess.run(
        [sys.executable, "-m", "trio_triggers.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


ADD = ["add", "--id", "report", "--flow", "f", "--cron", "0 3 * * *", "--tz", "UTC"]


def test_version(tmp_path: Path) -> None:
    done = cli("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"trio-triggers {__version__}\n")


def test_global_options_before_and_after_the_subcommand(tmp_path: Path) -> None:
    assert cli("--db", "t.sqlite", *ADD, cwd=tmp_path).returncode == 0
    before = cli("-v", "--db", "t.sqlite", "list", "--json", cwd=tmp_path)
    after = cli("list", "--json", "--db", "t.sqlite", "-v", cwd=tmp_path)
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    assert json.loads(before.stdout)[0]["trigger_id"] == "report"
    assert before.stdout == after.stdout
    config = tmp_path / "triggers.toml"
    config.write_text('[flows.f]\ncommand = ["true"]\n')
    # --config before the subcommand names the database next to it, as after it does.
    assert cli("--config", str(config), *ADD, cwd=tmp_path).returncode == 0
    shown = cli("list", "--json", "--config", str(config), cwd=tmp_path)
    assert [row["trigger_id"] for row in json.loads(shown.stdout)] == ["report"]


def test_add_refuses_an_existing_id_unless_replace_and_says_what_changed(tmp_path: Path) -> None:
    first = cli("--db", "t.sqlite", *ADD, "--input", '{"day": 1}', cwd=tmp_path)
    assert first.stdout == "registered report (revision 1) in t.sqlite\n"
    refused = cli("--db", "t.sqlite", *ADD, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr == (
        "trio-triggers: error: --id: trigger 'report' is already registered (revision 1); "
        "pass --replace to change:\n"
        '  input: {"day":1} -> {}\n'
    )
    kept = json.loads(cli("list", "--db", "t.sqlite", "--json", cwd=tmp_path).stdout)
    assert (kept[0]["revision"], kept[0]["input"]) == (1, {"day": 1})  # nothing written

    same = cli("--db", "t.sqlite", *ADD, "--input", '{"day": 1}', cwd=tmp_path)
    assert (same.returncode, same.stdout) == (
        0,
        "report is already registered as given (revision 1)\n",
    )
    replaced = cli("--db", "t.sqlite", *ADD, "--replace", "--overlap", "supersede", cwd=tmp_path)
    assert replaced.returncode == 0
    assert replaced.stdout == (
        "replaced report (revision 2) in t.sqlite:\n"
        '  input: {"day":1} -> {}\n'
        '  overlap: "skip" -> "supersede"\n'
    )


def test_every_subcommand_help_has_a_description_an_example_and_positional_help() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    choices = getattr(commands, "choices", {})
    assert set(choices) >= {"run", "list", "history", "show", "next", "add", "remove", "demo"}
    for name, sub in choices.items():
        text = sub.format_help()
        assert sub.description, name
        assert f"example:\n  trio-triggers {name}" in text, name
        for action in sub._actions:
            if not action.option_strings:
                assert action.help, f"{name} {action.dest}"


def test_list_fits_100_columns_wide_shows_all_and_times_are_local_with_zone(
    tmp_path: Path,
) -> None:
    long_add = ["add", "--db", "t.sqlite", "--id", "a-trigger-id-" + "x" * 40]
    long_add += ["--flow", "flow-" + "y" * 30, "--cron", "0 0 1-5 * MON-FRI"]
    long_add += ["--tz", "America/Argentina/Buenos_Aires", "--input", '{"a": 1}']
    assert cli(*long_add, cwd=tmp_path).returncode == 0
    narrow = cli("list", "--db", "t.sqlite", cwd=tmp_path, tz="Europe/Berlin")
    assert narrow.returncode == 0
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 100
    assert narrow.stdout.splitlines()[0].split() == [
        "ID",
        "FLOW",
        "CRON",
        "TIMEZONE",
        "STATE",
        "NEXT",
    ]
    row = narrow.stdout.splitlines()[2]
    assert row.endswith(("CET", "CEST"))
    wide = cli("list", "--db", "t.sqlite", "--wide", "--utc", cwd=tmp_path)
    assert "a-trigger-id-" + "x" * 40 in wide.stdout
    assert "LAST FIRED" in wide.stdout
    assert "Z (in " in wide.stdout


def test_run_for_prints_the_last_launches_names_the_process_and_hands_back_honestly(
    tmp_path: Path,
) -> None:
    config = tmp_path / "triggers.toml"
    config.write_text(
        "[flows.quick]\n"
        'command = ["true"]\n'
        "[flows.slow]\n"
        'command = ["sleep", "30"]\n'
        "[scheduler]\npoll_interval = 0.1\nrun_poll_interval = 0.1\n"
        "[[triggers]]\n"
        'id = "quick"\nflow = "quick"\ncron = "* * * * * *"\ntimezone = "UTC"\n'
    )
    done = cli("run", "--config", str(config), "--for", "2.5s", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "-- stopped"  # no flow was running at the stop
    events = [json.loads(line) for line in done.stdout.splitlines()]
    printed = {e["occurrence"] for e in events if e["outcome"] == "launched"}
    ledger = json.loads(cli("history", "--config", str(config), "--json", cwd=tmp_path).stdout)
    launched = {r["occurrence"] for r in ledger if r["run_id"]}
    assert launched
    seen = printed | {e["occurrence"] for e in events if e["outcome"] == "completed"}
    assert launched <= seen
    assert max(launched) in seen  # the last boundary before --for ended was printed
    owners = {(e["owner"]["host_id"], e["owner"]["pid"]) for e in events if e["run_id"]}
    assert len(owners) == 1  # one process served them all, and each event says which

    config.write_text(config.read_text().replace('flow = "quick"', 'flow = "slow"'))
    slow = cli("run", "--config", str(config), "--for", "2s", cwd=tmp_path)
    assert slow.returncode == 0, slow.stderr
    assert slow.stderr.splitlines()[-1] == (
        "-- stopped; 1 running flow(s) were handed back for the next start"
    )
    assert " by " in slow.stdout
