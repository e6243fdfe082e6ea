"""Test doubles shipped for users and plugin authors (no cluster needed)."""

from resurrect.testing.fake_scheduler import FakeScheduler

__all__ = ["FakeScheduler"]
