"""``resurrect stacks dump`` and ``resurrect progress check``.

``resurrect stacks dump --job ID [--restart N] [--json]`` reads the stacks of every rank of
a Slurm job on this node with py-spy (as root: run it on each of the job's nodes, by hand, by
``srun --overlap --jobid ID`` as root, or from the node agent) and prints where each rank is:
victims waiting in a collective, the culprit elsewhere, and what NCCL's RAS service says (or
why it cannot be asked). Exit 0 when stacks were read, 1 when no rank of the job runs here or
none could be read.

``resurrect stacks flight-recorder FILE...`` reads PyTorch Flight Recorder dumps (JSON or
plain-data pickle; the rank is the number at the end of each file name; each parsed by the
bounded helper as the file's owner) and prints the ranks behind their peers.

In text mode every job-controlled field (node names, frames, process-group ids, notes) is
printed through :func:`~resurrect.text_safety.printable`: control characters and escape
sequences are shown, never sent to the terminal. JSON output is escaped by ``json``.

``resurrect progress check [PATH...]`` validates the shipped progress packs plus the given
ones and runs every rule's examples; exit 1 naming the rule on any failure.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from resurrect.errors import JobFileRefused
from resurrect.progress.loader import load_progress_rules, shipped_progress_pack_paths
from resurrect.progress.parser import check_rules
from resurrect.stacks.classify import judge
from resurrect.stacks.collect import collect_job_stacks
from resurrect.stacks.flight_recorder import behind_ranks, lagging_ranks, read_flight_record
from resurrect.stacks.nccl_ras import query_ras
from resurrect.text_safety import printable


def register(subparsers: Any) -> None:
    stacks = subparsers.add_parser("stacks", help="where a job's ranks are (py-spy)")
    stacks_sub = stacks.add_subparsers(dest="stacks_command", metavar="SUBCOMMAND")
    dump = stacks_sub.add_parser("dump", help="dump and classify the job's ranks on this node")
    dump.add_argument("--job", required=True, help="Slurm job id")
    dump.add_argument("--restart", type=int, default=None, help="only this attempt's ranks")
    dump.add_argument("--timeout", type=float, default=15.0, help="seconds per dump")
    dump.add_argument("--json", action="store_true", help="print JSON")
    dump.set_defaults(handler=run_dump)

    fr = stacks_sub.add_parser("flight-recorder", help="ranks behind in Flight Recorder dumps")
    fr.add_argument("files", nargs="+", type=Path, metavar="FILE")
    fr.set_defaults(handler=run_flight_recorder)

    progress = subparsers.add_parser("progress", help="progress rule tools")
    progress_sub = progress.add_subparsers(dest="progress_command", metavar="SUBCOMMAND")
    check = progress_sub.add_parser("check", help="validate progress packs and run examples")
    check.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    check.set_defaults(handler=run_progress_check)


def run_dump(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[0-9]{1,12}(?:_[0-9]{1,12})?", args.job):
        print(f"resurrect: not a job id: {args.job!r}")
        return 2
    stacks = collect_job_stacks(args.job, restart_count=args.restart, timeout_s=args.timeout)
    verdict = judge(stacks)
    pids = [s.pid for s in stacks]
    ras = query_ras(pids=pids, timeout_s=min(args.timeout, 10.0)) if stacks else None
    if args.json:
        by_pid = {s.pid: s for s in stacks}
        ranks = [
            {
                "rank": p.rank,
                "node": p.node,
                "pid": p.pid,
                "state": by_pid[p.pid].state,
                "place": p.place,
                "frame": p.frame,
                "error": by_pid[p.pid].error or None,
                "stack": by_pid[p.pid].dump_text,
            }
            for p in verdict.places
        ]
        print(
            json.dumps(
                {
                    "job_id": args.job,
                    "ranks": ranks,
                    "victims": [p.rank for p in verdict.victims],
                    "culprits": [{"rank": c.rank, "node": c.node} for c in verdict.culprits],
                    "summary": verdict.summary,
                    "nccl_ras": None
                    if ras is None
                    else {
                        "available": ras.available,
                        "reason": ras.reason or None,
                        "nccl_version": ras.nccl_version or None,
                        "findings": [
                            {"rank": f.rank, "host": f.host, "pid": f.pid, "why": f.why}
                            for f in ras.findings
                        ],
                    },
                },
                indent=2,
            )
        )
    else:  # node names, frames and notes are the job's: printed escaped
        for p in verdict.places:
            print(printable(f"rank {p.rank} on {p.node} pid {p.pid}: {p.place} at {p.frame}"))
        print(printable(verdict.summary) if stacks else f"no rank process of job {args.job} here")
        if ras is not None:
            for e in ras.evidence(None):
                print(printable(e.text))
    return 0 if verdict.ranks_seen else 1


def run_flight_recorder(args: argparse.Namespace) -> int:
    records = []
    for path in args.files:
        m = re.search(r"([0-9]+)(?:\.json)?$", path.name)
        if m is None:
            print(printable(f"{path}: no rank number at the end of the file name; skipped"))
            continue
        try:
            records.extend(read_flight_record(path, int(m.group(1))))
        except JobFileRefused as exc:
            print(printable(exc))
        except OSError as exc:
            print(printable(f"{path}: {exc.strerror or exc}"))
    for pg, ranks in sorted(lagging_ranks(records).items()):  # pg ids are the job's
        print(
            printable(f"process group {pg}: ranks {ranks} are behind their peers' last collective")
        )
    for behind in behind_ranks(records):
        print(printable(f"rank {behind.rank}: {behind.describe()}"))
    return 0 if records else 1


def run_progress_check(args: argparse.Namespace) -> int:
    paths = [*shipped_progress_pack_paths(), *args.paths]
    problems = check_rules(load_progress_rules(paths))
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{len(paths)} progress pack(s) OK")
    return 1 if problems else 0
