"""The examples of the manual pages: for each command (a tool by its Go name, nsqtools'
own subcommands as `nsq NAME`), what it does and the command line, in order.

The addresses are the README's: an nsqd on 127.0.0.1:4150 (HTTP 4151) and an nsqlookupd
on 127.0.0.1:4161. tests/test_generated_docs.py checks that every command has examples
and that every flag an example gives is one of its command's.
"""

from __future__ import annotations

NSQD = "--nsqd-tcp-address=127.0.0.1:4150"
LOOKUPD = "--lookupd-http-address=127.0.0.1:4161"

# command → (what it does, the command line) ...
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "nsq_tail": (
        ("Every message of events, raw, until Ctrl-C:", f"nsq_tail {NSQD} --topic=events"),
        ("Exactly 3 messages, then exit 0:", f"nsq_tail {NSQD} --topic=events -n 3"),
        (
            "Two topics found through nsqlookupd, each line prefixed with its topic:",
            f"nsq_tail {LOOKUPD} --topic=orders --topic=events --print-topic",
        ),
        (
            "One JSON envelope per line, for scripts:",
            f"nsq_tail {NSQD} --topic=events --format=json",
        ),
        (
            "A template of the message's fields:",
            f"nsq_tail {NSQD} --topic=events --format='{{ts}} {{topic}} {{body}}'",
        ),
        (
            "What the channel holds now, then exit 0:",
            f"nsq_tail {LOOKUPD} --topic=events --channel=audit --exit-at-end",
        ),
        (
            "A look at 5 messages of a durable channel, all given back, none FIN'd:",
            f"nsq_tail {NSQD} --topic=events --channel=archive --peek -n 5",
        ),
        (
            "The Go command line, unchanged:",
            "nsq_tail -nsqd-tcp-address 127.0.0.1:4150 -topic events -n 10 -print-topic",
        ),
        ("Through a saved cluster (see nsq context):", "nsq_tail --context=prod --topic=events"),
        (
            "Its counters for Prometheus at http://127.0.0.1:9117/metrics:",
            f"nsq_tail {NSQD} --topic=events --metrics-address=127.0.0.1:9117",
        ),
    ),
    "to_nsq": (
        ("One message per line of stdin:", f"printf 'a\\nb\\n' | to_nsq {NSQD} --topic=events"),
        (
            "Records split on NUL bytes, read from files:",
            f"to_nsq {NSQD} --topic=events --delimiter='\\0' part1.bin part2.bin",
        ),
        ("At most 10 records a second:", f"seq 20 | to_nsq {NSQD} --topic=slow --rate=10"),
        (
            "Keep what an nsqd did not acknowledge, to publish it again later:",
            f"to_nsq {NSQD} --topic=events --failed-file=failed.txt < records.txt",
        ),
        ("As nsq pub, one message given as an argument:", f"nsq pub {NSQD} events 'hello'"),
        (
            "1000 JSON messages, numbered, timed and with a random id, 100 a second:",
            f"nsq pub {NSQD} --count=1000 --rate=100 events "
            '\'{{"n": {seq}, "at": "{ts}", "id": "{id}"}}\'',
        ),
    ),
    "nsq_to_file": (
        (
            "Each topic to /var/archive/<topic>.<host>.<yyyy-mm-dd_hh>.log:",
            f"nsq_to_file {NSQD} --topic=events --output-dir=/var/archive",
        ),
        (
            "Gzipped, a new file every hour, moved out of a work dir when done:",
            f"nsq_to_file {LOOKUPD} --topic=events --gzip --rotate-interval=1h "
            "--work-dir=/var/archive/.work --output-dir=/var/archive",
        ),
        (
            "Every topic whose name starts with orders., one directory per topic:",
            f"nsq_to_file {LOOKUPD} --topic-pattern='^orders\\.' "
            "--filename-format='<TOPIC>/<DATETIME><REV>.log'",
        ),
        (
            "Messages past 10 attempts kept in a file, then given up:",
            f"nsq_to_file {NSQD} --topic=events --consumer-opt=max_attempts,10 "
            "--dead-letter-file=/var/archive/dead.jsonl",
        ),
        (
            "A cron job: drain what the topic holds into files, close them, exit 0:",
            f"nsq_to_file {LOOKUPD} --topic=events --output-dir=/var/archive --exit-at-end",
        ),
        (
            "Its counters (written, in flight, the oldest unsynced message's age) for Prometheus:",
            f"nsq_to_file {NSQD} --topic=events --output-dir=/var/archive --metrics-address=:9118",
        ),
    ),
    "nsq_to_nsq": (
        (
            "Everything on events to another cluster's nsqd:",
            f"nsq_to_nsq {LOOKUPD} --topic=events --destination-nsqd-tcp-address=10.0.0.5:4150",
        ),
        (
            "Only JSON messages whose kind is order, to the topic orders:",
            f"nsq_to_nsq {NSQD} --topic=events --destination-topic=orders "
            "--destination-nsqd-tcp-address=10.0.0.5:4150 --require-json-field=kind "
            "--require-json-value=order",
        ),
        (
            "Every message to every destination:",
            f"nsq_to_nsq {NSQD} --topic=events --mode=all "
            "--destination-nsqd-tcp-address=10.0.0.5:4150 "
            "--destination-nsqd-tcp-address=10.0.0.6:4150",
        ),
        (
            "Its counters, what each destination took among them, for Prometheus:",
            f"nsq_to_nsq {NSQD} --topic=events --destination-nsqd-tcp-address=10.0.0.5:4150 "
            "--metrics-address=127.0.0.1:9119",
        ),
    ),
    "nsq_to_http": (
        (
            "Each message POSTed as JSON to one of two endpoints:",
            f"nsq_to_http {LOOKUPD} --topic=events --post=http://10.0.0.7/ingest "
            "--post=http://10.0.0.8/ingest --content-type=application/json",
        ),
        (
            "A GET per message, the body in the URL; a tenth of the messages:",
            f"nsq_to_http {NSQD} --topic=clicks "
            "--get='http://127.0.0.1:8080/track?event=%s' --sample=0.1",
        ),
        (
            "100 messages per POST, one per line:",
            f"nsq_to_http {NSQD} --topic=events --post=http://127.0.0.1:9200/_bulk "
            "--batch-size=100",
        ),
        (
            "An endpoint that may take 2 minutes; its messages TOUCHed meanwhile:",
            f"nsq_to_http {NSQD} --topic=reports --post=http://127.0.0.1:8080/render "
            "--http-client-request-timeout=2m",
        ),
        (
            "Its counters, what each endpoint accepted among them, for Prometheus:",
            f"nsq_to_http {NSQD} --topic=events --post=http://10.0.0.7:8080/in "
            "--metrics-address=127.0.0.1:9117",
        ),
    ),
    "nsq_stat": (
        ("A live table of the topic and its channels:", f"nsq_stat {LOOKUPD} --topic=events"),
        (
            "Three rows of one channel, then exit:",
            f"nsq_stat {LOOKUPD} --topic=events --channel=archive --count=3",
        ),
        (
            "One JSON object per poll:",
            "nsq_stat --nsqd-http-address=127.0.0.1:4151 --topic=events --format=json",
        ),
        (
            "Every topic's and channel's counters on each nsqd, once, for Prometheus "
            "(node_exporter's textfile collector):",
            f"nsq_stat {LOOKUPD} --format=prometheus --count=1 > nsq.prom",
        ),
    ),
    "nsq topics": (
        ("Every topic of the cluster:", f"nsq topics {LOOKUPD}"),
        ("With messages/s, measured over 1 s:", "nsq topics --interval=1s"),
    ),
    "nsq channels": (("Every channel of events, summed over its nsqds:", "nsq channels events"),),
    "nsq nodes": (("Every nsqd and lookupd, their health and tombstones:", "nsq nodes"),),
    "nsq topic": (("Per nsqd and in total, with messages/s:", "nsq topic events --interval=1s"),),
    "nsq channel": (
        (
            "The clients of a channel, as JSON:",
            "nsq channel events archive --json | jq '.clients[] | {user_agent, ready_count}'",
        ),
    ),
    "nsq create": (
        ("A topic and a channel, on the lookupds and the nsqds:", "nsq create events archive"),
    ),
    "nsq delete": (
        ("A channel: shows what will be lost and asks:", "nsq delete events archive"),
        ("A topic, in a script:", "nsq delete events --yes"),
    ),
    "nsq empty": (("Drop every message of a channel:", "nsq empty events archive --yes"),),
    "nsq pause": (("Pause a channel on every nsqd:", "nsq pause events archive"),),
    "nsq unpause": (("Unpause a topic:", "nsq unpause events"),),
    "nsq tombstone": (
        ("Take one nsqd out of a topic's lookups:", "nsq tombstone events 127.0.0.1:4151 --yes"),
    ),
    "nsq context": (
        ("The saved clusters, the selected one marked *:", "nsq context ls"),
        ("Select one for every program:", "nsq context use prod"),
    ),
    "nsq context add": (
        ("A cluster found through its lookupd:", f"nsq context add prod {LOOKUPD}"),
        (
            "One nsqd over TLS, the AUTH secret read from a variable when a program runs:",
            f"nsq context add local {NSQD} --nsqd-http-address=127.0.0.1:4151 "
            "--tls-root-ca-file=ca.pem --auth-secret-env=NSQ_SECRET",
        ),
    ),
    "nsq context use": (
        ("Every program uses prod from now on:", "nsq context use prod"),
        ("None again: the programs behave as Go's:", "nsq context use --none"),
    ),
    "nsq context ls": (("Every context, the selected one marked *:", "nsq context ls"),),
    "nsq context show": (("The selected context, as its file holds it:", "nsq context show"),),
    "nsq context rm": (("Forget a cluster:", "nsq context rm local"),),
    "nsq bench": (
        ("Publish and consume at once on a local nsqd:", "nsq bench"),
        (
            "A million messages at 50000/s, the figures kept:",
            "nsq bench --count=1000000 --rate=50000 --json=run.json --csv=runs.csv",
        ),
        ("Publish only, to drain later:", "nsq bench --mode=publish --topic=load --count=500000"),
    ),
    "nsq archive compact": (
        (
            "nsq_to_file's archives to Parquet:",
            "nsq archive compact /var/archive/orders --out /data/orders.parquet",
        ),
    ),
    "nsq archive stats": (("Counts per topic and hour:", "nsq archive stats /var/archive/orders"),),
    "nsq archive sql": (
        (
            "Spark SQL over the messages:",
            'nsq archive sql "SELECT topic, count(*) FROM messages GROUP BY topic" /var/archive',
        ),
    ),
    "nsq archive replay": (
        (
            "Publish archived messages again:",
            f"nsq archive replay /data/orders.parquet --topic=orders-replay {NSQD}",
        ),
    ),
    "nsq completion": (
        ("Completion for nsq and every tool, in ~/.bashrc:", 'eval "$(nsq completion bash)"'),
        ("nsq's completion as a zsh function file:", "nsq completion zsh nsq > ~/.zfunc/_nsq"),
    ),
    "nsq man": (
        ("nsq_tail's page:", "nsq man tail"),
        ("The roff source, into a file:", "nsq man nsq_stat > nsq_stat.1"),
    ),
    "nsq help": (("The help of one command:", "nsq help channels"),),
}
