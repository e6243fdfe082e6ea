"""A namespace has every search attribute resurrect sets before a worker serves it
(resurrect/temporal/registration.py), on the real dev server."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from resurrect.errors import SearchAttributesUnregistered
from resurrect.temporal.registration import (
    refuse_unregistered_search_attributes,
    register_search_attributes,
    unregistered_search_attributes,
)
from resurrect.temporal.search_attributes import DEV_SERVER_TYPES

pytestmark = pytest.mark.temporal


async def test_the_dev_server_namespace_has_them_all(temporal_client: Client) -> None:
    assert await unregistered_search_attributes(temporal_client) == {}
    await refuse_unregistered_search_attributes(temporal_client)


async def test_a_worker_is_refused_a_namespace_without_them_until_they_are_registered(
    temporal_client: Client,
) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:12]}"
    retention = Duration()
    retention.FromTimedelta(timedelta(days=1))
    await temporal_client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=retention)
    )
    fresh = await Client.connect(
        temporal_client.service_client.config.target_host, namespace=namespace
    )
    assert await unregistered_search_attributes(fresh) == DEV_SERVER_TYPES
    with pytest.raises(SearchAttributesUnregistered) as refused:
        await refuse_unregistered_search_attributes(fresh)
    message = str(refused.value)
    assert "resurrect temporal register-search-attributes" in message
    assert f"--namespace {namespace} --name ResurrectIncarnation --type Keyword" in message

    assert await register_search_attributes(fresh) == DEV_SERVER_TYPES
    assert await unregistered_search_attributes(fresh) == {}
    await refuse_unregistered_search_attributes(fresh)
    assert await register_search_attributes(fresh) == {}  # again: nothing to add
