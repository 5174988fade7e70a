"""The README's set-up and test lines are the ones CI runs (issue 18 section 4).

``.ci/run`` runs the README's test command exactly as written and calls ``.ci/readme-setup``,
which follows the README's set-up lines in a fresh clone; these checks keep the three in step.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _block_after(marker: str) -> list[str]:
    match = re.search(rf"^{re.escape(marker)}.*?\n```[a-z]*\n(.*?)^```", README, re.M | re.S)
    assert match is not None, f"README.md has no fenced block after {marker!r}"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_as_written() -> None:
    (command,) = _block_after("<!-- readme-test")
    assert command.startswith(".venv/bin/python -m pytest")
    assert command in CI_RUN.splitlines()


def test_readme_setup_creates_the_venv_upgrades_pip_and_installs_a_real_group() -> None:
    lines = _block_after("<!-- readme-setup")
    assert lines[0] == "python3 -m venv .venv"
    assert lines[1] == ".venv/bin/python -m pip install --upgrade pip"
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    (group,) = re.findall(r"--group (\S+)", lines[2])
    assert group in groups
    assert "pytest-trio" in " ".join(map(str, groups[group]))
    assert ".ci/readme-setup" in CI_RUN.splitlines()


def test_readme_setup_script_extracts_the_readme_lines() -> None:
    script = (ROOT / ".ci" / "readme-setup").read_text()
    assert "<!-- readme-setup" in script
    assert "<!-- readme-test" in script
    status = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "readme-setup")], check=False)
    assert status.returncode == 0
