"""One rule for a real part that is missing on this machine: skip the test on a developer's
machine, fail it in CI.

``deploy/run-tests.sh`` (and so ``.ci/run``) sets ``RESURRECT_REQUIRE_SLURM``; there
``deploy/install.sh`` has installed every real part the suite uses (Slurm, Temporal's test
server, py-spy, Prometheus, Chromium, openssl, systemd), so a missing one is a broken setup,
not a reason to pass quietly.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "RESURRECT_REQUIRE_SLURM"


def required() -> bool:
    """Whether this run must have every real part (CI)."""
    return bool(os.environ.get(REQUIRE_ENV))


def missing(reason: str) -> NoReturn:
    """Stop the test for lack of a real part: a failure in CI, a skip elsewhere."""
    if required():
        pytest.fail(f"{REQUIRE_ENV} is set but {reason}")
    pytest.skip(reason)
