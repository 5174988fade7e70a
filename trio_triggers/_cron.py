"""Cron expressions on wall-clock time (``triggers.md`` §4).

A cron is a schedule of **wall-clock times in a zone**. The fields are matched by croniter on
*naive* wall times (encoded as the UTC instant with the same calendar reading, so croniter
never consults a zone or the host's clock), and this module turns matching wall times into
instants with the §4.2 rules:

* a wall time that exists once maps to its instant;
* a wall time inside a spring-forward gap maps to ``wall - offset_before`` (02:30 on the gap
  day fires at 03:30 daylight time), once;
* a wall time repeated by fall-back fires once, at its first instant, unless the hour field is
  unconstrained, in which case it fires in both passes;
* occurrences are whole seconds.

The search loops are exactly the reference algorithm of §4.2. Three shortcuts keep them fast
without changing an answer: (1) when the zone has no transition within a few days of the
candidate (checked against a per-zone table of hourly offset samples), the loop is known to
stop at the next candidate, so that extra croniter call is skipped; (2) with exactly one
transition within a few days, the answer is the better of one croniter call on each side of
it (see ``_next_near``) instead of a walk through every matching wall time in between; (3) the
field parsing and the croniter object are compiled once per expression and shared.
"""

from __future__ import annotations

import bisect
import datetime
import os
import re
import threading
import zoneinfo
from functools import lru_cache
from typing import Final, Literal, final

from croniter import croniter

from ._constants import MAX_OCCURRENCES, is_safe_integer
from ._errors import TriggerError

__all__ = ["Cron", "host_timezone"]

_S: Final = 1000
_H: Final = 3_600_000
_D: Final = 86_400_000
_YEAR10: Final = 3653 * _D  # ten calendar years are at most 3653 days
_YEAR8: Final = 2922 * _D

# Representable wall times, as whole seconds of the UTC-encoded calendar reading.
_MIN_WALL_S: Final = -62_135_596_800  # 0001-01-01T00:00:00
_MAX_WALL_S: Final = 253_402_300_799  # 9999-12-31T23:59:59
_MIN_WALL: Final = _MIN_WALL_S * _S
_MAX_WALL: Final = _MAX_WALL_S * _S
# Instants at which a zone's offset may be asked (a zone offset is always under a day).
_MIN_SAFE_INSTANT: Final = _MIN_WALL + 2 * _D
_MAX_SAFE_INSTANT: Final = _MAX_WALL - 2 * _D
# Probing from `now` in this range cannot be exhausted for a statically satisfiable cron:
# such a cron matches at least once in any 8 years and a day.
_PROBE_SAFE_LOW: Final = _MIN_WALL + 2 * _D
_PROBE_SAFE_HIGH: Final = 253_087_000_000_000  # 9990-01-01, far enough from year 9999

_EPOCH: Final = datetime.datetime(1970, 1, 1)

Operation = Literal["next", "previous", "interval"]

# --- field syntax (§4.1) ---------------------------------------------------------------------

_MONTHS: Final = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
_DAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


class _FieldSpec:
    __slots__ = ("high", "low", "name", "names")

    def __init__(self, name: str, low: int, high: int, names: tuple[str, ...] = ()) -> None:
        self.name = name
        self.low = low
        self.high = high
        self.names = {text: low + index for index, text in enumerate(names)}


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day of month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTHS)
_DOW = _FieldSpec("day of week", 0, 6, _DAYS)
_SPECS: Final = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)

_ITEM: Final = re.compile(
    r"(?:(?P<star>\*)|(?P<a>[0-9]+|[A-Za-z]{3})(?:-(?P<b>[0-9]+|[A-Za-z]{3}))?)"
    r"(?:/(?P<step>[0-9]+))?",
    re.ASCII,
)
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _invalid_value(spec: _FieldSpec, item: str) -> TriggerError:
    return TriggerError(
        "invalid_cron", f"Invalid value for {spec.name} in cron expression: '{item}'"
    )


def _number(digits: str) -> int:
    """ASCII digits as an int; absurdly long numbers (past ``int``'s digit limit) become -1."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 6 else -1


def _value(spec: _FieldSpec, text: str, item: str) -> int:
    if text.isdigit():  # ASCII digits only: the item pattern allows nothing else
        number = _number(text)
    else:
        found = spec.names.get(text.lower())
        if found is None:
            raise _invalid_value(spec, item)
        number = found
    if not spec.low <= number <= spec.high:
        raise _invalid_value(spec, item)
    return number


@lru_cache(maxsize=4096)  # distinct expressions share their fields ("0", "*", "*/5")
def _parse_field(spec: _FieldSpec, segment: str) -> frozenset[int]:
    values: set[int] = set()
    for item in segment.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise _invalid_value(spec, item)
        step_text = match.group("step")
        step = 1
        if step_text is not None:
            step = _number(step_text)
            if not 1 <= step <= spec.high:
                raise _invalid_value(spec, item)
        if match.group("star"):
            low, high = spec.low, spec.high
        else:
            low = _value(spec, match.group("a"), item)
            b = match.group("b")
            if b is None:
                if step_text is not None:  # `5/15`: a step needs `*` or a range
                    raise _invalid_value(spec, item)
                high = low
            else:
                high = _value(spec, b, item)
                if high < low:
                    raise _invalid_value(spec, item)
        values.update(range(low, high + 1, step))
    return frozenset(values)


@lru_cache(maxsize=4096)
def _field(spec: _FieldSpec, segment: str) -> tuple[frozenset[int], str, tuple[int, ...]]:
    """A field's values, its croniter text (``*`` for the whole range) and its sorted values:
    computed once per distinct (field, text), since 100 000 distinct daily schedules share
    only 60 + 60 + 24 field texts."""
    values = _parse_field(spec, segment)
    ordered = tuple(sorted(values))
    rendered = "*" if len(values) == spec.high - spec.low + 1 else ",".join(map(str, ordered))
    return values, rendered, ordered


class _Compiled:
    """The parsed fields of one expression plus its (shared, locked) croniter object."""

    __slots__ = (
        "_wallcron",
        "croniter_expression",
        "day_times",
        "every_hour",
        "fields",
        "has_seconds",
        "lock",
        "satisfiable",
    )

    def __init__(self, segments: list[str]) -> None:
        self.has_seconds = len(segments) == 6
        texts = segments if self.has_seconds else ["0", *segments]
        parsed = [_field(spec, text) for spec, text in zip(_SPECS, texts, strict=True)]
        self.fields = tuple(values for values, _, _ in parsed)
        rendered = [text for _, text, _ in parsed]
        self.every_hour = rendered[2] == "*"
        dom_free, dow_free = rendered[3] == "*", rendered[5] == "*"
        months, doms = self.fields[4], self.fields[3]
        # Only a day-of-month restriction on its own can be impossible (30 February);
        # with a constrained weekday the OR rule always finds a day.
        self.satisfiable = (
            dom_free
            or not dow_free
            or any(day <= _DAYS_IN_MONTH[month - 1] for month in months for day in doms)
        )
        self.croniter_expression = " ".join(rendered if self.has_seconds else rendered[1:])
        # Built on first use: constructing a croniter costs about 0.3 ms, which a registration
        # of 100 000 distinct schedules would pay several times over, and an expression that
        # matches every day never needs one (below).
        self._wallcron: croniter | None = None
        self.lock = threading.Lock()
        # An expression whose day-of-month, month and day-of-week are all unrestricted matches
        # the same times of day on every day: its next and previous matches are found from the
        # sorted second, minute and hour values alone (see _day_call).
        self.day_times: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
        if dom_free and dow_free and len(months) == 12:
            self.day_times = (parsed[0][2], parsed[1][2], parsed[2][2])

    @property
    def wallcron(self) -> croniter:
        built = self._wallcron
        if built is None:
            if self.has_seconds:
                built = croniter(self.croniter_expression, 0.0, second_at_beginning=True)
            else:
                built = croniter(self.croniter_expression, 0.0)
            self._wallcron = built
        return built

    def _day_call(self, start_s: int, is_prev: bool) -> int:
        """The match strictly after (before) ``start_s`` for an every-day expression.

        Wall seconds are UTC-encoded naive times, so a day is exactly 86 400 of them; within
        a day the matches are the (hour, minute, second) triples of the three sorted fields,
        in lexicographic order, and the next (previous) one is found field by field.
        """
        assert self.day_times is not None
        seconds, minutes, hours = self.day_times
        day, tod = divmod(start_s, 86_400)
        h, rest = divmod(tod, 3_600)
        m, sec = divmod(rest, 60)
        if not is_prev:
            if h in hours:
                if m in minutes:
                    i = bisect.bisect_right(seconds, sec)
                    if i < len(seconds):
                        return day * 86_400 + h * 3_600 + m * 60 + seconds[i]
                i = bisect.bisect_right(minutes, m)
                if i < len(minutes):
                    return day * 86_400 + h * 3_600 + minutes[i] * 60 + seconds[0]
            i = bisect.bisect_right(hours, h)
            if i < len(hours):
                return day * 86_400 + hours[i] * 3_600 + minutes[0] * 60 + seconds[0]
            return (day + 1) * 86_400 + hours[0] * 3_600 + minutes[0] * 60 + seconds[0]
        if h in hours:
            if m in minutes:
                i = bisect.bisect_left(seconds, sec)
                if i > 0:
                    return day * 86_400 + h * 3_600 + m * 60 + seconds[i - 1]
            i = bisect.bisect_left(minutes, m)
            if i > 0:
                return day * 86_400 + h * 3_600 + minutes[i - 1] * 60 + seconds[-1]
        i = bisect.bisect_left(hours, h)
        if i > 0:
            return day * 86_400 + hours[i - 1] * 3_600 + minutes[-1] * 60 + seconds[-1]
        return (day - 1) * 86_400 + hours[-1] * 3_600 + minutes[-1] * 60 + seconds[-1]

    def matches(self, wall_s: int) -> bool:
        """Whether a whole-second wall time (UTC-encoded seconds) matches every field."""
        when = _EPOCH + datetime.timedelta(seconds=wall_s)
        second, minute, hour, dom, month, dow = self.fields
        if not (
            when.second in second
            and when.minute in minute
            and when.hour in hour
            and when.month in month
        ):
            return False
        weekday = (when.weekday() + 1) % 7
        dom_free = len(dom) == 31
        dow_free = len(dow) == 7
        if dom_free or dow_free:
            return when.day in dom and weekday in dow
        return when.day in dom or weekday in dow

    def _call(self, start_s: int, is_prev: bool) -> int | None:
        if self.day_times is not None:
            return self._day_call(start_s, is_prev)
        try:
            with self.lock:
                found = (
                    self.wallcron.get_prev(float, start_s)
                    if is_prev
                    else self.wallcron.get_next(float, start_s)
                )
        except (ValueError, OverflowError, OSError, ArithmeticError):
            return None  # croniter ran off the calendar (CroniterBadDateError is a ValueError)
        return int(found)

    def wall_next(self, w: int) -> int | None:
        """The first matching whole-second wall time strictly after ``w`` (ms), or ``None``."""
        if not self.satisfiable:
            return None
        start_s = w // _S
        if start_s >= _MAX_WALL_S:
            return None
        if start_s < _MIN_WALL_S:
            if w < _MIN_WALL - _YEAR10:
                return None
            if self.matches(_MIN_WALL_S):
                return _MIN_WALL
            start_s = _MIN_WALL_S
        found = self._call(start_s, is_prev=False)
        if found is None or found > _MAX_WALL_S:
            return None
        result = found * _S
        if result - w > _YEAR8 and not _within_ten_years(w, result, forward=True):
            return None
        return result

    def wall_prev(self, w: int) -> int | None:
        """The last matching whole-second wall time strictly before ``w`` (ms), or ``None``."""
        if not self.satisfiable:
            return None
        start_s = -((-w) // _S)  # ceil: "strictly before w" for a fractional w
        if start_s <= _MIN_WALL_S:
            return None
        if start_s > _MAX_WALL_S:
            if w > _MAX_WALL + _YEAR10:
                return None
            if self.matches(_MAX_WALL_S):
                return _MAX_WALL
            start_s = _MAX_WALL_S
        found = self._call(start_s, is_prev=True)
        if found is None or found < _MIN_WALL_S:
            return None
        result = found * _S
        if w - result > _YEAR8 and not _within_ten_years(w, result, forward=False):
            return None
        return result


def _within_ten_years(start: int, found: int, *, forward: bool) -> bool:
    """Whether ``found`` lies within 10 calendar years of ``start`` (wall ms)."""
    if not _MIN_WALL <= start <= _MAX_WALL:
        return True  # the calendar bound already limits the search
    when = _EPOCH + datetime.timedelta(milliseconds=start)
    year = when.year + (10 if forward else -10)
    if not 1 <= year <= 9999:
        return True
    try:
        limit = when.replace(year=year)
    except ValueError:  # 29 February -> 1 March
        limit = when.replace(year=year, month=3, day=1)
    limit_ms = (limit - _EPOCH) // datetime.timedelta(milliseconds=1)
    return found <= limit_ms if forward else found >= limit_ms


@lru_cache(maxsize=1024)
def _compile(expression: str) -> _Compiled:
    segments = [segment for segment in expression.split(" ") if segment]
    if len(segments) not in (5, 6):
        raise TriggerError("invalid_cron", "Invalid number of segments in cron expression")
    return _Compiled(segments)


# --- zones ---------------------------------------------------------------------------------------

# A transition: (its instant, the offset before it, the offset from it on), all in ms.
_Step = tuple[int, int, int]

_FIXED_OFFSET: Final = re.compile(r"([+-])([0-9]{2}):([0-9]{2})", re.ASCII)
_BUCKET_HOURS: Final = 1024
_MAX_BUCKETS: Final = 2048  # about 240 years of hourly samples per zone


class _Zone:
    """UTC offsets of one zone, in milliseconds, with a transition table for shortcuts."""

    __slots__ = ("_buckets", "_steps", "fixed", "offset", "tz")

    def __init__(
        self, tz: datetime.tzinfo | None, offset: int = 0, *, fixed: bool | None = None
    ) -> None:
        self.tz = tz
        self.fixed = tz is None if fixed is None else fixed
        self.offset = offset
        # bucket -> (hourly offsets, indices k where off(kH) != off((k+1)H))
        self._buckets: dict[int, tuple[list[int], frozenset[int]]] = {}
        # change hour k -> its transition (instant, offset before, offset after), or None
        self._steps: dict[int, _Step | None] = {}

    def _exact(self, t: int) -> int:
        seconds = min(max(t, _MIN_SAFE_INSTANT), _MAX_SAFE_INSTANT) // _S
        delta = datetime.datetime.fromtimestamp(seconds, self.tz).utcoffset()
        assert delta is not None
        return (delta.days * 86_400 + delta.seconds) * _S + delta.microseconds // 1000

    def _bucket(self, index: int) -> tuple[list[int], frozenset[int]]:
        found = self._buckets.get(index)
        if found is None:
            first = index * _BUCKET_HOURS
            samples = [self._exact((first + k) * _H) for k in range(_BUCKET_HOURS + 1)]
            changes = frozenset(
                first + k for k in range(_BUCKET_HOURS) if samples[k] != samples[k + 1]
            )
            found = (samples, changes)
            if len(self._buckets) >= _MAX_BUCKETS:  # a far-ranging caller: start over
                self._buckets.clear()
            self._buckets[index] = found
        return found

    def off(self, t: int) -> int:
        """The zone's offset at instant ``floor(t / 1000) * 1000``."""
        if self.fixed:
            return self.offset
        if not _MIN_SAFE_INSTANT <= t <= _MAX_SAFE_INSTANT:
            return self._exact(t)
        hour = t // _H
        samples, changes = self._bucket(hour // _BUCKET_HOURS)
        if hour in changes:
            return self._exact(t)
        return samples[hour % _BUCKET_HOURS]

    def stable(self, low: int, high: int) -> bool:
        """Whether no transition lies within ``[low, high]`` (conservative)."""
        if self.fixed:
            return True
        if not (low >= _MIN_SAFE_INSTANT and high <= _MAX_SAFE_INSTANT):
            return False
        first, last = low // _H - 1, high // _H + 1
        for index in range(first // _BUCKET_HOURS, last // _BUCKET_HOURS + 1):
            changes = self._bucket(index)[1]
            if changes and any(first <= k <= last for k in changes):
                return False
        return True

    def _step(self, hour: int) -> _Step | None:
        """The transition inside change hour ``hour``, found by bisecting whole seconds.

        ``off`` asks the zone itself inside a change hour, so it steps from the offset at
        ``hour * H`` to the one at ``(hour + 1) * H`` at the first second that reads the new
        one. ``None`` if that second does not read the later hour's offset (an hour holding
        more than one transition: tzdata has none, the caller then takes the slow path).
        """
        if hour in self._steps:
            return self._steps[hour]
        low, high = hour * 3_600, (hour + 1) * 3_600
        before, after = self._exact(low * _S), self._exact(high * _S)
        while high - low > 1:  # invariant: _exact(low) == before != _exact(high)
            middle = (low + high) // 2
            if self._exact(middle * _S) == before:
                low = middle
            else:
                high = middle
        step: _Step | None = (high * _S, before, after)
        if self._exact(high * _S) != after or before % _S or after % _S:
            step = None
        if len(self._steps) >= _MAX_BUCKETS:
            self._steps.clear()
        self._steps[hour] = step
        return step

    def lone_step(self, low: int, high: int) -> _Step | None:
        """The one transition within ``[low, high]`` (widened by an hour each side).

        With none, ``(low, offset, offset)``: a transition that changes nothing, so the same
        two-run search applies. ``None`` with more than one, or one that cannot be located
        exactly: the caller then keeps the reference search.
        """
        if self.fixed or not (low >= _MIN_SAFE_INSTANT and high <= _MAX_SAFE_INSTANT):
            return None
        first, last = low // _H - 1, high // _H + 1
        found: _Step | None = None
        for index in range(first // _BUCKET_HOURS, last // _BUCKET_HOURS + 1):
            for k in self._bucket(index)[1]:
                if first <= k <= last:
                    if found is not None:
                        return None
                    found = self._step(k)
                    if found is None:
                        return None
        if found is None:
            offset = self.off(low)
            return (low, offset, offset)
        return found


_UTC_ZONE: Final = _Zone(None, 0)


@lru_cache(maxsize=512)
def _named_zone(key: str) -> _Zone:
    """The zone for a timezone string; raises ``invalid_cron`` for an unknown one."""
    fixed = _FIXED_OFFSET.fullmatch(key)
    if fixed is not None:
        sign, hours, minutes = fixed.groups()
        if int(hours) > 23 or int(minutes) > 59:
            raise _invalid_zone()
        offset = (int(hours) * 60 + int(minutes)) * 60_000
        return _Zone(None, -offset if sign == "-" else offset)
    if key in _HOST_DEPENDENT or key.startswith(_HOST_DEPENDENT_TREES):
        raise _invalid_zone()
    try:
        tz = zoneinfo.ZoneInfo(key)
    except Exception:  # ZoneInfoNotFoundError, ValueError for odd paths, OSError
        raise _invalid_zone() from None
    if key in _UTC_NAMES and _always_utc(tz):
        # UTC under any of its names has no transition: searched as a fixed offset (no
        # hourly offset table per lookup), the most common zone of a large config costs what
        # an absent offset does. The zone object is kept, so its key still reads back.
        return _Zone(tz, 0, fixed=True)
    return _Zone(tz)


# tzdata's names for UTC itself (links to Etc/UTC or Etc/GMT, offset 0 for all time).
_UTC_NAMES: Final = frozenset(
    {
        "UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu",
        "GMT", "Etc/GMT", "Greenwich", "Etc/Greenwich",
    }
)  # fmt: skip


def _always_utc(tz: datetime.tzinfo) -> bool:
    """Whether ``tz`` reads offset 0 at a spread of instants (a guard against odd tzdata)."""
    for seconds in (-2_208_988_800, 0, 946_684_800, 4_102_444_800):
        if datetime.datetime.fromtimestamp(seconds, tz).utcoffset() != datetime.timedelta(0):
            return False
    return True


# Names in a zoneinfo directory whose meaning depends on the host, not on tzdata: the host's
# own zone (`localtime` links to /etc/localtime), the rules POSIX TZ strings borrow, a
# placeholder, and the leap-second ("right/") and duplicate ("posix/") trees that only some
# installations ship. An explicit zone must mean the same on every host.
_HOST_DEPENDENT: Final = frozenset({"localtime", "posixrules", "Factory"})
_HOST_DEPENDENT_TREES: Final = ("right/", "posix/")


def _invalid_zone() -> TriggerError:
    return TriggerError("invalid_cron", "Invalid time zone in cron expression", "timezone")


def _zone_or_none(key: str) -> _Zone | None:
    if _FIXED_OFFSET.fullmatch(key):
        return None  # TZ must name an IANA key
    try:
        return _named_zone(key)
    except TriggerError:
        return None


@lru_cache(maxsize=1)
def _system_zone() -> _Zone:
    """The system's configured zone: ``/etc/localtime`` (its link target), ``/etc/timezone``."""
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:  # pragma: no cover - realpath rarely fails
        target = ""
    marker = "/zoneinfo/"
    if marker in target:
        zone = _zone_or_none(target.rsplit(marker, 1)[1])
        if zone is not None:
            return zone
    try:
        with open("/etc/timezone", encoding="utf-8") as handle:
            key = handle.readline().strip()
    except OSError:
        key = ""
    if key:
        zone = _zone_or_none(key)
        if zone is not None:
            return zone
    try:
        with open("/etc/localtime", "rb") as handle:
            return _Zone(zoneinfo.ZoneInfo.from_file(handle))
    except (OSError, ValueError):
        return _UTC_ZONE


def _host_zone() -> _Zone:
    tz = os.environ.get("TZ", "")
    key = tz[1:] if tz.startswith(":") else tz
    if key:
        zone = _zone_or_none(key)
        if zone is not None:
            return zone
    return _system_zone()


def host_timezone() -> str | None:
    """The IANA key of the host zone an absent timezone means right now (§4.4).

    A non-empty ``TZ`` (a leading ``:`` ignored) naming an IANA key wins; otherwise the
    system's configured zone (``/etc/localtime``'s link target, then ``/etc/timezone``, read
    once per process); otherwise UTC. ``None`` when the system zone has no key.
    """
    zone = _host_zone()
    if zone.tz is None:
        return "UTC"
    return getattr(zone.tz, "key", None)


# --- the search (§4.2) ----------------------------------------------------------------------------


def _resolve(zone: _Zone, w: int, every_hour: bool) -> list[int]:
    b = zone.off(w - _D)
    a = zone.off(w + _D)
    if a == b:
        return [w - b]  # kept, or else the gap rule: the same instant either way
    kept = [w - o for o in (b, a) if zone.off(w - o) == o]
    if not kept:
        return [w - b]  # the gap rule: the offset in force before the transition
    kept.sort()
    return kept if every_hour else kept[:1]


def _next(compiled: _Compiled, zone: _Zone, start: int) -> int | None:
    """``next(start)`` of §4.2, or ``None`` when exhausted first or past 9999-12-31."""
    found = _next_search(compiled, zone, start)
    if found is not None and found < _MIN_WALL:  # in year 0 (UTC): not an occurrence
        found = _next_search(compiled, zone, _MIN_WALL - 1)
    return None if found is None or found > _MAX_WALL else found


def _previous(compiled: _Compiled, zone: _Zone, at: int) -> int | None:
    """``previous_at_or_before(at)`` of §4.2, or ``None`` when exhausted first."""
    found = _previous_search(compiled, zone, at)
    if found is not None and found > _MAX_WALL:  # in year 10000 (UTC): not an occurrence
        found = _previous_search(compiled, zone, _MAX_WALL)
    return None if found is None or found < _MIN_WALL else found


# Near a transition the reference walk below must step through every matching wall time
# until no later one can produce an earlier instant: for `* * * * * *` an hour before a
# one-hour gap that is 3 600 croniter calls. With a single transition T (offset b before, a
# from T on) within a few days, the rules of §4.2 reduce to two runs of wall times:
#
# * walls below T + max(a, b) read offset b: before T, the gap (shifted by the offset
#   before) and the first pass of a repeat, instant w - b;
# * walls from T + a on read offset a, instant w - a; with a constrained hour field the
#   second pass of a repeat does not fire, so that run starts at T + b instead.
#
# `next` is the earlier of the first instant each run offers after `start`, one croniter call
# per run, `previous` the later of their last ones. tests/foundation/test_cron_near_
# transitions.py checks this against the reference walk around every 2027 transition of five
# zones. The answer is only taken when it lies within two days, where the single-transition
# picture provably holds for every offset the reference walk would consult; otherwise, or
# with two transitions in the window, the reference walk decides.
_NEAR_BEFORE: Final = 3 * _D
_NEAR_AFTER: Final = 5 * _D
_NEAR_REACH: Final = 2 * _D


def _next_near(compiled: _Compiled, zone: _Zone, start: int) -> int | None:
    """``next(start)`` in at most two croniter calls near a lone transition; ``None``: undecided."""
    step = zone.lone_step(start - _NEAR_BEFORE, start + _NEAR_AFTER)
    if step is None:
        return None
    t, b, a = step
    top = t + max(a, b)  # walls below read b
    low = t + a if compiled.every_hour else top  # walls from here read a
    best: int | None = None
    if start + b < top - _S:  # a whole-second wall in (start + b, top) may exist
        found = compiled.wall_next(start + b)
        if found is None:
            return None
        if found < top:
            best = found - b
    if best is None or best > low - a:  # the second run could still offer an earlier instant
        found = compiled.wall_next(max(start + a, low - 1))
        if found is None:
            return None
        if best is None or found - a < best:
            best = found - a
    return best if best <= start + _NEAR_REACH else None


def _previous_near(compiled: _Compiled, zone: _Zone, u: int) -> int | None:
    """``previous_at_or_before(u)`` (``u`` whole seconds) likewise; ``None``: undecided."""
    step = zone.lone_step(u - _NEAR_AFTER, u + _NEAR_BEFORE)
    if step is None:
        return None
    t, b, a = step
    top = t + max(a, b)
    low = t + a if compiled.every_hour else top
    best: int | None = None
    if u + a >= low:
        found = compiled.wall_prev(u + a + _S)
        if found is None:
            return None
        if found >= low:
            best = found - a
    last = min(u + b, top - _S)  # the latest wall of the first run at or before u
    if best is None or best < last - b:
        found = compiled.wall_prev(last + _S)
        if found is None:
            return None
        if best is None or found - b > best:
            best = found - b
    return best if best >= u - _NEAR_REACH else None


def _next_search(compiled: _Compiled, zone: _Zone, start: int) -> int | None:
    if zone.fixed:
        found = compiled.wall_next(start + zone.offset)
        return None if found is None else found - zone.offset
    near = _next_near(compiled, zone, start)
    if near is not None:
        return near
    off = zone.off
    w = start + min(off(start - _D), off(start), off(start + _D))
    best: int | None = None
    every_hour = compiled.every_hour
    while True:
        found = compiled.wall_next(w)
        if found is None:
            return best
        w = found
        if best is not None and w - max(off(w - _D), off(w), off(w + _D)) >= best:
            return best
        for i in _resolve(zone, w, every_hour):
            if start < i and (best is None or i < best):
                best = i
        # Shortcut: with no transition near w, the next candidate cannot beat `best`.
        if best is not None and best <= w + _S - off(w) and zone.stable(w - _D, w + 3 * _D):
            return best


def _previous_search(compiled: _Compiled, zone: _Zone, at: int) -> int | None:
    u = at // _S * _S
    if zone.fixed:
        found = compiled.wall_prev(u + zone.offset + _S)
        return None if found is None else found - zone.offset
    near = _previous_near(compiled, zone, u)
    if near is not None:
        return near
    off = zone.off
    w = u + max(off(u - _D), off(u), off(u + _D)) + _S
    best: int | None = None
    every_hour = compiled.every_hour
    while True:
        found = compiled.wall_prev(w)
        if found is None:
            return best
        w = found
        if best is not None and w - min(off(w - _D), off(w), off(w + _D)) <= best:
            return best
        for i in _resolve(zone, w, every_hour):
            if i <= u and (best is None or best < i):
                best = i
        if best is not None and best >= w - _S - off(w) and zone.stable(w - 3 * _D, w + _D):
            return best


# --- the public object ----------------------------------------------------------------------------


# A scheduler asks the same question for every trigger that shares an expression and a zone
# (a thousand "* * * * * *" triggers in one tick). So the last gap between consecutive
# occurrences is remembered per (expression, zone): ``(p, n)`` with ``p`` an occurrence and
# ``n = next(p)``, so no occurrence lies strictly between them. Every instant in ``[p, n)`` has
# ``previous_at_or_before = p`` and ``next = n``: a tick that reads the clock per trigger (a few
# milliseconds apart) still asks croniter once per expression.
_GAPS: dict[tuple[_Compiled, _Zone], tuple[int, int]] = {}
_MAX_GAPS = 4096


def _next_fast(compiled: _Compiled, zone: _Zone, start: int) -> int | None:
    gap = _GAPS.get((compiled, zone))
    if gap is not None and gap[0] <= start < gap[1]:
        return gap[1]
    return _next(compiled, zone, start)


def _previous_fast(compiled: _Compiled, zone: _Zone, at: int) -> int | None:
    key = (compiled, zone)
    u = at // _S * _S
    gap = _GAPS.get(key)
    if gap is not None and gap[0] <= u < gap[1]:
        return gap[0]
    found = _previous(compiled, zone, at)
    if found is not None:
        following = _next(compiled, zone, found)
        if following is not None and found <= u < following:
            if len(_GAPS) >= _MAX_GAPS:
                _GAPS.clear()
            _GAPS[key] = (found, following)
    return found


@final
class Cron:
    """A parsed cron expression with its timezone; immutable and safe to share.

    Build it with :meth:`Cron.parse`. ``expression`` and ``timezone`` are kept as given; an
    absent timezone means the host's zone, looked up afresh on every operation (§4.4).
    """

    __slots__ = ("_compiled", "_expression", "_timezone", "_zone")

    _compiled: _Compiled
    _expression: str
    _timezone: str | None
    _zone: _Zone | None

    def __init__(self) -> None:
        raise TypeError("use Cron.parse(expression, timezone=None)")

    @classmethod
    def parse(cls, expression: object, timezone: object = None, *, now: int = 0) -> Cron:
        """Parse and validate a 5- or 6-field expression with its timezone (§4.1).

        Raises ``invalid_cron`` for bad syntax or an unknown zone, ``unsatisfiable_cron`` when
        ``next(now)`` finds nothing (30 February, 31 April).
        """
        if not isinstance(expression, str):
            raise TriggerError("invalid_cron", "cron expression must be a string")
        if cls is Cron and type(expression) is str and (timezone is None or type(timezone) is str):
            cron, satisfiable = _cached(expression, timezone)  # the one cache of parsed crons
        else:
            cron, satisfiable = _construct(cls, expression, timezone)
        if not (satisfiable and _PROBE_SAFE_LOW <= now <= _PROBE_SAFE_HIGH):
            cron.next(now)  # the satisfiability probe; the fast path above cannot fail
        return cron

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Cron is immutable")

    def __reduce__(self) -> tuple[object, tuple[str, str | None]]:
        return (Cron.parse, (self._expression, self._timezone))

    @property
    def expression(self) -> str:
        return self._expression

    @property
    def timezone(self) -> str | None:
        return self._timezone

    @property
    def has_seconds(self) -> bool:
        """Whether the expression has six fields (a seconds field first)."""
        return self._compiled.has_seconds

    def __repr__(self) -> str:
        return f"Cron.parse({self._expression!r}, {self._timezone!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cron):
            return NotImplemented
        return (self._expression, self._timezone) == (other._expression, other._timezone)

    def __hash__(self) -> int:
        return hash((self._expression, self._timezone))

    def _resolved_zone(self) -> _Zone:
        return self._zone if self._zone is not None else _host_zone()

    def _exhausted(self, operation: Operation) -> TriggerError:
        return TriggerError(
            "unsatisfiable_cron",
            f"cron expression '{self._expression}' has no {operation} occurrence",
        )

    def next(self, after: int) -> int:
        """The first occurrence strictly after ``after``."""
        found = _next_fast(self._compiled, self._resolved_zone(), after)
        if found is None:
            raise self._exhausted("next")
        return found

    def previous_at_or_before(self, at: int) -> int:
        """The latest occurrence at or before ``floor_to_second(at)``."""
        found = _previous_fast(self._compiled, self._resolved_zone(), at)
        if found is None:
            raise self._exhausted("previous")
        return found

    def occurrences_between(self, start: int, end: int, limit: int | None = None) -> list[int]:
        """The occurrences in ``(start, end]``, ascending (§4.3).

        Without ``limit`` more than ``MAX_OCCURRENCES`` fails ``catch_up_bound_exceeded``;
        with one the result is silently truncated to it.
        """
        if limit is not None and (not is_safe_integer(limit) or limit < 0):
            raise TriggerError(
                "invalid_options",
                f"occurrence limit must be a non-negative safe integer, received {limit!r}",
                "limit",
            )
        cap = MAX_OCCURRENCES + 1 if limit is None else limit
        compiled, zone = self._compiled, self._resolved_zone()
        found: list[int] = []
        cursor = start
        while len(found) < cap:
            candidate = _next(compiled, zone, cursor)
            if candidate is None:
                raise self._exhausted("interval")
            if candidate > end:
                break
            found.append(candidate)
            cursor = candidate
        if limit is None and len(found) > MAX_OCCURRENCES:
            raise TriggerError(
                "catch_up_bound_exceeded",
                f"interval contains more than {MAX_OCCURRENCES} occurrences; "
                f"MAX_OCCURRENCES is {MAX_OCCURRENCES}",
            )
        return found


def _construct(cls: type[Cron], expression: str, timezone: object) -> tuple[Cron, bool]:
    """A new ``Cron`` and whether it is statically satisfiable (no cache, no probe).

    Raises ``invalid_cron`` for bad syntax or an unknown zone.
    """
    compiled = _compile(str.__str__(expression))
    zone: _Zone | None
    if timezone is None:
        zone = None
    elif isinstance(timezone, str):
        zone = _named_zone(str.__str__(timezone))
    else:
        raise _invalid_zone()
    cron = object.__new__(cls)
    object.__setattr__(cron, "_compiled", compiled)
    object.__setattr__(cron, "_expression", expression)
    object.__setattr__(cron, "_timezone", timezone)
    object.__setattr__(cron, "_zone", zone)
    return cron, compiled.satisfiable


@lru_cache(maxsize=4096)
def _cached(expression: str, timezone: str | None) -> tuple[Cron, bool]:
    """The parsed ``(expression, timezone)``: the package's one cache of parsed crons.

    Every reader of a schedule (the declaration's check, ``due_occurrences`` on every tick, the
    scheduler's wake-on-deadline sleep, the attention index on every store write) calls
    :meth:`Cron.parse`, which answers from here. A ``Cron`` is immutable and does not depend on
    ``now`` (an absent timezone is resolved afresh by every operation), so one instance serves
    every caller; only the satisfiability probe depends on ``now`` and :meth:`Cron.parse` runs
    it per call. Parse errors are not cached (``lru_cache`` keeps answers, not exceptions).
    """
    return _construct(Cron, expression, timezone)
