"""`nsq tombstone TOPIC NSQD_HTTP_ADDRESS`: retire an nsqd as a producer of a topic."""

from __future__ import annotations

from typing import Any

import click

from nsqtools.commands import completers
from nsqtools.commands.admin.action import dry_run_option, run_action, yes_option
from nsqtools.commands.cluster_cli import cluster_options, json_option
from nsqtools.commands.front import CONTEXT_SETTINGS


@click.command("tombstone", context_settings=CONTEXT_SETTINGS)
@click.argument("topic", shell_complete=completers.topics)
@click.argument("nsqd_address", metavar="NSQD_HTTP_ADDRESS")
@yes_option
@dry_run_option
@json_option
@cluster_options
def command(topic: str, nsqd_address: str, **options: Any) -> None:
    """Retire an nsqd as a producer of TOPIC, deleting TOPIC there.

    As nsqadmin does it: the lookupds stop listing that nsqd for TOPIC (for their
    --tombstone-lifetime), then TOPIC is deleted on it, with its messages.
    NSQD_HTTP_ADDRESS is the nsqd's HTTP address as the lookupds list it (`nsq nodes`).
    """
    from nsqtools.admin import AdminAction, Verb

    run_action(AdminAction(Verb.TOMBSTONE, topic, nsqd=nsqd_address), options)
