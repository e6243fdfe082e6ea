"""How resurrect's own errors leave an activity as Temporal failures.

Temporal names a failure by its exception's class, which the retry policies and the
recovery workflow decide on (``resurrect.errors``). What is not a failure at all gets the
``BENIGN`` category: the SDK logs it at debug level, without a traceback, and counts no
failure metric.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from resurrect.errors import NeedsMoreTime


def needs_more_time(exc: NeedsMoreTime) -> ApplicationError:
    """A first attempt that ran out of its seconds: retryable, and not an error to log (the
    recovery runs the call again as an activity task)."""
    return ApplicationError(
        str(exc), type=type(exc).__name__, category=ApplicationErrorCategory.BENIGN
    )
