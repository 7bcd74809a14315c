"""Relays: consuming tools whose output is another service, FIN'd only once it answered.

Between the commands and the runtime, beside archive. It owns:

- nsq.py: nsq_to_nsq's data path, a Relay publishing through one Producer, with Go's
  JSON filters (nsqtools.jsonfilter);
- http.py: nsq_to_http's data path, -n senders on one pool of kept-alive connections
  (nsqtools.httpclient), each message FIN'd or requeued on its own answer;
- status.py: the status lines of both relays, Go's timer_metrics and a rate.
"""
