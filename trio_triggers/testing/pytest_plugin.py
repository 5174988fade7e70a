"""pytest fixtures for simulations: ``pytest_plugins = ["trio_triggers.testing.pytest_plugin"]``.

Fixtures:

* ``simulate_seed``: a callable ``simulate_seed(seed, **config) -> SimReport`` that runs one
  world synchronously and, on a violation, fails the test with the seed, the invariant and the
  trace tail (the :class:`~trio_triggers.testing.SimulationViolation` message).
* ``quiet_trigger_logs``: silences the ``trio_triggers`` loggers for the test (a simulated week
  logs thousands of injected failures).

Options: ``--sim-seeds N`` (default 0 = the test's own seeds) is available to tests through
``request.config.getoption("sim_seeds")`` for opt-in long local runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from ._invariants import SimulationViolation
from ._simulate import SimConfig, SimReport, simulate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["pytest_addoption", "quiet_trigger_logs", "simulate_seed"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trio-triggers simulation")
    group.addoption(
        "--sim-seeds",
        type=int,
        default=0,
        dest="sim_seeds",
        help="number of extra simulation seeds for tests that opt in (default 0)",
    )


@pytest.fixture
def quiet_trigger_logs() -> Iterator[None]:
    logger = logging.getLogger("trio_triggers")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.fixture
def simulate_seed(quiet_trigger_logs: None) -> Callable[..., SimReport]:
    def run(seed: int, config: SimConfig | None = None, **overrides: Any) -> SimReport:
        base = config if config is not None else SimConfig()
        if overrides:
            base = msgspec.structs.replace(base, **overrides)
        try:
            return simulate(seed, base)
        except SimulationViolation as exc:
            pytest.fail(str(exc), pytrace=False)

    return run
