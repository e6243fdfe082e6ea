"""An example resurrect plugin.

Steps (activity names once enabled as plugin ``example``):

* ``example.webhook``: POST the incident as JSON to a URL (a chat or paging webhook).
* ``example.return_if_healthy``: run a node health script for each node this recovery
  drained and return the node to service when the script passes.

It also ships a plan (``plans/notify-on-drain.yaml``) that drains, restarts and then calls
the webhook.
"""

from pathlib import Path

from resurrect.sdk import Plugin
from resurrect_example_plugin.steps import return_if_healthy, webhook

PLUGIN = Plugin(
    name="example",
    steps=[webhook, return_if_healthy],
    plans=[Path(__file__).with_name("plans") / "notify-on-drain.yaml"],
    description="webhook notifier and health-checked return to service",
)

__all__ = ["PLUGIN"]
