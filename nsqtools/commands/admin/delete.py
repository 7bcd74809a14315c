"""`nsq delete TOPIC [CHANNEL]`: delete a topic, or a channel of it, with its messages."""

from __future__ import annotations

from nsqtools.commands.admin.action import topic_or_channel_command

command = topic_or_channel_command(
    "delete",
    """Delete TOPIC, or CHANNEL of TOPIC, with its messages.

    From the lookupds, then from every nsqd that has the topic.
    """,
    destructive=True,
)
