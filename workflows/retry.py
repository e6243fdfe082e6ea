"""The retry policy of the long-lived operator workflows' activities.

The drain budget's notices, a node's repair actions and the node health reports must get
through however long a controller, Slurm or Temporal outage lasts: the workflows live on and
never end over a failed activity. So they are retried without a maximum, backing off to at
most a minute apart.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

UNTIL_DONE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=60), maximum_attempts=0)
