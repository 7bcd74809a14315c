"""nsq_to_file (also `nsq to-file`): archive topics to files, FIN'd only once on disk.

Drop-in for Go's nsq_to_file v1.3.0: the same flags, defaults, file names, rotation and
gzip members. Beyond it: topics discovered at once (not after a whole --topic-refresh);
a bad pattern, option, topic or filename format stops before anything starts; files a
crash left half-written are repaired at start; work and output dirs on different
filesystems; no name can leave the output dir; --format json; a status line on a
terminal; a full disk ends the run with exit 1 and nothing FIN'd that is not on disk;
--exit-at-end drains the topics into files and stops (files closed as at any stop).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.consoles import end_status_line, status_line
from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    GoFlagsCommand,
    fail,
    grouped_option,
    run,
    run_event_loop,
    version_option,
)
from nsqtools.commands.logs import configure_logging
from nsqtools.commands.options import (
    DURATION,
    GoInt,
    connection_options,
    consumed_topics,
    consumer_addresses,
    dead_letter_options,
    exit_at_end_option,
    http_client_timeouts,
    logging_options,
    metrics_option,
    negative_as_zero,
    nsqd_and_lookupd_addresses,
)

if TYPE_CHECKING:
    from nsqtools.archive.names import FilenameFormat
    from nsqtools.archive.run import ArchiveRunSettings, StatusLine
    from nsqtools.archive.sink import ArchiveCounters, ArchiveSettings
    from nsqtools.config import ClientConfig
    from nsqtools.runtime.topics import TopicPattern

TOOL = "nsq_to_file"


@click.command("to-file", cls=GoFlagsCommand, go_tool=TOOL, context_settings=CONTEXT_SETTINGS)
@click.argument("arguments", nargs=-1, required=False, metavar="")  # Go: an error
@consumed_topics
@click.option("--topic-pattern", metavar="REGEXP", help="Only log topics matching this pattern.")
@click.option(
    "--topic-refresh",
    type=DURATION,
    default="1m",
    show_default=True,
    help="How often the topic list is refreshed (from lookupd, when no --topic).",
)
@click.option("--channel", default="nsq_to_file", show_default=True, help="NSQ channel.")
@click.option(
    "--max-in-flight",
    type=GoInt(),
    default=200,
    show_default=True,
    help="Max number of messages to allow in flight (and to sync at once).",
)
@grouped_option(
    OUTPUT,
    "--output-dir",
    default="/tmp",
    show_default=True,
    shell_complete=completers.directories,
    help="Directory for output files.",
)
@grouped_option(
    OUTPUT,
    "--work-dir",
    default="",
    shell_complete=completers.directories,
    help="Directory for in-progress files, moved to --output-dir once closed "
    "(default: the output dir).",
)
@grouped_option(
    OUTPUT,
    "--filename-format",
    default="<TOPIC>.<HOST><REV>.<DATETIME>.log",
    show_default=True,
    help="Output file name (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced; <REV> "
    "goes up when a file already exists; '/' makes sub-directories).",
)
@grouped_option(
    OUTPUT,
    "--datetime-format",
    default="%Y-%m-%d_%H",
    show_default=True,
    help="strftime format of <DATETIME> (local time).",
)
@grouped_option(
    OUTPUT,
    "--host-identifier",
    default="",
    help="Value of <HOST> instead of the short hostname; <SHORT_HOST> and <HOSTNAME> "
    "are replaced in it.",
)
@grouped_option(OUTPUT, "--gzip", is_flag=True, help="gzip output files.")
@grouped_option(
    OUTPUT,
    "--gzip-level",
    type=GoInt(),
    default=6,
    show_default=True,
    help="gzip compression level (1-9, 1=BestSpeed, 9=BestCompression).",
)
@grouped_option(
    OUTPUT,
    "--rotate-size",
    type=GoInt(),
    callback=negative_as_zero,
    default=0,
    help="Rotate the file when it grows bigger than this many bytes (uncompressed).",
)
@grouped_option(
    OUTPUT, "--rotate-interval", type=DURATION, default="0s", help="Rotate the file this often."
)
@grouped_option(
    OUTPUT,
    "--sync-interval",
    type=DURATION,
    default="30s",
    show_default=True,
    help="Sync files to disk (and FIN what they hold) at least this often.",
)
@grouped_option(OUTPUT, "--skip-empty-files", is_flag=True, help="Skip writing empty files.")
@grouped_option(
    OUTPUT,
    "--format",
    "output_format",
    type=click.Choice(["raw", "json"]),
    default="raw",
    show_default=True,
    help="raw: each body on a line (Go's); json: one JSON envelope per line (id, timestamp, "
    "attempts, topic, channel, nsqd, body, encoding), as nsq_tail --format json.",
)
@grouped_option(
    OUTPUT,
    "--status/--no-status",
    default=None,
    help="A status line on stderr (default: when stderr is a terminal).",
)
@exit_at_end_option
@dead_letter_options()
@nsqd_and_lookupd_addresses(
    "nsqd TCP address (may be given multiple times).",
    "lookupd HTTP address (may be given multiple times).",
)
@http_client_timeouts("5s", "lookupd")
@connection_options("consumer-opt")
@logging_options(TOOL)
@metrics_option
@version_option(TOOL)
def command(**options: Any) -> None:
    """Write the messages of topics to files, rotated, optionally gzipped."""
    settings = _settings(options)
    shown = options["status"]
    status = _StatusLine() if (sys.stderr.isatty() if shown is None else shown) else None
    configure_logging(options["log_level"], options["log_prefix"])
    run_event_loop(_archive, settings, status, options["metrics_address"])


def _settings(options: dict[str, Any]) -> ArchiveRunSettings:
    from nsqtools.archive.run import ArchiveRunSettings
    from nsqtools.commands.options import dead_letter_settings

    if options["arguments"]:
        fail(f"unknown arguments: [{' '.join(options['arguments'])}]")
    if not options["channel"]:
        fail("--channel is required")
    connect_timeout = options["http_client_connect_timeout"]
    request_timeout = options["http_client_request_timeout"]
    if connect_timeout <= 0:
        fail("--http-client-connect-timeout should be positive")
    if request_timeout <= 0:
        fail("--http-client-request-timeout should be positive")
    nsqd, lookupd = consumer_addresses(options)
    if not 1 <= options["gzip_level"] <= 9:
        fail(f"invalid --gzip-level value ({options['gzip_level']}), should be 1-9")
    topics = list(options["topics"])
    if not topics and not options["topic_pattern"]:
        fail("--topic or --topic-pattern required")
    if not topics and not lookupd:
        fail("--lookupd-http-address must be specified when no --topic specified")
    pattern = _pattern(options["topic_pattern"])
    if topics and pattern is not None and not any(map(pattern.search, topics)):
        fail("no --topic matches --topic-pattern: nothing to archive")
    archive = _archive_settings(options)
    _check_names(topics, options["channel"], archive.names)
    return ArchiveRunSettings(
        topics=[topic for topic in topics if pattern is None or pattern.search(topic)],
        pattern=pattern,
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        topic_refresh=options["topic_refresh"],
        http_timeouts=(connect_timeout, request_timeout),
        config=_config(options),
        archive=archive,
        dead_letters=dead_letter_settings(options),
        exit_at_end=options["exit_at_end"],
    )


def _pattern(text: str | None) -> TopicPattern | None:
    """Go's syntax (RE2's), matched in linear time: see nsqtools.runtime.topics."""
    if not text:
        return None
    from nsqtools.runtime.topics import BadTopicPattern, TopicPattern

    try:
        return TopicPattern(text)
    except BadTopicPattern as error:
        fail(f"--topic-pattern {text!r}: {error}")


def _config(options: dict[str, Any]) -> ClientConfig:
    from nsqtools.commands.options import build_config

    try:
        config: ClientConfig = build_config(TOOL, options, max_in_flight=options["max_in_flight"])
    except click.UsageError as error:
        fail(error.format_message())  # Go ignores a bad option; we stop, as for any check
    return config


def _archive_settings(options: dict[str, Any]) -> ArchiveSettings:
    from nsqtools.archive.names import BadName, FilenameFormat
    from nsqtools.archive.sink import ArchiveSettings

    output_dir = Path(options["output_dir"])
    work_dir = Path(options["work_dir"]) if options["work_dir"] else output_dir
    gzip, rotate_size, rotate_interval = (
        options["gzip"],
        options["rotate_size"],
        options["rotate_interval"],
    )
    try:
        names = FilenameFormat.build(
            options["filename_format"],
            datetime_format=options["datetime_format"],
            host_identifier=options["host_identifier"],
            gzip=gzip,
            rev_required=gzip or rotate_size > 0 or rotate_interval > 0 or work_dir != output_dir,
        )
    except BadName as error:
        fail(str(error))
    if options["sync_interval"] <= 0:
        fail("--sync-interval should be positive")
    return ArchiveSettings(
        channel=options["channel"],
        output_dir=output_dir,
        work_dir=work_dir,
        names=names,
        gzip_level=options["gzip_level"] if gzip else None,
        rotate_size=rotate_size,
        rotate_interval=rotate_interval,
        sync_interval=options["sync_interval"],
        skip_empty_files=options["skip_empty_files"],
        max_in_flight=options["max_in_flight"],
        json=options["output_format"] == "json",
    )


def _check_names(topics: list[str], channel: str, names: FilenameFormat) -> None:
    from nsqtools.archive.names import BadName
    from nsqtools.protocol import LocalProtocolError, check_channel, check_topic

    try:
        check_channel(channel)
        for topic in topics:
            check_topic(topic)
            names.check_topic(topic)
    except (LocalProtocolError, BadName) as error:
        fail(str(error))


async def _archive(
    settings: ArchiveRunSettings, status: StatusLine | None, metrics_address: str | None
) -> None:
    from nsqtools.archive.run import run_archive
    from nsqtools.runtime.consuming import RunCounters, Unreachable
    from nsqtools.runtime.deadletters import GivenUp
    from nsqtools.runtime.metrics import run_families, serving_metrics
    from nsqtools.runtime.sinks import SinkFailed

    counters = RunCounters()
    metrics = functools.partial(run_families, counters, settings.archive.channel, "written")
    try:
        async with serving_metrics(metrics_address, metrics):
            await run_archive(settings, status, counters)
    except (SinkFailed, GivenUp, Unreachable) as error:
        fail(str(error))


class _StatusLine:
    """The status line on stderr: messages, rate, size, files, syncs."""

    def show(self, counters: ArchiveCounters, per_second: float) -> None:
        status_line(
            f"{counters.messages:,} messages  {per_second:,.0f} msg/s  "
            f"{counters.bytes / 1e6:,.1f} MB  {counters.files} files  {counters.syncs} syncs "
        )

    def end(self) -> None:
        end_status_line()


def main() -> None:
    run(command, TOOL)
