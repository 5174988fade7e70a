"""Sphinx configuration (MyST Markdown, warnings are errors in CI)."""

from __future__ import annotations

import sys
from pathlib import Path

# The API reference imports the package from this checkout, not from an installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "trio-triggers"
author = "trio-triggers developers"
copyright = "2026, trio-triggers developers"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
# Heading anchors down to ###, so design pages and docs/design/section-map.toml can link to
# `page.md#heading-slug`.
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]

# --- API reference (docs/api/): autodoc over each module's __all__
# Signatures carry the annotations; members in source order; names in signatures are shown
# as written (`Lease`, not `trio_triggers._ownership._lease.Lease`).
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_default_options = {"show-inheritance": True}
python_use_unqualified_type_names = True
# Cross references to annotations that are not documented (private modules, third-party
# types) stay plain text instead of failing the -W build.
nitpicky = False


def _attribute_docs() -> dict[str, list[str]]:
    """``#:`` doc-comments of every module-level constant in the package, by name.

    autodoc reads a constant's doc-comment from the module it documents it under
    (``trio_triggers``), but the comment sits where the constant is defined (a private
    module), so the reference looks it up there.
    """
    import importlib
    import pkgutil

    from sphinx.pycode import ModuleAnalyzer

    import trio_triggers

    docs: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(trio_triggers.__path__, "trio_triggers."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        analyzer = ModuleAnalyzer.for_module(info.name)
        for (scope, name), lines in analyzer.find_attr_docs().items():
            if scope == "":
                docs.setdefault(name, list(lines))
    return docs


_ATTRIBUTE_DOCS: dict[str, list[str]] = {}


def _constant_docstring(
    app: object, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """A documented constant shows its own doc-comment, never the docstring of its type."""
    if what != "data":
        return
    if not _ATTRIBUTE_DOCS:
        _ATTRIBUTE_DOCS.update(_attribute_docs())
    own = _ATTRIBUTE_DOCS.get(name.rpartition(".")[2])
    inherited = isinstance(obj, type) or obj.__doc__ == type(obj).__doc__
    if own is not None:
        lines[:] = own
    elif inherited:
        lines.clear()


def setup(app: object) -> None:
    app.connect("autodoc-process-docstring", _constant_docstring)  # type: ignore[attr-defined]
