"""The design pages can be followed: every section-map entry and every page link resolves.

``docs/design/section-map.toml`` maps each numbered section of the design contract (cited as
``§10.2`` in the package and the docs) to the page and heading anchor that explains it. These
tests fail when an entry names a page or heading that does not exist, when a ``§`` number is
used without an entry, when a link between the docs pages points nowhere, or when the
invariants page and ``trio_triggers.testing.CATALOGUE`` disagree.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from trio_triggers.testing import CATALOGUE

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SECTION_MAP = DOCS / "design" / "section-map.toml"
SECTION = re.compile(r"§([0-9]+(?:\.[0-9]+)*)")
HEADING = re.compile(r"^(#{1,3}) +(.+?) *#*$", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(title: str) -> str:
    """The anchor MyST gives a heading (``myst_heading_anchors``): GitHub's slug rule."""
    text = re.sub(r"`([^`]*)`", r"\1", title)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for match in HEADING.finditer(text):
        slug = _slug(match.group(2))
        unique, n = slug, 0
        while unique in anchors:
            n += 1
            unique = f"{slug}-{n}"
        anchors.add(unique)
    return anchors


def _entries() -> list[tuple[str, str, str]]:
    tables = tomllib.loads(SECTION_MAP.read_text(encoding="utf-8"))
    return [
        (document, number, target)
        for document, table in tables.items()
        for number, target in table.items()
    ]


def _resolves(source: Path, target: str) -> bool:
    """Whether ``target`` (``page.md#anchor``, ``#anchor``), linked from ``source``, exists."""
    path, _, anchor = target.partition("#")
    page = (source.parent / path).resolve() if path else source
    if not page.is_file():
        return False
    return not anchor or page.suffix != ".md" or anchor in _anchors(page)


def test_the_section_map_names_every_contract_document() -> None:
    documents = {document for document, _, _ in _entries()}
    assert documents == {"triggers", "ownership", "trio-design", "product"}


@pytest.mark.parametrize(("document", "number", "target"), _entries(), ids=str)
def test_every_entry_resolves_to_a_page_and_heading(
    document: str, number: str, target: str
) -> None:
    assert "#" in target, f"{document} §{number}: {target} names no heading"
    assert _resolves(DOCS / "index.md", target), f"{document} §{number}: {target} does not resolve"


def test_every_section_number_in_use_has_an_entry() -> None:
    sources = [*(ROOT / "trio_triggers").rglob("*.py"), *DOCS.rglob("*.md")]
    used = {number for source in sources for number in SECTION.findall(source.read_text())}
    mapped = {number for _, number, _ in _entries()}
    assert sorted(used - mapped) == []


@pytest.mark.parametrize(
    "page", sorted(DOCS.rglob("*.md")), ids=lambda page: str(page.relative_to(DOCS))
)
def test_every_link_between_pages_resolves(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = [
        target
        for target in LINK.findall(text)
        if "://" not in target and not target.startswith("mailto:") and not _resolves(page, target)
    ]
    assert broken == []


def test_the_invariants_page_lists_the_catalogue() -> None:
    text = (DOCS / "design" / "invariants.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| ([TOW][0-9]+) \|", text, re.MULTILINE)
    assert listed == [info.id for info in CATALOGUE]
