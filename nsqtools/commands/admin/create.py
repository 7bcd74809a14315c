"""`nsq create TOPIC [CHANNEL]`: create a topic, or a channel of it, across the cluster."""

from __future__ import annotations

from nsqtools.commands.admin.action import topic_or_channel_command

command = topic_or_channel_command(
    "create",
    """Create TOPIC, or CHANNEL of TOPIC, across the cluster.

    As nsqadmin does it: a topic is created on the lookupds (an nsqd creates it when
    first published to) and on the nsqds given with --nsqd-http-address. A channel is
    created on the lookupds, then on every nsqd that has the topic.
    """,
    destructive=False,
)
