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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import msgspec

from ._errors import TriggerError

__all__ = [
    "MAX_JSON_DEPTH",
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


#: How deeply containers may nest in a JSON value: the outermost list or object is level 1.
#: Checked by counting, not by Python's recursion limit, so the answer does not depend on how
#: deep in the stack the caller is; deep enough for any real input, shallow enough that every
#: encoder and decoder on the way (msgspec, the stores) handles it from any call depth.
MAX_JSON_DEPTH: Final = 100

_TOO_DEEP: Final = f"the value is nested too deeply (more than {MAX_JSON_DEPTH} levels)"

# A container being copied: (its copy, an iterator over its items, the original's id).
_Frame = tuple["dict[str, JsonValue] | list[JsonValue]", Iterator[Any], int]


def _leaf(value: object, active: set[int], depth: int) -> tuple[JsonValue, _Frame | None]:
    """A scalar's copy, or an empty copy of a container with the frame that fills it."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return value, None  # type: ignore[return-value]
    if kind is str:
        if "\x00" in value:  # type: ignore[operator]
            raise JsonValueError("strings must not contain NUL characters")
        return value, None  # type: ignore[return-value]
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise JsonValueError("numbers must be finite (NaN and infinities are not JSON)")
        return value, None  # type: ignore[return-value]
    if isinstance(value, dict | list):
        marker = id(value)
        if marker in active:
            raise JsonValueError("a container contains itself")
        if depth > MAX_JSON_DEPTH:
            raise JsonValueError(_TOO_DEEP)
        active.add(marker)
        if isinstance(value, dict):
            copied: dict[str, JsonValue] = {}
            return copied, (copied, iter(value.items()), marker)
        items: list[JsonValue] = []
        return items, (items, iter(value), marker)
    # Subclasses of the scalar types (IntEnum, StrEnum, ...) are read as their plain value.
    if isinstance(value, bool):
        return bool(value), None
    if isinstance(value, int):
        return int(value), None
    if isinstance(value, str):
        return _leaf(str.__str__(value), active, depth)
    if isinstance(value, float):
        return _leaf(float(value), active, depth)
    raise JsonValueError(f"values of type {kind.__name__} are not JSON values")


def _copy(value: object) -> JsonValue:
    """The deep copy, depth first in document order, with an explicit stack (no recursion)."""
    active: set[int] = set()
    root, frame = _leaf(value, active, 1)
    stack = [] if frame is None else [frame]
    while stack:
        target, items, marker = stack[-1]
        for entry in items:
            if isinstance(target, dict):
                key, item = entry
                if not isinstance(key, str):
                    raise JsonValueError(f"object keys must be strings, not {type(key).__name__}")
                if "\x00" in key:
                    raise JsonValueError("strings must not contain NUL characters")
                copied, inner = _leaf(item, active, len(stack) + 1)
                target[str.__str__(key)] = copied
            else:
                copied, inner = _leaf(entry, active, len(stack) + 1)
                target.append(copied)
            if inner is not None:
                stack.append(inner)
                break
        else:
            active.discard(marker)
            stack.pop()
    return root


def copy_json(value: object) -> JsonValue:
    """Return an independent deep copy of ``value``, or raise ``JsonValueError``.

    ``dict`` key order is kept; subclasses of ``dict``/``list``/``str``/``int``/``float``
    become the plain type. Containers nested more than ``MAX_JSON_DEPTH`` levels are refused.
    """
    return _copy(value)


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
