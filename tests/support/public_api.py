"""The public surface of a module, as text, for tests that pin it.

One line per name in ``__all__``: the name, what it is, and where it is defined (for a
constant, its value). A test compares this with a stored file under
``tests/fixtures/public-api/``: changing what plugin authors and operators import is a
deliberate edit of that file, reviewed like any other breaking change.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

PINNED = Path(__file__).parents[1] / "fixtures" / "public-api"


def describe(module: ModuleType) -> list[str]:
    lines = []
    for name in module.__all__:
        obj = getattr(module, name)  # a name in __all__ that is not defined fails here
        if inspect.isclass(obj):
            lines.append(f"{name}: class {obj.__module__}.{obj.__qualname__}")
        elif callable(obj):
            lines.append(f"{name}: function {obj.__module__}.{obj.__qualname__}")
        else:
            lines.append(f"{name}: {type(obj).__name__} = {obj!r}")
    return lines


def pinned(module: ModuleType) -> list[str]:
    return (PINNED / f"{module.__name__}.txt").read_text().splitlines()
