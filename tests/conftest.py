"""Shared fixtures. Area-specific fixtures live in the area's conftest or helper modules."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator


def pytest_configure(config: pytest.Config) -> None:
    # Deterministic property tests: the same examples on every run unless asked otherwise.
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


BARE_SKIP_MESSAGES = ("", "Skipped")
"""What pytest shows for a skip that gives no reason (pytest-trio reports a skip raised inside an
async test or fixture this way, dropping its message)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Every skip names its reason: a skip without one fails the test, saying where to add it
    (``pytest.mark.skipif(..., reason=...)`` decided at collection, as ``tests/pg_support.py``'s
    ``postgres_marks`` does)."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        message = str(longrepr[2]).removeprefix("Skipped: ").strip()
        if message in BARE_SKIP_MESSAGES and not hasattr(report, "wasxfail"):
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} was skipped without a reason: give the skip a reason, decided "
                "at collection (pytest.mark.skipif(..., reason=...) or a param's marks)"
            )
    return report


@pytest.fixture(autouse=True)
def _library_loggers_as_they_were() -> Generator[None]:
    """Give the library's loggers back as each test found them.

    A test (or a docs example run in-process, such as docs/simulation.md's quiet-logging line)
    that sets the ``trio_triggers`` logger's level or handlers would otherwise silence every
    later test that asserts a log line with ``caplog``: CI once failed the SQLite lock tests
    that way, only in a full run.
    """
    loggers = [logging.getLogger(name) for name in ("trio_triggers", "psycopg")]
    saved = [(lg, lg.level, lg.propagate, lg.disabled, lg.handlers[:]) for lg in loggers]
    yield
    for lg, level, propagate, disabled, handlers in saved:
        lg.setLevel(level)
        lg.propagate, lg.disabled, lg.handlers[:] = propagate, disabled, handlers
