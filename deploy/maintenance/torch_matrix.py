"""Regenerate the PyTorch checkpoint fixtures: one throwaway venv per PyTorch release.

    python3 deploy/maintenance/torch_matrix.py [--versions 2.2.2,2.14.1] [--work DIR]
        [--python /usr/bin/python3.11 --name-python]

For each version: create ``DIR/venv-VERSION`` (``python3 -m venv``), ``pip install
torch==VERSION numpy``, run ``torch_fixture_writer.py`` in it to write
``tests/fixtures/checkpoints/torch-VERSION/``, delete the venv. Then verify what it wrote
with this checkout's ``resurrect checkpoint verify --level full`` (when resurrect imports).
Prints one JSON line per version (installed? written? verdict) and never runs in the suite:
PyPI's Linux wheels are CUDA builds (~3 GB with their nvidia dependencies each).

The pip of each venv reads no pip configuration file (``PIP_CONFIG_FILE=/dev/null``); it
gets the machine's settings as ``PIP_*`` variables instead, less any ``constraint``, so
releases newer than a site cap can be installed for this purpose only.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
WRITER = Path(__file__).resolve().with_name("torch_fixture_writer.py")
#: The newest patch release of each minor release PyPI serves, 2.2 to 2.15.
VERSIONS = (
    "2.2.2 2.3.1 2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0"
).split()
PIP_CONFIGS = (
    Path("/etc/xdg/pip/pip.conf"),
    Path("/etc/pip.conf"),
    Path.home() / ".pip" / "pip.conf",
    Path.home() / ".config" / "pip" / "pip.conf",
)


def pip_env_without_constraint() -> dict[str, str]:
    """The machine's pip configuration as ``PIP_*`` variables, less ``constraint``."""
    merged = configparser.ConfigParser()
    merged.read([p for p in PIP_CONFIGS if p.is_file()])
    env = {"PIP_CONFIG_FILE": os.devnull}
    for section in ("global", "install"):
        if merged.has_section(section):
            for key, value in merged.items(section):
                if key != "constraint":
                    env["PIP_" + key.upper().replace("-", "_")] = " ".join(value.split())
    return env


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def make_one(
    version: str, work: Path, env: dict[str, str], python: str, suffix: str
) -> dict[str, object]:
    row: dict[str, object] = {"torch": version, "fixture": f"torch-{version}{suffix}"}
    venv = work / f"venv-{version}{suffix}"
    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    try:
        made = run([python, "-m", "venv", str(venv)], env, 600)
        if made.returncode != 0:
            row["error"] = f"venv: {made.stderr[-500:]}"
            return row
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off"]
        # Releases before 2.4 were built against NumPy 1 (their object collectives need it).
        numpy = "numpy<2" if _minor(version) < (2, 4) else "numpy"
        installed = run([*pip, "--no-compile", f"torch=={version}", numpy], env, 3600)
        row["install_s"] = round(time.monotonic() - started)
        if installed.returncode != 0:
            row["installed"] = False
            row["error"] = f"pip: {(installed.stderr or installed.stdout)[-800:]}"
            return row
        row["installed"] = True
        out = FIXTURES / f"torch-{version}{suffix}"
        shutil.rmtree(out, ignore_errors=True)
        wrote = run([str(venv / "bin" / "python"), str(WRITER), str(out)], env, 900)
        row["written"] = wrote.returncode == 0
        if wrote.returncode != 0:
            row["error"] = f"writer: {(wrote.stderr or wrote.stdout)[-1500:]}"
            shutil.rmtree(out, ignore_errors=True)
            return row
        row["writer"] = json.loads(wrote.stdout.strip().splitlines()[-1])
        row["verdict"] = verify(out)
        return row
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def verify(out: Path) -> object:
    """This checkout's full-level verdict of the fixture, or why there is none."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "resurrect.checkpoint", "verify", str(out), "--level", "full"]
    done = subprocess.run(
        [*argv, "--json"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    try:
        verdict = json.loads(done.stdout)
    except json.JSONDecodeError:
        return f"no verdict: {done.stderr[-300:]}"
    return {Path(c["path"]).name: [c["valid"], c["reason"]] for c in verdict["candidates"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default=",".join(VERSIONS))
    parser.add_argument("--work", type=Path, default=Path("/work/cache-torch"))
    parser.add_argument("--python", default="python3", help="interpreter of the venvs")
    parser.add_argument(
        "--name-python",
        action="store_true",
        help="name the fixtures torch-VERSION-pyX.Y.Z (a second interpreter's variants)",
    )
    args = parser.parse_args()
    suffix = ""
    if args.name_python:
        probe = [args.python, "-c", "import platform; print(platform.python_version())"]
        suffix = "-py" + subprocess.run(probe, capture_output=True, text=True).stdout.strip()
    args.work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **pip_env_without_constraint(),
        "PIP_CACHE_DIR": str(args.work / "pip-cache"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("PIP_CONSTRAINT", None)
    env.pop("PYTHONPATH", None)
    failed = 0
    for version in args.versions.split(","):
        row = make_one(version, args.work, env, args.python, suffix)
        failed += not row.get("written")
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
