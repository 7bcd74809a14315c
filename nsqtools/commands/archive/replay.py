"""`nsq archive replay SRC... --topic T --nsqd-tcp-address A`: archived messages published
again (backfill, reprocessing) by Spark tasks (nsqtools.spark.replay), with a summary:
published and failed by topic of origin, malformed lines left out. As to_nsq: every
message to every nsqd, and exit status 1 with a count when any was not published.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers, consoles
from nsqtools.commands.archive.jobs import (
    Sources,
    archive_options,
    find_sources,
    run_job,
    sources_argument,
)
from nsqtools.commands.cluster_cli import Column, Table, print_tables
from nsqtools.commands.front import CONTEXT_SETTINGS, fail
from nsqtools.commands.options import check_addresses, connection_options, nsqd_addresses

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from nsqtools.config import ClientConfig
    from nsqtools.spark.replay import Replayed

TOOL = "nsq_archive_replay"  # in the user agent nsqd shows


@click.command(context_settings=CONTEXT_SETTINGS)
@sources_argument
@click.option(
    "--topic", required=True, shell_complete=completers.topics, help="The topic to publish to."
)
@nsqd_addresses(
    "nsqd TCP address to publish to (may be given multiple times): each gets every message."
)
@click.option(
    "--rate",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="At most this many messages a second, overall (shared evenly by the Spark tasks "
    "that run at once); 0: no limit.",
)
@click.option(
    "--where",
    metavar="CONDITION",
    help="Replay only the messages this Spark SQL condition selects, over the columns "
    "topic, host, id, timestamp, timestamp_ns, attempts, channel, nsqd, body, file; "
    "e.g. \"topic = 'orders' AND attempts < 3\".",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@connection_options("producer-opt")
@archive_options
def command(**options: Any) -> None:
    """Publish archived messages (files or directories, or Parquet that compact wrote)
    again, to a topic.

    \b
    Each body is published as archived, byte for byte, to every --nsqd-tcp-address.
    Spark reads the archives in partitions, each published by one task: within a
    partition messages go out in the order of their timestamps (raw archives: of their
    file's hour, then their order in the file); across partitions there is no order.
    Exit status 1 when any message was not published to every nsqd (the summary says
    how many, by topic of origin). A Spark task run again (after a failure) publishes
    its messages again: replay is at-least-once, as NSQ is.
    """
    config = _checked_destination(options)
    run = run_job(
        options,
        find_sources(options),
        lambda spark, files: _replay(spark, files, options, config),
        consoles.stderr(),
    )
    replayed = run.result
    if options["as_json"]:
        click.echo(json.dumps(_summary_json(replayed, options, run.seconds), sort_keys=True))
    else:
        print_tables(_summary_tables(replayed, options))
    failed = replayed.failed.total()
    if failed:
        from nsqtools.runtime.publishing import unpublished

        total = replayed.published.total() + failed
        fail(unpublished(failed, total, replayed.reasons, "messages"))


def _checked_destination(options: dict[str, Any]) -> ClientConfig:
    """The topic and nsqds checked as to_nsq checks them; the connection options' config."""
    from nsqtools.commands.options import build_config
    from nsqtools.protocol import LocalProtocolError, check_topic

    if not options["nsqd_tcp_addresses"]:
        fail("--nsqd-tcp-address required")
    check_addresses(options["nsqd_tcp_addresses"], "--nsqd-tcp-address")
    try:
        check_topic(options["topic"])
    except LocalProtocolError as error:
        fail(str(error))
    config: ClientConfig = build_config(TOOL, options)
    return config


def _replay(
    spark: SparkSession, sources: Sources, options: dict[str, Any], config: ClientConfig
) -> Replayed:
    from nsqtools.spark.query import source_messages
    from nsqtools.spark.replay import BadCondition, Destination, replay

    destination = Destination(options["topic"], tuple(options["nsqd_tcp_addresses"]), config)
    messages = source_messages(spark, sources.archives, sources.compacted)
    try:
        return replay(messages, destination, options["rate"], options["where"])
    except BadCondition as error:
        fail(f"--where {error}")


def _by_topic(replayed: Replayed) -> dict[str, dict[str, int]]:
    topics = sorted(replayed.published.keys() | replayed.failed.keys())
    return {
        topic: {"published": replayed.published[topic], "failed": replayed.failed[topic]}
        for topic in topics
    }


def _summary_json(
    replayed: Replayed, options: dict[str, Any], seconds: dict[str, float]
) -> dict[str, Any]:
    return {
        "topic": options["topic"],
        "nsqds": list(options["nsqd_tcp_addresses"]),
        "published": replayed.published.total(),
        "failed": replayed.failed.total(),
        "malformed": replayed.malformed,
        "by_topic": _by_topic(replayed),
        "failure_reasons": dict(replayed.reasons),
        "tasks": replayed.tasks,
        "seconds": {name: round(value, 3) for name, value in seconds.items()},
    }


def _summary_tables(replayed: Replayed, options: dict[str, Any]) -> list[Table]:
    nsqds = ", ".join(options["nsqd_tcp_addresses"])
    summary = Table(
        [Column("what"), Column("count", numeric=True)],
        title=f"Replayed to {options['topic']} on {nsqds}",
    )
    rows = [
        ("published (to every nsqd)", replayed.published.total()),
        ("failed", replayed.failed.total()),
        ("malformed lines left out", replayed.malformed),
    ]
    for what, count in rows:
        summary.add([what, f"{count:,}"])
    origins = Table(
        [
            Column("topic of origin"),
            Column("published", numeric=True),
            Column("failed", numeric=True),
        ],
        title="By topic of origin",
    )
    for topic, counts in _by_topic(replayed).items():
        origins.add([topic, f"{counts['published']:,}", f"{counts['failed']:,}"])
    return [summary, origins]
