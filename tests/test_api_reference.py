"""The API reference (docs/api/) documents every public name, so a new export needs an entry.

Each name of the four public ``__all__`` lists must have an autodoc directive
(``.. autoclass:: trio_triggers.Scheduler``, ``.. autofunction::``, ``.. autodata::``) under its
public module's name; and the reference documents nothing that is not exported.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parent.parent / "docs" / "api"
MODULES = ("trio_triggers", "trio_triggers.testing", "trio_triggers.postgres", "trio_triggers.cli")
DIRECTIVE = re.compile(r"^\.\. auto(?:class|function|data|exception)::\s+(\S+)\s*$", re.MULTILINE)


def _documented() -> list[str]:
    return [
        name for page in sorted(API.glob("*.md")) for name in DIRECTIVE.findall(page.read_text())
    ]


def _exported() -> set[str]:
    return {
        f"{module}.{name}" for module in MODULES for name in importlib.import_module(module).__all__
    }


@pytest.mark.parametrize("module", MODULES)
def test_every_export_has_a_reference_entry(module: str) -> None:
    names = importlib.import_module(module).__all__
    documented = set(_documented())
    missing = [name for name in names if f"{module}.{name}" not in documented]
    assert missing == [], f"add these to docs/api/: {missing}"


def test_the_reference_documents_only_exports() -> None:
    stray = sorted(set(_documented()) - _exported())
    assert stray == [], f"documented but not exported: {stray}"


def test_each_name_is_documented_once() -> None:
    documented = _documented()
    twice = sorted({name for name in documented if documented.count(name) > 1})
    assert twice == []


def test_the_reference_is_in_the_toctree() -> None:
    index = (API.parent / "index.md").read_text()
    pages = (API / "index.md").read_text()
    assert "api/index" in index
    assert all(page.stem in pages for page in API.glob("*.md") if page.stem != "index")
