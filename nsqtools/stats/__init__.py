"""nsq_stat's library: a topic's (or one channel's) counters polled across the
cluster, summed, turned into rates, and written as Go's plain layout or JSON lines.

- counters: what nsqd counts for a topic or channel, summed, and rates between two
  answers (shared with nsqtools.inspection), sans-IO;
- tracking: polls into Reports (sums, per-nsqd rows, rates over the measured
  interval, history), sans-IO;
- text: Go's plain layout, JSON lines, and what changed worth a line on stderr, sans-IO;
- prometheus: a poll's counters, per nsqd, topic and channel, in Prometheus's text
  format, sans-IO;
- polling: the beat polls keep, on a clock given, and one poll of the cluster
  (nsqtools.cluster) as a plan, for the caller to run (nsq_stat: on threads).

The live table is the command's (nsqtools.commands.statview): rich stays in the commands.
"""
