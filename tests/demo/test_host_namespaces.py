"""Hosts in namespaces (start.sh --hosts netns) on the real local Slurm: each node its own
hostname, address and slurmd; a cut link leaves its processes alive; a frozen host stops
every process at once; a crashed host loses them all; heal brings the node back; a missing
nft names its package."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.requirements import missing
from support.slurm import LocalSlurm, slurm_unavailable_reason, start_local_slurm, stop_local_slurm

from resurrect.demo.host_namespaces import hosts_argv, namespaces_unavailable_reason

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[LocalSlurm]:
    reason = slurm_unavailable_reason() or namespaces_unavailable_reason()
    if reason is not None:
        missing(reason)
    cluster = start_local_slurm(nodes=3, hosts="netns")
    try:
        yield cluster
    finally:
        stop_local_slurm(cluster)


def _host_pids(cluster: LocalSlurm, host: str) -> list[int]:
    out = subprocess.run(
        hosts_argv(cluster.state_dir, "pids", host),
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return [int(p) for p in out.split()]


def _states(pids: list[int]) -> set[str]:
    found = set()
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next(x for x in status.splitlines() if x.startswith("State:"))
        found.add(line.split()[1])
    return found


def test_each_node_is_its_own_host_with_its_own_address(netns_cluster: LocalSlurm) -> None:
    hosts = netns_cluster.host_map
    assert hosts["ctl"].address == "198.18.0.1"
    for i, node in enumerate(netns_cluster.nodes, start=1):
        record = netns_cluster.node(node)
        assert record["NodeAddr"] == hosts[node].address == f"198.18.0.{10 + i}"
        hostname = subprocess.run(
            netns_cluster.on_host(node, ["hostname"]), capture_output=True, text=True, check=True
        ).stdout.strip()
        assert hostname == node
        pids = _host_pids(netns_cluster, node)
        assert any(Path(f"/proc/{p}/comm").read_text().strip() == "slurmd" for p in pids)
    # nothing of the cluster is on this machine's own network
    ours = os.stat("/proc/self/ns/net").st_ino
    assert all(os.stat(f"/run/netns/{h.netns}").st_ino != ours for h in hosts.values())


def test_a_job_spans_two_hosts(netns_cluster: LocalSlurm) -> None:
    netns_cluster.reset()
    script = "srun --ntasks-per-node=1 bash -c 'echo host=$(hostname)'\n"
    job_id = netns_cluster.submit(script, nodes=2, output=str(netns_cluster.out_dir / "span-%j"))
    netns_cluster.wait_job_state(job_id, {"COMPLETED"}, timeout=60)
    lines = (netns_cluster.out_dir / f"span-{job_id}").read_text().split()
    assert sorted(lines) == ["host=node1", "host=node2"]


def test_partition_keeps_the_processes_and_slurm_sees_the_node_go(
    netns_cluster: LocalSlurm,
) -> None:
    netns_cluster.reset()
    job_id = netns_cluster.submit(["srun", "sleep", "600"], nodes=2, requeue=False)
    record = netns_cluster.wait_job_state(job_id, {"RUNNING"}, timeout=60)
    node = netns_cluster.run(["scontrol", "show", "hostnames", record["NodeList"]]).split()[-1]
    before = _host_pids(netns_cluster, node)
    netns_cluster.partition(node)
    try:
        netns_cluster.wait_node_state(node, {"DOWN"}, timeout=60)
        alive = [p for p in before if Path(f"/proc/{p}").exists()]
        assert alive == before  # cut off, not dead: slurmd, the step and its sleep live on
    finally:
        netns_cluster.heal(node)
    # Slurm ends the stale job on the healed node; ReturnToService=2 brings it back
    netns_cluster.wait_node_state(node, {"IDLE"}, timeout=60)
    job_pids = [p for p in before if p not in _named(before, "slurmd")]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in job_pids):
        time.sleep(0.2)
    assert not [p for p in job_pids if Path(f"/proc/{p}").exists()]


def _named(pids: list[int], comm: str) -> set[int]:
    found = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                found.add(pid)
        except OSError:
            pass
    return found


def test_freeze_stops_every_process_of_the_host_and_thaw_resumes_them(
    netns_cluster: LocalSlurm,
) -> None:
    netns_cluster.reset()
    pids = _host_pids(netns_cluster, "node3")
    netns_cluster.freeze_host("node3")
    try:
        assert _states(pids) <= {"D", "T"}  # frozen (cgroup freezer) or stopped
    finally:
        netns_cluster.thaw_host("node3")
    # the freezer wakes its tasks after the thaw returns; on a loaded machine some are
    # still asleep for a moment
    deadline = time.monotonic() + 10
    while _states(pids) & {"D", "T"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _states(pids) & {"D", "T"}


def test_crash_kills_every_process_of_the_host_and_the_node_restarts(
    netns_cluster: LocalSlurm,
) -> None:
    netns_cluster.reset()
    pids = _host_pids(netns_cluster, "node3")
    netns_cluster.crash_host("node3")
    assert _host_pids(netns_cluster, "node3") == []
    assert _states(pids) <= {"Z"}  # dead (a zombie until its parent reaps it)
    netns_cluster.start_node("node3")
    netns_cluster.wait_node_state("node3", {"IDLE"}, timeout=60)


def test_lossy_link_without_netem_drops_with_nftables_and_heals(
    netns_cluster: LocalSlurm,
) -> None:
    said = netns_cluster.lossy("node1", 30)
    assert "loss 30%" in said
    netns_cluster.heal("node1")
    rules = subprocess.run(
        netns_cluster.on_host("node1", ["nft", "list", "chain", "inet", "resurrect", "output"]),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "drop" not in rules


def test_partition_faults_refuse_hosts_on_one_network(tmp_path: Path) -> None:
    state = tmp_path / "local"
    state.mkdir()
    info = {"STATE_DIR": state, "CLUSTER_NAME": "x", "NODES": 1, "NODE_PREFIX": "node",
            "SLURM_CONF": state / "c", "HOSTS": "local"}  # fmt: skip
    (state / "cluster.info").write_text("".join(f"{k}={v}\n" for k, v in info.items()))
    proc = subprocess.run(
        [str(Path(hosts_argv(state)[0]).with_name("inject.sh")), "--state-dir", str(state),
         "partition", "node1"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "needs hosts in namespaces (start.sh --hosts netns)" in proc.stderr


def test_missing_nft_is_named_with_its_package(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("hosts.sh check runs as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):  # every tool but nft
        for tool in Path(folder).iterdir():
            if tool.name != "nft" and not (bin_dir / tool.name).exists():
                (bin_dir / tool.name).symlink_to(tool)
    proc = subprocess.run(
        hosts_argv(tmp_path / "s", "check"),
        env={"PATH": str(bin_dir)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "nft not found: apt-get install nftables" in proc.stderr


# Run on a node's host: the agent's self-fence with its lease run out, for job JOB (opted
# in, owned by UID); prints what it killed.
_FENCE_ON_HOST = """
import asyncio, json, sys
from resurrect.config import FencingSettings
from resurrect.contracts import JobInfo, JobState
from resurrect.sensors.node_agent.fence import Lease, PidHandles, SelfFence
job_id, node, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def look_up(jid):
    return JobInfo(job_id=jid, state=JobState.RUNNING, user_id=uid)
fence = SelfFence(FencingSettings(enabled=True), node, Lease(0.001), look_up=look_up,
                  opted_in=lambda job: job.job_id == job_id, handles=PidHandles())
asyncio.run(fence.learn())
action = fence.fence_if_expired()
print(json.dumps(action.killed if action else {}))
"""


def test_a_fenced_node_kills_every_process_of_the_job_and_leaves_its_step_daemons(
    netns_cluster: LocalSlurm,
) -> None:
    """The batch script, srun, the task and the task's child, found by the kernel's word
    from the node's own host, all die at once; slurmstepd (root's) is left to Slurm."""
    import json
    import pwd
    import sys

    from resurrect.stacks.processes import scan_job_processes

    netns_cluster.reset()
    script = "srun --ntasks-per-node=1 bash -c 'sleep 600 & exec sleep 601'\n"
    job_id = netns_cluster.submit(script, nodes=1, output=str(netns_cluster.out_dir / "f-%j"))
    netns_cluster.wait_job_state(job_id, {"RUNNING"}, timeout=60)
    node = netns_cluster.job(job_id)["NodeList"]

    def members() -> list[int]:
        """The job's processes on its node's host (other clusters on this machine may run
        a job of the same id: the node's network namespace tells them apart)."""
        conf = str(netns_cluster.slurm_conf)
        on_host = set(_host_pids(netns_cluster, node))
        return [
            r.process.pid
            for r in scan_job_processes()
            if r.job_id == job_id and r.slurm_conf in (conf, None) and r.process.pid in on_host
        ]

    deadline = time.monotonic() + 30
    while len(members()) < 4 and time.monotonic() < deadline:  # bash, srun, sleep, sleep
        time.sleep(0.2)
    before = members()
    assert len(before) >= 4
    stepds = [
        p
        for p in _host_pids(netns_cluster, node)
        if Path(f"/proc/{p}/comm").read_text().strip() == "slurmstepd"
    ]
    assert stepds
    uid = pwd.getpwnam(netns_cluster.demo_user).pw_uid
    done = subprocess.run(
        netns_cluster.on_host(node, [sys.executable, "-c", _FENCE_ON_HOST, job_id, node, str(uid)]),
        capture_output=True, text=True, check=True, timeout=60, env=os.environ,
    )  # fmt: skip
    killed = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(p for pids in killed.values() for p in pids) == sorted(set(before))
    deadline = time.monotonic() + 10  # SIGKILL lands at once; the states follow
    while not _states(before) <= {"Z", "X"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _states(before) <= {"Z", "X"}
    # Slurm's own daemons are Slurm's to end (they leave once the job's processes are gone)
    assert not set(stepds) & {p for pids in killed.values() for p in pids}
    netns_cluster.run(["scancel", job_id], check=False)
