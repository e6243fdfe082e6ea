"""Search attributes set as a workflow goes and upserted together: one upsert command per
workflow task at most, and only for the attributes whose value changed."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate


class SearchAttributeBatch:
    """The search attributes a workflow has set and not yet upserted."""

    def __init__(self) -> None:
        self._pending: dict[str, SearchAttributeUpdate[Any]] = {}
        self._upserted: dict[str, object] = {}

    def begin(self) -> None:
        """Take the attributes the workflow was started with as already upserted."""
        started = workflow.info().typed_search_attributes
        self._upserted = {pair.key.name: pair.value for pair in started}

    def set(self, key: SearchAttributeKey[Any], value: object) -> None:
        """Set ``key`` at the next :meth:`publish` (forgotten if it is set back first)."""
        if self._upserted.get(key.name) == value:
            self._pending.pop(key.name, None)
        else:
            self._pending[key.name] = key.value_set(value)

    def publish(self) -> None:
        """Upsert the attributes that changed since the last upsert, in one command."""
        if not self._pending:
            return
        updates = list(self._pending.values())
        for update in updates:
            self._upserted[update.key.name] = update.value
        self._pending.clear()
        workflow.upsert_search_attributes(updates)
