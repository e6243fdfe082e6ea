"""A sensor's ``report`` for tests: it keeps every interruption handed to it, in order."""

from __future__ import annotations

from resurrect.contracts import Interruption


class Reports(list[Interruption]):
    """The interruptions reported so far; the object itself is the ``report`` callable."""

    async def __call__(self, interruption: Interruption) -> None:
        self.append(interruption)
