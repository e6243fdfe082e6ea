"""How resurrect's own errors leave an activity as Temporal failures: one rule for all.

Temporal names a failure by its exception's class, which the retry policies and the
recovery workflow decide on (``resurrect.errors``); a :class:`NonRetryable` error is not
retried. What is not a failure at all (:class:`NeedsMoreTime`) gets the ``BENIGN``
category: the SDK logs it at debug level, without a traceback, and counts no failure metric.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from resurrect.errors import NeedsMoreTime, NonRetryable, ResurrectError


def failure_of(exc: ResurrectError) -> ApplicationError:
    """``exc`` as the failure its activity ends with (raise it ``from exc``)."""
    return ApplicationError(
        str(exc),
        type=type(exc).__name__,
        non_retryable=isinstance(exc, NonRetryable),
        category=(
            ApplicationErrorCategory.BENIGN
            if isinstance(exc, NeedsMoreTime)
            else ApplicationErrorCategory.UNSPECIFIED
        ),
    )
