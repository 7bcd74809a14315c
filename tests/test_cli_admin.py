"""`nsq create`, `delete`, `empty`, `pause`, `unpause`, `tombstone` run as a user runs
them, against two real nsqds behind a lookupd; what they did is checked through nsqd's
own /stats and the lookupd's /topics, /channels and /lookup afterwards. Destructive
actions need --yes without a terminal and ask on one (a real pty); a frozen or stopped
nsqd is named, the others are done, and the exit status is 1.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from nsqtools.httpapi import lookupd as lookupd_api
from nsqtools.testing import Nsqd, our_tool
from nsqtools.testing.cluster import ask
from tests.conftest import Cluster
from tests.test_cli_inspect import (
    CHANNELS,
    TOPIC,
    lookupd_flag,
    nsq,
    nsq_json,
    populate,
    wait_for_channels,
)


def topics_of(nsqd: Nsqd) -> list[str]:
    return [topic.topic_name for topic in nsqd.stats().topics]


def channels_of(nsqd: Nsqd, topic: str = TOPIC) -> list[str]:
    return [channel.channel_name for channel in nsqd.stats(topic).topic(topic).channels]


def lookupd_topics(cluster: Cluster) -> list[str]:
    return ask(lookupd_api.topics(cluster.lookupd.http_address))


def lookupd_channels(cluster: Cluster, topic: str = TOPIC) -> list[str]:
    return ask(lookupd_api.channels(cluster.lookupd.http_address, topic))


def result_rows(stdout: str) -> list[list[str]]:
    """The piped outcome table's rows, cut where its (left-aligned) headers start:
    result, server, address, request, detail."""
    header, *rows = stdout.splitlines()
    names = ["result", "server", "address", "request", "detail"]
    assert header.split() == names
    starts = [header.index(name) for name in names]
    ends = [*starts[1:], None]
    return [
        [row[start:end].strip() for start, end in zip(starts, ends, strict=True)] for row in rows
    ]


# -- create ----------------------------------------------------------------------------


def test_create_a_topic_on_the_lookupd_and_the_nsqds_given(cluster2: Cluster) -> None:
    first, second = cluster2.nsqds
    result = nsq("create", "planned", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    assert lookupd_topics(cluster2) == ["planned"]
    assert "planned" not in topics_of(first)  # nsqd creates it when first published to
    given = nsq("create", "given", f"--nsqd-http-address={second.http_address}")
    assert given.returncode == 0, given.stderr
    assert (topics_of(first), topics_of(second)) == ([], ["given"])


def test_create_a_channel_on_the_lookupd_then_on_every_nsqd_of_the_topic(
    cluster2: Cluster,
) -> None:
    first, second = populate(cluster2)
    result = nsq("create", TOPIC, "fresh", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    lookupd, nsqds = (
        cluster2.lookupd.http_address,
        sorted([first.http_address, second.http_address]),
    )
    assert result_rows(result.stdout) == [
        ["ok", "nsqlookupd", lookupd, "POST /topic/create", ""],
        ["ok", "nsqlookupd", lookupd, "POST /channel/create", ""],
        *(["ok", "nsqd", address, "POST /channel/create", ""] for address in nsqds),
    ]
    assert "fresh" in lookupd_channels(cluster2)
    assert channels_of(first) == channels_of(second) == sorted([*CHANNELS, "fresh"])


# -- delete ----------------------------------------------------------------------------


def test_delete_a_topic_from_the_lookupd_and_every_nsqd(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    result = nsq("delete", TOPIC, "--yes", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    assert (topics_of(first), topics_of(second)) == ([], ["other"])
    assert lookupd_topics(cluster2) == ["other"]


def test_delete_a_channel_from_the_lookupd_and_every_nsqd(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    result = nsq("delete", TOPIC, "live", "-y", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    assert channels_of(first) == channels_of(second) == ["archive"]
    assert lookupd_channels(cluster2) == ["archive"]


def test_without_a_terminal_a_destructive_action_needs_yes(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    for args in (
        ["delete", TOPIC],
        ["empty", TOPIC, "live"],
        ["tombstone", TOPIC, first.http_address],
    ):
        result = nsq(*args, lookupd_flag(cluster2))
        assert result.returncode == 1
        assert result.stderr.endswith(": confirm with --yes (stdin is not a terminal)\n")
        assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert channels_of(first) == channels_of(second) == list(CHANNELS)
    assert first.channel_stats(TOPIC, "live").depth == 3


def test_on_a_terminal_a_destructive_action_shows_its_plan_and_asks(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    declined = on_a_terminal(["delete", TOPIC, "live", lookupd_flag(cluster2)], answer="n")
    assert declined.returncode == 1
    assert declined.stderr.endswith("nsq: error: cancelled: nothing was changed\n")
    assert channels_of(first) == list(CHANNELS)
    accepted = on_a_terminal(["delete", TOPIC, "live", lookupd_flag(cluster2)], answer="y")
    assert accepted.returncode == 0, accepted.stderr
    depths = {first.http_address: 3, second.http_address: 2}  # the nsqds' depths of live
    losses = "".join(
        f"delete on nsqd {address} loses {depths[address]} messages queued in channel live\n"
        for address in sorted(depths)
    )
    assert accepted.stderr == (  # what is lost, not the HTTP requests (main listed them)
        f"{losses}and it is removed from nsqlookupd {cluster2.lookupd.http_address}\n"
        "Delete channel live of topic events? [y/N]: "
    )
    assert accepted.stdout.startswith("result ")
    assert channels_of(first) == channels_of(second) == ["archive"]


def on_a_terminal(args: list[str], answer: str) -> subprocess.CompletedProcess[str]:
    """Our `nsq` with stdin a pseudo-terminal that has `answer` typed in."""
    controller, terminal = os.openpty()
    try:
        os.write(controller, f"{answer}\n".encode())
        return subprocess.run(
            [*our_tool("nsq"), *args],
            env={k: v for k, v in os.environ.items() if not k.startswith("NSQ_")},
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)


# -- empty, pause, unpause -------------------------------------------------------------


def test_empty_a_channel_on_every_nsqd(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    result = nsq("empty", TOPIC, "live", "--yes", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    for nsqd, kept in ((first, 3), (second, 2)):
        assert nsqd.channel_stats(TOPIC, "live").depth == 0
        assert nsqd.channel_stats(TOPIC, "archive").depth == kept


def test_empty_a_topic_on_every_nsqd(cluster2: Cluster) -> None:
    for nsqd in cluster2.nsqds:  # no channel: the messages stay in the topic
        nsqd.publish_many("buffered", [b"m"] * 4)
    cluster2.lookupd.wait_for_topic("buffered", cluster2.nsqds)
    result = nsq("empty", "buffered", "--yes", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    assert [nsqd.topic_depth("buffered") for nsqd in cluster2.nsqds] == [0, 0]


def test_pause_and_unpause_a_topic_and_a_channel_on_every_nsqd(cluster2: Cluster) -> None:
    populate(cluster2)

    def paused() -> list[tuple[bool, bool]]:
        topics = [nsqd.stats(TOPIC).topic(TOPIC) for nsqd in cluster2.nsqds]
        return [(topic.paused, topic.channel("live").paused) for topic in topics]

    for args, expected in (
        (["pause", TOPIC], [(True, False)] * 2),
        (["pause", TOPIC, "live"], [(True, True)] * 2),
        (["unpause", TOPIC], [(False, True)] * 2),
        (["unpause", TOPIC, "live"], [(False, False)] * 2),
    ):
        result = nsq(*args, lookupd_flag(cluster2))
        assert result.returncode == 0, result.stderr
        assert paused() == expected, args


def test_an_action_answers_in_json(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    document = nsq_json("pause", TOPIC, "archive", lookupd_flag(cluster2))
    assert document == {
        "action": "pause",
        "topic": TOPIC,
        "channel": "archive",
        "nsqd": None,
        "succeeded": True,
        "results": [
            {
                "server": "nsqd",
                "address": address,
                "request": "POST /channel/pause",
                "result": "ok",
                "detail": "",
            }
            for address in sorted([first.http_address, second.http_address])
        ],
    }


def test_a_node_without_the_channel_has_nothing_to_do(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    first.create_channels(TOPIC, "solo")
    wait_for_channels(cluster2.lookupd, TOPIC, ("solo",))
    result = nsq("pause", TOPIC, "solo", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    rows = {row[2]: row for row in result_rows(result.stdout)}
    assert rows[first.http_address][0] == "ok"
    # It is not asked: the plan has the nsqds that hold the channel (main asked it, and
    # showed its 404 as "absent").
    assert second.http_address not in rows
    assert first.channel_stats(TOPIC, "solo").paused


def test_nothing_to_act_on_is_an_error(cluster2: Cluster) -> None:
    populate(cluster2)
    unknown = nsq("pause", "nosuch", lookupd_flag(cluster2))
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "nsq: error: cannot pause topic nosuch: no nsqd has topic nosuch\n",
    )
    nowhere = nsq("delete", TOPIC, "nosuch", "--yes", lookupd_flag(cluster2))
    assert nowhere.returncode == 1
    assert nowhere.stderr == (
        "nsq: error: cannot delete channel nosuch of topic events: "
        "no nsqd has channel nosuch of topic events\n"
    )


@pytest.mark.parametrize("verb", ["delete", "empty", "pause", "unpause"])
def test_a_missing_topic_is_said_and_nothing_is_done(cluster2: Cluster, verb: str) -> None:
    """`nsq delete nosuch --yes` printed ok on main (the lookupds said ok)."""
    populate(cluster2)
    yes = ["--yes"] if verb in ("delete", "empty") else []
    result = nsq(verb, "nosuch", *yes, lookupd_flag(cluster2))
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr == f"nsq: error: cannot {verb} topic nosuch: no nsqd has topic nosuch\n"


def test_a_topic_only_the_lookupds_still_register_is_deleted_from_them(
    cluster: Cluster,
) -> None:
    """Its nsqd gone for good, the lookupds keep the topic: that is what delete clears."""
    ask(lookupd_api.create_topic(cluster.lookupd.http_address, "stale"))
    assert "stale" in lookupd_topics(cluster)
    result = nsq("delete", "stale", "--yes", lookupd_flag(cluster))
    assert result.returncode == 0, result.stderr
    assert "stale" not in lookupd_topics(cluster)


def test_dry_run_says_what_would_be_done_and_lost_and_changes_nothing(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    lookupd = cluster2.lookupd.http_address
    for args in (["delete", TOPIC, "live"], ["empty", TOPIC, "live"], ["pause", TOPIC]):
        result = nsq(*args, "--dry-run", lookupd_flag(cluster2))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        requests = [line for line in lines if line.startswith("would send POST /")]
        assert requests and lines[-len(requests) :] == requests, lines  # after the losses
        if args[0] != "pause":
            loss = f"{args[0]} on nsqd {first.http_address} loses 3 messages queued"
            assert f"{loss} in channel live" in lines
    tombstone = nsq("tombstone", TOPIC, first.http_address, "--dry-run", lookupd_flag(cluster2))
    assert tombstone.returncode == 0, tombstone.stderr
    assert f"tombstone on nsqd {first.http_address} loses" in tombstone.stdout
    create = nsq("create", "fresh", "--dry-run", lookupd_flag(cluster2))
    assert create.stdout == f"would send POST /topic/create to nsqlookupd {lookupd}\n"
    assert channels_of(first) == channels_of(second) == list(CHANNELS)
    assert first.channel_stats(TOPIC, "live").depth == 3
    assert not first.channel_stats(TOPIC, "live").paused


# -- a node down -----------------------------------------------------------------------


def test_a_frozen_nsqd_is_named_and_the_others_are_done(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    with second.frozen():
        result = nsq("pause", TOPIC, lookupd_flag(cluster2), "--http-timeout=0.3s")
    assert result.returncode == 1
    assert result.stderr == (
        f"nsq: error: pause topic events failed on nsqd {second.http_address} "
        "(POST /topic/pause: timed out (--http-timeout)); 1 of 2 requests succeeded\n"
    )
    rows = {row[2]: row for row in result_rows(result.stdout)}
    assert rows[first.http_address][0] == "ok"
    assert rows[second.http_address][0::4] == ["failed", "timed out (--http-timeout)"]
    assert first.stats(TOPIC).topic(TOPIC).paused
    # The frozen nsqd may still pause when it wakes: its request waits in its socket.


def test_a_stopped_nsqd_given_by_address_is_named(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    second.kill()
    given = [f"--nsqd-http-address={nsqd.http_address}" for nsqd in (first, second)]
    result = nsq("delete", TOPIC, "live", "--yes", "--json", *given)
    assert result.returncode == 1
    assert result.stderr == (
        f"nsq: error: delete channel live of topic events failed on nsqd {second.http_address} "
        "(POST /channel/delete: connection refused); 1 of 2 requests succeeded\n"
    )
    document = json.loads(result.stdout)
    assert document["succeeded"] is False
    outcomes = {row["address"]: (row["result"], row["detail"]) for row in document["results"]}
    assert outcomes == {
        first.http_address: ("ok", ""),
        second.http_address: ("failed", "connection refused"),
    }
    assert channels_of(first) == ["archive"]


# -- tombstone -------------------------------------------------------------------------


def test_tombstone_hides_an_nsqd_from_lookups_and_deletes_the_topic_there(
    cluster2: Cluster,
) -> None:
    first, second = populate(cluster2)
    result = nsq("tombstone", TOPIC, second.http_address, "--yes", lookupd_flag(cluster2))
    assert result.returncode == 0, result.stderr
    assert result_rows(result.stdout) == [
        ["ok", "nsqlookupd", cluster2.lookupd.http_address, "POST /topic/tombstone", ""],
        ["ok", "nsqd", second.http_address, "POST /topic/delete", ""],
    ]
    assert cluster2.lookupd.topic_tcp_ports(TOPIC) == {_port(first.tcp_address)}
    assert (TOPIC in topics_of(first), TOPIC in topics_of(second)) == (True, False)


def test_tombstone_of_an_nsqd_the_lookupd_does_not_list_is_an_error(cluster2: Cluster) -> None:
    first, second = populate(cluster2)
    unknown = nsq("tombstone", TOPIC, "127.0.0.1:1", "--yes", lookupd_flag(cluster2))
    assert unknown.returncode == 1
    known = ", ".join(sorted([first.http_address, second.http_address]))
    assert unknown.stderr.startswith(
        "nsq: error: cannot tombstone topic events on nsqd 127.0.0.1:1: no lookupd knows that nsqd"
    )
    assert all(address in unknown.stderr for address in known.split(", "))
    not_a_producer = nsq("tombstone", "other", first.http_address, "--yes", lookupd_flag(cluster2))
    assert not_a_producer.stderr == (
        f"nsq: error: cannot tombstone topic other on nsqd {first.http_address}: "
        "that nsqd does not produce the topic\n"
    )
    without_lookupd = nsq(
        "tombstone", TOPIC, first.http_address, "--yes", f"--nsqd-http-address={first.http_address}"
    )
    assert without_lookupd.stderr == (
        "nsq: error: a tombstone is kept by nsqlookupd: give --lookupd-http-address\n"
    )
    assert TOPIC in topics_of(first) and "other" in topics_of(second)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])
