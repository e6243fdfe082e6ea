"""Bounds on the work one verification may do on job-owned (hostile) files.

The policy, in one place:

* A file larger than ``max_full_file_bytes`` is never read in full (no sha256, no CRC): its
  size and structure are checked as at quick level and the verdict says "too large to
  verify fully". It counts as intact if those checks pass: a huge (or huge sparse) file
  can only lower the level of checking to ``quick``, never block the recovery.
* When ``time_budget_s`` runs out, unfinished full checks stop at their next block and
  are reported the same way (quick-level result, "not verified fully: time budget").
* Compressed zip members (``torch.save`` itself never compresses) are inflated at most
  ``max_inflated_bytes`` per archive, and a member declaring more than
  ``max_compression_ratio`` times its compressed size is damage (a zip bomb), refused
  before anything is inflated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VerifyLimits:
    """See the module docstring."""

    max_full_file_bytes: int = 256 << 30
    max_inflated_bytes: int = 256 << 20
    max_compression_ratio: float = 100.0
    time_budget_s: float | None = None


DEFAULT_LIMITS = VerifyLimits()
