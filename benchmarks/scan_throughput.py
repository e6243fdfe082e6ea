"""Throughput of the rule engine's whole-file scan against GNU grep with the same patterns.

Builds a realistic training log (default 2,000,000 lines: per-rank iteration lines, NCCL INFO
chatter, checkpoint and dataloader messages, with failure signatures sprinkled in) in a
temporary file, scans it with :meth:`RuleEngine.scan_file`, then runs ``grep -c -P`` over the
same file with every job-log rule pattern joined into one alternation (named groups turned into
plain groups, as PCRE rejects duplicate names). With ``--json`` prints one JSON line::

    {"lines": ..., "engine_s": ..., "engine_lines_per_s": ..., "engine_matched_lines": ...,
     "grep_s": ..., "grep_lines_per_s": ..., "grep_matched_lines": ..., "ratio_vs_grep": ...}

``ratio_vs_grep`` is engine speed over grep speed (above 1: the engine is faster). Match counts
differ a little by design: the engine strips launcher prefixes before anchored patterns and
applies each rule only to its signal kinds.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import benchmark_parser, print_result

from resurrect.contracts import SignalKind
from resurrect.rules import load_engine

HEALTHY = (
    "[rank{r}]: iteration {i}/50000 | consumed samples: {s} | elapsed time per iteration (ms): "
    "{ms} | "
    "learning rate: 3.000E-04 | global batch size: 1024 | lm loss: {loss:.4f} | grad norm: 0.812 |",
    "[rank{r}]: iteration {i}/50000 | loss {loss:.2f} | lr 3e-4 | {ms} ms",
    "{host}:{pid}:{tid} [{d}] NCCL INFO Channel {c:02d}/32 : 0 1 2 3 4 5 6 7",
    "{host}:{pid}:{tid} [{d}] NCCL INFO comm 0x55d1c2a0 rank {r} nranks 64 cudaDev {d} busId "
    "1b000 - Init COMPLETE",
    "{host}:{pid}:{tid} [{d}] NCCL INFO Connected all rings",
    "{r}: [2025-11-29 19:{m:02d}:{sec:02d}] train step {i} throughput 182.3 TFLOP/s/GPU, tokens/s "
    "412345",
    "[rank{r}]: saving checkpoint at iteration {i} to /lustre/ckpt/iter_{i:07d}",
    "[rank{r}]: successfully saved checkpoint at iteration {i} to /lustre/ckpt",
    "Epoch {e}:  42%|████▏     | {i}/20000 [1:02:03<1:25:00,  2.10it/s, loss={loss:.3f}, v_num=7]",
    "INFO:root:dataloader worker {d} prefetched {s} samples from shard-{c:05d}.tar",
)
FAILURES = (
    "[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
    "{host}:{pid}:{tid} [{d}] NCCL WARN NET/IB : Got completion from peer 10.0.3.{d}<44206> with "
    "status=12 opcode=129 len=65536 vendor err 129 (Recv)",
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU {d}; "
    "79.15 GiB total capacity)",
    "Nov 29 19:00:00 {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, GPU has fallen off "
    "the bus.",
    "[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank{r}]: OSError: [Errno 116] Stale file handle",
)


def build_corpus(path: Path, lines: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        batch: list[str] = []
        for n in range(lines):
            template = rng.choice(FAILURES) if n % 20000 == 19999 else rng.choice(HEALTHY)
            batch.append(
                template.format(
                    r=rng.randrange(64),
                    i=n // 64,
                    s=n * 16,
                    ms=800 + rng.randrange(40),
                    loss=2.0 + rng.random(),
                    host=f"gpu-node-{rng.randrange(8):02d}",
                    pid=31000 + rng.randrange(8),
                    tid=32000 + rng.randrange(50),
                    d=rng.randrange(8),
                    c=rng.randrange(32),
                    m=n % 60,
                    sec=rng.randrange(60),
                    e=n // 100000,
                )
            )
            if len(batch) >= 10000:
                fh.write("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            fh.write("\n".join(batch) + "\n")


def grep_pattern(patterns: list[str]) -> str:
    """One PCRE alternation of the rule patterns, as ``grep -P`` accepts it.

    Named groups become plain groups (PCRE rejects a name used twice) and bounded repeats with
    a large upper bound become unbounded (PCRE expands bounded group repeats and would exceed
    its size limit); the set of matching lines is the same in practice.
    """
    plain = [re.sub(r"\(\?P<\w+>", "(?:", p) for p in patterns]
    plain = [re.sub(r"\{(\d+),(\d{3,})\}", r"{\1,}", p) for p in plain]
    return "|".join(f"(?:{p})" for p in plain)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lines", type=int, default=2_000_000)
    args = parser.parse_args(argv)

    engine = load_engine()
    patterns = [c.rule.pattern for c in engine.rules if SignalKind.JOB_LOG in c.rule.kinds]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        build_corpus(path, args.lines)
        size = path.stat().st_size

        start = time.perf_counter()
        evidence = engine.scan_file(path)
        engine_s = time.perf_counter() - start
        engine_matched = len({e.line for e in evidence})

        grep = shutil.which("grep")
        grep_s = float("nan")
        grep_matched = -1
        if grep is not None:
            start = time.perf_counter()
            proc = subprocess.run(
                [grep, "-c", "-P", grep_pattern(patterns), str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            grep_s = time.perf_counter() - start
            if proc.returncode in (0, 1):
                grep_matched = int(proc.stdout.strip() or 0)
            else:
                print(f"grep failed: {proc.stderr.strip()}", file=sys.stderr)

    result = {
        "lines": args.lines,
        "bytes": size,
        "rules": len(patterns),
        "engine_s": round(engine_s, 3),
        "engine_lines_per_s": round(args.lines / engine_s),
        "engine_matched_lines": engine_matched,
        "grep_s": round(grep_s, 3),
        "grep_lines_per_s": round(args.lines / grep_s) if grep_s == grep_s else None,
        "grep_matched_lines": grep_matched,
        "ratio_vs_grep": round(grep_s / engine_s, 2) if grep_s == grep_s else None,
    }
    summary = (
        f"engine {result['engine_lines_per_s']:,} lines/s, grep "
        f"{result['grep_lines_per_s']:,} lines/s"
    )
    print_result(result, as_json=args.json, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
