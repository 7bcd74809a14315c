"""Publishing to the Youzan fork through its partitions (nsqtools.producer with
nsqtools.partitions, and to_nsq), against the scripted fork: topics looked up as they
are first published to, a leader move waited through, back pressure retried, the
round robin's start, and the error lines.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nsqtools.config import ClientConfig
from nsqtools.partitions import PartitionError, Partitions
from nsqtools.producer import PublishOutcome, open_producer
from nsqtools.testing.youzan import ForkTopic, YouzanCluster

BIN = Path(sys.executable).parent
CHANNEL = "ch"
# Bounds a test's whole run: a publish that hangs fails the test instead.
DEADLINE = 30


def config(**settings: Any) -> ClientConfig:
    return dataclasses.replace(ClientConfig(), **settings)


@pytest.fixture
def fork() -> Iterator[YouzanCluster]:
    topics = [
        ForkTopic("yz", partitions=2, channels=(CHANNEL,)),
        ForkTopic("other", partitions=2, channels=(CHANNEL,)),
        ForkTopic("solo", partitions=1, channels=(CHANNEL,)),
    ]
    with YouzanCluster(topics) as cluster:
        yield cluster


def bodies(fork: YouzanCluster, topic: str) -> list[bytes]:
    return sorted(message.body for message in fork.stored(topic))


# -- item 2: a topic not looked up, and leaving the block --------------------------------


async def test_a_topic_not_looked_up_is_looked_up_when_first_published(
    fork: YouzanCluster,
) -> None:
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer([], config(), partitions=partitions) as producer,
        ):
            await producer.publish("yz", b"awaited")
            await producer.put_many("other", [b"put-1", b"put-2"])
    assert bodies(fork, "yz") == [b"awaited"]
    assert bodies(fork, "other") == [b"put-1", b"put-2"]


async def test_an_unknown_topic_fails_its_own_publishes_and_the_block_returns(
    fork: YouzanCluster,
) -> None:
    outcomes: list[PublishOutcome] = []
    with trio.fail_after(DEADLINE):
        async with (
            Partitions([fork.lookupd_http_address], config()) as partitions,
            open_producer(
                [], config(), partitions=partitions, on_outcome=outcomes.append
            ) as producer,
        ):
            with pytest.raises(PartitionError, match="nope"):
                await producer.publish("nope", b"awaited")
            await producer.put_many("nope", [b"put"], tokens=["t"])
            await producer.publish("yz", b"fine")
    awaited, put = [outcome for outcome in outcomes if outcome.error is not None]
    assert (awaited.tokens, put.tokens) == (None, ["t"])
    assert "cannot look up topic nope" in str(put.error)
    assert producer.failed == 2 and producer.acknowledged == 1
    assert bodies(fork, "yz") == [b"fine"]
