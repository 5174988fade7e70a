"""JSON values (``triggers.md`` §2.4): checking, deep copies and compact text.

A trigger's ``input`` travels to a runner and is stored as JSON text, so it must be a value
every store can hold and give back unchanged: ``None``, ``bool``, ``int``, finite ``float``,
``str`` without NUL characters, lists of JSON values and ``dict`` objects with ``str`` keys.
Everything else (NaN and infinities, tuples, sets, bytes, dates, ``Decimal``, arbitrary
objects, non-``str`` keys, containers that contain themselves) is refused wherever it sits,
instead of being silently converted by an encoder.

The checks never put the offending *value* in an error text: a secret in ``input`` must not
reach a message, a cause or a log. Only type names and the broken rule are described.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from ._errors import TriggerError

__all__ = [
    "JsonValue",
    "JsonValueError",
    "checked_input",
    "copy_json",
    "decode_json",
    "encode_input",
    "encode_json",
    "json_problem",
]

if TYPE_CHECKING:
    JsonValue: TypeAlias = (
        bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
    )
else:  # msgspec reads annotations at runtime; a recursive alias is only for the type checker
    JsonValue = Any

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


class JsonValueError(ValueError):
    """A value is not a JSON value; ``str(err)`` is a one-line detail without the value."""

    detail: str

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _copy(value: object, active: set[int]) -> JsonValue:
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return value  # type: ignore[return-value]
    if kind is str:
        if "\x00" in value:  # type: ignore[operator]
            raise JsonValueError("strings must not contain NUL characters")
        return value  # type: ignore[return-value]
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise JsonValueError("numbers must be finite (NaN and infinities are not JSON)")
        return value  # type: ignore[return-value]
    if isinstance(value, dict):
        marker = id(value)
        if marker in active:
            raise JsonValueError("a container contains itself")
        active.add(marker)
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise JsonValueError(f"object keys must be strings, not {type(key).__name__}")
            if "\x00" in key:
                raise JsonValueError("strings must not contain NUL characters")
            result[str.__str__(key)] = _copy(item, active)
        active.discard(marker)
        return result
    if isinstance(value, list):
        marker = id(value)
        if marker in active:
            raise JsonValueError("a container contains itself")
        active.add(marker)
        items = [_copy(item, active) for item in value]
        active.discard(marker)
        return items
    # Subclasses of the scalar types (IntEnum, StrEnum, ...) are read as their plain value.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return _copy(str.__str__(value), active)
    if isinstance(value, float):
        return _copy(float(value), active)
    raise JsonValueError(f"values of type {kind.__name__} are not JSON values")


def copy_json(value: object) -> JsonValue:
    """Return an independent deep copy of ``value``, or raise ``JsonValueError``.

    ``dict`` key order is kept; subclasses of ``dict``/``list``/``str``/``int``/``float``
    become the plain type.
    """
    try:
        return _copy(value, set())
    except RecursionError:
        raise JsonValueError("the value is nested too deeply") from None


def json_problem(value: object) -> str | None:
    """The one-line reason ``value`` is not a JSON value, or ``None`` when it is one."""
    try:
        copy_json(value)
    except JsonValueError as exc:
        return exc.detail
    return None


def checked_input(value: object) -> JsonValue:
    """A deep copy of a trigger ``input``; otherwise ``invalid_trigger`` at path ``input``."""
    try:
        return copy_json(value)
    except JsonValueError as exc:
        detail = exc.detail
    error = TriggerError(
        "invalid_trigger", f"Trigger declaration is invalid at input: {detail}", "input"
    )
    raise error from JsonValueError(detail)


def encode_json(value: JsonValue) -> str:
    """Compact JSON text of a (checked) JSON value; ``dict`` key order is kept.

    Raises ``JsonValueError`` when the value has no JSON text (for example a string holding a
    lone surrogate, which UTF-8 cannot carry).
    """
    try:
        return _ENCODER.encode(value).decode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise JsonValueError(f"the value has no JSON text ({type(exc).__name__})") from None


def encode_input(value: JsonValue) -> str:
    """``encode_json`` for a trigger input: ``invalid_trigger`` at ``input`` when impossible."""
    try:
        return encode_json(value)
    except JsonValueError as exc:
        detail = exc.detail
    error = TriggerError("invalid_trigger", "trigger input has no JSON representation", "input")
    raise error from JsonValueError(detail)


def decode_json(text: str | bytes) -> JsonValue:
    """Decode JSON text; objects come back as ``dict`` in their textual key order.

    Raises ``msgspec.DecodeError`` for malformed text (stores turn that into their own error).
    """
    result: JsonValue = _DECODER.decode(text)
    return result
