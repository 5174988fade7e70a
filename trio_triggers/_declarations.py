"""Declarations (``triggers.md`` §2): ``Schedule``, ``Trigger`` and ``RegisteredTrigger``.

Constructing a struct directly does not validate it (it is how stores rebuild rows they
already validated). ``Schedule.make`` and ``Trigger.make`` decode *untrusted* mappings: they
check every field in declaration order, report the first failure with a dotted ``path`` and a
one-line detail that never repeats a value from the declaration, deep-copy ``input`` and then
parse the cron with its timezone so a declaration that can never fire is refused up front.
"""

from __future__ import annotations

import datetime
import math
import warnings
from collections.abc import Mapping
from typing import Literal

import msgspec

from ._constants import MAX_OCCURRENCES, is_safe_integer
from ._cron import _DOM, _DOW, Cron, _parse_field
from ._errors import TriggerError
from ._json import JsonValue, JsonValueError, copy_json

__all__ = [
    "Backfill",
    "BackfillState",
    "CatchUp",
    "Overlap",
    "Pause",
    "RegisteredTrigger",
    "Schedule",
    "Trigger",
    "overlap_override",
]

Overlap = Literal["skip", "buffer-one", "supersede"]
BackfillState = Literal["running", "done", "cancelled"]
CatchUp = Literal["none", "one", "all"]

_OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer-one", "supersede")
_CATCH_UPS: tuple[CatchUp, ...] = ("none", "one", "all")
_MAX_DETAIL = 512
_MISSING = object()
#: The largest ``jitter`` (seconds): a day. A larger spread is a mistake, not a schedule.
MAX_JITTER_S = 86_400
#: The largest ``pause_after_failures``.
MAX_PAUSE_AFTER_FAILURES = 1000


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """The reusable part of a trigger: the cron, its zone and the three policies."""

    cron: str
    timezone: str | None = None
    overlap: Overlap = "skip"
    catch_up: CatchUp = "none"
    max_catch_up: int = 0

    @classmethod
    def make(cls, mapping: object) -> Schedule:
        """Decode and validate an untrusted mapping (unknown keys are ignored).

        Raises ``invalid_schedule`` (with ``path``), then ``invalid_cron`` or
        ``unsatisfiable_cron`` from parsing the cron with its timezone.
        """
        fields = _decode(mapping, _SCHEDULE_FIELDS, "invalid_schedule")
        schedule = Schedule(**fields)  # type: ignore[arg-type]
        _probe(schedule.cron, schedule.timezone)
        return schedule


class Trigger(msgspec.Struct, frozen=True, kw_only=True):
    """A declared trigger: which flow to start with which input, on which schedule."""

    id: str
    flow_id: str
    input: JsonValue
    cron: str
    timezone: str | None = None
    overlap: Overlap = "skip"
    catch_up: CatchUp = "none"
    max_catch_up: int = 0
    enabled: bool = True
    #: The most a launch is delayed after its boundary, in seconds (``docs/declarations.md``,
    #: "Jitter, windows and pausing after failures"); 0: launched at the boundary.
    jitter: float = 0.0
    #: The window of owed boundaries, epoch ms, both ends inclusive; ``None``: unbounded.
    start_at: int | None = None
    end_at: int | None = None
    #: Pause the trigger when this many runs in a row are recorded ``failed``; ``None``: never.
    pause_after_failures: int | None = None

    @property
    def jitter_ms(self) -> int:
        """``jitter`` in whole milliseconds."""
        return round(self.jitter * 1000)

    @property
    def schedule(self) -> Schedule:
        """The five schedule fields of this trigger."""
        return Schedule(
            cron=self.cron,
            timezone=self.timezone,
            overlap=self.overlap,
            catch_up=self.catch_up,
            max_catch_up=self.max_catch_up,
        )

    @classmethod
    def make(cls, mapping: object) -> Trigger:
        """Decode and validate an untrusted mapping (or an existing ``Trigger``).

        Unknown keys are ignored; ``input`` is deep-copied. Raises ``invalid_trigger`` (with
        ``path``), then ``invalid_cron`` or ``unsatisfiable_cron``. Always returns a plain
        ``Trigger`` (a ``RegisteredTrigger`` passed in loses its registration fields).
        """
        fields = _decode(mapping, _TRIGGER_FIELDS, "invalid_trigger")
        trigger = Trigger(**fields)  # type: ignore[arg-type]
        _probe(trigger.cron, trigger.timezone)
        return trigger


class Pause(msgspec.Struct, frozen=True, kw_only=True):
    """An operator's pause of a trigger: since when (epoch ms, the store's clock), why, by whom.

    A pause is operator state, kept beside the declaration and never part of it, so that
    re-applying a config file (which re-registers declarations) leaves it in place.
    """

    at: int
    note: str | None = None
    by: str | None = None


class Backfill(msgspec.Struct, frozen=True, kw_only=True):
    """A backfill of a trigger: its own boundaries in ``[start, end]``, fired in order.

    Operator state kept with the trigger (``docs/operations.md``, "Backfill"), so it survives
    a crash and any scheduler carries it on. ``next`` is its progress: the next boundary to
    take (``None`` once ``done`` or ``cancelled``); ``done`` counts the boundaries taken, of
    ``total``; ``bound`` is the most it was allowed; ``overlap`` the policy its boundaries are
    claimed under (``None``: the trigger's own). ``created_at`` is the store's clock at the
    start, ``by`` who started it.
    """

    start: int
    end: int
    next: int | None
    total: int
    done: int = 0
    bound: int
    overlap: Overlap | None = None
    state: BackfillState = "running"
    created_at: int
    by: str | None = None

    @property
    def running(self) -> bool:
        """Whether boundaries remain to take (the state is ``running``)."""
        return self.state == "running" and self.next is not None


class RegisteredTrigger(Trigger, frozen=True, kw_only=True):
    """A trigger as a store holds it: the declaration plus ``revision`` and the fire cursor.

    ``revision`` is 1 on first registration and grows by one on every re-registration, pause
    and resume; ``last_fired_at`` is the durable fire cursor (``None`` until a claim or result
    advances it). ``paused`` is the operator's pause (``None`` unless paused), and
    ``resume_after`` the instant a ``resume`` from ``"now"`` skipped everything up to: no
    occurrence at or before it is owed. ``removed_at`` is when ``remove`` retired it (it is
    then disabled; a registration that enables it again clears the mark). ``backfill`` is
    the trigger's latest backfill (running, done or cancelled; ``None`` if it never had one).
    ``consecutive_failures`` counts the runs recorded ``failed`` since the last ``completed``
    one (or the last resume).
    """

    revision: int
    last_fired_at: int | None = None
    paused: Pause | None = None
    resume_after: int | None = None
    removed_at: int | None = None
    backfill: Backfill | None = None
    #: How many runs in a row were recorded ``failed`` (a ``completed`` run and a ``resume``
    #: set it back to 0); ``pause_after_failures`` pauses the trigger when it reaches that.
    consecutive_failures: int = 0

    @property
    def schedulable(self) -> bool:
        """Whether a scheduler claims new work for it: enabled and not paused.

        A trigger that is not (disabled, or paused) still gets its held runs recovered and
        settled; it only never starts anything new.
        """
        return self.enabled and self.paused is None

    @classmethod
    def of(
        cls, trigger: Trigger, *, revision: int, last_fired_at: int | None = None
    ) -> RegisteredTrigger:
        """The registered form of ``trigger`` (no validation: ``trigger`` is trusted)."""
        return RegisteredTrigger(
            id=trigger.id,
            flow_id=trigger.flow_id,
            input=trigger.input,
            cron=trigger.cron,
            timezone=trigger.timezone,
            overlap=trigger.overlap,
            catch_up=trigger.catch_up,
            max_catch_up=trigger.max_catch_up,
            enabled=trigger.enabled,
            jitter=trigger.jitter,
            start_at=trigger.start_at,
            end_at=trigger.end_at,
            pause_after_failures=trigger.pause_after_failures,
            revision=revision,
            last_fired_at=last_fired_at,
        )

    @property
    def declaration(self) -> Trigger:
        """The declaration without the registration fields."""
        return Trigger(
            id=self.id,
            flow_id=self.flow_id,
            input=self.input,
            cron=self.cron,
            timezone=self.timezone,
            overlap=self.overlap,
            catch_up=self.catch_up,
            max_catch_up=self.max_catch_up,
            enabled=self.enabled,
            jitter=self.jitter,
            start_at=self.start_at,
            end_at=self.end_at,
            pause_after_failures=self.pause_after_failures,
        )


# --- decoding -------------------------------------------------------------------------------


class _Invalid(Exception):
    """A broken constraint at a field; ``detail`` never contains a value."""

    def __init__(self, path: str | None, detail: str) -> None:
        super().__init__(detail)
        self.path = path
        self.detail = detail


class DeclarationDetail(ValueError):
    """The ``__cause__`` of a decode failure: its text is exactly the one-line detail."""


def _text(path: str, value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(path, "expected a string")
    if not value:
        raise _Invalid(path, "must be a non-empty string")
    if "\x00" in value:
        raise _Invalid(path, "must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no store can hold it
            raise _Invalid(path, "must not contain lone surrogates") from None
    return str.__str__(value)


def _timezone(path: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(path, "expected a string or null")
    return _text(path, value)


def _overlap(path: str, value: object) -> Overlap:
    for choice in _OVERLAPS:
        if isinstance(value, str) and value == choice:
            return choice
    raise _Invalid(path, "expected one of 'skip', 'buffer-one', 'supersede'")


def overlap_override(value: object, *, label: str = "overlap") -> Overlap | None:
    """An overlap policy given for one operation in place of the trigger's (a manual fire's,
    a backfill's): ``None`` or one of the policies; otherwise ``invalid_options`` at
    ``overlap``, the message naming ``label``."""
    if value is None:
        return None
    for choice in _OVERLAPS:
        if value == choice:
            return choice
    raise TriggerError(
        "invalid_options",
        f"{label} must be skip, buffer-one or supersede, received {value!r}",
        path="overlap",
    )


def _catch_up(path: str, value: object) -> CatchUp:
    for choice in _CATCH_UPS:
        if isinstance(value, str) and value == choice:
            return choice
    raise _Invalid(path, "expected one of 'none', 'one', 'all'")


def _bound(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(path, f"expected an integer from 0 to {MAX_OCCURRENCES}")
    if not 0 <= value <= MAX_OCCURRENCES:
        raise _Invalid(path, f"expected an integer from 0 to {MAX_OCCURRENCES}")
    return int(value)


def _flag(path: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(path, "expected a boolean")
    return bool(value)


def _jitter(path: str, value: object) -> float:
    """Seconds (``int``, ``float`` or ``timedelta``) from 0 to a day, kept to whole ms."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise _Invalid(path, "expected a number of seconds")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_JITTER_S:
        raise _Invalid(path, f"expected a number of seconds from 0 to {MAX_JITTER_S}")
    return round(seconds * 1000) / 1000


def instant_ms(value: object) -> int | None:
    """An instant as epoch ms: a safe integer (epoch ms), an aware ``datetime`` or RFC 3339
    text with an offset (``2026-01-01T00:00:00Z``); ``None`` for anything else."""
    if is_safe_integer(value):
        return int(value)
    when: datetime.datetime
    if isinstance(value, datetime.datetime):
        when = value
    elif isinstance(value, str) and value.isascii():
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    if when.tzinfo is None or when.utcoffset() is None:
        return None  # a local time names no instant
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _instant(path: str, value: object) -> int | None:
    if value is None:
        return None
    found = instant_ms(value)
    if found is None:
        raise _Invalid(
            path, "expected an RFC 3339 date-time with an offset, an aware datetime or epoch ms"
        )
    return found


def _failures(path: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(path, f"expected null or an integer from 1 to {MAX_PAUSE_AFTER_FAILURES}")
    if not 1 <= value <= MAX_PAUSE_AFTER_FAILURES:
        raise _Invalid(path, f"expected null or an integer from 1 to {MAX_PAUSE_AFTER_FAILURES}")
    return int(value)


def _json_input(path: str, value: object) -> JsonValue:
    try:
        return copy_json(value)
    except JsonValueError as exc:
        raise _Invalid(path, exc.detail) from None


# (name, checker, default); _MISSING marks a required field.
_Field = tuple[str, "object", object]
_SCHEDULE_FIELDS: tuple[tuple[str, object, object], ...] = (
    ("cron", _text, _MISSING),
    ("timezone", _timezone, None),
    ("overlap", _overlap, "skip"),
    ("catch_up", _catch_up, "none"),
    ("max_catch_up", _bound, 0),
)
_TRIGGER_FIELDS: tuple[tuple[str, object, object], ...] = (
    ("id", _text, _MISSING),
    ("flow_id", _text, _MISSING),
    ("input", _json_input, _MISSING),
    *_SCHEDULE_FIELDS,
    ("enabled", _flag, True),
    ("jitter", _jitter, 0.0),
    ("start_at", _instant, None),
    ("end_at", _instant, None),
    ("pause_after_failures", _failures, None),
)


def _one_line(text: str) -> str:
    line = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return line[:_MAX_DETAIL]


def _read(mapping: object, name: str) -> object:
    if isinstance(mapping, msgspec.Struct):
        return getattr(mapping, name, _MISSING)
    assert isinstance(mapping, Mapping)
    if name in mapping:
        return mapping[name]
    return _MISSING


def _decode_fields(
    mapping: object, fields: tuple[tuple[str, object, object], ...]
) -> dict[str, object]:
    if not isinstance(mapping, Mapping | Trigger | Schedule):
        raise _Invalid(None, f"expected a mapping, not {type(mapping).__name__}")
    decoded: dict[str, object] = {}
    is_struct = isinstance(mapping, msgspec.Struct)
    for name, check, default in fields:
        value = getattr(mapping, name, _MISSING) if is_struct else _read(mapping, name)
        if value is _MISSING:
            if default is _MISSING:
                raise _Invalid(name, "a value is required")
            decoded[name] = default
            continue
        decoded[name] = check(name, value)  # type: ignore[operator]
    start, end = decoded.get("start_at"), decoded.get("end_at")
    if isinstance(start, int) and isinstance(end, int) and end < start:
        raise _Invalid("end_at", "must not be before start_at")
    return decoded


def _decode(
    mapping: object,
    fields: tuple[tuple[str, object, object], ...],
    code: Literal["invalid_trigger", "invalid_schedule"],
) -> dict[str, object]:
    summary = (
        "Trigger declaration is invalid"
        if code == "invalid_trigger"
        else "Schedule declaration is invalid"
    )
    path: str | None
    try:
        return _decode_fields(mapping, fields)
    except _Invalid as exc:
        path, detail = exc.path, exc.detail
    except Exception as exc:  # a hostile mapping: report it, never its structures
        path, detail = None, f"{type(exc).__name__}: {exc}"
    detail = _one_line(detail)
    message = f"{summary} at {path}: {detail}" if path is not None else f"{summary}: {detail}"
    # Raised outside the ``except`` block so the original exception is not the context.
    raise TriggerError(code, message, path) from DeclarationDetail(detail)


def _probe(cron: str, timezone: str | None) -> None:
    """Parse the cron with its timezone from ``now=0`` (§2.1, §4.1).

    Raises ``invalid_cron`` or ``unsatisfiable_cron``; a declaration that can never fire is
    refused when it is declared, not discovered at the first tick.
    """
    Cron.parse(cron, timezone, now=0)
    differs = _day_rule_differs(cron)
    if differs:
        warnings.warn(
            f"cron expression '{cron}': its day-of-month and day-of-week fields combine "
            f"differently in {differs} (here a day field covering its whole range counts "
            "as '*'; see docs/cron.md)",
            UserWarning,
            stacklevel=3,
        )


def _day_rule_differs(cron: str) -> str:
    """Which classic crons give the (valid) expression's day fields another meaning, or "".

    We treat a day field covering its whole range as ``*`` (then only the other applies) and
    OR two constrained ones. croniter ORs unless a field is a bare ``*``; Vixie cron (and
    cronsim) ANDs when either field's text starts with ``*``, else ORs. Compared exactly, on
    every (day of month, weekday) pair.
    """
    segments = [segment for segment in cron.split(" ") if segment]
    dom_text, dow_text = segments[-3], segments[-1]
    if dom_text == "*" or dow_text == "*":
        return ""  # all three then apply the other field alone
    doms, dows = _parse_field(_DOM, dom_text), _parse_field(_DOW, dow_text)
    pairs = [(day, weekday) for day in range(1, 32) for weekday in range(7)]
    either = {(d, w) for d, w in pairs if d in doms or w in dows}
    both = {(d, w) for d, w in pairs if d in doms and w in dows}
    # A full-range field matches every day, so with one only the other one counts.
    ours = both if len(doms) == 31 or len(dows) == 7 else either
    vixie = both if dom_text.startswith("*") or dow_text.startswith("*") else either
    tools = [name for name, days in (("croniter", either), ("Vixie cron", vixie)) if days != ours]
    return " and ".join(tools)
