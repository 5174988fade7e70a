"""Sphinx configuration (MyST Markdown, warnings are errors in CI)."""

from __future__ import annotations

project = "trio-triggers"
author = "trio-triggers developers"
copyright = "2026, trio-triggers developers"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]
