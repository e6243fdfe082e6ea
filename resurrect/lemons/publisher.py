"""Lemon scores as metrics: ``resurrect_node_lemon_score{cluster, node}`` for every node with
an incident on record, recomputed every ``lemons.metrics_interval_s`` (scores decay between
incidents, so they are recomputed, not only set when an incident arrives)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.lemons.models import LemonScore
from resurrect.lemons.records import lemon_rules, read_records, score_records
from resurrect.telemetry import metrics as m
from resurrect.telemetry.republish import republish_until


def publish(cluster: str, scores: Sequence[LemonScore]) -> None:
    for score in scores:
        m.NODE_LEMON_SCORE.set(score.score, {"cluster": cluster, "node": score.node})


class LemonPublisher:
    def __init__(self, client: Client, config: ResurrectConfig) -> None:
        self.client = client
        self.config = config

    async def publish_once(self) -> list[LemonScore]:
        records = await read_records(self.client, self.config)
        scores = score_records(records, lemon_rules(self.config), datetime.now(UTC))
        publish(self.config.cluster.name, scores)
        return scores

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.config.lemons.metrics_interval_s
        await republish_until(stop, interval, self.publish_once, "lemon score")
