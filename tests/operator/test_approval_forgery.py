"""Audit item (issue 20): ``resurrect approve --by`` was free text, and any Temporal client
(every node agent holds credentials) could approve or deny a waiting recovery.

Now an answer counts only when signed with an operator's own key that the worker holds
(``approvals.operator_keys_dir``), and it is recorded under that key's name, never under a
name the caller typed. Each attack below is sent as a node agent could send it (a Temporal
client without an operator key) to a recovery waiting for approval on the real Temporal dev
server; each is refused with the reason, and the recovery keeps waiting with nothing done.
The operator's signed answer then goes through and names her.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
import pytest_asyncio
from support.operator_control import (
    awaiting,
    lost_node_jobs,
    make_config,
    operator_keys,
    result,
    start,
    workers,
)
from temporalio.client import Client, WorkflowUpdateFailedError

from resurrect.config import ResurrectConfig, TlsSettings
from resurrect.contracts.recovery_status import RecoveryWorkflowStatus
from resurrect.contracts.workflow_names import APPROVE_UPDATE, DENY_UPDATE, STATUS_QUERY
from resurrect.operator.approval_auth import ApprovalRefused, ApprovalVerifier, sign
from resurrect.operator.cli import decide_approval
from resurrect.operator.models import ApprovalInput
from resurrect.temporal.server import EmbeddedTemporal
from resurrect.testing import FakeScheduler

pytestmark = pytest.mark.temporal

PLANS = """
version: 1
plans:
  - name: gated-drain
    when: {actions: [drain_and_restart]}
    approval: {timeout_s: 600, on_timeout: deny}
    steps:
      - activity: recovery.drain_nodes
      - use: restart-from-checkpoint
"""


class Waiting(NamedTuple):
    client: Client
    config: ResurrectConfig
    scheduler: FakeScheduler
    workflow_id: str
    alice: Path  # the operator's own key file
    agent_key: bytes  # a key the worker does not hold (a node agent's own)


@pytest_asyncio.fixture
async def waiting(
    temporal_client: Client, temporal_server: EmbeddedTemporal, tmp_path: Path
) -> AsyncIterator[Waiting]:
    keys_dir, keys = operator_keys(tmp_path, "alice")
    plans = tmp_path / "gated.yaml"
    plans.write_text(PLANS)
    config = make_config(
        tmp_path,
        temporal_server.address,
        plans={"paths": [str(plans)]},
        approvals={"operator_keys_dir": str(keys_dir)},
    )
    scheduler = FakeScheduler.with_nodes(4, cluster_name=config.cluster.name)
    (info,) = lost_node_jobs(scheduler, 1)
    async with workers(temporal_client, config, scheduler, count=1):
        workflow_id = await start(temporal_client, config, info)
        await awaiting(temporal_client, workflow_id)
        yield Waiting(temporal_client, config, scheduler, workflow_id, keys["alice"], b"agent" * 8)


async def status(client: Client, workflow_id: str) -> RecoveryWorkflowStatus:
    handle = client.get_workflow_handle(workflow_id)
    found: RecoveryWorkflowStatus = await handle.query(
        STATUS_QUERY, result_type=RecoveryWorkflowStatus
    )
    return found


async def test_an_agents_client_cannot_answer_and_the_operators_signed_answer_names_her(
    waiting: Waiting,
) -> None:
    client, config, scheduler, workflow_id, alice, agent_key = waiting
    handle = client.get_workflow_handle(workflow_id)
    what = (await status(client, workflow_id)).awaiting_approval
    assert what is not None
    now = datetime.now(UTC)
    alice_key = alice.read_bytes().strip()

    def signed(key: bytes, operator: str, **changes: object) -> ApprovalInput:
        fields: dict[str, object] = {
            "workflow_id": workflow_id,
            "what": what,
            "approved": True,
            "reason": "ok",
            "now": now,
        }
        fields.update(changes)
        proof = sign(key, operator, **fields)  # type: ignore[arg-type]
        return ApprovalInput(by=operator, reason="ok", proof=proof)

    forged_by = signed(alice_key, "alice").model_copy(update={"by": "bob"})
    attacks: list[tuple[str, ApprovalInput, str]] = [
        # what --by did: any name, no proof
        (APPROVE_UPDATE, ApprovalInput(by="alice", reason="ok"), "only answers signed"),
        (DENY_UPDATE, ApprovalInput(by="alice", reason="no"), "only answers signed"),
        # the agent signs with its own key, under its own or alice's name
        (APPROVE_UPDATE, signed(agent_key, "node7"), "no operator key 'node7'"),
        (APPROVE_UPDATE, signed(agent_key, "alice"), "does not match"),
        # alice's signature from elsewhere: another recovery, another answer, another reason
        (APPROVE_UPDATE, signed(alice_key, "alice", workflow_id="other"), "does not match"),
        (DENY_UPDATE, signed(alice_key, "alice"), "does not match"),
        (
            APPROVE_UPDATE,
            signed(alice_key, "alice").model_copy(update={"reason": "forged reason"}),
            "does not match",
        ),
        (APPROVE_UPDATE, forged_by, "claims to be 'bob'"),
        (APPROVE_UPDATE, signed(alice_key, "alice", now=now - timedelta(hours=1)), "too old"),
    ]
    for update, given, why in attacks:
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(update, given, result_type=str)
        assert why in str(refused.value.cause), (why, refused.value.cause)
    after = await status(client, workflow_id)
    assert after.phase == "awaiting_approval" and after.approvals == []
    assert scheduler.calls == []  # the victim: nothing drained, nothing requeued

    answer = await decide_approval(
        config, workflow_id, approved=True, reason="rack checked", key_file=alice
    )
    assert answer.endswith("(by alice)")
    outcome = await result(client, workflow_id)
    assert outcome.recovered and outcome.drained_nodes == ["node1"]
    assert any("approved by alice: rack checked" in n for n in outcome.notes)


def test_with_authenticated_clients_and_no_operator_keys_nobody_can_answer(
    tmp_path: Path,
) -> None:
    """mTLS (or an API key) without operator keys: every agent's certificate could answer,
    so the worker takes no answer at all (the plan's timeout decides)."""
    config = make_config(tmp_path, "127.0.0.1:7233", temporal={"tls": TlsSettings().model_dump()})
    verifier = ApprovalVerifier.from_config(config)
    with pytest.raises(ApprovalRefused, match="only answers signed"):
        verifier.check(
            ApprovalInput(by="alice", reason="ok"),
            workflow_id="w",
            what="drain",
            approved=True,
            now=datetime.now(UTC),
        )
    unauthenticated = ApprovalVerifier.from_config(make_config(tmp_path, "127.0.0.1:7233"))
    unauthenticated.check(  # the embedded single host: a claim, marked unverified by the CLI
        ApprovalInput(by="alice (unverified)", reason="ok"),
        workflow_id="w",
        what="drain",
        approved=True,
        now=datetime.now(UTC),
    )
