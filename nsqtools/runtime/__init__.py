"""The runtime: what every tool runs on, between the core and the commands.

The commands (nsqtools.commands) parse their flags, build typed settings and call in
here; the runtime stands on the core (consumer, producer) and never imports a command
or click. It owns:

- signals.py: SIGINT/SIGTERM (first: stop cleanly; second: exit at once) and SIGHUP,
  in one place for every tool;
- sinks.py: the Sink interface a consuming tool implements, and Delivery, the messages
  handed to a sink, which it settles once its output is durable or acknowledged;
- consuming.py: consumers for several topics, each feeding its sink; FIN only after
  the sink settles, requeue (with backoff) when it fails; flushes on a timer and when
  a consumer is starved; the -n budget across topics; stop on signal.
"""
