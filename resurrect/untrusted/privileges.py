"""Becoming a job's owner, and bounding what this process may use, before touching job data.

A helper that reads or parses what a job wrote runs as the job's owner
(:func:`drop_to`: groups, gid, uid, then every capability cleared, and checked that root
cannot be regained) and under resource limits it cannot raise (:func:`limit_resources`).
Used by the checkpoint helper and the parse helper (:mod:`resurrect.untrusted.helper`).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
from typing import Protocol


class HasIds(Protocol):
    """A job's owner: its uid and primary gid (as the scheduler or the kernel reports them)."""

    @property
    def uid(self) -> int: ...

    @property
    def gid(self) -> int: ...


class DropFailed(Exception):
    """The helper could not become the job's owner; it does nothing then."""


def drop_to(owner: HasIds | None) -> str:
    """Become ``owner`` when this process may change its ids; say what it now runs as.

    As root, or with CAP_SETUID/CAP_SETGID (e.g. a worker unit running as SlurmUser with
    those ambient capabilities), it drops to the owner and checks it cannot come back. As
    root with no known owner it refuses (DropFailed) rather than touch a job's files as
    root. Without the right to change ids (tests, development, a plain SlurmUser worker)
    it runs as itself under the same file rules.
    """
    if owner is None:
        if os.geteuid() == 0:
            raise DropFailed(
                "the job's owner uid/gid is unknown: refusing to read its files as root"
            )
        return f"uid {os.geteuid()} (owner unknown: no drop)"
    if owner.uid == 0:
        return "uid 0 (the job's owner is root)"
    if (os.getuid(), os.geteuid()) == (owner.uid, owner.uid):
        return f"uid {owner.uid} gid {os.getegid()} (already the owner)"
    try:
        name = pwd.getpwuid(owner.uid).pw_name
        groups = os.getgrouplist(name, owner.gid)
    except KeyError:
        groups = [owner.gid]
    try:
        os.setgroups(groups)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        return f"uid {os.geteuid()} (no right to change ids: no drop)"
    os.setresgid(owner.gid, owner.gid, owner.gid)
    os.setresuid(owner.uid, owner.uid, owner.uid)
    # From root, the kernel clears the capabilities at this point; from a non-root user
    # holding CAP_SETUID/CAP_SETGID it does not: clear them all ourselves.
    _clear_capabilities()
    if os.getresuid() != (owner.uid,) * 3 or os.getresgid() != (owner.gid,) * 3:
        raise DropFailed(f"could not become uid {owner.uid} gid {owner.gid}")
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid {owner.uid} gid {owner.gid}"
    raise DropFailed("privileges could be regained after the drop")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4


def _clear_capabilities() -> None:
    """Empty this process's capability sets (effective, permitted, inheritable, ambient)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # absent on old kernels
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    empty = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), empty) != 0:
        raise DropFailed(f"could not clear capabilities (errno {ctypes.get_errno()})")


def limit_resources(
    *, memory_bytes: int, cpu_s: int | None = None, file_bytes: int | None = None
) -> None:
    """Cap this process's address space, CPU seconds and file writes (soft and hard, so the
    limits cannot be raised again), and never write a core dump. Past the CPU limit the
    kernel stops the process (SIGXCPU, then SIGKILL a second later)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    if file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
