"""De-duplication and rate limiting of findings, so a flapping counter cannot flood Temporal."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from resurrect.contracts import Evidence
from resurrect.evidence_trust import UNCONFIRMED_FIELD
from resurrect.throttle import OncePerWindow


def finding_key(evidence: Evidence) -> tuple[str, str]:
    """What counts as "the same finding": the same rule on the same GPU (or node), and as
    confirmed (an unconfirmed finding never holds back its confirmation)."""
    where = evidence.gpu or evidence.fields.get("pci") or evidence.host or "node"
    what = evidence.rule or evidence.text
    return where, f"{what} (unconfirmed)" if UNCONFIRMED_FIELD in evidence.fields else what


class FindingLimiter:
    """Admits a finding once per (GPU, rule) per ``window_s``, and at most
    ``max_per_minute`` findings in any sliding minute. Suppressed findings are counted."""

    def __init__(
        self,
        *,
        window_s: float,
        max_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_per_minute
        self._clock = clock
        self._reported: OncePerWindow[tuple[str, str]] = OncePerWindow(window_s)
        self._recent: deque[float] = deque()
        self.duplicates = 0
        self.rate_limited = 0

    def admit(self, evidence: Evidence) -> bool:
        """Whether to report ``evidence`` now (and remember that it was)."""
        now = self._clock()
        key = finding_key(evidence)
        if self._reported.holds_back(key, now):
            self.duplicates += 1
            return False
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if len(self._recent) >= self._max:
            self.rate_limited += 1
            return False
        self._recent.append(now)
        self._reported.let_through(key, now)
        return True
