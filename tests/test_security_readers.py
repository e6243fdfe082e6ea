"""SECURITY.md's reader table names every module that reads job-controlled data: the log,
checkpoint, stack and Slurm readers themselves and every module importing one of them. A
new reader (or a new user of one) fails this test until its row says what it reads, as
whom, within which bounds, with which fuzz test and share."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from resurrect.source_tree import TOP_LEVEL_SUBPACKAGES

REPO = Path(__file__).resolve().parents[1]
#: The readers of job-controlled data, by family: module names or package prefixes.
READERS: dict[str, tuple[str, ...]] = {
    "log": (
        "resurrect.log_reading",
        "resurrect.goodput.progress",
        "resurrect.sensors.log_follower",
    ),
    "checkpoint": ("resurrect.checkpoint",),
    "stack": ("resurrect.stacks", "resurrect.untrusted"),
    "slurm": (
        "resurrect.scheduler.slurm_json",
        "resurrect.scheduler.slurm_compact",
        "resurrect.scheduler.slurm_cli",
        "resurrect.scheduler.slurm_rest",
        "resurrect.scheduler.slurm_rest_client",
        "resurrect.scheduler.pyslurm_backend",
    ),
}
_PREFIXES = tuple(p for family in READERS.values() for p in family)


def _is_reader(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _PREFIXES)


def _module_files() -> dict[str, Path]:
    """Every module of the package (the top-level activities, sensors, workers and workflows
    folders included, under their one name ``resurrect.<folder>``), by dotted name."""
    roots = [(REPO / "resurrect", "resurrect")] + [
        (REPO / folder, f"resurrect.{folder}") for folder in TOP_LEVEL_SUBPACKAGES
    ]
    found: dict[str, Path] = {}
    for root, package in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    path = Path(folder) / name
                    dotted = ".".join((package, *path.relative_to(root).with_suffix("").parts))
                    found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def reading_modules() -> set[str]:
    """The reader modules and every module that imports one."""
    modules = _module_files()
    return {
        name
        for name, path in modules.items()
        if _is_reader(name) or any(_is_reader(i) for i in _imports(path))
    }


def table_modules() -> set[str]:
    """The modules SECURITY.md's reader table names (in backquotes)."""
    text = (REPO / "SECURITY.md").read_text()
    section = text.split("## Readers of job-controlled data", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {m for row in rows for m in re.findall(r"`(resurrect(?:\.\w+)+)`", row)}


def test_every_reader_of_job_data_is_in_the_security_table() -> None:
    missing = sorted(reading_modules() - table_modules())
    assert missing == [], f"add these readers of job data to SECURITY.md's table: {missing}"


def test_the_table_names_only_modules_that_exist() -> None:
    assert sorted(table_modules() - set(_module_files())) == []


def test_each_row_gives_every_column() -> None:
    text = (REPO / "SECURITY.md").read_text()
    section = text.split("## Readers of job-controlled data", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| reader"))
    columns = header.count("|")
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert row.count("|") - row.count("\\|") == columns and all(cells), row


def test_every_test_the_table_names_exists() -> None:
    text = (REPO / "SECURITY.md").read_text()
    section = text.split("## Readers of job-controlled data", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(tests/[\w/]+\.py)`", section))
    assert named and sorted(p for p in named if not (REPO / p).is_file()) == []
