"""A Temporal client for goodput tests whose visibility lists no recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter


class NoRecoveries:
    """A Temporal client whose visibility lists nothing."""

    data_converter = pydantic_data_converter

    def list_workflows(self, query: str, limit: int) -> AsyncIterator[Any]:
        async def nothing() -> AsyncIterator[Any]:
            for item in ():
                yield item

        return nothing()
