"""Packages of the distribution: ``resurrect`` and its subpackages, and the top-level
folders workflows/, activities/, workers/ and sensors/ installed as ``resurrect.<name>``
(``package_dir``; resurrect/source_tree.py maps them the same way in a checkout). The
metadata is in pyproject.toml."""

import runpy
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
TOP_LEVEL = runpy.run_path(str(HERE / "resurrect" / "source_tree.py"))["TOP_LEVEL_SUBPACKAGES"]

packages = find_packages(include=["resurrect", "resurrect.*"])
for name in TOP_LEVEL:
    packages += [f"resurrect.{name}"] + [f"resurrect.{name}.{sub}" for sub in find_packages(name)]

setup(
    packages=packages,
    package_dir={f"resurrect.{name}": name for name in TOP_LEVEL},
)
