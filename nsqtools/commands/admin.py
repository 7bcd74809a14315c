"""`nsq create`, `nsq delete`, `nsq empty`, `nsq pause`, `nsq unpause` (a topic, or a
channel of it) and `nsq tombstone`: nsqadmin's actions, in a terminal (no Go tool has
these).

The action is planned (nsqtools.admin: the topic's nsqds found through the lookupds, or
those given), then sent to every node concerned; each node's outcome is printed (a
table, or --json's one document). Delete, empty and tombstone lose messages: on a
terminal they show what they will do and ask first; otherwise they need --yes. Any
node that fails is named on stderr, with why, and the exit status is 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from nsqtools.commands.cluster_cli import (
    HTTP_TIMEOUT_OPTION,
    Column,
    Table,
    check_names,
    cluster_from,
    cluster_options,
    json_option,
    new_console,
    print_json,
    print_tables,
    with_client,
)
from nsqtools.commands.front import CONTEXT_SETTINGS, fail

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nsqtools.admin import Action, Outcome, Plan

F = TypeVar("F", bound=Callable[..., Any])

_STYLES = {"ok": "green", "absent": "dim", "failed": "red"}


def yes_option(function: F) -> F:
    return click.option(
        "--yes",
        "-y",
        is_flag=True,
        help="Do it without asking (required when stdin is not a terminal).",
    )(function)


def run_action(action: Action, options: dict[str, Any]) -> None:
    """Plan the action, have it confirmed when it loses messages, send it, show how
    every node answered; exit 1 when any failed."""
    from nsqtools.admin import execute, prepare, succeeded

    check_names(action.topic, action.channel)
    cluster = cluster_from(options)
    plan = with_client(options, lambda client: prepare(client, cluster, action))
    if action.verb.destructive and not options["yes"]:
        confirm(plan)
    outcomes = with_client(
        options, lambda client: execute(client, plan, timeout_option=HTTP_TIMEOUT_OPTION)
    )
    if options["as_json"]:
        print_json(outcomes_json(action, outcomes))
    else:
        print_tables(new_console(), [outcomes_table(outcomes)])
    if not succeeded(outcomes):
        fail(failure_summary(action, outcomes))


def confirm(plan: Plan) -> None:
    """Show what the plan will do and ask; without a terminal to ask on, refuse."""
    if not sys.stdin.isatty():
        fail(f"{plan.action} loses messages: confirm with --yes (stdin is not a terminal)")
    for line in plan_lines(plan):
        click.echo(line, err=True)
    question = str(plan.action)
    if not click.confirm(question[:1].upper() + question[1:] + "?", default=False, err=True):
        fail("cancelled: nothing was changed")


def plan_lines(plan: Plan) -> list[str]:
    """What the plan sends where, a line per request and kind of server, step by step."""
    lines = [f"{failure}: some nsqds may be missed" for failure in plan.failures]
    for step in plan.steps:
        by_request: dict[tuple[str, str], list[str]] = {}
        for call in step:
            by_request.setdefault((f"{call.method} {call.path}", call.server), []).append(
                call.address
            )
        for (request, server), addresses in by_request.items():
            lines.append(f"{request} to {server} {', '.join(addresses)}")
    return lines


def outcomes_table(outcomes: Sequence[Outcome]) -> Table:
    table = Table(
        [Column("result"), Column("server"), Column("address"), Column("request"), Column("detail")]
    )
    for outcome in outcomes:
        result = outcome.result.value
        cells = [result, outcome.server, outcome.address, outcome.request, outcome.detail]
        table.add(cells, _STYLES[result])
    return table


def outcomes_json(action: Action, outcomes: Sequence[Outcome]) -> dict[str, Any]:
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


def failure_summary(action: Action, outcomes: Sequence[Outcome]) -> str:
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


def _topic_or_channel_command(verb_name: str, summary: str, destructive: bool) -> click.Command:
    """`nsq VERB TOPIC [CHANNEL]`."""

    def command(topic: str, channel: str | None, **options: Any) -> None:
        from nsqtools.admin import Action, Verb

        run_action(Action(Verb(verb_name), topic, channel or ""), options)

    command.__doc__ = summary
    decorated = cluster_options(json_option(command))
    if destructive:
        decorated = yes_option(decorated)
    decorated = click.argument("channel", required=False)(decorated)
    decorated = click.argument("topic")(decorated)
    return click.command(verb_name, context_settings=CONTEXT_SETTINGS)(decorated)


create_command = _topic_or_channel_command(
    "create",
    """Create TOPIC, or CHANNEL of TOPIC, across the cluster.

    As nsqadmin does it: a topic is created on the lookupds (an nsqd creates it when
    first published to) and on the nsqds given with --nsqd-http-address. A channel is
    created on the lookupds, then on every nsqd that has the topic.
    """,
    destructive=False,
)
delete_command = _topic_or_channel_command(
    "delete",
    """Delete TOPIC, or CHANNEL of TOPIC, with its messages.

    From the lookupds, then from every nsqd that has the topic.
    """,
    destructive=True,
)
empty_command = _topic_or_channel_command(
    "empty",
    """Drop the messages waiting in TOPIC, or CHANNEL of TOPIC.

    Every nsqd that has the topic; the topic and channel stay.
    """,
    destructive=True,
)
pause_command = _topic_or_channel_command(
    "pause",
    """Pause TOPIC, or CHANNEL of TOPIC, on every nsqd.

    On every nsqd that has the topic. A paused topic hands its channels no messages;
    a paused channel hands its clients none. Messages wait until `nsq unpause`.
    """,
    destructive=False,
)
unpause_command = _topic_or_channel_command(
    "unpause",
    "Resume TOPIC, or CHANNEL of TOPIC, on every nsqd that has the topic (`nsq pause`).",
    destructive=False,
)


@click.command("tombstone", context_settings=CONTEXT_SETTINGS)
@click.argument("topic")
@click.argument("nsqd_address", metavar="NSQD_HTTP_ADDRESS")
@yes_option
@json_option
@cluster_options
def tombstone_command(topic: str, nsqd_address: str, **options: Any) -> None:
    """Retire an nsqd as a producer of TOPIC, deleting TOPIC there.

    As nsqadmin does it: the lookupds stop listing that nsqd for TOPIC (for their
    --tombstone-lifetime), then TOPIC is deleted on it, with its messages.
    NSQD_HTTP_ADDRESS is the nsqd's HTTP address as the lookupds list it (`nsq nodes`).
    """
    from nsqtools.admin import Action, Verb

    run_action(Action(Verb.TOMBSTONE, topic, nsqd=nsqd_address), options)
