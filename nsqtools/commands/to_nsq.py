"""to_nsq (also `nsq pub`): publish records from stdin (or files) to every nsqd given;
`nsq pub TOPIC BODY` publishes a body made from a template, --count times.

Drop-in for Go's to_nsq: same flags; records split on a one-byte --delimiter, empty
ones skipped, each published to EVERY --nsqd-tcp-address (fan-out). Beyond it:
pipelined MPUB batches instead of one round trip per record; a last record without a
delimiter is kept whole; --defer (DPUB); input files as arguments; a progress line on
a terminal (stderr; not when the records are typed at it), ending with the final
count. Nothing read is silently dropped: while an nsqd restarts, reading stops and
its records wait (up to --reconnect-timeout); exit status 1 with a count when any
record was not acknowledged by every nsqd, and --failed-file keeps exactly those
records, so that feeding it back completes the job. A second SIGINT/SIGTERM exits at
once, still with the count (every record without an answer counts as failed).

`nsq pub` without --topic takes the topic as its first argument: `nsq pub TOPIC` reads
stdin as to_nsq does, `nsq pub TOPIC BODY` publishes BODY --count times (default 1),
its fields filled in each time ({seq}, {ts}, {id}: nsqtools.formats.BodyTemplate); its
flags may also follow TOPIC and BODY (GoFlagsCommand's flags_anywhere_as). With
--topic, `nsq pub` is to_nsq exactly: its arguments are input files. to_nsq itself
never takes a topic as an argument (a forgotten --topic stays an error, not a topic
named after a file).

On the Youzan fork: --partition names the partition of every PUB; through the fork's
nsqlookupd (--lookupd-http-address) records go to each partition's leader, in turn, or
by --shard-key (a record's field, or a template over its fields, hashed to a partition:
the order of one key's records holds); --trace-id publishes traced (PUB_TRACE).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsqtools.commands import completers
from nsqtools.commands.consoles import end_status_line, status_line
from nsqtools.commands.front import (
    CONTEXT_SETTINGS,
    OUTPUT,
    YOUZAN,
    GoFlagsCommand,
    error_line,
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
    check_addresses,
    connection_options,
    logging_options,
    negative_as_zero,
    nsqd_addresses,
    partition_option,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nsqtools.formats import BodyTemplate
    from nsqtools.runtime.publishing import FailedFile, PublishSettings, RecordPublisher, Source

TOOL = "to_nsq"
PUB = "pub"  # the name under nsq, which also takes TOPIC [BODY] as arguments
INPUT_FILE = click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True, path_type=Path)


@click.command(
    PUB,
    cls=GoFlagsCommand,
    go_tool=TOOL,
    flags_anywhere_as=PUB,
    context_settings=CONTEXT_SETTINGS,
)
@click.argument(
    "arguments",
    nargs=-1,
    metavar="[FILES]...",
    type=click.Path(dir_okay=False, allow_dash=True),  # checked as INPUT_FILE when files
)
@click.option("--topic", shell_complete=completers.topics, help="NSQ topic to publish to.")
@nsqd_addresses("Destination nsqd TCP address (may be given multiple times).")
@click.option(
    "--delimiter",
    default="\n",
    show_default=repr("\n"),
    help="Character to split input on: one byte, or an escape such as \\t or \\0.",
)
@click.option(
    "--rate",
    type=GoInt(),
    callback=negative_as_zero,
    default=0,
    show_default=True,
    help="Throttle messages to n/second. 0 to disable.",
)
@grouped_option(
    OUTPUT,
    "--count",
    type=GoInt(min=1),
    help="With `nsq pub TOPIC BODY`: publish BODY this many times (default 1), its "
    "fields filled in each time: {seq} (1 to N), {count}, {ts}, {epoch}, {timestamp_ns}, "
    "{id} (random), {topic}; {{ and }} are literal braces.",
)
@grouped_option(
    OUTPUT, "--defer", type=DURATION, help="Deliver each message after this delay (DPUB), e.g. 30s."
)
@grouped_option(
    OUTPUT,
    "--failed-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every record not acknowledged by every nsqd here, delimited as read, so "
    "that `to_nsq ... < FILE` completes the job (emptied at start).",
)
@grouped_option(
    OUTPUT,
    "--reconnect-timeout",
    type=DURATION,
    default="2m",
    show_default=True,
    help="While an nsqd that was reachable is down, stop reading, keep its records and "
    "redial it for this long before counting them failed.",
)
@grouped_option(
    YOUZAN,
    "--lookupd-http-address",
    "lookupd_http_addresses",
    multiple=True,
    metavar="HOST:PORT",
    help="Publish through the Youzan fork's nsqlookupd, to each partition's leader "
    "(instead of --nsqd-tcp-address; may be given multiple times).",
)
@partition_option("Publish to this partition")
@grouped_option(
    YOUZAN,
    "--shard-key",
    metavar="FIELD|TEMPLATE",
    help="Hash each JSON record's FIELD, or a template such as '{user}-{region}', to its "
    "partition (CRC-32 modulo the partition count): one key's records keep their order. "
    "Needs --lookupd-http-address.",
)
@grouped_option(
    YOUZAN,
    "--trace-id",
    metavar="ID|FIELD|TEMPLATE",
    help="Publish traced (PUB_TRACE/MPUB_TRACE) with this trace id, a number or taken "
    "from each JSON record (an unsigned 64-bit number).",
)
@connection_options("producer-opt")
@logging_options(TOOL)
@version_option(TOOL, go_has_it=False)
@click.pass_context
def command(ctx: click.Context, /, arguments: tuple[str, ...], **options: Any) -> None:
    """Publish records read from stdin, or from FILES ("-" is stdin), to a topic.

    As `nsq pub` without --topic: `nsq pub TOPIC` reads stdin, `nsq pub TOPIC BODY`
    publishes BODY, a template (see --count)."""
    from nsqtools.commands.options import build_config
    from nsqtools.protocol import LocalProtocolError, check_topic
    from nsqtools.records import DelimiterError, parse_delimiter
    from nsqtools.runtime.publishing import RecordPublisher

    positional = ctx.info_name == PUB and not options["topic"]
    files = () if positional else _input_files(ctx, arguments)
    topic, body = _topic_and_body(arguments) if positional else (options["topic"], None)
    if not topic:
        fail("--topic required")
    if options["count"] is not None and body is None:
        fail("--count needs a BODY: nsq pub --count=N TOPIC BODY")
    addresses = list(options["nsqd_tcp_addresses"])
    lookupds = list(options["lookupd_http_addresses"])
    if not addresses and not lookupds:
        fail("--nsqd-tcp-address required")
    if addresses and lookupds:
        fail("use --nsqd-tcp-address or --lookupd-http-address, not both")
    check_addresses(addresses, "--nsqd-tcp-address")
    check_addresses(lookupds, "--lookupd-http-address")
    _check_fork_options(options)
    try:
        check_topic(topic)
        delimiter = parse_delimiter(options["delimiter"])
    except (LocalProtocolError, DelimiterError) as error:
        fail(str(error))
    inputs = () if body is not None else files or (Path("-"),)
    sources: Sequence[Source] = inputs
    if body is not None:
        sources = (_body_template(body, topic, options["count"] or 1),)
    config = build_config(TOOL, options)
    configure_logging(options["log_level"], options["log_prefix"])
    failed_file = _open_failed_file(options["failed_file"], inputs, delimiter)
    progress = _progress_line(reads_stdin=Path("-") in inputs)
    publisher = RecordPublisher(
        _settings(topic, delimiter, options),
        failed_file,
        progress=progress,
        say_lost=progress.say_lost if progress else _say_lost,
    )
    run_event_loop(publisher.publish, sources, addresses, config)
    problem = publisher.problem()
    if problem is not None:
        fail(problem)
    if body is not None and publisher.interrupted:
        _say_interrupted(publisher, options["count"] or 1)


def _input_files(ctx: click.Context, arguments: tuple[str, ...]) -> tuple[Path, ...]:
    """to_nsq's arguments: files that must exist (click's message when one does not)."""
    [param] = [param for param in ctx.command.params if param.name == "arguments"]
    return tuple(INPUT_FILE.convert(argument, param, ctx) for argument in arguments)


def _topic_and_body(arguments: tuple[str, ...]) -> tuple[str, str | None]:
    """`nsq pub TOPIC [BODY]` without --topic."""
    if not arguments:
        fail("a TOPIC is required: nsq pub TOPIC [BODY] (or --topic=TOPIC [FILES]...)")
    if len(arguments) > 2:
        fail(
            "nsq pub takes a TOPIC and at most one BODY (quote a BODY with spaces); "
            "with --topic, its arguments are input files"
        )
    topic, *body = arguments
    return topic, body[0] if body else None


def _body_template(body: str, topic: str, count: int) -> BodyTemplate:
    from nsqtools.formats import BodyTemplate, FormatError

    if not body:
        fail("BODY is empty: nsqd takes no empty message")
    try:
        return BodyTemplate(body, topic, count)
    except FormatError as error:
        fail(f"BODY: {error}")


def _say_interrupted(publisher: RecordPublisher, count: int) -> None:
    """How far a run of --count got when a signal stopped it (each record made was
    acknowledged: else the run failed, with its count)."""
    import logging

    assert publisher.producer is not None
    published = publisher.producer.acknowledged
    if published < count:
        logging.getLogger("nsqtools").info("interrupted: %s of %s published", published, count)


def _check_fork_options(options: dict[str, Any]) -> None:
    from nsqtools.records import RecordKey, RecordKeyError

    fork = [name for name in ("partition", "shard_key", "trace_id") if options[name] is not None]
    if fork and options["defer"] is not None:
        fail(f"--{fork[0].replace('_', '-')} cannot be used with --defer")
    if options["shard_key"] is not None:
        if options["partition"] is not None:
            fail("use --shard-key or --partition, not both")
        if not options["lookupd_http_addresses"]:
            fail("--shard-key needs --lookupd-http-address (to know the partitions)")
    for name in ("shard_key", "trace_id"):
        if options[name] is not None:
            try:
                RecordKey(options[name])
            except RecordKeyError as error:
                fail(f"--{name.replace('_', '-')}: {error}")


def _settings(topic: str, delimiter: bytes, options: dict[str, Any]) -> PublishSettings:
    from nsqtools.records import RecordKey
    from nsqtools.runtime.publishing import PublishSettings

    shard_key, trace_id = options["shard_key"], options["trace_id"]
    return PublishSettings(
        topic=topic,
        delimiter=delimiter,
        rate=options["rate"],
        delay=options["defer"],
        reconnect_timeout=options["reconnect_timeout"],
        lookupd_http_addresses=tuple(options["lookupd_http_addresses"]),
        partition=options["partition"],
        shard_key=None if shard_key is None else RecordKey(shard_key),
        trace_id=None if trace_id is None else RecordKey(trace_id),
    )


def _open_failed_file(
    path: Path | None, sources: Sequence[Path], delimiter: bytes
) -> FailedFile | None:
    """The failed file, emptied; never one of the inputs, which emptying would destroy."""
    import os

    from nsqtools.runtime.publishing import FailedFile

    if path is None:
        return None
    if path.exists():
        for source in sources:
            status = os.fstat(0) if str(source) == "-" else os.stat(source)
            if os.path.samestat(status, os.stat(path)):
                fail(f"--failed-file {path} is also an input: write it elsewhere")
    try:
        return FailedFile(path, delimiter)
    except OSError as error:
        fail(f"cannot write --failed-file {path}: {error.strerror}")


def _progress_line(reads_stdin: bool) -> _ProgressLine | None:
    """A progress line when stderr is a terminal, unless the records are read from a
    stdin that is one: records typed at the terminal would mix with it."""
    import logging

    if not sys.stderr.isatty() or (reads_stdin and sys.stdin.isatty()):
        return None
    progress = _ProgressLine()
    for handler in logging.getLogger("nsqtools").handlers:
        handler.addFilter(progress.before_log)
    return progress


class _ProgressLine:
    """The progress line on stderr (a terminal): published, rate, failed. Erased before
    a log line, which then starts on a line of its own (the next redraw brings it back);
    at the end, the final count stays."""

    def __init__(self) -> None:
        self.drawn = False

    def show(self, published: int, per_second: float, failed: int) -> None:
        status_line(f"{published:,} published, {per_second:,.0f}/s, {failed:,} failed", clear=True)
        self.drawn = True

    def end(self, published: int, failed: int) -> None:
        status_line(f"{published:,} published, {failed:,} failed", clear=True)
        end_status_line()
        self.drawn = False

    def before_log(self, record: object) -> bool:
        """A logging filter that lets every record through, the line erased first."""
        if self.drawn:
            status_line("", clear=True)
            self.drawn = False
        return True

    def say_lost(self, problem: str) -> None:
        self.before_log(None)
        _say_lost(problem)


def _say_lost(problem: str) -> None:
    """What a second signal loses, in the line the command would have ended with."""
    error_line(TOOL, problem)


def main() -> None:
    run(command, TOOL)
