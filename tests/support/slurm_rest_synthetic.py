"""A synthetic slurmrestd of any size for httpx.MockTransport: Slurm 26.05's answers (data
parser v0.0.45) with the recorded job and node (tests/fixtures/slurm-rest/26.05) as templates.

It serves ``ping/``, ``jobs/``, ``jobs/state/``, ``job/<id>``, ``nodes/`` (with
``update_time``: HTTP 304 while no node changed) and ``node/<name>``, pretty-printed as
slurmrestd prints them, and counts the requests and answer bytes. Answers are rendered once
and kept until the jobs or nodes change, so what a benchmark times is mostly the client's.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-rest" / "26.05"
PREFIX = "/slurm/v0.0.45/"


def _recorded_entry(name: str, key: str) -> dict[str, Any]:
    record = json.loads((RECORDED / f"{name}.json").read_text())
    entry: dict[str, Any] = json.loads(record["body"])[key][0]
    return entry


def _set(number: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": number}


class SyntheticRestd:
    """``jobs`` jobs (the first ``running`` running on one node each, the next ``failed``
    failed, the rest pending and held) on ``nodes`` nodes (every ``down_every``-th down and
    not responding, the last one drained)."""

    def __init__(
        self, *, jobs: int, running: int, nodes: int, failed: int = 3, down_every: int = 500
    ) -> None:
        self._job_template = _recorded_entry("job", "jobs")
        self._node_template = _recorded_entry("nodes", "nodes")
        self.clock = 1_800_000_000  # slurmctld's time: one tick per request
        self.node_change = self.clock
        self.requests: Counter[str] = Counter()
        self.bytes = 0
        self._rendered: dict[str, bytes] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        for index in range(jobs):
            job_id = str(1000 + index)
            if index < running:
                self.set_job(job_id, ["RUNNING"], node=f"gpu{index % nodes + 1:05d}")
            elif index < running + failed:
                self.set_job(job_id, ["FAILED"], node=f"gpu{index % nodes + 1:05d}")
            else:
                self.set_job(job_id, ["PENDING"], held=True)
        self.nodes: dict[str, dict[str, Any]] = {}
        for index in range(nodes):
            name = f"gpu{index + 1:05d}"
            if index % down_every == down_every - 1:
                self.set_node(name, ["DOWN", "NOT_RESPONDING"], "Not responding")
            elif index == nodes - 1:
                self.set_node(name, ["IDLE", "DRAIN"], "resurrect: synthetic")
            else:
                self.set_node(name, ["ALLOCATED"] if index < running else ["IDLE"], "")

    def set_job(self, job_id: str, state: list[str], *, node: str = "", held: bool = False) -> None:
        """Add or change one job (its state, its node, whether it is held)."""
        job = copy.deepcopy(self._job_template)
        job.update(
            job_id=int(job_id),
            job_state=state,
            nodes=node,
            hold=held,
            priority=_set(0 if held else 1000),
            state_reason="JobHeldUser" if held else "None",
            restart_cnt=0,
            admin_comment="",
        )
        self.jobs[job_id] = job
        self._rendered.clear()

    def set_node(self, name: str, state: list[str], reason: str) -> None:
        """Add or change one node (slurmctld's node change time moves)."""
        node = copy.deepcopy(self._node_template)
        node.update(name=name, hostname=name, state=state, reason=reason, partitions=["gpu"])
        self.nodes[name] = node
        self.node_change = self.clock
        self._rendered.clear()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.clock += 1
        path = request.url.path
        key = path.removeprefix(PREFIX)
        self.requests[key.split("/", 1)[0] + "/" if key.startswith(("job/", "node/")) else key] += 1
        status, body = self._answer(key, request.url.params.get("update_time"))
        self.bytes += len(body)
        return httpx.Response(status, content=body)

    def _answer(self, key: str, update_time: str | None) -> tuple[int, bytes]:
        if not key.startswith(("ping", "jobs", "job/", "nodes", "node/")):
            return 404, b"Unable find requested URL."
        if key == "ping/":
            return 200, self._render({"pings": [{"pinged": "UP"}]})
        if key == "jobs/state/":
            return 200, self._cached(key, lambda: self._doc("jobs", self._states()))
        if key == "jobs/":
            return 200, self._cached(key, lambda: self._doc("jobs", list(self.jobs.values())))
        if key.startswith("job/"):
            job = self.jobs.get(key.removeprefix("job/"))
            if job is None:
                text = f"Unable to query JobId={key[4:]}"
                return 404, _failed("jobs", text, "Invalid job id specified", 2017)
            return 200, self._cached(key, lambda: self._doc("jobs", [job]))
        if key == "nodes/":
            if update_time is not None and int(update_time) - 1 >= self.node_change:
                return 304, b""
            return 200, self._cached(key, lambda: self._doc("nodes", list(self.nodes.values())))
        node = self.nodes.get(key.removeprefix("node/"))
        if node is None:
            return 200, _failed("nodes", f"Failure to query node {key[5:]}", "No error", 0)
        return 200, self._cached(key, lambda: self._doc("nodes", [node]))

    def _states(self) -> list[dict[str, Any]]:
        return [{"job_id": job_id, "state": job["job_state"]} for job_id, job in self.jobs.items()]

    def _doc(self, key: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: entries, "last_update": _set(self.clock), "errors": [], "warnings": []}

    def _cached(self, key: str, make: Callable[[], dict[str, Any]]) -> bytes:
        """The answer rendered at its first request since the last change (its
        ``last_update`` is that request's time)."""
        if key not in self._rendered:
            self._rendered[key] = self._render(make())
        return self._rendered[key]

    @staticmethod
    def _render(doc: dict[str, Any]) -> bytes:
        return json.dumps(doc, indent=2).encode()


def _failed(key: str, description: str, error: str, number: int) -> bytes:
    """A failed answer as slurmrestd writes it (texts of the recorded answers)."""
    entry = {"description": description, "error_number": number, "error": error, "source": "x"}
    return json.dumps({key: [], "errors": [entry]}, indent=2).encode()
