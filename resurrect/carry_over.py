"""One record built from another that carries the same fields in another form.

A heartbeat and its wire form, a job's recovery record and what the recovery cost, the
attribution's decision and the diagnosis it amounts to: the second record repeats fields of
the first by name and adds a few of its own. :func:`carry_over` copies the fields both
declare, so a field added to both travels without a list kept by hand in each place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def _field_names(record: object) -> Collection[str]:
    if isinstance(record, BaseModel):
        return type(record).model_fields.keys()
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name for f in dataclasses.fields(record)}
    raise TypeError(f"{type(record).__name__} is neither a pydantic model nor a dataclass")


def carry_over(source: object, target: type[M], /, **own: Any) -> M:
    """A ``target`` made of ``own`` plus ``source``'s value of every other field both declare.

    ``source`` is a pydantic model or a dataclass; the result is validated as ``target``.
    """
    carried = _field_names(source)
    shared = {
        name: getattr(source, name)
        for name in target.model_fields
        if name in carried and name not in own
    }
    return target(**shared, **own)
