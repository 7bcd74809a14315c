"""`nsq create`, `nsq delete`, `nsq empty`, `nsq pause`, `nsq unpause` (a topic, or a
channel of it) and `nsq tombstone`: nsqadmin's actions, in a terminal (no Go tool has
these).

The action is planned (nsqtools.admin: the topic's nsqds found through the lookupds, or
those given), then sent to every node concerned; each node's outcome is printed (a
table, or --json's one document). Delete, empty and tombstone lose messages: on a
terminal they show what they will do and ask first; otherwise they need --yes. Any
node that fails is named on stderr, with why, and the exit status is 1.

One module per command; action.py holds what they share.
"""
