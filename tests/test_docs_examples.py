"""Every ```python block in docs/*.md is executed here.

Blocks of one page run in order in one namespace, so a page can build up an example. A block
whose info string is ``python no-run`` is shown but not executed (use it only for fragments
that cannot run, such as a config file's shape). Async examples call ``trio.run`` themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def _pages() -> list[Path]:
    return sorted([*DOCS.glob("*.md"), README])


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_doc_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = page.read_text(encoding="utf-8")
    blocks = BLOCK.findall(text)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for index, block in enumerate(blocks):
        code = compile(block, f"{page.name}[block {index}]", "exec")
        exec(code, namespace)
