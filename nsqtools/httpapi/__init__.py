"""Clients of nsqd's and nsqlookupd's HTTP APIs, with typed answers.

Layering: built on httpx (h11 and sockets for the blocking client) and
nsqtools.errors/addresses only; the consumer's discovery (nsqtools.discovery), the
commands and the test harness use it, never the reverse.

- call: a Call (one request and how to read its answer), send() on an
  httpx.AsyncClient, send_sync() on an httpx.Client, HttpApiError.
- blocking: BlockingClient, Calls sent on plain sockets, several at once on threads,
  for a program that starts without httpx (nsq_stat).
- plans: what to ask several servers at once and what the answers mean, written once,
  run on trio (nsqtools.discovery.run_plan) or on threads (BlockingClient.run).
- nsqd: /info, /stats (typed: topics, channels, clients), /pub, /mpub, admin calls.
- lookupd: /info, /lookup, /topics, /channels, /nodes, admin calls, tombstones.
- json_shape: checking documents (sans-IO).
- clients: the httpx clients nsqtools makes, on one TLS context per process.

    from nsqtools.httpapi import nsqd, send
    stats = await send(client, nsqd.stats("127.0.0.1:4151", topic="events"))
    await send(client, nsqd.pause_channel("127.0.0.1:4151", "events", "archive"))
"""

from nsqtools.httpapi.call import Call, HttpApiError, send, send_sync

__all__ = ["Call", "HttpApiError", "send", "send_sync"]
