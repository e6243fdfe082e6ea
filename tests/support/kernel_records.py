"""Kernel log records a local user can make the kernel write, for fuzzing the node agent's
kernel-log source: the kernel's own formats that quote a name the user chooses (a
segfaulting file, a task name of at most 15 characters, a cgroup, a bridge or interface
name), filled with NVIDIA-driver-like text, escaped as /dev/kmsg escapes them (every byte
below 0x20, from 0x7f, and the backslash as ``\\xNN``), at the kernel facility.

The shapes follow records captured from a real kernel (tests/fixtures/kmsg) and the format
strings of arch/x86/mm/fault.c, arch/x86/kernel/traps.c, mm/oom_kill.c, kernel/hung_task.c
and net/bridge/br_stp.c.
"""

from __future__ import annotations

import random

TASK_COMM_LEN = 15  # the kernel keeps 15 characters of a task's name
DRIVER_LIKE = [
    "NVRM: Xid (PCI:{pci}): 79, pid=1, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:{pci}): 48, pid=991, DBE (double bit error) ECC error",
    "NVRM: Xid (PCI:{pci}): 45, pid=77, name=python, Ch 00000008 caused by previous Xid 79",
    "NVRM: GPU {pci}.0: GPU has fallen off the bus.",
    "NVRM: Xid (PCI:{pci}): 119, pid=1, Timeout after 6s of waiting for RPC response",
    "NVRM: Xid (PCI:",
    "NVRM: ",
]
FORMATS = [
    "{comm}[4242]: segfault at 0 ip 0000000000401116 sp 00007ffce1258a40 error 4 in "
    "{name}[1116,401000+1000] likely on CPU 0 (core 0, socket 0)",
    "traps: {comm}[4242] trap invalid opcode ip:40110a sp:7fff4bb41380 error:0 in "
    "{name}[110a,401000+1000]",
    "traps: {comm}[4242] general protection fault ip:401114 sp:7ffcf243ae10 error:0 in "
    "{name}[1114,401000+1000]",
    "Out of memory: Killed process 4242 ({comm}) total-vm:1024kB, anon-rss:512kB, "
    "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:40kB oom_score_adj:0",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/user.slice/{name},task_memcg=/user.slice/{name},task={comm},pid=4242,uid=1000",
    "INFO: task {comm}:4242 blocked for more than 122 seconds.",
    "{comm}: port 1({comm}) entered blocking state",
    "{comm}[4242]: segfault at 0 ip 0000000000401116 sp 00007ffce1258a40 error 4 in "
    "libc.so.6[7f00+1000]",
]


def kmsg_escape(text: str) -> str:
    """``text`` as /dev/kmsg shows it (kernel/printk: bytes < 0x20, >= 0x7f and ``\\``
    escaped as ``\\xNN``)."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        if byte < 0x20 or byte >= 0x7F or byte == 0x5C:
            out.append(f"\\x{byte:02x}")
        else:
            out.append(chr(byte))
    return "".join(out)


def user_name(rng: random.Random, pci: str) -> str:
    """A name a user chooses: driver-like text, somewhere in some noise."""
    driver = rng.choice(DRIVER_LIKE).format(pci=pci)
    noise = "".join(rng.choice("ab /:()[],.-_\n²\x1b") for _ in range(rng.randint(0, 8)))
    where = rng.random()
    if where < 0.4:
        return driver + noise
    if where < 0.7:
        return noise + driver
    return noise + "\n" + driver + "\n" + noise


def forged_kmsg_record(rng: random.Random, pci: str) -> str:
    """One /dev/kmsg record of the kernel facility whose text a user chose, driver-like."""
    name = user_name(rng, pci)
    comm = name[:TASK_COMM_LEN] if rng.random() < 0.5 else user_name(rng, pci)[:TASK_COMM_LEN]
    message = rng.choice(FORMATS).format(comm=comm, name=name)
    level = rng.randint(0, 7)  # the kernel facility: prio = level
    return f"{level},{rng.randint(0, 10**6)},{rng.randint(0, 10**12)},-;{kmsg_escape(message)}"


def written_to_kmsg(rng: random.Random, pci: str) -> str:
    """A record root's tools (or a logger) write to /dev/kmsg: exactly the driver's text,
    but of the user facility (prio >= 8)."""
    text = rng.choice(DRIVER_LIKE).format(pci=pci)
    return f"{8 + rng.randint(0, 183)},{rng.randint(0, 10**6)},1,-;{kmsg_escape(text)}"
