"""`nsq unpause TOPIC [CHANNEL]`: resume a paused topic, or channel of it, on every nsqd."""

from __future__ import annotations

from nsqtools.commands.admin.action import topic_or_channel_command

command = topic_or_channel_command(
    "unpause",
    "Resume TOPIC, or CHANNEL of TOPIC, on every nsqd that has the topic (`nsq pause`).",
    destructive=False,
)
