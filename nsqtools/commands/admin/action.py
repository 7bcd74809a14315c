"""What the six admin commands share: an action run from its plan to every node's
outcome (asked first when it loses messages), --yes, the outcomes as a table or JSON,
the one-line summary of what failed, and the command of a verb on a TOPIC [CHANNEL]."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nsqtools.commands import completers
from nsqtools.commands.cluster_cli import (
    HTTP_TIMEOUT_OPTION,
    Column,
    Table,
    check_names,
    cluster_from,
    cluster_options,
    json_option,
    print_json,
    print_tables,
    with_client,
)
from nsqtools.commands.front import CONTEXT_SETTINGS, fail

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nsqtools.admin import AdminAction, NodeOutcome, Plan

F = TypeVar("F", bound=Callable[..., Any])

_STYLES = {"ok": "green", "absent": "dim", "failed": "red"}


def yes_option(function: F) -> F:
    return click.option(
        "--yes",
        "-y",
        is_flag=True,
        help="Do it without asking (required when stdin is not a terminal).",
    )(function)


def dry_run_option(function: F) -> F:
    return click.option(
        "--dry-run",
        is_flag=True,
        help="Say what would be done (and lost) and change nothing.",
    )(function)


def run_action(action: AdminAction, options: dict[str, Any]) -> None:
    """Plan the action (a missing topic or channel ends it: exit 1), have it confirmed
    when it loses messages, send it, show how every node answered; exit 1 when any
    failed. --dry-run: only say what it would do and lose."""
    from nsqtools.admin import execute, prepare, succeeded

    check_names(action.topic, action.channel)
    cluster = cluster_from(options)
    plan = with_client(options, lambda client: prepare(client, cluster, action))
    if options["dry_run"]:
        for line in [*loss_lines(plan), *request_lines(plan)]:
            click.echo(line)
        return
    if action.verb.destructive and not options["yes"]:
        confirm(plan)
    outcomes = with_client(
        options, lambda client: execute(client, plan, timeout_option=HTTP_TIMEOUT_OPTION)
    )
    if options["as_json"]:
        print_json(outcomes_json(action, outcomes))
    else:
        print_tables([outcomes_table(outcomes)])
    if not succeeded(outcomes):
        fail(failure_summary(action, outcomes))


def confirm(plan: Plan) -> None:
    """Show what the plan will do and ask; without a terminal to ask on, refuse."""
    if not sys.stdin.isatty():
        fail(f"{plan.action} loses messages: confirm with --yes (stdin is not a terminal)")
    for line in loss_lines(plan):
        click.echo(line, err=True)
    question = str(plan.action)
    if not click.confirm(question[:1].upper() + question[1:] + "?", default=False, err=True):
        fail("cancelled: nothing was changed")


def loss_lines(plan: Plan) -> list[str]:
    """What the action loses (a delete, an empty, a tombstone): per nsqd, the messages
    queued in the topic and in each channel (or in the channel); then the lookupds a
    delete removes it from, and the servers that could not be asked."""
    from nsqtools.admin import Verb

    action = plan.action
    lines = [f"{failure}: some nsqds may be missed" for failure in plan.failures]
    if not action.verb.destructive:
        return lines
    for holding in plan.holdings:
        if action.channel:
            queued = f"{holding.depth:,} messages queued in channel {action.channel}"
        else:
            channels = ", ".join(f"{name} ({depth:,})" for name, depth in holding.channels)
            queued = f"{holding.depth:,} messages queued in topic {action.topic}; " + (
                f"channels {channels}" if channels else "no channels"
            )
        lines.append(f"{action.verb.value} on nsqd {holding.address} loses {queued}")
    asked = {call.address for step in plan.steps for call in step if call.server == "nsqd"}
    for address in sorted(asked - {holding.address for holding in plan.holdings}):
        lines.append(f"{action.verb.value} on nsqd {address}: what it holds is unknown")
    lookupds = {call.address for step in plan.steps for call in step if call.server != "nsqd"}
    if lookupds and action.verb is Verb.DELETE:
        lines.append(f"and it is removed from nsqlookupd {', '.join(sorted(lookupds))}")
    return lines


def request_lines(plan: Plan) -> list[str]:
    """What the plan sends where, a line per request and kind of server, step by step."""
    lines = []
    for step in plan.steps:
        by_request: dict[tuple[str, str], list[str]] = {}
        for call in step:
            by_request.setdefault((f"{call.method} {call.path}", call.server), []).append(
                call.address
            )
        for (request, server), addresses in by_request.items():
            lines.append(f"would send {request} to {server} {', '.join(addresses)}")
    return lines


def outcomes_table(outcomes: Sequence[NodeOutcome]) -> Table:
    table = Table(
        [Column("result"), Column("server"), Column("address"), Column("request"), Column("detail")]
    )
    for outcome in outcomes:
        result = outcome.result.value
        cells = [result, outcome.server, outcome.address, outcome.request, outcome.detail]
        table.add(cells, _STYLES[result])
    return table


def outcomes_json(action: AdminAction, outcomes: Sequence[NodeOutcome]) -> dict[str, Any]:
    from nsqtools.admin import succeeded

    return {
        "action": action.verb.value,
        "topic": action.topic,
        "channel": action.channel or None,
        "nsqd": action.nsqd or None,
        "succeeded": succeeded(outcomes),
        "results": [
            {
                "server": outcome.server,
                "address": outcome.address,
                "request": outcome.request,
                "result": outcome.result.value,
                "detail": outcome.detail,
            }
            for outcome in outcomes
        ],
    }


def failure_summary(action: AdminAction, outcomes: Sequence[NodeOutcome]) -> str:
    """One line: which nodes failed and why, how many did it; or that none had it."""
    from nsqtools.admin import Result

    failed = [outcome for outcome in outcomes if outcome.result is Result.FAILED]
    done = sum(outcome.result is Result.OK for outcome in outcomes)
    if not failed:
        what = f"channel {action.channel}" if action.channel else f"topic {action.topic}"
        return f"{action}: no node has {what}"
    nodes = "; ".join(
        f"{outcome.server} {outcome.address} ({outcome.request}: {outcome.detail})"
        for outcome in failed
    )
    return f"{action} failed on {nodes}; {done} of {len(outcomes)} requests succeeded"


def topic_or_channel_command(verb_name: str, summary: str, destructive: bool) -> click.Command:
    """`nsq VERB TOPIC [CHANNEL]`."""

    def command(topic: str, channel: str | None, **options: Any) -> None:
        from nsqtools.admin import AdminAction, Verb

        run_action(AdminAction(Verb(verb_name), topic, channel or ""), options)

    command.__doc__ = summary
    decorated = cluster_options(json_option(dry_run_option(command)))
    if destructive:
        decorated = yes_option(decorated)
    decorated = click.argument("channel", required=False)(decorated)
    decorated = click.argument("topic", shell_complete=completers.topics)(decorated)
    return click.command(verb_name, context_settings=CONTEXT_SETTINGS)(decorated)
