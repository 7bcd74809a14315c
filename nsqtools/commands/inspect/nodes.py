"""`nsq nodes`: every nsqd and nsqlookupd of the cluster, with its health."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands.cluster_cli import (
    Column,
    Table,
    cluster_from,
    cluster_options,
    fail_on,
    json_option,
    print_json,
    print_tables,
    with_client,
)
from nsqtools.commands.front import CONTEXT_SETTINGS
from nsqtools.commands.inspect.shared import failures_json

if TYPE_CHECKING:
    from nsqtools.httpapi import HttpApiError
    from nsqtools.inspection import NodesView


@click.command("nodes", context_settings=CONTEXT_SETTINGS)
@json_option
@cluster_options
def command(**options: Any) -> None:
    """Every nsqd and nsqlookupd of the cluster.

    Per nsqd (given, or registered with the lookupds): HTTP and TCP address, hostname,
    version, health, topics (and, on the Youzan fork, the topic partitions it holds),
    channels, depth, messages, clients, and the topics the lookupds tombstoned for it.
    Per lookupd: its version, or why it did not answer.
    """
    from nsqtools.inspection import gather_nodes

    cluster = cluster_from(options)
    view = with_client(options, lambda client: gather_nodes(client, cluster))
    if options["as_json"]:
        print_json(nodes_json(view))
    else:
        print_tables(nodes_tables(view))
    fail_on(view.failures)


def nodes_tables(view: NodesView) -> list[Table]:
    partitioned = any(node.partition_count for node in view.nodes)
    nsqds = Table(
        [
            Column("address"),
            Column("tcp", gives_way=3),
            Column("hostname", gives_way=4),
            Column("version", gives_way=5),
            Column("health"),
            Column("topics", numeric=True),
            *([Column("partitions", numeric=True, gives_way=1)] if partitioned else []),
            Column("channels", numeric=True),
            Column("depth", numeric=True),
            Column("messages", numeric=True, gives_way=2),
            Column("clients", numeric=True),
            Column("tombstoned", gives_way=6),
        ],
        title="nsqd",
    )
    for node in view.nodes:
        cells = [node.http_address, node.tcp_address, node.hostname, node.version]
        partitions = [str(node.partition_count)] if partitioned else []
        if node.error is None:
            numbers = (node.channel_count, node.depth, node.message_count, node.client_count)
            cells += [node.health, str(len(node.topics)), *partitions, *map(str, numbers)]
        else:
            blanks = ["", "", "", "", ""] + [""] * len(partitions)
            cells += [f"no answer: {_reason(node.error)}", *blanks]
        healthy = node.error is None and node.health == "OK"
        nsqds.add([*cells, " ".join(node.tombstoned_topics)], "" if healthy else "red")
    tables = [nsqds]
    if view.lookupds:
        lookupds = Table(
            [Column("address"), Column("version", gives_way=5), Column("health")], "nsqlookupd"
        )
        for lookupd in view.lookupds:
            if lookupd.error is None:
                lookupds.add([lookupd.address, lookupd.version, "OK"])
            else:
                lookupds.add([lookupd.address, "", f"no answer: {_reason(lookupd.error)}"], "red")
        tables.append(lookupds)
    return tables


def nodes_json(view: NodesView) -> dict[str, Any]:
    nodes = [
        {
            "http_address": node.http_address,
            "tcp_address": node.tcp_address,
            "hostname": node.hostname,
            "version": node.version,
            "health": node.health,
            "topics": list(node.topics),
            "tombstoned_topics": list(node.tombstoned_topics),
            **({"partition_count": node.partition_count} if node.partition_count else {}),
            "channel_count": node.channel_count,
            "depth": node.depth,
            "message_count": node.message_count,
            "client_count": node.client_count,
            "error": None if node.error is None else node.error.reason,
        }
        for node in view.nodes
    ]
    lookupds = [
        {
            "address": lookupd.address,
            "version": lookupd.version,
            "error": None if lookupd.error is None else lookupd.error.reason,
        }
        for lookupd in view.lookupds
    ]
    return {"nodes": nodes, "lookupds": lookupds, **failures_json(view)}


def _reason(error: HttpApiError) -> str:
    """Why a node did not answer, without the request (the same for every node)."""
    return error.reason.partition(": ")[2] or error.reason
