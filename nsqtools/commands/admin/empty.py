"""`nsq empty TOPIC [CHANNEL]`: drop the messages waiting in a topic, or a channel of it."""

from __future__ import annotations

from nsqtools.commands.admin.action import topic_or_channel_command

command = topic_or_channel_command(
    "empty",
    """Drop the messages waiting in TOPIC, or CHANNEL of TOPIC.

    Every nsqd that has the topic; the topic and channel stay.
    """,
    destructive=True,
)
