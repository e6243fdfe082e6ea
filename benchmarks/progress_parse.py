"""Cost of reading progress from job output, against the failure-rule scan of the same lines.

The log follower runs every line it reads through the failure rules (``RuleEngine.scan_line``)
and, for adaptive hang detection, through the progress rules (``ProgressParser.parse``). This
builds a realistic mix of trainer output (Megatron iteration lines, torchtitan steps, tqdm
bars, NCCL chatter, checkpoint messages), times both over the same lines in the same run, and
(``--json``) prints one JSON line::

    {"lines": ..., "progress_s": ..., "progress_lines_per_s": ..., "progress_events": ...,
     "rules_s": ..., "rules_lines_per_s": ..., "ratio_vs_rules": ...}

``ratio_vs_rules`` is progress-parse speed over rule-scan speed (above 1: reading progress
costs less than the scan the follower already does).
"""

from __future__ import annotations

import random
import time

from _common import benchmark_parser, print_result

from resurrect.contracts import SignalKind
from resurrect.progress.parser import shipped_parser
from resurrect.rules import load_engine

TEMPLATES = (
    "[rank{r}]: iteration {i:>8}/   50000 | consumed samples: {s} | elapsed time per iteration"
    " (ms): {ms} | learning rate: 3.000E-04 | global batch size: 1024 | lm loss: 2.1E+00 |",
    "[rank{r}]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: {i}  loss:  3.24405"
    "  grad_norm:  0.8319  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%",
    " 42%|████▏     | {i}/20000 [1:02:03<1:25:00,  2.10it/s]",
    "node{r}:{s}:{s} [{r}] NCCL INFO Channel 03/32 : 0 1 2 3 4 5 6 7",
    "node{r}:{s}:{s} [{r}] NCCL INFO Connected all rings",
    "[rank{r}]: saving checkpoint at iteration {i} to /lustre/ckpt/iter_{i:07d}",
    "INFO:root:dataloader worker {r} prefetched {s} samples from shard-{i:05d}.tar",
    "[rank{r}] step {i}/120000 loss 0.4214",
)


def corpus(lines: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [
        rng.choice(TEMPLATES).format(
            r=rng.randrange(64), i=n, s=rng.randrange(10**6), ms=f"{rng.uniform(300, 900):.1f}"
        )
        for n in range(lines)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lines", type=int, default=300_000)
    args = parser.parse_args(argv)
    lines = corpus(args.lines)
    progress = shipped_parser()
    engine = load_engine()

    start = time.perf_counter()
    events = sum(1 for line in lines if progress.parse(line) is not None)
    progress_s = time.perf_counter() - start

    start = time.perf_counter()
    for line in lines:
        engine.scan_line(line, kind=SignalKind.JOB_LOG)
    rules_s = time.perf_counter() - start

    result = {
        "benchmark": "progress_parse",
        "lines": len(lines),
        "progress_s": round(progress_s, 3),
        "progress_lines_per_s": round(len(lines) / progress_s),
        "progress_events": events,
        "rules_s": round(rules_s, 3),
        "rules_lines_per_s": round(len(lines) / rules_s),
        "ratio_vs_rules": round(rules_s / progress_s, 2),
    }
    print_result(result, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
