"""Hosts of a local cluster as Linux namespaces (``deploy/local-slurm/hosts.sh``), from Python.

``start.sh --hosts netns`` makes each compute node its own network and UTS namespace, the
controller (slurmctld, slurmrestd, Temporal, resurrect's watcher) one more, and resurrect's
worker a host of its own, all on a bridge in the controller's namespace with addresses from
198.18.0.0/24 that exist only there. This module reads what hosts.sh recorded
(``<state>/hosts.info``), builds the argv that runs a program on a host, and moves the calling
thread (and the threads and processes it starts later) onto a host's network with
``setns(2)``: a driver (the demo, the soak) enters the controller's network first, so what it
starts reaches slurmctld and Temporal there and the node hosts reach it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from resurrect.errors import ConfigError

HOSTS_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local-slurm" / "hosts.sh"
CLONE_NEWNET = 0x40000000
CONTROLLER = "ctl"
WORKER = "worker"
# every node host's link to the bridge (hosts.sh names it so in each namespace)
NODE_INTERFACE = "eth0"


@dataclass(frozen=True)
class Host:
    """One host: its name (``ctl``, ``worker`` or a node), network namespace and address."""

    name: str
    netns: str
    address: str


def read_hosts(state_dir: Path) -> dict[str, Host]:
    """The hosts hosts.sh made for the cluster in ``state_dir`` (empty when none)."""
    hosts: dict[str, Host] = {}
    try:
        text = (state_dir / "hosts.info").read_text()
    except FileNotFoundError:
        return hosts
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] != "ID":
            hosts[fields[0]] = Host(fields[0], fields[1], fields[2])
    return hosts


def hosts_argv(state_dir: Path, *args: str) -> list[str]:
    """argv of ``hosts.sh --state-dir STATE_DIR ARGS...``."""
    return [str(HOSTS_SCRIPT), "--state-dir", str(state_dir), *args]


def on_host(state_dir: Path, host: str, argv: list[str]) -> list[str]:
    """argv that runs ``argv`` on ``host`` (its network, UTS namespace and freezer cgroup)."""
    return hosts_argv(state_dir, "exec", host, "--", *argv)


def hosts_up(state_dir: Path, nodes: int, node_prefix: str = "node") -> dict[str, Host]:
    """Create the hosts (hosts.sh up); ConfigError naming what is missing when it cannot."""
    proc = subprocess.run(
        hosts_argv(state_dir, "up", "--nodes", str(nodes), "--node-prefix", node_prefix),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ConfigError(f"hosts in namespaces: {proc.stderr.strip() or proc.stdout.strip()}")
    return read_hosts(state_dir)


def namespaces_unavailable_reason() -> str | None:
    """Why hosts in namespaces cannot be made here (package or kernel capability), or None."""
    proc = subprocess.run(
        hosts_argv(Path("/tmp/resurrect-hosts-check"), "check"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return None
    return proc.stderr.strip().removeprefix("local-slurm: error: ") or "hosts.sh check failed"


def _netns_path(host: Host) -> Path:
    return Path("/run/netns") / host.netns


def on_network_of(host: Host) -> bool:
    """Whether the calling thread is on ``host``'s network already."""
    try:
        mine = os.stat("/proc/thread-self/ns/net").st_ino
        return mine == os.stat(_netns_path(host)).st_ino
    except OSError:
        return False


def enter_network(host: Host) -> None:
    """Move the calling thread onto ``host``'s network namespace (threads and processes it
    starts afterwards are there too). Call it before a driver starts threads."""
    if on_network_of(host):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = os.open(_netns_path(host), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise ConfigError(f"setns onto {host.netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def host_of_process(hosts: dict[str, Host], pid: int) -> str | None:
    """The host (of ``hosts``) whose network namespace process ``pid`` is in, or None."""
    try:
        inode = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
    for name, host in hosts.items():
        try:
            if os.stat(_netns_path(host)).st_ino == inode:
                return name
        except OSError:
            continue
    return None
