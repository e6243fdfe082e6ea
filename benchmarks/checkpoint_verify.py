"""Benchmark: resurrect checkpoint verification against ``cat`` and ``sha256sum``.

Creates a real PyTorch DCP checkpoint of ``--size-gb`` GB (several shard files + .metadata,
plus a resurrect manifest) in a temporary directory, then times, in the same run and on a
warm page cache (every file is read once before any timing):

* ``quick``: resurrect quick verification (structure and sizes, no data read);
* ``full``: resurrect full verification (sha256 of every file against the manifest, files
  hashed in parallel);
* ``full_crc``: full verification without a manifest (CRC-32 of every DCP item);
* ``cat``: ``cat FILES > /dev/null``;
* ``sha256sum``: ``sha256sum FILES``;
* ``sha256_1thread``: the same hashing as ``full``, on one thread;
* ``helper_quick`` / ``helper_full``: the same verifications run as the service runs them,
  in the helper process (``python -m resurrect.checkpoint.helper``) that drops to the
  checkpoint owner's uid/gid (as root the checkpoint is given to ``nobody`` first, so the
  drop really happens); ``helper_overhead_ms`` is ``helper_quick - quick`` (the cost of
  the process, its imports, the drop and the JSON exchange per verification).

Prints one JSON line. The directory is removed afterwards.

    python benchmarks/checkpoint_verify.py --json --size-gb 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 64 << 20
GB = 10**9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--json", action="store_true", help="print one JSON line (default: also)")
    p.add_argument("--size-gb", type=float, default=4.0)
    p.add_argument("--shards", type=int, default=8, help="DCP storage files")
    p.add_argument("--tensors", type=int, default=32)
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--repeats", type=int, default=2, help="best of N for each measurement")
    return p.parse_args()


def make_checkpoint(path: Path, size: int, shards: int, tensors: int) -> None:
    """A real DCP checkpoint of ``size`` bytes: tensors tiled from one random 64 MiB block."""
    import torch
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save

    from resurrect.checkpoint import write_manifest

    block = torch.frombuffer(bytearray(os.urandom(BLOCK)), dtype=torch.uint8)
    per = size // tensors
    state: dict[str, Any] = {}
    for i in range(tensors):
        reps = -(-per // BLOCK)
        state[f"layer{i}.weight"] = block.repeat(reps)[:per].clone()
    state["step"] = 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(state, storage_writer=FileSystemWriter(str(path), thread_count=shards))
    del state
    write_manifest(path)


def timed(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_tool(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def measure_helper(
    work: Path, root: Path, ckpt: Path, repeats: int
) -> tuple[dict[str, float], str]:
    """Time quick and full verification through the privilege-dropping helper."""
    import asyncio
    import pwd

    from resurrect.checkpoint.as_owner import run_helper
    from resurrect.checkpoint.helper import HelperRequest

    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        work.chmod(0o755)
        for dirpath, _dirs, names in os.walk(root):
            os.chown(dirpath, nobody.pw_uid, nobody.pw_gid)
            for name in names:
                os.chown(os.path.join(dirpath, name), nobody.pw_uid, nobody.pw_gid)
        uid, gid = nobody.pw_uid, nobody.pw_gid
        note = f"helper drops from root to nobody (uid {uid})"
    else:
        uid, gid = os.geteuid(), os.getegid()
        note = "unprivileged run: helper without a drop (same file rules)"

    def check(level: str) -> None:
        request = HelperRequest.model_validate(
            {"op": "verify", "root": str(root), "level": level, "owner_uid": uid, "owner_gid": gid}
        )
        verdict = asyncio.run(run_helper(request, timeout_s=3600))
        if verdict.latest_valid != str(ckpt):
            raise SystemExit(f"helper verification failed: {verdict.model_dump_json()}")

    times = {
        "helper_quick": timed(lambda: check("quick"), max(repeats, 5)),
        "helper_full": timed(lambda: check("full"), repeats),
    }
    return times, note


def main() -> int:
    args = parse_args()
    from resurrect.checkpoint import MANIFEST_NAME, verify_root
    from resurrect.checkpoint.manifest import sha256_file

    size = int(args.size_gb * GB)
    free = shutil.disk_usage(args.dir).free
    if free < size * 1.2 + (1 << 30):
        print(json.dumps({"error": f"not enough free space in {args.dir}: {free} bytes"}))
        return 2
    work = Path(tempfile.mkdtemp(prefix="resurrect-bench-", dir=args.dir))
    try:
        root = work / "ckpts"
        ckpt = root / "step_1000"
        t0 = time.perf_counter()
        make_checkpoint(ckpt, size, args.shards, args.tensors)
        create_s = time.perf_counter() - t0
        files = sorted(str(p) for p in ckpt.iterdir() if p.name != MANIFEST_NAME)
        total = sum(os.path.getsize(f) for f in files)
        run_tool(["cat", *files])  # warm-up: every file in the page cache before timing

        def check(level: str) -> None:
            verdict = verify_root(root, level)  # type: ignore[arg-type]
            if verdict.latest_valid != str(ckpt):
                raise SystemExit(f"verification failed: {verdict.model_dump_json()}")

        results = {
            "quick": timed(lambda: check("quick"), max(args.repeats, 5)),
            "full": timed(lambda: check("full"), args.repeats),
            "cat": timed(lambda: run_tool(["cat", *files]), args.repeats),
            "sha256sum": timed(lambda: run_tool(["sha256sum", *files]), args.repeats),
        }
        # The same hashing on one thread: separates the hash library's speed from parallelism.
        results["sha256_1thread"] = timed(
            lambda: [sha256_file(Path(f)) for f in files], args.repeats
        )
        helper_times, helper_note = measure_helper(work, root, ckpt, args.repeats)
        results.update(helper_times)
        manifest = ckpt / MANIFEST_NAME
        manifest.rename(work / MANIFEST_NAME)
        results["full_crc"] = timed(lambda: check("full"), args.repeats)
        (work / MANIFEST_NAME).rename(manifest)

        gbps = {k: round(total / GB / v, 3) for k, v in results.items()}
        out = {
            "benchmark": "checkpoint_verify",
            "bytes": total,
            "files": len(files),
            "checkpoint": f"DCP, {args.tensors} tensors in {args.shards} shard files + manifest",
            "cpus": os.cpu_count(),
            "page_cache": "warm: all files read once before timing; all measured warm",
            "repeats": f"best of {args.repeats}",
            "create_s": round(create_s, 2),
            "seconds": {k: round(v, 4) for k, v in results.items()},
            "gbps": gbps,
            "ratios": {
                "full_vs_sha256sum": round(gbps["full"] / gbps["sha256sum"], 3),
                "full_vs_cat": round(gbps["full"] / gbps["cat"], 3),
                "full_crc_vs_cat": round(gbps["full_crc"] / gbps["cat"], 3),
                "quick_vs_cat": round(gbps["quick"] / gbps["cat"], 1),
                "full_vs_sha256_1thread": round(gbps["full"] / gbps["sha256_1thread"], 3),
            },
            "helper": helper_note,
            "helper_overhead_ms": round((results["helper_quick"] - results["quick"]) * 1000, 1),
            "helper_full_vs_full": round(results["helper_full"] / results["full"], 3),
            "notes": "full = sha256 vs manifest (files hashed in parallel); full_crc = "
            "no manifest, CRC-32 of every DCP item; quick reads no data (GB/s is "
            "checkpoint size / time); sha256_1thread = resurrect's hashlib sha256 over all "
            "files on one thread (hashlib/OpenSSL may use SHA-NI, coreutils sha256sum may not)",
        }
        print(json.dumps(out), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
