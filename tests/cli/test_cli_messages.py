"""The CLI's error messages, by exact text, through real subprocesses (issue 18 section 3):
each names the flag or the config key (a trigger by its id, with the line), echoes the value
and says what is expected; nothing is written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX subprocesses")


#: Runs the CLI as another user without that user reading the checkout or its virtualenv: the
#: child starts as root, imports the whole package (and so its dependencies) while it can, then
#: drops to the user and only then runs the command. A checkout under a private directory
#: (``mktemp -d``, a home directory) is unreadable to that user, so ``setpriv`` before the
#: interpreter started could not even import ``trio_triggers``.
AS_USER = """
import importlib, os, pkgutil, sys
import trio_triggers, trio_triggers.cli
for found in pkgutil.walk_packages(trio_triggers.__path__, "trio_triggers."):
    if not found.name.startswith("trio_triggers.testing") and "__main__" not in found.name:
        importlib.import_module(found.name)
user = int(sys.argv[1])
os.setgroups([])
os.setresgid(user, user, user)
os.setresuid(user, user, user)
sys.exit(trio_triggers.cli.main(sys.argv[2:]))
"""


def cli(*args: str, cwd: Path, user: int | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trio_triggers.cli", *args]
    if user is not None:
        command = [sys.executable, "-c", AS_USER, str(user), *args]
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


ADD = ["add", "--db", "t.sqlite", "--id", "report", "--flow", "f"]
ERR = "trio-triggers: error: "


def refused(done: subprocess.CompletedProcess[str], tmp_path: Path, message: str) -> None:
    assert (done.returncode, done.stderr) == (2, ERR + message + "\n")
    assert not (tmp_path / "t.sqlite").exists()
    assert not (tmp_path / "trio-triggers.sqlite").exists()


def test_add_unknown_zone_names_tz_and_echoes_it(tmp_path: Path) -> None:
    done = cli(*ADD, "--cron", "0 3 * * *", "--tz", "Mars/Olympus", cwd=tmp_path)
    refused(
        done,
        tmp_path,
        "--tz: invalid_cron: unknown time zone 'Mars/Olympus' (write an IANA name such as "
        "'Europe/Berlin', or a fixed offset such as '+05:30')",
    )


def test_add_wrong_field_count_says_5_or_6(tmp_path: Path) -> None:
    done = cli(*ADD, "--cron", "* * *", cwd=tmp_path)
    refused(
        done,
        tmp_path,
        "--cron: invalid_cron: '* * *' has 3 fields; 5 or 6 fields are expected (minute hour "
        "day-of-month month day-of-week, or second first and those five)",
    )


CONFIG = """\
[flows.f]
command = ["true"]

[[triggers]]
id = "report"
flow = "f"
cron = "CRON"
timezone = "ZONE"
overlap = "OVERLAP"
"""


def config_error(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "triggers.toml").write_text(text)
    return cli("run", "--config", "triggers.toml", "--for", "1s", cwd=tmp_path)


def good(**changes: str) -> str:
    text = CONFIG.replace("CRON", "0 3 * * *").replace("ZONE", "UTC").replace("OVERLAP", "skip")
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


def test_config_errors_name_the_trigger_by_id_with_the_line(tmp_path: Path) -> None:
    done = config_error(tmp_path, good(**{'"0 3 * * *"': '"* * *"'}))
    refused(
        done,
        tmp_path,
        "triggers.toml:7: triggers[id=\"report\"].cron: invalid_cron: '* * *' has 3 fields; "
        "5 or 6 fields are expected (minute hour day-of-month month day-of-week, or second "
        "first and those five)",
    )
    done = config_error(tmp_path, good(**{'"UTC"': '"Mars/Olympus"'}))
    refused(
        done,
        tmp_path,
        'triggers.toml:8: triggers[id="report"].timezone: invalid_cron: unknown time zone '
        "'Mars/Olympus' (write an IANA name such as 'Europe/Berlin', or a fixed offset such "
        "as '+05:30')",
    )


def test_config_enum_error_lists_the_valid_values(tmp_path: Path) -> None:
    done = config_error(tmp_path, good(**{'"skip"': '"sometimes"'}))
    refused(
        done,
        tmp_path,
        'triggers.toml:9: triggers[id="report"].overlap: invalid_value: Invalid enum value '
        "'sometimes'; valid values: skip, buffer-one, supersede",
    )


def test_config_command_string_says_write_an_argv_list(tmp_path: Path) -> None:
    done = config_error(tmp_path, good(**{'["true"]': '"ls -l"'}))
    refused(
        done,
        tmp_path,
        "triggers.toml:2: flows.f.command: invalid_flow: write the command as an argv list, "
        'e.g. command = ["ls", "-l"] (a string is neither split nor run by a shell)',
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_postgres_says_connection_refused_with_host_and_port_masked(
    tmp_path: Path,
) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    port = _closed_port()
    dsn = f"postgresql://tt:s3cret@127.0.0.1:{port}/tt"
    done = cli("list", "--db", dsn, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"{ERR}--db: cannot connect to PostgreSQL at 127.0.0.1 port {port} "
        f"(postgresql://tt:***@127.0.0.1:{port}/tt): connection refused\n"
    )
    assert "s3cret" not in done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to read the database as another user")
def test_list_and_history_in_a_read_only_directory_say_why(tmp_path: Path) -> None:
    home = tmp_path / "ro"
    home.mkdir()
    assert cli(*ADD, "--cron", "0 3 * * *", cwd=home).returncode == 0
    tmp_path.chmod(0o755)
    home.chmod(0o555)
    for command in ("list", "history"):
        done = cli(command, "--db", "t.sqlite", cwd=home, user=65534)
        assert done.returncode == 1
        assert done.stderr == (
            f"{ERR}--db: cannot open t.sqlite: the file is not writable and its directory is "
            "read-only; SQLite is opened read-write even to read (its -wal and -shm files live "
            "beside it), so copy t.sqlite to a writable directory and pass that copy as --db\n"
        )
    home.chmod(0o755)
