"""The package layout: workflows/, activities/, workers/ and sensors/ sit at the top of the
repository and are subpackages of resurrect (through links resurrect/<name> -> ../<name>),
so a wheel installs nothing under those generic names (docs/architecture.md)."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("workflows", "activities", "workers", "sensors")
BARE_IMPORT = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(TOP_LEVEL)})\b", re.M)
SKIP = {".venv", ".git", "build", "state", "node_modules"}


def test_each_top_level_folder_is_the_resurrect_subpackage() -> None:
    for name in TOP_LEVEL:
        link = REPO / "resurrect" / name
        assert link.is_symlink() and link.resolve() == REPO / name
        module = importlib.import_module(f"resurrect.{name}")
        assert Path(str(module.__file__)).resolve().parent == REPO / name


def test_no_code_imports_the_bare_names() -> None:
    """Importing ``workflows.x`` besides ``resurrect.workflows.x`` would load the module
    twice in a checkout, and fail in an installed wheel."""
    offenders = []
    for folder, dirs, files in os.walk(REPO):  # links are not followed: each file once
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".")]
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                for match in BARE_IMPORT.finditer(path.read_text(errors="replace")):
                    offenders.append(f"{path.relative_to(REPO)}: {match.group().strip()}")
    assert offenders == []
