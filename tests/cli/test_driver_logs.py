"""The CLI's stderr shows the library's outage lines, not the driver's reconnect chatter.

psycopg's pool logs every failed reconnect attempt of an outage ("error connecting in ...",
"discarding closed connection") at WARNING; without a handler Python printed each one bare on
stderr. The CLI now routes the ``psycopg`` loggers through its own handler: errors always, the
rest from ``-v`` on (docs/faults.md, "PostgreSQL restarts").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_triggers.cli import _logging_to_stderr

if TYPE_CHECKING:
    import pytest


def _emit() -> None:
    logging.getLogger("psycopg.pool").warning("error connecting in 'trio-triggers:runs'")
    logging.getLogger("psycopg.pool").error("the pool is broken")
    logging.getLogger("trio_triggers.postgres").warning("PostgreSQL is unreachable")


def test_driver_warnings_are_hidden_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    with _logging_to_stderr(0):
        _emit()
    err = capsys.readouterr().err
    assert "error connecting" not in err
    assert "ERROR psycopg.pool: the pool is broken" in err
    assert "WARNING trio_triggers.postgres: PostgreSQL is unreachable" in err
    assert logging.getLogger("psycopg").handlers == []  # restored afterwards


def test_driver_warnings_show_with_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    with _logging_to_stderr(1):
        _emit()
    assert (
        "WARNING psycopg.pool: error connecting in 'trio-triggers:runs'" in capsys.readouterr().err
    )
