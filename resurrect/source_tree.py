"""Where ``resurrect.workflows``, ``.activities``, ``.workers`` and ``.sensors`` come from.

The four folders sit at the top of the repository (docs/architecture.md). A wheel installs
each as ``resurrect/<name>`` (``package_dir`` in setup.py), an editable install maps them
with setuptools' finder, and a source checkout used through ``sys.path`` alone (a worktree
on ``PYTHONPATH``, the tests' subprocesses) has them beside ``resurrect/``: there
``install`` puts a finder first on ``sys.meta_path`` that answers for exactly these four
names from the folders beside the ``resurrect`` package that was imported, so another
checkout's editable install never answers for them. Every module has one import name.

Only ``os.path`` is used: Temporal's workflow sandbox imports ``resurrect`` again for each
workflow, where ``pathlib``'s file system calls are refused, and the finder it would
install again is recognised by its root (the sandbox's copy of this module has its own
class), so one finder serves every import."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os.path
import sys
from collections.abc import Sequence
from types import ModuleType

TOP_LEVEL_SUBPACKAGES = ("workflows", "activities", "workers", "sensors")


class SourceTreeFinder(importlib.abc.MetaPathFinder):
    """Finds ``resurrect.<name>`` in ``<root>/<name>`` for the four top-level folders."""

    def __init__(self, root: str) -> None:
        self.resurrect_source_root = root
        self.names = frozenset(f"resurrect.{name}" for name in TOP_LEVEL_SUBPACKAGES)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.resurrect_source_root])


def install(package_dir: str) -> None:
    """Maps the four subpackages to the folders beside ``package_dir`` when they are not
    inside it (a source checkout); an installed wheel has them inside and needs nothing."""
    if all(os.path.isdir(os.path.join(package_dir, name)) for name in TOP_LEVEL_SUBPACKAGES):
        return
    root = os.path.dirname(package_dir)
    beside = (os.path.join(root, name, "__init__.py") for name in TOP_LEVEL_SUBPACKAGES)
    if not all(os.path.isfile(init) for init in beside):
        return
    if not any(getattr(f, "resurrect_source_root", None) == root for f in sys.meta_path):
        sys.meta_path.insert(0, SourceTreeFinder(root))
