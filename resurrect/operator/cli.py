"""Operator commands: ``budget``, ``approve``, ``deny``, ``nodes`` (also ``--lemons``), and
``watchdog``.

They talk to a running service's Temporal (never start one): the cluster's drain budget
workflow, a recovery's approval updates, the nodes' repair workflows.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from resurrect.command_line import add_config_arg, exit_now
from resurrect.config import ResurrectConfig, load_config
from resurrect.errors import ResurrectError
from resurrect.text_safety import printable

Handler = Callable[[argparse.Namespace], int]


def _with_temporal(handler: Callable[[argparse.Namespace], int]) -> Handler:
    """Run a command that talks to Temporal, then leave with
    :func:`~resurrect.command_line.exit_now`."""

    def run(args: argparse.Namespace) -> int:
        try:
            code = handler(args)
        except ResurrectError as exc:
            print(f"resurrect: error: {printable(exc)}", file=sys.stderr)
            code = 2
        exit_now(code)

    return run


def _config(args: argparse.Namespace) -> ResurrectConfig:
    config = load_config(args.config)
    config.temporal.embedded = False  # inspect a running service, never start one
    return config


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = (moment - now).total_seconds()
    word = "in" if seconds >= 0 else "ago"
    seconds = abs(seconds)
    text = f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
    return f"in {text}" if word == "in" else f"{text} ago"


# ---------------------------------------------------------------------------- budget
async def budget_view_json(config: ResurrectConfig) -> dict[str, Any]:
    from resurrect.operator.budget import view
    from resurrect.operator.budget_client import budget_state
    from resurrect.operator.models import BudgetState
    from resurrect.service import temporal_for

    async with temporal_for(config) as client:
        state = await budget_state(client, config.cluster.name)
    state = state or BudgetState(cluster=config.cluster.name)
    result: dict[str, Any] = view(state, datetime.now(UTC)).model_dump(mode="json")
    return result


def _budget(args: argparse.Namespace) -> int:
    config = _config(args)
    data = asyncio.run(budget_view_json(config))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    now = datetime.now(UTC)
    print(
        f"cluster {data['cluster']}: breaker {'TRIPPED' if data['tripped'] else 'closed'},"
        f" {data['trips']} trip(s)"
    )
    if not data["scopes"]:
        print("  no drains reserved yet")
    for scope in data["scopes"]:
        frees = _ago(_parse(scope["next_free_at"]), now) if scope["uses"] else "-"
        print(
            f"  {scope['scope']:<24} {scope['used']}/{scope['limit']} per"
            f" {scope['window_s']:g} s; next frees {frees}"
        )
        for use in scope["uses"]:
            approved = f" (approved by {use['approved_by']})" if use["approved_by"] else ""
            line = (
                f"    {use['node']:<16} job {use['job_id']:<10} {use['workflow_id']}"
                f" frees {_ago(_parse(use['frees_at']), now)}{approved}"
            )
            print(printable(line))
    return 0


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# ---------------------------------------------------------------------------- approvals
async def decide_approval(
    config: ResurrectConfig,
    workflow_id: str,
    *,
    approved: bool,
    reason: str,
    by: str | None = None,
    key_file: Path | None = None,
) -> str:
    """Answer what ``workflow_id`` waits for. With an operator key (``key_file``, else
    ``approvals.operator_key_file``) the answer is signed and recorded as that operator;
    without one it carries ``by`` (default: this user at this host) marked unverified."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from resurrect.contracts.recovery_status import RecoveryWorkflowStatus
    from resurrect.contracts.workflow_names import APPROVE_UPDATE, DENY_UPDATE, STATUS_QUERY
    from resurrect.operator.approval_auth import operator_name, sign
    from resurrect.operator.models import ApprovalInput
    from resurrect.secret_file import read_key
    from resurrect.service import temporal_for

    key_file = key_file or config.approvals.operator_key_file
    async with temporal_for(config) as client:
        handle = client.get_workflow_handle(workflow_id)
        try:
            if key_file is not None:
                operator = operator_name(key_file)
                status = await handle.query(STATUS_QUERY, result_type=RecoveryWorkflowStatus)
                if status.awaiting_approval is None:
                    raise ResurrectError(f"{workflow_id}: this recovery is not awaiting approval")
                proof = sign(
                    read_key(key_file, "operator key"),
                    operator,
                    workflow_id=workflow_id,
                    what=status.awaiting_approval,
                    approved=approved,
                    reason=reason,
                    now=datetime.now(UTC),
                )
                given = ApprovalInput(by=operator, reason=reason, proof=proof)
            else:
                claimed = by or f"{getpass.getuser()}@{socket.gethostname()}"
                given = ApprovalInput(by=f"{claimed[:100]} (unverified)", reason=reason)
            answer: str = await handle.execute_update(
                APPROVE_UPDATE if approved else DENY_UPDATE, given, result_type=str
            )
        except WorkflowUpdateFailedError as exc:
            raise ResurrectError(f"{workflow_id}: {exc.cause or exc}") from exc
        except RPCError as exc:
            raise ResurrectError(f"{workflow_id}: {exc.message}") from exc
    return f"{answer} (by {given.by})"


def _decide(approved: bool) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        answer = asyncio.run(
            decide_approval(
                _config(args),
                args.workflow_id,
                approved=approved,
                reason=args.reason,
                key_file=args.key_file,
            )
        )
        print(f"{args.workflow_id}: {answer}")
        return 0

    return handler


# ---------------------------------------------------------------------------- nodes
async def nodes_json(config: ResurrectConfig, node: str | None = None) -> list[dict[str, Any]]:
    from resurrect.contracts.workflow_ids import node_repair_workflow_id
    from resurrect.contracts.workflow_names import NODE_REPAIR_WORKFLOW
    from resurrect.operator.repair_client import node_state
    from resurrect.service import temporal_for

    async with temporal_for(config) as client:
        if node is not None:
            names = [node]
        else:
            prefix = node_repair_workflow_id(config.cluster.name, "")
            names = []
            query = f"WorkflowType = '{NODE_REPAIR_WORKFLOW}' AND ExecutionStatus = 'Running'"
            async for execution in client.list_workflows(query):
                if execution.id.startswith(prefix):
                    names.append(execution.id[len(prefix) :])
        rows = []
        for name in sorted(set(names)):
            state = await node_state(client, config.cluster.name, name, config)
            if state is not None:
                rows.append(state.model_dump(mode="json", exclude={"pending"}))
    return rows


async def lemons_json(config: ResurrectConfig, node: str | None = None) -> list[dict[str, Any]]:
    """The nodes with a lemon score (or ``node``), highest first, with their incidents."""
    from resurrect.lemons.records import lemon_rules, read_records, score_records
    from resurrect.service import temporal_for

    async with temporal_for(config) as client:
        records = await read_records(client, config, also=[node] if node else [])
    if node is not None:
        records = {n: state for n, state in records.items() if n == node}
    scores = score_records(records, lemon_rules(config), datetime.now(UTC))
    return [s.model_dump(mode="json") for s in scores if s.incidents]


def _lemons(args: argparse.Namespace, config: ResurrectConfig) -> int:
    rows = asyncio.run(lemons_json(config, args.node))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no node has an incident on record" + (f" ({args.node})" if args.node else ""))
        return 0
    for row in rows:
        verdict = "LEMON" if row["lemon"] else "-"
        if row["drain_due"]:
            verdict += f", due for draining ({len(row['window_jobs'])} jobs in the window)"
        print(
            f"{row['node']:<16} score {row['score']:6.2f}  {verdict}"
            f"  (in service {100 * row['in_service']:.0f}%)"
        )
        for scored in row["incidents"]:
            item = scored["incident"]
            print(
                printable(
                    f"  {item['at']}  job {item['job_id']:<10} {item['kind']:<9}"
                    f" {item['tier']:<11} weight {scored['weight']:.2f} now"
                    f" {scored['contribution']:.2f}  {item['detail']}"
                )
            )
    return 0


def _nodes(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.lemons:
        return _lemons(args, config)
    if args.history and not args.node:
        raise ResurrectError("--history needs a NODE")
    rows = asyncio.run(nodes_json(config, args.node))
    if args.node and not rows:
        raise ResurrectError(f"resurrect never drained node {args.node} in {config.cluster.name}")
    if args.json:
        print(json.dumps(rows if not args.node else rows[0], indent=2))
        return 0
    for row in rows:
        flag = " FLAGGED for a hardware ticket" if row["flagged"] else ""
        print(
            f"{row['node']:<16} {row['status']:<18} drains {row['drains']}, checks"
            f" {row['checks']}, returns {row['returns']}{flag}"
        )
        if args.history:
            for event in row["events"]:
                job = f" job {event['job_id']}" if event["job_id"] else ""
                print(printable(f"  {event['at']}  {event['kind']:<13}{job}  {event['detail']}"))
            for job_id, since in row["exclusions"].items():
                print(f"  excluded from job {job_id} since {since}")
            for item in row["incidents"]:
                print(
                    printable(
                        f"  {item['at']}  incident      job {item['job_id']}  {item['kind']}"
                        f" ({item['tier']}): {item['detail']}"
                    )
                )
    if not rows:
        print("resurrect has drained no nodes")
    return 0


# ---------------------------------------------------------------------------- watchdog
def _watchdog(args: argparse.Namespace) -> int:
    from resurrect.operator.watchdog import release_stale_holds, run_watchdog
    from resurrect.service import scheduler_from_config, stop_on_signals

    config = load_config(args.config)
    scheduler = scheduler_from_config(config)
    bound = args.bound_s if args.bound_s is not None else config.watchdog.hold_bound_s

    async def main() -> int:
        if args.once:
            for result in await release_stale_holds(scheduler, bound):
                print(printable(f"job {result.target}: {result.detail}"))
            return 0
        stop = asyncio.Event()
        stop_on_signals(stop)
        await run_watchdog(scheduler, bound, config.watchdog.interval_s, stop)
        return 0

    return asyncio.run(main())


# ---------------------------------------------------------------------------- register
def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    budget = sub.add_parser(
        "budget", help="the drain budgets (circuit breaker): use, who used them, when they free"
    )
    add_config_arg(budget)
    budget.add_argument("--json", action="store_true")
    budget.set_defaults(handler=_with_temporal(_budget))

    for name, approved in (("approve", True), ("deny", False)):
        parser = sub.add_parser(
            name, help=f"{name} what a recovery is waiting for (phase awaiting_approval)"
        )
        add_config_arg(parser)
        parser.add_argument("workflow_id", metavar="WORKFLOW_ID")
        parser.add_argument("--reason", required=True, help="why (kept in the history)")
        parser.add_argument(
            "--key-file",
            type=Path,
            default=None,
            help="your operator key (default: approvals.operator_key_file); the answer is"
            " recorded under its name",
        )
        parser.set_defaults(handler=_with_temporal(_decide(approved)))

    nodes = sub.add_parser(
        "nodes", help="nodes resurrect drained or recoveries implicated: status and history"
    )
    add_config_arg(nodes)
    nodes.add_argument("node", nargs="?", metavar="NODE")
    nodes.add_argument("--history", action="store_true", help="every event of the node")
    nodes.add_argument(
        "--lemons",
        action="store_true",
        help="lemon scores (highest first) with the incidents behind each",
    )
    nodes.add_argument("--json", action="store_true")
    nodes.set_defaults(handler=_with_temporal(_nodes))

    watchdog = sub.add_parser(
        "watchdog", help="release jobs resurrect held longer than the bound (fail-open)"
    )
    add_config_arg(watchdog)
    watchdog.add_argument("--once", action="store_true", help="one pass (for a timer unit)")
    watchdog.add_argument(
        "--bound-s", type=float, default=None, help="default: watchdog.hold_bound_s (120)"
    )
    watchdog.set_defaults(handler=_watchdog)
