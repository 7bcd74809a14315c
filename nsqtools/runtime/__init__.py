"""The runtime: what every tool runs on, between the core and the commands.

The commands (nsqtools.commands) parse their flags, build typed settings and call in
here; the runtime stands on the core (consumer, producer) and never imports a command
or click. It owns:

- signals.py: SIGINT/SIGTERM (first: stop cleanly; second: exit at once) and SIGHUP,
  in one place for every tool;
- sinks.py: the Sink interface a consuming tool implements, and Delivery, the messages
  handed to a sink, which it settles message by message: done once its output is
  durable or acknowledged, requeued, or refused for good;
- consuming.py: consumers for several topics, each feeding its sink; FIN only after
  the sink settles done, requeue (with backoff) when it fails; flushes on a timer and
  when a consumer is starved; the -n budget across topics; stop on signal (at once
  while still connecting);
- publishing.py: to_nsq's run: records read, held to a rate, routed by shard key,
  published to every nsqd; the failed file; what a stop and a second signal mean;
- progress.py: a count's rate every interval, for the status lines the commands draw;
- stdio.py: the standard streams from trio: whole writes, chunked reads, a closed pipe;
- stdout.py: the stdout sink (nsq_tail's output): each delivery rendered, written,
  then done;
- deadletters.py: messages given up (past max_attempts, or refused with a dead-letter
  destination) kept in a file, a topic or the log before their FIN, and counted.
"""
