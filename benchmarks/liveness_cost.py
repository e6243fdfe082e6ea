"""Liveness cost at fleet scale: Temporal actions per healthy node-hour and node-loss
detection time, with heartbeats going to the liveness collector instead of Temporal.

A sender process plays ``--nodes`` agents (10,000), each sending an authenticated heartbeat
every ``--interval`` (2 s) over UDP to a real :class:`sensors.liveness.collector.
LivenessCollector` in this process, for ``--duration`` seconds. Halfway through, ``--lose``
nodes stop (as a node that dies does). Measured here:

* ``temporal_actions_per_node_hour``: the changes the collector hands on (each one Temporal
  signal), counted after the start-up burst (every node is "heard" once), per node-hour,
  plus the hourly refresh each healthy node gets (``refresh_s``, 3600 s): the healthy
  steady state. ``naive_temporal_actions_per_node_hour``: one signal per heartbeat, as
  counted from the heartbeats the same run delivered (the former path).
* ``detect_s``: from the moment the lost nodes die to each one's ``silent`` change (max and
  p50 over them; a node dies between two heartbeats, so this is the threshold minus the
  age of its last heartbeat, plus the collector's latency); the threshold is ``--threshold``
  (6 s, counted from the last heartbeat, as the workflow's own timer does).
* the collector's CPU per second and per heartbeat (the node key's derivation, HMAC check,
  JSON, bookkeeping).

    python benchmarks/liveness_cost.py [--nodes 10000] [--duration 30] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import socket
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from _common import benchmark_parser, print_result

from resurrect.sensors.liveness.collector import REFRESH_S, LivenessChange, LivenessCollector
from resurrect.sensors.liveness.wire import Beat, node_key, seal

CLUSTER = "bench"


def send(
    key: bytes,
    port: int,
    nodes: int,
    interval: float,
    duration: float,
    lose: int,
    threshold: float,
    stopped_at: Any,
) -> None:
    """The agents: every node heartbeats once per interval, spread evenly over it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    start = time.monotonic()
    seq = [0] * nodes
    keys = [node_key(key, CLUSTER, f"gpu{n:05d}") for n in range(nodes)]  # each agent's own
    lost_from = start + duration / 2
    step = interval / nodes
    index, planned = 0, start
    while True:
        now = time.monotonic()
        if now - start >= duration:
            break
        if planned > now:
            time.sleep(min(planned - now, 0.01))
            continue
        node = index % nodes
        if now >= lost_from and "loss" not in stopped_at:
            stopped_at["loss"] = time.time()  # the moment the lost nodes die
        if not (node < lose and now >= lost_from):
            beat = Beat(
                cluster=CLUSTER,
                node=f"gpu{node:05d}",
                instance="bench",
                seq=seq[node],
                sent_at=datetime.now(UTC),
                silence_threshold_s=threshold,
            )
            seq[node] += 1
            try:
                sock.sendto(seal(keys[node], beat), ("127.0.0.1", port))
            except BlockingIOError:
                pass
            if node < lose:
                stopped_at[node] = time.time()  # the last heartbeat this node sent
        index += 1
        planned += step
    sock.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    key = os.urandom(32)
    changes: list[tuple[float, LivenessChange]] = []

    async def count(change: LivenessChange) -> None:
        changes.append((time.time(), change))

    collector = LivenessCollector(key, CLUSTER, count)
    _host, port = await collector.listen("127.0.0.1", 0)
    assert collector.transport is not None
    sock = collector.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(collector.watch(stop, max_sleep_s=0.05)),
        asyncio.create_task(collector.forward(stop)),
    ]
    manager = multiprocessing.Manager()
    stopped_at = manager.dict()
    sender = multiprocessing.Process(
        target=send,
        args=(
            key,
            port,
            args.nodes,
            args.interval,
            args.duration,
            args.lose,
            args.threshold,
            stopped_at,
        ),
    )
    cpu0, wall0 = time.process_time(), time.monotonic()
    sender.start()
    warmup = args.interval * 2  # every node heard once: the start-up burst
    await asyncio.sleep(warmup)
    steady_from, steady_changes0 = time.time(), len(changes)
    assert args.duration / 2 > warmup + args.threshold, "--duration too short to see a loss"
    cpu_steady0, wall_steady0, beats0 = (
        time.process_time(),
        time.monotonic(),
        collector.stats.accepted,
    )
    while sender.is_alive():
        await asyncio.sleep(0.2)
    # the window ends with the sender (after it, every node falls silent)
    cpu_steady = time.process_time() - cpu_steady0
    wall_steady = time.monotonic() - wall_steady0
    steady_to = time.time()
    stop.set()
    await asyncio.gather(*tasks)
    collector.close()
    total_cpu, total_wall = time.process_time() - cpu0, time.monotonic() - wall0
    beats = collector.stats.accepted - beats0

    lost = {f"gpu{n:05d}": float(stopped_at[n]) for n in range(args.lose) if n in stopped_at}
    loss_at = float(stopped_at.get("loss", 0.0))
    detect: list[float] = []  # from the moment the node died
    after_last: list[float] = []  # from its last heartbeat
    for at, change in changes:
        last = lost.get(change.beat.node)
        if change.kind == "silent" and last is not None:
            detect.append(at - loss_at)
            after_last.append(at - last)
            lost.pop(change.beat.node)
    window_changes = [
        c
        for at, c in changes[steady_changes0:]
        if steady_from <= at <= steady_to
        and c.beat.node not in {f"gpu{n:05d}" for n in range(args.lose)}
    ]
    healthy_hours = (args.nodes - args.lose) * wall_steady / 3600
    healthy_rate = len(window_changes) / healthy_hours if healthy_hours else 0.0
    naive_rate = beats / (args.nodes * wall_steady / 3600) if wall_steady else 0.0
    return {
        "benchmark": "liveness_cost",
        "nodes": args.nodes,
        "interval_s": args.interval,
        "threshold_s": args.threshold,
        "duration_s": round(total_wall, 1),
        "heartbeats_accepted": collector.stats.accepted,
        "heartbeats_refused": collector.stats.refused,
        "temporal_actions_per_node_hour": round(healthy_rate + 3600 / REFRESH_S, 3),
        "measured_changes_healthy_window": len(window_changes),
        "naive_temporal_actions_per_node_hour": round(naive_rate),
        "detect_s": round(max(detect), 2) if detect else None,
        "detect_p50_s": round(statistics.median(detect), 2) if detect else None,
        "detect_after_last_heartbeat_max_s": round(max(after_last), 2) if after_last else None,
        "lost_nodes": args.lose,
        "lost_nodes_detected": len(detect),
        "collector_cpu_ms_per_s": round(cpu_steady * 1000 / wall_steady, 1),
        "collector_cpu_us_per_heartbeat": round(cpu_steady * 1e6 / max(beats, 1), 1),
        "collector_cpu_s_total": round(total_cpu, 2),
        "targets": {"temporal_actions_per_node_hour": 1, "detect_s": 6},
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--threshold", type=float, default=6.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--lose", type=int, default=20)
    args = parser.parse_args(argv)
    # The liveness sensor logs one line per lost node: not the benchmark's output.
    logging.getLogger("resurrect.sensors.liveness").setLevel(logging.ERROR)
    print_result(asyncio.run(run(args)), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
