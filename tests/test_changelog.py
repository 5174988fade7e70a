"""News fragments (changes/) are named so towncrier can build the changelog from them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _types() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {entry["directory"] for entry in config["tool"]["towncrier"]["type"]}


def test_fragment_names_have_an_issue_and_a_known_type() -> None:
    pattern = re.compile(r"^(\d+|\+[\w-]+)\.(?P<type>[a-z]+)(\.\d+)?\.md$")
    types = _types()
    assert types == {"feature", "bugfix", "removal", "doc", "misc"}
    bad = []
    for fragment in (ROOT / "changes").iterdir():
        if fragment.name == "README.md":
            continue
        match = pattern.match(fragment.name)
        if match is None or match.group("type") not in types:
            bad.append(fragment.name)
    assert bad == []


def test_the_changelog_has_towncriers_start_marker() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.count("<!-- towncrier release notes start -->\n") == 1
    assert "## 0.1.0" in text
