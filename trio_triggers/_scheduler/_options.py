"""``SchedulerOptions`` and their validation (``triggers.md`` §12.1).

Constructing the options does not validate them (they are a plain frozen struct, so they can be
built from configuration and passed around). ``open_scheduler`` validates everything except
``poll_interval`` in a fixed order and stops at the first failure; ``serve`` validates
``poll_interval``, the one option only the supervisor loop uses.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import msgspec

from .._constants import DEFAULT_CONCURRENCY, DEFAULT_HOST
from .._durations import Duration, duration_ms
from .._errors import TriggerError

__all__ = ["SchedulerOptions", "Settings", "validate_options", "validate_poll_interval"]


class SchedulerOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Scheduler settings; durations are seconds (``int``/``float``) or ``timedelta``."""

    poll_interval: Duration = 60
    run_poll_interval: Duration = 15
    concurrency: int = DEFAULT_CONCURRENCY
    start_timeout: Duration = 240
    inspect_timeout: Duration = 30
    cancel_timeout: Duration = 30
    fire_retention: Duration = datetime.timedelta(days=30)
    host: str = DEFAULT_HOST
    #: How often a tick on an indexed store also sweeps every row that holds a run or a
    #: reservation (``holding()``), so runs of a dead process are recovered
    #: (``docs/scheduler.md``, "What a tick reads").
    recovery_interval: Duration = 30
    #: ``True`` forces the reference tick that lists every row (``store.list()``) even on a
    #: store with the attention index; a store without one always gets it.
    listing: bool = False


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated options in integer milliseconds (what the scheduler actually uses)."""

    run_poll_interval_ms: int
    concurrency: int
    start_timeout_ms: int
    inspect_timeout_ms: int
    cancel_timeout_ms: int
    fire_retention_ms: int
    host: str
    recovery_interval_ms: int = 30_000
    listing: bool = False


def validate_options(options: SchedulerOptions) -> Settings:
    """Check the options in the contract's order; raise ``invalid_options`` at the first failure."""
    run_poll_interval_ms = duration_ms("run_poll_interval", options.run_poll_interval)
    concurrency = options.concurrency
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TriggerError(
            "invalid_options", "concurrency must be a positive integer", "concurrency"
        )
    return Settings(
        run_poll_interval_ms=run_poll_interval_ms,
        concurrency=concurrency,
        start_timeout_ms=duration_ms("start_timeout", options.start_timeout),
        inspect_timeout_ms=duration_ms("inspect_timeout", options.inspect_timeout),
        cancel_timeout_ms=duration_ms("cancel_timeout", options.cancel_timeout),
        fire_retention_ms=duration_ms("fire_retention", options.fire_retention),
        host=options.host,
        recovery_interval_ms=duration_ms("recovery_interval", options.recovery_interval),
        listing=options.listing is True,
    )


def validate_poll_interval(options: SchedulerOptions) -> int:
    """``poll_interval`` in milliseconds (checked by ``serve``)."""
    return duration_ms("poll_interval", options.poll_interval)
