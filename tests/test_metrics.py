"""--metrics-address and `nsq_stat --format=prometheus`, as a user runs them: each
long-running tool against a real nsqd, scraped over HTTP while it runs, each scrape
parsed as Prometheus's text format (a strict parser here: prometheus_client is no
dependency) and its counts checked against what was published, written and sent;
in flight and the oldest message's age while a destination holds messages back; an
address in use; scrapers that misbehave; nsq_stat's exposition of a known depth.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from nsqtools.exposition import CONTENT_TYPE, Family, counter, exposition, gauge
from nsqtools.httpapi.clients import sync_client
from nsqtools.testing import Nsqd, our_tool, wait_until
from nsqtools.testing.webserver import Answer, WebServer
from tests.conftest import Cluster, LocalNsq

TOPIC = "metered"
CHANNEL = "metrics"
WAIT = 20.0

# -- a strict reader of the text format ---------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_HELP = re.compile(rf"# HELP ({_NAME}) (.*)")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge)")
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(.*)\}})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Key = tuple[str, frozenset[tuple[str, str]]]


@dataclass
class Scrape:
    """A parsed exposition: each sample's value by name and labels, each family's type."""

    samples: dict[Key, float]
    types: dict[str, str]
    helps: dict[str, str]

    def value(self, name: str, **labels: str) -> float:
        return self.samples[name, frozenset(labels.items())]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include these."""
        wanted = set(labels.items())
        return sum(v for (n, found), v in self.samples.items() if n == name and wanted <= found)

    def labelled(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {found: v for (n, found), v in self.samples.items() if n == name}


Check = Callable[[Scrape], bool]


def parse(text: str) -> Scrape:
    """Prometheus's text format 0.0.4, strictly: every sample after its family's HELP
    and TYPE lines, counters named `_total`, each series once, nothing else."""
    scrape = Scrape({}, {}, {})
    assert text.endswith("\n")
    for line in text[:-1].split("\n"):
        if help_line := _HELP.fullmatch(line):
            scrape.helps[help_line[1]] = help_line[2]
        elif type_line := _TYPE.fullmatch(line):
            name, kind = type_line[1], type_line[2]
            assert name in scrape.helps and name not in scrape.types, line
            assert kind != "counter" or name.endswith("_total"), line
            scrape.types[name] = kind
        else:
            sample = _SAMPLE.fullmatch(line)
            assert sample is not None, f"not a sample: {line!r}"
            name, labels, value = sample[1], _labels(sample[2] or ""), float(sample[3])
            assert name in scrape.types, f"no TYPE before {line!r}"
            assert name.startswith("nsqtools_"), line
            key = (name, frozenset(labels.items()))
            assert key not in scrape.samples, f"twice: {line!r}"
            scrape.samples[key] = value
    return scrape


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        label = _LABEL.match(text, position)
        assert label is not None, f"bad labels: {text!r}"
        labels[label[1]] = re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m[0]], label[2])
        position = label.end()
        if position < len(text):
            assert text[position] == ",", f"bad labels: {text!r}"
            position += 1
    return labels


# -- the format, written --------------------------------------------------------------


def test_label_values_and_help_are_escaped() -> None:
    odd = 'back\\slash "quoted"\nnew line'
    text = exposition(
        [
            counter("nsqtools_odd_total", "Help with \\ and\na new line.", [({"v": odd}, 3)]),
            gauge("nsqtools_levels", "Gauges.", [({}, 1.5), ({"a": "x", "b": "y"}, float("inf"))]),
        ]
    )
    assert 'nsqtools_odd_total{v="back\\\\slash \\"quoted\\"\\nnew line"} 3\n' in text
    assert "# HELP nsqtools_odd_total Help with \\\\ and\\na new line.\n" in text
    scrape = parse(text)
    assert scrape.value("nsqtools_odd_total", v=odd) == 3
    assert scrape.value("nsqtools_levels") == 1.5
    assert scrape.value("nsqtools_levels", a="x", b="y") == float("inf")
    assert scrape.types == {"nsqtools_odd_total": "counter", "nsqtools_levels": "gauge"}
    assert exposition([Family("nsqtools_none", "gauge", "No samples.")]).count("\n") == 2


# -- the tools, scraped ---------------------------------------------------------------


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def scrape(self) -> Scrape:
        with sync_client(timeout=5) as client:
            response = client.get(self.url)
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE
        return parse(response.text)

    def waits_for(self, condition: str, check: Check, timeout: float = WAIT) -> Scrape:
        """Scrape until check(scrape) holds; the last scrape."""
        scrapes: list[Scrape] = []

        def holds() -> bool:
            scrapes.append(self.scrape())
            try:
                return check(scrapes[-1])
            except KeyError:  # a topic's series come once the tool has subscribed to it
                return False

        wait_until(holds, timeout, condition)
        return scrapes[-1]


@contextmanager
def serving(argv: list[str], tmp_path: Path) -> Iterator[Served]:
    """The tool with --metrics-address on any free port (the port it logs) for the
    block; then SIGTERM, which must end it with exit 0."""
    log = tmp_path / "tool.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*argv, "--metrics-address=127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        found: list[str] = []

        def logged() -> bool:
            assert process.poll() is None, log.read_text()
            found.extend(re.findall(r"metrics on (http://\S+/metrics)", log.read_text()))
            return bool(found)

        wait_until(logged, WAIT, "the metrics address in the log")
        yield Served(process, found[0], log)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def bodies(count: int) -> list[bytes]:
    return [b"message %03d" % index for index in range(count)]


def consumed(nsqd: Nsqd) -> list[str]:
    return [f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}", f"--channel={CHANNEL}"]


def per_topic(scrape: Scrape, name: str) -> float:
    return scrape.value(name, topic=TOPIC, channel=CHANNEL)


def assert_all_answered(scrape: Scrape, count: int) -> None:
    for name in ("received", "finished"):
        assert per_topic(scrape, f"nsqtools_messages_{name}_total") == count, name
    assert per_topic(scrape, "nsqtools_messages_requeued_total") == 0
    assert per_topic(scrape, "nsqtools_messages_in_flight") == 0
    assert per_topic(scrape, "nsqtools_oldest_unanswered_message_age_seconds") == 0
    assert scrape.total("nsqtools_messages_given_up_total", channel=CHANNEL) == 0


def written(count: int) -> Check:
    return lambda scrape: per_topic(scrape, "nsqtools_messages_written_total") == count


def sent(count: int) -> Check:
    """Sent, and FIN'd (nsq_to_http FINs what succeeded a moment later, together)."""
    return lambda scrape: (
        scrape.total("nsqtools_messages_sent_total") == count
        and per_topic(scrape, "nsqtools_messages_finished_total") == count
    )


def test_nsq_tail_counts_what_it_wrote(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(120))
    with serving([*our_tool("nsq_tail"), *consumed(nsqd)], tmp_path) as tail:
        scrape = tail.waits_for("120 written", written(120))
        assert_all_answered(scrape, 120)
        assert scrape.types["nsqtools_messages_in_flight"] == "gauge"
        assert scrape.labelled("nsqtools_messages_given_up_total") == {
            frozenset({("channel", CHANNEL), ("reason", reason)}): 0
            for reason in ("max_attempts", "refused")
        }


def test_nsq_to_file_counts_what_it_synced(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(150))
    output = tmp_path / "out"
    output.mkdir()
    argv = [
        *our_tool("nsq_to_file"),
        *consumed(nsqd),
        f"--output-dir={output}",
        "--sync-interval=100ms",
    ]
    with serving(argv, tmp_path) as to_file:
        scrape = to_file.waits_for("150 written", written(150))
        assert_all_answered(scrape, 150)
        wait_until(lambda: nsqd.drained(TOPIC, CHANNEL), WAIT, "the channel drained")


def test_nsq_to_nsq_counts_what_each_destination_took(
    local_nsq: LocalNsq, nsqd: Nsqd, tmp_path: Path
) -> None:
    destinations = [local_nsq.nsqd(f"destination{index}") for index in (1, 2)]
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(200))
    argv = [
        *our_tool("nsq_to_nsq"),
        *consumed(nsqd),
        *[f"--destination-nsqd-tcp-address={d.tcp_address}" for d in destinations],
        "--mode=round-robin",
    ]
    with serving(argv, tmp_path) as relay:
        scrape = relay.waits_for("200 sent", sent(200))
        assert_all_answered(scrape, 200)
        for destination in destinations:  # MPUBs each to one of them, in turn
            topics = destination.stats(TOPIC).topics
            took = topics[0].message_count if topics else 0
            to_it = scrape.total(
                "nsqtools_messages_sent_total", destination=destination.tcp_address
            )
            assert to_it == took


def test_nsq_to_http_counts_what_each_endpoint_accepted(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(100))
    with WebServer() as first, WebServer() as second:
        endpoints = {f"{server.url}/in": server for server in (first, second)}
        argv = [
            *our_tool("nsq_to_http"),
            *consumed(nsqd),
            *[f"--post={url}" for url in endpoints],
            "--mode=round-robin",
        ]
        with serving(argv, tmp_path) as relay:
            scrape = relay.waits_for("100 sent", sent(100))
            assert_all_answered(scrape, 100)
            for url, server in endpoints.items():
                labels = {"topic": TOPIC, "channel": CHANNEL, "destination": url}
                assert scrape.value("nsqtools_messages_sent_total", **labels) == len(
                    server.accepted
                )


def held_back(relay: Served, count: int) -> Scrape:
    """Once `count` messages are in flight, the oldest held for half a second, none sent."""
    held = relay.waits_for(
        f"{count} held for half a second",
        lambda s: (
            per_topic(s, "nsqtools_messages_in_flight") == count
            and per_topic(s, "nsqtools_oldest_unanswered_message_age_seconds") >= 0.5
        ),
    )
    assert held.total("nsqtools_messages_sent_total") == 0
    return held


def test_in_flight_and_oldest_age_while_an_endpoint_holds_back(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(10))
    release = threading.Event()
    with WebServer(default=Answer(hold=release)) as server:
        argv = [*our_tool("nsq_to_http"), *consumed(nsqd), f"--post={server.url}/in"]
        with serving(argv, tmp_path) as relay:
            held = held_back(relay, 10)
            assert per_topic(held, "nsqtools_messages_finished_total") == 0
            older = relay.waits_for(
                "the age to grow",
                lambda s: (
                    per_topic(s, "nsqtools_oldest_unanswered_message_age_seconds")
                    > per_topic(held, "nsqtools_oldest_unanswered_message_age_seconds")
                ),
            )
            assert per_topic(older, "nsqtools_messages_in_flight") == 10
            release.set()
            scrape = relay.waits_for("10 sent", sent(10))
            assert_all_answered(scrape, 10)


def test_in_flight_while_a_destination_nsqd_is_frozen(
    local_nsq: LocalNsq, nsqd: Nsqd, tmp_path: Path
) -> None:
    destination = local_nsq.nsqd("destination")
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(10))
    argv = [
        *our_tool("nsq_to_nsq"),
        *consumed(nsqd),
        f"--destination-nsqd-tcp-address={destination.tcp_address}",
    ]
    destination.freeze()  # before the relay starts: it holds every message from the first
    try:
        with serving(argv, tmp_path) as relay:
            held_back(relay, 10)
            destination.thaw()
            scrape = relay.waits_for("10 sent", sent(10))
            assert_all_answered(scrape, 10)
    finally:
        destination.thaw()


def test_misbehaving_scrapers_do_not_stop_the_tool(nsqd: Nsqd, tmp_path: Path) -> None:
    nsqd.create_channels(TOPIC, CHANNEL)
    nsqd.publish_many(TOPIC, bodies(50))
    with serving([*our_tool("nsq_tail"), *consumed(nsqd)], tmp_path) as tail:
        host, port = tail.url.removeprefix("http://").removesuffix("/metrics").rsplit(":", 1)
        silent = [socket.create_connection((host, int(port))) for _ in range(5)]  # say nothing
        try:
            with socket.create_connection((host, int(port))) as junk:
                junk.sendall(b"\x00\x01 not http at all\r\n\r\n")
                assert junk.recv(100).startswith(b"HTTP/1.1 400 ")
            for path in ("/", "/metrics/x", "/favicon.ico"):
                assert httpx.get(tail.url.replace("/metrics", path)).status_code == 404
            assert httpx.post(tail.url).status_code == 404
            nsqd.publish_many(TOPIC, bodies(50))
            tail.waits_for("100 written", written(100))  # the silent ones still waiting
        finally:
            for connection in silent:
                connection.close()


def test_an_address_in_use_fails_before_consuming(nsqd: Nsqd) -> None:
    nsqd.publish_many(TOPIC, bodies(5))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = [*our_tool("nsq_tail"), *consumed(nsqd), f"--metrics-address=127.0.0.1:{port}"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"nsq_tail: error: --metrics-address 127.0.0.1:{port}: Address already in use"
    ]
    assert result.stdout == ""
    assert nsqd.stats(TOPIC).topic(TOPIC).channels == ()  # never subscribed


def test_a_bad_address_is_a_usage_error(nsqd: Nsqd) -> None:
    argv = [*our_tool("nsq_to_nsq"), *consumed(nsqd), "--metrics-address=http://x:1"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "--metrics-address" in result.stderr
    assert len(result.stderr.splitlines()) == 1


# -- nsq_stat --format=prometheus -------------------------------------------------------


def stat(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [*our_tool("nsq_stat"), "--format=prometheus", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_nsq_stat_prints_one_exposition_of_every_topic(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, CHANNEL, "other")
    nsqd.publish_many(TOPIC, bodies(7))
    nsqd.publish_many("second", bodies(3))
    wait_until(lambda: nsqd.topic_depth(TOPIC) == 0, WAIT, "the topic's messages in its channels")
    result = stat("--count=1", f"--nsqd-http-address={nsqd.http_address}")
    assert result.returncode == 0, result.stderr
    scrape = parse(result.stdout)
    on = {"nsqd": nsqd.http_address}
    assert scrape.value("nsqtools_nsqd_up", **on) == 1
    assert scrape.value("nsqtools_nsqd_topic_messages_total", **on, topic=TOPIC) == 7
    assert scrape.value("nsqtools_nsqd_topic_depth", **on, topic=TOPIC) == 0  # to channels
    assert scrape.value("nsqtools_nsqd_topic_depth", **on, topic="second") == 3  # no channel
    for channel in (CHANNEL, "other"):
        labels = {**on, "topic": TOPIC, "channel": channel}
        assert scrape.value("nsqtools_nsqd_channel_depth", **labels) == 7
        assert scrape.value("nsqtools_nsqd_channel_messages_total", **labels) == 7
        assert scrape.value("nsqtools_nsqd_channel_in_flight", **labels) == 0
        assert scrape.value("nsqtools_nsqd_channel_clients", **labels) == 0
    assert scrape.types["nsqtools_nsqd_channel_requeued_total"] == "counter"
    assert scrape.types["nsqtools_nsqd_channel_depth"] == "gauge"


def test_nsq_stat_prometheus_of_one_topic_and_channel(nsqd: Nsqd) -> None:
    nsqd.create_channels(TOPIC, CHANNEL, "other")
    nsqd.publish_many(TOPIC, bodies(4))
    nsqd.publish_many("second", bodies(2))
    args = [f"--nsqd-http-address={nsqd.http_address}", f"--topic={TOPIC}"]
    result = stat("--count=2", "--interval=100ms", *args, f"--channel={CHANNEL}")
    assert result.returncode == 0, result.stderr
    expositions = result.stdout.split("# HELP nsqtools_nsqd_up ")[1:]
    assert len(expositions) == 2  # each poll one, the first too: no baseline
    scrape = parse("# HELP nsqtools_nsqd_up " + expositions[0])
    assert set(scrape.labelled("nsqtools_nsqd_topic_depth")) == {
        frozenset({("nsqd", nsqd.http_address), ("topic", TOPIC)})
    }
    assert set(scrape.labelled("nsqtools_nsqd_channel_depth")) == {
        frozenset({("nsqd", nsqd.http_address), ("topic", TOPIC), ("channel", CHANNEL)})
    }


def test_nsq_stat_without_topic_still_needs_one_in_gos_formats(nsqd: Nsqd) -> None:
    argv = [*our_tool("nsq_stat"), "--format=plain", f"--nsqd-http-address={nsqd.http_address}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (1, "nsq_stat: error: --topic is required\n")


def test_nsq_stat_prometheus_finds_every_nsqd_through_lookupd(cluster2: Cluster) -> None:
    cluster2.publish_many(TOPIC, lambda nsqd: bodies(2 if nsqd is cluster2.nsqd else 5))
    result = stat("--count=1", f"--lookupd-http-address={cluster2.lookupd.http_address}")
    assert result.returncode == 0, result.stderr
    scrape = parse(result.stdout)
    depths = scrape.labelled("nsqtools_nsqd_topic_messages_total")
    assert depths == {
        frozenset({("nsqd", nsqd.http_address), ("topic", TOPIC)}): count
        for nsqd, count in zip(cluster2.nsqds, (2, 5), strict=True)
    }
