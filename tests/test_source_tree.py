"""workflows/, activities/, workers/ and sensors/ sit at the top of the repository and are
the packages resurrect.<name>, with one import name each: in a checkout through
resurrect/source_tree.py, in a wheel as resurrect/<name> (setup.py's package_dir)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from resurrect import source_tree
from resurrect.source_tree import TOP_LEVEL_SUBPACKAGES, SourceTreeFinder

REPO = Path(__file__).resolve().parents[1]


def test_in_a_checkout_each_subpackage_is_its_top_level_folder() -> None:
    assert not any((REPO / "resurrect" / name).exists() for name in TOP_LEVEL_SUBPACKAGES)
    for name in TOP_LEVEL_SUBPACKAGES:
        module = importlib.import_module(f"resurrect.{name}")
        assert Path(str(module.__file__)).resolve() == REPO / name / "__init__.py"
    nested = importlib.import_module("resurrect.sensors.node_agent.agent")
    assert nested.__name__ == "resurrect.sensors.node_agent.agent"
    assert Path(str(nested.__file__)).resolve().is_relative_to(REPO / "sensors" / "node_agent")


def test_the_checkout_alone_on_the_path_imports_its_own_folders(tmp_path: Path) -> None:
    """Only the repository on sys.path (-I -S: no site-packages, no editable install)."""
    script = "import sys; sys.path.insert(0, sys.argv[1]); import resurrect.workflows as w; print(w.__file__)"
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(REPO)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(run.stdout.strip()) == REPO / "workflows" / "__init__.py"


def _tree(root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")


def test_the_finder_answers_for_exactly_the_four_names(tmp_path: Path) -> None:
    _tree(tmp_path, TOP_LEVEL_SUBPACKAGES)
    finder = SourceTreeFinder(str(tmp_path))
    for name in TOP_LEVEL_SUBPACKAGES:
        spec = finder.find_spec(f"resurrect.{name}", None)
        assert spec is not None and spec.name == f"resurrect.{name}"
        assert spec.origin == str(tmp_path / name / "__init__.py")
    for other in ("workflows", "resurrect", "resurrect.config", "resurrect.workflows.recovery"):
        assert finder.find_spec(other, None) is None


def test_an_installed_tree_needs_no_finder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel has resurrect/<name> inside the package: install() adds nothing."""
    package = tmp_path / "resurrect"
    _tree(package, TOP_LEVEL_SUBPACKAGES)
    _tree(tmp_path, TOP_LEVEL_SUBPACKAGES)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = list(sys.meta_path)
    source_tree.install(str(package))
    assert sys.meta_path == before


def test_a_checkout_puts_its_finder_first_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First, so that another checkout's editable install never answers for its folders."""
    _tree(tmp_path, TOP_LEVEL_SUBPACKAGES)
    (tmp_path / "resurrect").mkdir()
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    source_tree.install(str(tmp_path / "resurrect"))
    source_tree.install(str(tmp_path / "resurrect"))
    ours = [f for f in sys.meta_path if getattr(f, "resurrect_source_root", None) == str(tmp_path)]
    assert len(ours) == 1 and sys.meta_path[0] is ours[0]


def test_the_wheel_installs_each_folder_as_resurrect_name_and_nothing_else(tmp_path: Path) -> None:
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("resurrect-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"resurrect"}
    for name in TOP_LEVEL_SUBPACKAGES:
        for source in (REPO / name).rglob("*.py"):
            assert f"resurrect/{source.relative_to(REPO).as_posix()}" in names
    assert any(n.startswith("resurrect/rules/packs/") and n.endswith(".yaml") for n in names)


#: The most lines a product module may have: past it, a module holds more than one job.
MAX_MODULE_LINES = 600


def test_no_product_module_is_longer_than_600_lines() -> None:
    folders = [REPO / "resurrect", *(REPO / name for name in TOP_LEVEL_SUBPACKAGES)]
    lengths = {
        str(path.relative_to(REPO)): len(path.read_text().splitlines())
        for folder in folders
        for path in folder.rglob("*.py")
    }
    assert lengths, folders
    assert {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES} == {}
