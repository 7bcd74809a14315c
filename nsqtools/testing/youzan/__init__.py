"""A scripted stand-in for the Youzan fork of NSQ (youzan/nsq v0.3.7-HA.1.12.7), for tests.

The fork is not served by the Go module proxy, so it cannot be built here; tests of our
client run against this server instead. Its wire behaviour follows the spec page
/work/shared/spec/youzan.md ("The Youzan fork of NSQ: what differs on the wire") and
nothing more: it is no reimplementation of the fork. Where the page is silent the
server does the simplest thing, and a comment says so.

YouzanCluster owns one nsqlookupd HTTP API (/lookup with partitions and meta, the
wrapped 0.3.x envelope or the bare v1 one, /listlookup, /info, /topics, /channels,
/nodes) and N nsqds on the TCP protocol (PUB and its TRACE/EXT variants, SUB,
SUB_ADVANCED, SUB_ORDERED, binary message ids read at fixed length, the fork's error
codes), each with its HTTP API (/ping, /info, /stats in the fork's shape, /pub,
/pubtrace). It also owns the state they
share: every topic's partitions and their stored messages, each channel's delivery
state, every command received. Tests script it: inject messages, refuse the next
publish with an error code, move a partition's leader, make a topic unwritable.

Deterministic: ids, offsets and sizes follow from what was stored, never from a clock
(but for timestamps). Threads and raw sockets, not trio: tests run our trio client and
our CLI as subprocesses against it, and it must keep going while their loops block.

    with YouzanCluster([ForkTopic("t", partitions=2, channels=("ch",))]) as fork:
        ... point a client at fork.lookupd_http_address ...
        fork.stored("t"), fork.finished("t", "ch"), fork.commands()

As on the fork, a channel first made by a SUB starts at the end of its partition, and a
topic is writable only once it has a channel: name in ForkTopic(channels=...) the
channels a test reads injected messages from, or subscribe before storing them.

This package is that one face; its modules, from the bottom up:

- wire.py: the fork's constants (version, frames, limits, error texts) and Refusal;
- state.py: topics, partitions, stored messages and channels' delivery state (Store);
- arguments.py: what a command carries, read and checked (PUB bodies, names, positions);
- reader.py: commands read off a client's stream, ids at fixed length;
- session.py: one client connection on the TCP protocol (reader and delivery threads);
- httpapi.py: the HTTP server and the 0.3.x or v1 envelope both daemons answer with;
- stats.py: one nsqd's /stats document, in the fork's shape;
- nsqd.py: one nsqd's listener, HTTP API and peer record;
- lookupd.py: the nsqlookupd's HTTP API;
- cluster.py: YouzanCluster, its threads, and what tests script and read.
"""

from nsqtools.testing.youzan.cluster import YouzanCluster
from nsqtools.testing.youzan.state import ForkTopic, StoredMessage

__all__ = ["ForkTopic", "StoredMessage", "YouzanCluster"]
