"""Which Slurm a local cluster (deploy/local-slurm) runs, and whether it can run here.

The host's Slurm, or a version named by ``slurm_version`` or the ``RESURRECT_SLURM_VERSION``
environment variable, which start.sh runs from a Debian userland it builds once and caches
(``24.11``, ``26.05``). The ``*_reason`` functions say why a cluster, or its slurmrestd,
cannot run here (tests skip with that reason), or None when it can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# The Slurm version local clusters run when none is given: unset means the host's.
SLURM_VERSION_ENV = "RESURRECT_SLURM_VERSION"
# Versions start.sh runs from a Debian userland (deploy/local-slurm/userland.sh).
USERLAND_VERSIONS = ("24.11", "26.05")
_SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "munged")


def requested_slurm_version() -> str | None:
    """The version ``RESURRECT_SLURM_VERSION`` asks for (``22.05``, ``24.11``, ``26.05``), or
    None for the host's."""
    return os.environ.get(SLURM_VERSION_ENV) or None


def _host_slurm_version() -> str | None:
    """``major.minor`` of the host's slurmctld, or None when it is missing."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    ctld = shutil.which("slurmctld", path=search)
    if ctld is None:
        return None
    try:
        out = subprocess.run(
            [ctld, "-V"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.split()[-1].split(".") if out.split() else []
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def slurm_unavailable_reason(slurm_version: str | None = None) -> str | None:
    """Why a local cluster (of ``slurm_version``, default: the requested one) cannot start
    here, or None if it can."""
    if os.geteuid() != 0:
        return "local Slurm cluster needs root (slurmd runs jobs as their owners)"
    version = slurm_version or requested_slurm_version()
    if version is not None and version != _host_slurm_version():
        if version not in USERLAND_VERSIONS:
            return f"no Slurm {version} here (the host's, or {', '.join(USERLAND_VERSIONS)})"
        cached = Path(_cache_dir()) / f"slurm-{version}" / "sbin" / "slurmd"
        if not cached.exists() and shutil.which("mmdebstrap") is None:
            return (
                f"Slurm {version} needs a Debian userland: deploy/local-slurm/userland.sh "
                f"{version} (apt-get install mmdebstrap patchelf)"
            )
        if shutil.which("munged", path="/usr/sbin:/sbin") is None:
            return "munged missing (apt-get install munge)"
        return None
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [b for b in _SLURM_BINARIES if shutil.which(b, path=search) is None]
    if missing:
        return (
            f"Slurm binaries missing: {', '.join(missing)} "
            "(apt-get install munge slurmctld slurmd slurm-client)"
        )
    return None


def restd_unsupported_reason(slurm_version: str | None = None) -> str | None:
    """Why resurrect's slurmrestd backend does not apply to ``slurm_version`` (default: the
    requested one, else the host's): its REST API predates data parser v0.0.42 (Slurm
    24.11), the oldest the backend reads. None where it applies."""
    version = slurm_version or requested_slurm_version() or _host_slurm_version()
    if version is None:
        return None
    try:
        release = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    if release < (24, 11):
        return f"slurmrestd of Slurm {version} serves data parsers older than v0.0.42"
    return None


def restd_unavailable_reason(slurm_version: str | None = None) -> str | None:
    """Why a local cluster (of ``slurm_version``, default: the requested one) cannot run
    slurmrestd with auth/jwt here, or None if it can (the 24.11 / 26.05 userlands have it;
    the host's Slurm needs the slurmrestd and slurm-wlm-jwt-plugin packages)."""
    reason = slurm_unavailable_reason(slurm_version)
    if reason is not None:
        return reason
    version = slurm_version or requested_slurm_version()
    if version is not None and version != _host_slurm_version():
        return None  # userland.sh builds it with slurmrestd and the jwt plugin
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    if shutil.which("slurmrestd", path=search) is None:
        return "no slurmrestd for the host's Slurm (apt-get install slurmrestd)"
    if not Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so").exists():
        return "no auth/jwt plugin for the host's Slurm (apt-get install slurm-wlm-jwt-plugin)"
    return None


def _cache_dir() -> str:
    """Where start.sh keeps the Debian userlands (``LOCAL_SLURM_CACHE_DIR``)."""
    return os.environ.get("LOCAL_SLURM_CACHE_DIR", "/var/cache/resurrect")
