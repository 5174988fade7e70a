"""The JSON-text and message-text rules of ``ownership.md`` §1.7.

JSON text is checked, never normalised: the store keeps the caller's exact characters. The
checks are strict RFC 8259 (no ``NaN``/``Infinity``), no surrogate code points (neither raw nor
as ``\\u`` escapes that decode to a lone surrogate), nesting of at most 128 levels and at most
100 000 values and members in total. The depth is measured on the raw text *before* parsing, so
a hostile ``[[[[...`` costs one linear scan and never reaches the parser's recursion.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NoReturn

from ._owner import has_surrogate

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_JSON_ITEMS",
    "MAX_MESSAGE_TEXT",
    "json_text_problem",
    "message_text_problem",
]

MAX_JSON_DEPTH: Final = 128
MAX_JSON_ITEMS: Final = 100_000
MAX_MESSAGE_TEXT: Final = 65_536

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _no_constant(name: str) -> NoReturn:
    raise ValueError("non-finite literal")


def _depth(text: str) -> int:
    depth = 0
    deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    break
        else:
            depth -= 1
    return deepest


def _walk_problem(value: Any, field: str) -> str | None:
    """Count values and members; look for lone surrogates decoded from escapes."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, str):
            if has_surrogate(item):
                return f"{field} must not contain surrogate code points"
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            count += len(item)  # the members
            for key, member in item.items():
                if has_surrogate(key):
                    return f"{field} must not contain surrogate code points"
                stack.append(member)
        if count > MAX_JSON_ITEMS:
            return f"{field} has more than {MAX_JSON_ITEMS} values and members"
    return None


def json_text_problem(value: Any, field: str) -> str | None:
    """Why ``value`` is not JSON text (§1.7), or ``None`` if it is."""
    if not isinstance(value, str):
        return f"{field} must be a str"
    if has_surrogate(value):
        return f"{field} must not contain surrogate code points"
    if _depth(value) > MAX_JSON_DEPTH:
        return f"{field} is nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        decoded = json.loads(value, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return f"{field} is not valid JSON"
    return _walk_problem(decoded, field)


def message_text_problem(value: Any, field: str) -> str | None:
    """Why ``value`` is not message text (§1.7), or ``None`` if it is."""
    if not isinstance(value, str):
        return f"{field} must be a str"
    if len(value) > MAX_MESSAGE_TEXT:
        return f"{field} is longer than {MAX_MESSAGE_TEXT} characters"
    if "\x00" in value:
        return f"{field} must not contain NUL"
    if has_surrogate(value):
        return f"{field} must not contain surrogate code points"
    return None
