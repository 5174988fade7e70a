"""Every msgspec Struct's annotations resolve at runtime.

msgspec reads a Struct's annotations when it decodes or validates one, so a name used only in
a Struct's annotations must be imported at runtime, not under ``if TYPE_CHECKING:``. Ruff's TC
rules move annotation-only imports there; ``runtime-evaluated-base-classes`` in pyproject keeps
them for Structs. This test is the net under that setting: a Struct whose annotation names a
type-checking-only import fails here, not at the first decode in production.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

import msgspec
import pytest

import trio_triggers

if typing.TYPE_CHECKING:
    from types import ModuleType


def _modules() -> list[ModuleType]:
    found = [trio_triggers]
    for info in pkgutil.walk_packages(trio_triggers.__path__, "trio_triggers."):
        if info.name.endswith("__main__"):
            continue
        found.append(importlib.import_module(info.name))
    return found


def _structs() -> list[type[msgspec.Struct]]:
    seen: dict[str, type[msgspec.Struct]] = {}
    for module in _modules():
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, msgspec.Struct)
                and obj.__module__ == module.__name__
            ):
                seen[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [seen[name] for name in sorted(seen)]


STRUCTS = _structs()


def test_the_package_defines_structs() -> None:
    assert len(STRUCTS) > 50


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
def test_struct_annotations_resolve_at_runtime(cls: type[msgspec.Struct]) -> None:
    module = importlib.import_module(cls.__module__)
    hints = typing.get_type_hints(cls, globalns=vars(module), include_extras=True)
    assert set(cls.__struct_fields__) <= set(hints)
