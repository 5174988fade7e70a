"""The human side of time in the CLI, with pendulum: rendering instants, parsing what people type.

The core speaks epoch milliseconds (UTC) everywhere; people read and type local times, offsets,
"in 3 minutes" and "30d". This module is the one place that translates, so every command renders
and parses the same way:

* :func:`format_local` renders an instant in a zone with its abbreviation
  (``2026-03-10 03:00:00 CET``);
* :func:`relative` renders it against *now* as people say it (``in 3 minutes``,
  ``2 hours ago``), ``now`` being passed in (the CLI's wall clock, a test's fixed instant);
* :func:`parse_duration` reads ``30d``, ``12h``, ``1.5m``, ``250ms``, plain seconds, and ISO 8601
  durations (``P30D``, ``PT2H30M``);
* :func:`parse_instant` reads an ISO 8601 instant (with an offset or ``Z``; a naive one is a
  wall time in the given zone), ``now``, or a duration relative to now (``2h`` and ``-2h`` are
  two hours ago, ``+2h`` two hours ahead): what ``--from``/``--to`` options accept.
"""

from __future__ import annotations

import re

import pendulum

__all__ = ["format_local", "parse_duration", "parse_instant", "relative", "zone"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_RELATIVE = re.compile(r"^\s*([+-]?)\s*(.+?)\s*$")


_FIXED_OFFSET = re.compile(r"^([+-])([0-9]{2}):([0-9]{2})$")


def zone(name: str | None) -> pendulum.Timezone | pendulum.FixedTimezone:
    """A trigger's timezone as pendulum reads it: an IANA name, ``±HH:MM`` (a fixed offset, as
    the cron engine accepts), or ``None`` for the host's zone. Raises ``ValueError``."""
    if name is None:
        return pendulum.tz.local_timezone()
    fixed = _FIXED_OFFSET.match(name)
    if fixed is not None:
        sign, hours, minutes = fixed.groups()
        seconds = (int(hours) * 60 + int(minutes)) * 60
        return pendulum.FixedTimezone(-seconds if sign == "-" else seconds, name=name)
    try:
        return pendulum.timezone(name)
    except pendulum.tz.exceptions.InvalidTimezone as exc:
        raise ValueError(f"unknown timezone: {name!r}") from exc


def _epoch_ms(when: pendulum.DateTime) -> int:
    """Exact epoch milliseconds (integer arithmetic: no float rounding)."""
    delta = when - pendulum.from_timestamp(0, tz="UTC")
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def _at(ms: int) -> pendulum.DateTime:
    return pendulum.from_timestamp(ms / 1000, tz="UTC")


def format_local(ms: int | None, tz: str | None = None) -> str:
    """``ms`` as ``YYYY-MM-DD HH:MM:SS`` wall time in ``tz`` (see :func:`zone`; ``None`` is the
    host's zone) followed by the zone's abbreviation (``CET``, ``+05:30``); ``-`` for ``None``."""
    if ms is None:
        return "-"
    local = _at(ms).in_timezone(zone(tz))
    return f"{local.format('YYYY-MM-DD HH:mm:ss')} {local.tzname() or tz}"


def relative(ms: int | None, now_ms: int) -> str:
    """``ms`` against ``now_ms`` as people say it: ``in 3 minutes``, ``2 hours ago``,
    ``a few seconds ago``; ``-`` for ``None``."""
    if ms is None:
        return "-"
    return pendulum.format_diff(_at(ms).diff(_at(now_ms)), True)


def _iso_duration_seconds(text: str) -> float | None:
    if not text.upper().startswith("P"):
        return None
    try:
        parsed = pendulum.parse(text.upper())
    except (ValueError, pendulum.parsing.exceptions.ParserError):
        return None
    if not isinstance(parsed, pendulum.Duration):
        return None
    if parsed.years or parsed.months:
        # A month or a year has no fixed length in seconds: refuse rather than guess.
        raise ValueError(f"duration {text!r} has years or months; use days (e.g. P30D)")
    return parsed.total_seconds()


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"90s"``, ``"1.5m"``, ``"250ms"``, plain seconds, or an ISO 8601
    duration (``"P30D"``, ``"PT2H"``) -> seconds (positive)."""
    seconds = _iso_duration_seconds(text.strip())
    if seconds is None:
        match = _DURATION.match(text)
        if match is None:
            raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 12h, 30d or P30D)")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return seconds


def parse_instant(text: str, *, now_ms: int, tz: str | None = None) -> int:
    """An instant people type -> epoch ms.

    * ``now``;
    * an ISO 8601 date or date-time: with an offset or ``Z`` it is that instant; without one it
      is a wall time in ``tz`` (``None``: UTC), e.g. ``2026-03-10T02:00:00+01:00``,
      ``2026-03-10T01:00Z``, ``2026-03-10 02:00``;
    * a duration relative to ``now_ms`` (see :func:`parse_duration`): ``2h`` or ``-2h`` is two
      hours ago (the usual meaning of ``--from 2h``), ``+30m`` thirty minutes ahead.
    """
    stripped = text.strip()
    if stripped.lower() == "now":
        return now_ms
    match = _RELATIVE.match(stripped)
    if match is not None:
        sign, body = match.groups()
        try:
            seconds = parse_duration(body)
        except ValueError:
            seconds = None
        if seconds is not None:
            delta = round(seconds * 1000)
            return now_ms + delta if sign == "+" else now_ms - delta
    try:
        # exact: a time of day alone stays a Time (pendulum would otherwise put it on today's
        # date, read from the OS clock behind our back), refused below.
        parsed = pendulum.parse(stripped, exact=True, tz=zone(tz) if tz is not None else "UTC")
    except (ValueError, pendulum.parsing.exceptions.ParserError) as exc:
        raise ValueError(
            f"not an instant: {text!r} (use an ISO 8601 time such as 2026-03-10T02:00:00+01:00, "
            f"'now', or a duration such as 2h)"
        ) from exc
    if isinstance(parsed, pendulum.DateTime):
        return _epoch_ms(parsed)
    if isinstance(parsed, pendulum.Date):
        midnight = pendulum.datetime(
            parsed.year, parsed.month, parsed.day, tz=zone(tz) if tz is not None else "UTC"
        )
        return _epoch_ms(midnight)
    raise ValueError(f"not an instant: {text!r} (a time of day or a duration has no date)")
