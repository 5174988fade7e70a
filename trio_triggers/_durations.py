"""Duration options (``triggers.md`` §1.2): seconds or ``timedelta`` to integer milliseconds."""

from __future__ import annotations

import datetime
import math
from fractions import Fraction

from ._constants import MAX_SAFE_INTEGER
from ._errors import TriggerError

__all__ = ["Duration", "duration_ms"]

Duration = int | float | datetime.timedelta


def duration_ms(name: str, value: object) -> int:
    """Convert a duration option to positive integer milliseconds.

    Seconds (``int``/``float``, never ``bool``) become ``round(seconds * 1000)``; a ``timedelta``
    becomes its exact microsecond count divided by 1000, rounded. A positive value that rounds
    to 0 becomes 1, so a tiny positive duration never turns into "no wait at all".

    Raises ``TriggerError("invalid_options", ..., path=name)``: ``<name> must be a valid
    duration`` for another type, ``<name> must be a finite positive duration`` for zero,
    negative, NaN, infinite or larger than ``MAX_SAFE_INTEGER`` milliseconds.
    """
    ms: int
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros <= 0:
            raise _not_positive(name)
        ms = round(Fraction(micros, 1000))
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TriggerError("invalid_options", f"{name} must be a valid duration", name)
    elif isinstance(value, float):
        if not math.isfinite(value) or value <= 0:
            raise _not_positive(name)
        scaled = value * 1000
        if not math.isfinite(scaled):
            raise _not_positive(name)
        ms = round(scaled)
    else:
        if value <= 0:
            raise _not_positive(name)
        ms = int(value) * 1000
    if ms > MAX_SAFE_INTEGER:
        raise _not_positive(name)
    return max(ms, 1)


def _not_positive(name: str) -> TriggerError:
    return TriggerError("invalid_options", f"{name} must be a finite positive duration", name)
