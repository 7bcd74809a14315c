"""`nsq pause TOPIC [CHANNEL]`: pause a topic, or a channel of it, on every nsqd."""

from __future__ import annotations

from nsqtools.commands.admin.action import topic_or_channel_command

command = topic_or_channel_command(
    "pause",
    """Pause TOPIC, or CHANNEL of TOPIC, on every nsqd.

    On every nsqd that has the topic. A paused topic hands its channels no messages;
    a paused channel hands its clients none. Messages wait until `nsq unpause`.
    """,
    destructive=False,
)
