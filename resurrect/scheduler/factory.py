"""Choose a Slurm backend: pyslurm when it imports and matches the cluster, else the CLI."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Literal

from resurrect.errors import ConfigError
from resurrect.scheduler.base import Scheduler
from resurrect.scheduler.hold_marker import HoldMarkKey
from resurrect.scheduler.pyslurm_backend import PyslurmScheduler, import_pyslurm, pyslurm_version
from resurrect.scheduler.slurm_cli import SlurmCli, parse_slurm_version
from resurrect.scheduler.slurm_exec import CommandRunner

SchedulerKind = Literal["auto", "cli", "pyslurm"]


def cluster_slurm_version(
    slurm_conf: str | None = None, bin_dir: str | None = None, timeout: float = 10.0
) -> tuple[int, int] | None:
    """(major, minor) of the installed Slurm clients, or None if they cannot be run."""
    runner = CommandRunner(bin_dir=bin_dir, slurm_conf=slurm_conf)
    try:
        out = subprocess.run(
            [runner.resolve("scontrol"), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=runner.env,
            check=True,
        ).stdout
        major, minor, _ = parse_slurm_version(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return major, minor


def make_scheduler(
    kind: SchedulerKind,
    cluster_name: str,
    slurm_conf: str | None = None,
    *,
    bin_dir: str | None = None,
    command_timeout_s: float = 30.0,
    verify_timeout_s: float = 20.0,
    poll_interval_s: float = 0.25,
    version_probe: Callable[[], tuple[int, int] | None] | None = None,
    hold_mark_key: HoldMarkKey | None = None,
) -> Scheduler:
    """Build the scheduler backend.

    ``cli``: always SlurmCli. ``pyslurm``: PyslurmScheduler or ConfigError if pyslurm is
    missing or does not match the cluster's Slurm. ``auto``: pyslurm only if it imports and
    its (major, minor) equals the cluster's, else SlurmCli. pyslurm reads the cluster from
    ``SLURM_CONF`` in the process environment, so a private ``slurm_conf`` forces the CLI in
    ``auto`` unless it is already the process's SLURM_CONF. ``hold_mark_key`` tags the hold
    marks (the watchdog must use the same one).
    """
    cli = SlurmCli(
        cluster_name,
        slurm_conf,
        bin_dir,
        command_timeout=command_timeout_s,
        verify_timeout=verify_timeout_s,
        poll_interval=poll_interval_s,
    )
    if hold_mark_key is not None:
        cli.hold_mark_key = hold_mark_key
    if kind == "cli":
        return cli
    if kind not in ("auto", "pyslurm"):
        raise ConfigError(f"scheduler kind must be auto, cli or pyslurm, got {kind!r}")
    mod = import_pyslurm()
    have = pyslurm_version(mod) if mod is not None else None
    probe = version_probe or (lambda: cluster_slurm_version(slurm_conf, bin_dir))
    want = probe() if have is not None else None
    conf_ok = slurm_conf is None or os.environ.get("SLURM_CONF") == slurm_conf
    if mod is not None and have is not None and have == want and conf_ok:
        backend = PyslurmScheduler(
            cluster_name, mod, verify_timeout=verify_timeout_s, poll_interval=poll_interval_s
        )
        backend.hold_mark_key = cli.hold_mark_key
        return backend
    if kind == "pyslurm":
        raise ConfigError(
            f"scheduler 'pyslurm' requested but pyslurm {'is missing' if mod is None else have} "
            f"does not match cluster Slurm {want}"
            + ("" if conf_ok else f" (or SLURM_CONF is not {slurm_conf})")
        )
    return cli
