"""A released resurrect in a virtual environment of its own, for tests that run a worker of
that release beside today's (tests/workflows/test_rolling_upgrade.py).

The release is installed from this repository's history (``git archive`` of its commit, then
``pip install --no-deps``): no download. Its dependencies come from the interpreter running
the tests, through a ``.pth`` file naming that interpreter's site-packages, after the venv's
own (so the release's ``resurrect`` wins over an editable install of today's). The venv is
kept under ``$RESURRECT_RELEASE_VENVS`` (default ``~/.cache/resurrect/release-venvs``), one
per commit and test interpreter: built once (about 15 s), then reused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE_ENV = "RESURRECT_RELEASE_VENVS"


def _cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache/resurrect/release-venvs"


def release_python(commit: str, version: str) -> Path:
    """The interpreter of a venv where the release at ``commit`` is installed (built when
    missing). Raises RuntimeError when the commit is not in the repository's history (a
    shallow clone: ``git fetch --unshallow``) or the install does not report ``version``."""
    site = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{sys.executable}\0{site}".encode()).hexdigest()[:12]
    venv = _cache_root() / f"{commit}-{key}"
    python = venv / "bin" / "python"
    if (venv / "installed").exists():
        return python
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise RuntimeError(
            f"commit {commit} (resurrect {version}) is not in {REPO}'s history: a shallow"
            " clone? git fetch --unshallow"
        )
    venv.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{commit}-", dir=venv.parent))
    try:
        _build(commit, building, site)
        _check_version(building / "bin" / "python", version)
        shutil.rmtree(venv, ignore_errors=True)
        building.rename(venv)  # the venv's paths are relative to its interpreter's location
    finally:
        shutil.rmtree(building, ignore_errors=True)
    (venv / "installed").write_text(f"{commit}\n")
    return python


def _build(commit: str, venv: Path, site: str) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig;print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "test-interpreter-packages.pth").write_text(site + "\n")
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "release.tar"
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", f"--output={archive}", commit],
            check=True,
        )
        source = Path(scratch) / "source"
        source.mkdir()
        subprocess.run(["tar", "-xf", str(archive), "-C", str(source)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                str(source),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )


def _check_version(python: Path, version: str) -> None:
    shown = subprocess.run(
        [str(python), "-c", "import resurrect;print(resurrect.__version__, resurrect.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
        cwd=python.parents[1],  # not the repository: ``-c`` puts the working directory first
    ).stdout.split()
    if shown[0] != version or not shown[1].startswith(str(python.parents[1])):
        raise RuntimeError(f"the release venv imports resurrect {shown}, not {version} of its own")
