"""The search attributes a namespace must have registered before a worker serves it.

A workflow that upserts a search attribute the namespace does not know fails its workflow
task (and every retry of it): the recovery stops where it stands. So a worker checks the
namespace once at start (:func:`refuse_unregistered_search_attributes`, one
ListSearchAttributes call) and does not start while one is missing, naming what to register.
``resurrect temporal register-search-attributes`` registers them (AddSearchAttributes), or
prints the Temporal CLI commands that do.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

from resurrect.errors import SearchAttributesUnregistered
from resurrect.temporal.search_attributes import DEV_SERVER_TYPES

# The Temporal CLI's type names -> the API's
INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Double": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
}


async def unregistered_search_attributes(client: Client) -> dict[str, str]:
    """name -> type of each search attribute resurrect sets that the client's namespace
    does not have (one ListSearchAttributes call)."""
    answer = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    known = set(answer.custom_attributes) | set(answer.system_attributes)
    return {name: kind for name, kind in DEV_SERVER_TYPES.items() if name not in known}


def cli_commands(missing: dict[str, str], namespace: str) -> list[str]:
    """The Temporal CLI commands that register ``missing`` in ``namespace``."""
    return [
        f"temporal operator search-attribute create --namespace {namespace}"
        f" --name {name} --type {kind}"
        for name, kind in missing.items()
    ]


async def register_search_attributes(client: Client) -> dict[str, str]:
    """Register the search attributes the namespace lacks; name -> type of those added."""
    missing = await unregistered_search_attributes(client)
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={name: INDEXED_TYPES[kind] for name, kind in missing.items()},
            )
        )
    return missing


async def refuse_unregistered_search_attributes(client: Client) -> None:
    """Raise SearchAttributesUnregistered, naming each missing one and how to register it,
    when the namespace lacks a search attribute resurrect sets."""
    missing = await unregistered_search_attributes(client)
    if not missing:
        return
    raise SearchAttributesUnregistered(
        f"namespace {client.namespace!r} lacks the search attributes"
        f" {', '.join(sorted(missing))}: a recovery that sets one would stop at its next"
        " workflow task. Register them first: `resurrect temporal register-search-attributes`"
        " (or: " + "; ".join(cli_commands(missing, client.namespace)) + ")"
    )
