"""Who may approve or deny: an answer signed with an operator's own key, checked by the worker.

Temporal does not tell a workflow who sent an update, and every node agent holds Temporal
credentials that may send one (they signal-with-start node-health workflows and poll their
task queues), so the caller's connection cannot say who decided. Instead each operator has a
key of their own (``approvals.operator_key_file`` on their machine; the same file as
``<name>.key`` in the worker's ``approvals.operator_keys_dir``) and ``resurrect approve|deny``
sends, with the answer, an HMAC-SHA256 over the recovery's workflow id, the question it
waits on, approve or deny, the reason, the operator's name and the time (:func:`sign`).

The worker checks it before the recovery takes the answer, in a workflow interceptor's
update validator (:class:`ApprovalInterceptor`: validators run on the worker that receives
the update and never on replay, so the workflow's commands and histories are unchanged): the
name must be a key the worker holds, the MAC must match, the workflow and question must be
the ones waiting, ``by`` must be the operator's name (the answer records it), and the time
within :data:`MAX_AGE_S`. Anything else is refused and the recovery keeps waiting. Without
operator keys, a worker whose Temporal clients authenticate (mTLS or API key) refuses every
answer, since any client could send one; on an unauthenticated single host (the embedded
server) answers are accepted as claims, marked ``(unverified)`` by the CLI.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from datetime import datetime, timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from resurrect.config import ResurrectConfig
from resurrect.contracts.workflow_names import APPROVE_UPDATE, DENY_UPDATE
from resurrect.errors import ConfigError, ResurrectError
from resurrect.operator.models import ApprovalInput, ApprovalProof
from resurrect.secret_file import read_key

MAX_AGE_S = 600.0
MAX_AHEAD_S = 60.0
OPERATOR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
KEY_SUFFIX = ".key"
MAX_OPERATORS = 1000


class ApprovalRefused(ResurrectError):
    """An approve/deny the worker does not take (unsigned where a signature is needed, a
    key it does not hold, a MAC that does not match, another workflow or question)."""


def operator_name(key_file: Path) -> str:
    """The operator a key file names (its file name without ``.key``)."""
    name = key_file.name.removesuffix(KEY_SUFFIX)
    if not OPERATOR_NAME.match(name):
        raise ConfigError(f"operator key {key_file}: {name!r} is not an operator name")
    return name


def _signed(
    workflow_id: str, what: str, approved: bool, reason: str, operator: str, at: datetime
) -> bytes:
    fields = {
        "workflow_id": workflow_id,
        "what": what,
        "approved": approved,
        "reason": reason,
        "operator": operator,
        "issued_at": at.isoformat(),
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def sign(
    key: bytes,
    operator: str,
    *,
    workflow_id: str,
    what: str,
    approved: bool,
    reason: str,
    now: datetime,
) -> ApprovalProof:
    """The proof that ``operator`` (holding ``key``) gives this answer to ``what``."""
    text = _signed(workflow_id, what, approved, reason, operator, now)
    mac = hmac.new(key, text, hashlib.sha256).hexdigest()
    return ApprovalProof(operator=operator, issued_at=now, mac=mac)


def load_operator_keys(directory: Path) -> dict[str, bytes]:
    """Every operator's key in ``directory`` (``<name>.key``), which must be a directory
    (not a symlink) of this user or root that nobody else can write; each key file is
    checked as :func:`resurrect.secret_file.read_key` does."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(f"approvals.operator_keys_dir {directory}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"approvals.operator_keys_dir {directory}: not a directory")
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        raise ConfigError(
            f"approvals.operator_keys_dir {directory}: must belong to this user or root and"
            " be writable by nobody else"
        )
    keys = {}
    for path in sorted(directory.iterdir())[: MAX_OPERATORS * 2]:
        if path.name.endswith(KEY_SUFFIX):
            keys[operator_name(path)] = read_key(path, "operator key")
    return keys


def signatures_required(config: ResurrectConfig) -> bool:
    """Whether an answer must be signed: with operator keys configured, or whenever
    Temporal's clients authenticate (then node agents hold credentials that could answer)."""
    temporal = config.temporal
    return (
        config.approvals.operator_keys_dir is not None
        or temporal.tls is not None
        or bool(temporal.api_key)
    )


class ApprovalVerifier:
    """The worker's check of an answer (keys by operator name)."""

    def __init__(self, keys: dict[str, bytes], *, required: bool) -> None:
        self.keys = keys
        self.required = required

    @classmethod
    def from_config(cls, config: ResurrectConfig) -> ApprovalVerifier:
        directory = config.approvals.operator_keys_dir
        keys = load_operator_keys(directory) if directory is not None else {}
        return cls(keys, required=signatures_required(config))

    def check(
        self,
        given: ApprovalInput,
        *,
        workflow_id: str,
        what: str | None,
        approved: bool,
        now: datetime,
    ) -> None:
        """Return if the recovery may take ``given``; ApprovalRefused (saying why) if not."""
        proof = given.proof
        if proof is None:
            if self.required:
                raise ApprovalRefused(
                    "this worker takes only answers signed with an operator's key"
                    " (approvals.operator_key_file; docs/operator-control.md)"
                )
            return
        key = self.keys.get(proof.operator)
        if key is None:
            raise ApprovalRefused(f"no operator key {proof.operator!r} on this worker")
        if what is None:
            raise ApprovalRefused("this recovery is not awaiting approval")
        text = _signed(workflow_id, what, approved, given.reason, proof.operator, proof.issued_at)
        expected = hmac.new(key, text, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, proof.mac):
            raise ApprovalRefused(
                f"the signature of {proof.operator!r} does not match this recovery, question,"
                " answer and reason"
            )
        if given.by != proof.operator:
            raise ApprovalRefused(f"signed by {proof.operator!r}, but claims to be {given.by!r}")
        age = now - proof.issued_at
        if age > timedelta(seconds=MAX_AGE_S) or age < -timedelta(seconds=MAX_AHEAD_S):
            raise ApprovalRefused(f"signed at {proof.issued_at.isoformat()}: too old or ahead")


def _awaited_question() -> str | None:
    """What the running recovery waits on (its ``status`` query), or None."""
    status = getattr(workflow.instance(), "status", None)
    if status is None:
        return None
    what = getattr(status(), "awaiting_approval", None)
    return what if isinstance(what, str) else None


class ApprovalInterceptor(Interceptor):
    """Checks every approve/deny update with ``verifier`` before the workflow's own
    validator runs; a refused answer never reaches the recovery."""

    def __init__(self, verifier: ApprovalVerifier) -> None:
        self.verifier = verifier

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        verifier = self.verifier

        class _CheckApprovals(WorkflowInboundInterceptor):
            def handle_update_validator(self, input: HandleUpdateInput) -> None:
                if input.update in (APPROVE_UPDATE, DENY_UPDATE):
                    given = input.args[0] if input.args else None
                    if not isinstance(given, ApprovalInput):
                        raise ApprovalRefused("an answer must be an ApprovalInput")
                    verifier.check(
                        given,
                        workflow_id=workflow.info().workflow_id,
                        what=_awaited_question(),
                        approved=input.update == APPROVE_UPDATE,
                        now=workflow.now(),
                    )
                super().handle_update_validator(input)

        return _CheckApprovals
