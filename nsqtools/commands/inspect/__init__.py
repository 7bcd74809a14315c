"""`nsq topics`, `nsq channels TOPIC`, `nsq nodes`, `nsq topic TOPIC` and `nsq channel
TOPIC CHANNEL`: the cluster as nsqadmin shows it, in a terminal (no Go tool has these).

Each asks every node at once (nsqtools.inspection gathers and sums) and prints tables
(rich on a terminal, aligned plain text otherwise) or, with --json, one JSON document.
One poll by default; --interval polls twice and adds message rates. A node that cannot
be asked is left out of the tables and named on stderr, and the exit status is 1.

One module per command (topics.py, channels.py, nodes.py, topic.py, channel.py), each
with its tables and its JSON; shared.py holds what they share.
"""
