"""The ownership counters, reported through the library's metrics hook (``_instrument``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _instrument

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["add_counter"]


def add_counter(name: str, value: int, attributes: Mapping[str, str]) -> None:
    """Add ``value`` to the counter ``name`` (a no-op unless a metrics backend is installed)."""
    _instrument.add_counter(name, value, attributes)
