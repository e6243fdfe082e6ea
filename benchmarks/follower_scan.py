"""Hang-check cost: file-system operations and CPU per second for one job whose checkpoint
directory holds 50,000 entries, before and after the cheap checkpoint look.

* ``before`` (the baseline, measured in the same run): what the log follower did until
  issue 9 item 9, reproduced here: every poll (0.25 s) list the directory and stat every
  entry, then list and stat the newest subdirectory.
* ``after``: :class:`sensors.checkpoint_progress.CheckpointProgress` as the follower uses
  it (a look at most every ``max(hang_after_s / 10, 5 s)``: the directory, the newest
  entries, the newest save), driven by the follower's 0.25 s polls over a simulated
  window in which the job saves a checkpoint every ``--save-every`` seconds; the one full
  listing when following starts and the one full look before a hang verdict are counted.

File-system operations are counted (stat/lstat calls and directory listings); CPU is the
process time the checks took, per second of (simulated) follower time.

Then a look at a quiet job whose newest save holds ``--save-entries`` (100,000) files, once a
second as in adaptive hang detection: ``save_look_after_ms`` is the CPU time of one look of
:class:`CheckpointProgress` (a listing only when a directory changed) against
``save_look_before_ms``, the look before that rule (the newest save listed in full and its
first 256 names stat'ed at every look), measured in the same run.

    python benchmarks/follower_scan.py [--entries 50000] [--window 600] [--json]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from _common import benchmark_parser, print_result

from resurrect.sensors.checkpoint_progress import CheckpointProgress
from resurrect.sensors.log_follower import hang_check_interval

POLL_S = 0.25  # the follower's default log_poll_interval_s


def make_tree(root: Path, entries: int) -> None:
    root.mkdir()
    for index in range(entries):
        (root / f"shard-{index:06d}.distcp").touch()
    (root / "step_000000").mkdir()
    for rank in range(8):
        (root / "step_000000" / f"__{rank}_0.distcp").touch()


class FullRescan:
    """The former check: every poll, list the directory and stat every entry."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.fs_ops = 0
        self.signature: int | None = None

    def moved(self) -> bool:
        self.fs_ops += 1
        top = []
        for entry in os.scandir(self.directory):
            st = entry.stat()
            self.fs_ops += 1
            top.append((entry.name, st.st_mtime_ns, st.st_size, entry.is_dir()))
        dirs = [entry for entry in top if entry[3]]
        inner = []
        if dirs:
            newest = max(dirs, key=lambda entry: (entry[1], entry[0]))[0]
            self.fs_ops += 1
            for entry in os.scandir(os.path.join(self.directory, newest)):
                st = entry.stat()
                self.fs_ops += 1
                inner.append((entry.name, st.st_mtime_ns, st.st_size))
        signature = hash((tuple(sorted(top)), tuple(sorted(inner))))
        moved = self.signature is not None and signature != self.signature
        self.signature = signature
        return moved


def measure_before(root: Path, polls: int) -> dict[str, float]:
    check = FullRescan(str(root))
    check.moved()
    ops_before = check.fs_ops
    started = time.process_time()
    for _ in range(polls):
        check.moved()
    cpu = time.process_time() - started
    seconds = polls * POLL_S
    return {
        "fs_ops_per_s": (check.fs_ops - ops_before) / seconds,
        "cpu_core_fraction": cpu / seconds,
    }


def measure_after(
    root: Path, window_s: float, hang_after_s: float, save_every_s: float
) -> dict[str, float]:
    clock = [0.0]
    progress = CheckpointProgress(
        str(root), min_interval_s=hang_check_interval(hang_after_s), clock=lambda: clock[0]
    )
    started = time.process_time()
    progress.changed()  # following starts: one full listing
    first_look_ops = progress.fs_ops
    saves = 0
    next_save = save_every_s
    polls = int(window_s / POLL_S)
    for _ in range(polls):
        clock[0] += POLL_S
        if clock[0] >= next_save:
            saves += 1
            step = root / f"step_{saves:06d}"
            step.mkdir()
            for rank in range(8):
                (step / f"__{rank}_0.distcp").touch()
            next_save += save_every_s
        progress.changed()
    steady_ops = progress.fs_ops - first_look_ops
    progress.changed_since(time.time() - hang_after_s)  # the look before a hang verdict
    cpu = time.process_time() - started
    return {
        "fs_ops_per_s": progress.fs_ops / window_s,
        "cpu_core_fraction": cpu / window_s,
        "steady_fs_ops_per_s": steady_ops / window_s,
        "first_look_fs_ops": first_look_ops,
        "look_interval_s": hang_check_interval(hang_after_s),
        "saves": saves,
    }


def former_save_look(save: Path) -> int:
    """The look at the newest save before listings were kept: list it all, stat 256."""
    names = sorted(entry.name for entry in os.scandir(save))[:256]
    for name in names:
        os.lstat(save / name)
    return len(names)


def measure_save_looks(root: Path, entries: int, looks: int) -> dict[str, float]:
    root.mkdir()
    save = root / "step_000001"
    save.mkdir()
    for index in range(entries):
        os.close(os.open(save / f"__{index}_0.distcp", os.O_CREAT | os.O_WRONLY, 0o644))
    started = time.process_time()
    for _ in range(looks):
        former_save_look(save)
    before = (time.process_time() - started) / looks
    clock = [0.0]
    progress = CheckpointProgress(
        str(root), min_interval_s=1.0, owner_uid=os.getuid(), clock=lambda: clock[0]
    )
    progress.changed()  # following starts: one full listing
    first_entries = progress.entries_read
    started = time.process_time()
    for _ in range(looks):
        clock[0] += 1.0
        progress.changed()
    after = (time.process_time() - started) / looks
    return {
        "before_ms": before * 1000,
        "after_ms": after * 1000,
        "after_entries_per_look": (progress.entries_read - first_entries) / looks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--window", type=float, default=600.0, help="simulated seconds")
    parser.add_argument("--hang-after", type=float, default=300.0)
    parser.add_argument("--save-every", type=float, default=60.0)
    parser.add_argument("--before-polls", type=int, default=20)
    parser.add_argument("--save-entries", type=int, default=100_000)
    parser.add_argument("--save-looks", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="follower-scan-") as tmp:
        root = Path(tmp) / "ckpt"
        make_tree(root, args.entries)
        before = measure_before(root, args.before_polls)
        after = measure_after(root, args.window, args.hang_after, args.save_every)
        saves = measure_save_looks(Path(tmp) / "saves", args.save_entries, args.save_looks)
    result = {
        "benchmark": "follower_scan",
        "entries": args.entries,
        "poll_interval_s": POLL_S,
        "hang_after_s": args.hang_after,
        "window_s": args.window,
        "before_fs_ops_per_s": round(before["fs_ops_per_s"]),
        "before_cpu_core_fraction": round(before["cpu_core_fraction"], 4),
        "after_fs_ops_per_s": round(after["fs_ops_per_s"], 2),
        "after_steady_fs_ops_per_s": round(after["steady_fs_ops_per_s"], 2),
        "after_cpu_core_fraction": round(after["cpu_core_fraction"], 6),
        "after_first_look_fs_ops": after["first_look_fs_ops"],
        "after_look_interval_s": after["look_interval_s"],
        "saves_in_window": after["saves"],
        "fs_ops_ratio_before_over_after": round(
            before["fs_ops_per_s"] / max(after["fs_ops_per_s"], 1e-9), 1
        ),
        "cpu_ratio_before_over_after": round(
            before["cpu_core_fraction"] / max(after["cpu_core_fraction"], 1e-9), 1
        ),
        "save_entries": args.save_entries,
        "save_look_before_ms": round(saves["before_ms"], 2),
        "save_look_after_ms": round(saves["after_ms"], 3),
        "save_look_after_entries_read": round(saves["after_entries_per_look"], 1),
        "save_look_ratio": round(saves["before_ms"] / max(saves["after_ms"], 1e-6), 1),
    }
    print_result(result, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
