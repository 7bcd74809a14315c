"""The plan of each admin action (nsqtools.admin, sans-IO): which calls go to which
nsqlookupds and nsqds, in which steps, as nsqadmin v1.3.0 sends them; and how each
node's answer is read (ok, absent, failed) into the action's success."""

from __future__ import annotations

import pytest

from nsqtools.admin import AdminAction, NodeOutcome, Result, Verb, plan_steps, succeeded
from nsqtools.httpapi import Call, HttpApiError
from nsqtools.httpapi.lookupd import NsqdNode

NSQDS = ["127.0.0.1:4151", "127.0.0.1:4251"]
LOOKUPDS = ["127.0.0.1:4161"]

Described = list[list[tuple[str, str, str, dict[str, str]]]]


def described(steps: tuple[tuple[Call[None], ...], ...]) -> Described:
    """Each step's calls as (server, address, request, query)."""
    return [
        [
            (call.server, call.address, f"{call.method} {call.path}", dict(call.params))
            for call in step
        ]
        for step in steps
    ]


def on_nsqds(request: str, **query: str) -> list[tuple[str, str, str, dict[str, str]]]:
    return [("nsqd", address, request, query) for address in NSQDS]


def on_lookupds(request: str, **query: str) -> list[tuple[str, str, str, dict[str, str]]]:
    return [("nsqlookupd", address, request, query) for address in LOOKUPDS]


def test_a_topic_is_deleted_from_the_lookupds_then_from_its_nsqds() -> None:
    steps = plan_steps(AdminAction(Verb.DELETE, "events"), NSQDS, LOOKUPDS)
    assert described(steps) == [
        on_lookupds("POST /topic/delete", topic="events"),
        on_nsqds("POST /topic/delete", topic="events"),
    ]


def test_a_channel_is_deleted_from_the_lookupds_then_from_the_nsqds() -> None:
    steps = plan_steps(AdminAction(Verb.DELETE, "events", "archive"), NSQDS, LOOKUPDS)
    query = {"topic": "events", "channel": "archive"}
    assert described(steps) == [
        on_lookupds("POST /channel/delete", **query),
        on_nsqds("POST /channel/delete", **query),
    ]


def test_a_topic_is_created_on_the_lookupds_and_the_nsqds_given() -> None:
    steps = plan_steps(AdminAction(Verb.CREATE, "events"), NSQDS, LOOKUPDS)
    assert described(steps) == [
        on_lookupds("POST /topic/create", topic="events"),
        on_nsqds("POST /topic/create", topic="events"),
    ]


def test_a_channel_is_created_on_the_lookupds_topic_first_then_on_the_nsqds() -> None:
    steps = plan_steps(AdminAction(Verb.CREATE, "events", "archive"), NSQDS, LOOKUPDS)
    query = {"topic": "events", "channel": "archive"}
    assert described(steps) == [
        on_lookupds("POST /topic/create", topic="events"),
        on_lookupds("POST /channel/create", **query),
        on_nsqds("POST /channel/create", **query),
    ]


@pytest.mark.parametrize("verb", [Verb.EMPTY, Verb.PAUSE, Verb.UNPAUSE])
def test_empty_pause_and_unpause_concern_the_nsqds_only(verb: Verb) -> None:
    on_topic = plan_steps(AdminAction(verb, "events"), NSQDS, LOOKUPDS)
    on_channel = plan_steps(AdminAction(verb, "events", "archive"), NSQDS, LOOKUPDS)
    assert described(on_topic) == [on_nsqds(f"POST /topic/{verb.value}", topic="events")]
    assert described(on_channel) == [
        on_nsqds(f"POST /channel/{verb.value}", topic="events", channel="archive")
    ]


def test_a_tombstone_hides_the_producer_on_every_lookupd_then_deletes_the_topic_there() -> None:
    producer = NsqdNode("127.0.0.1", "box", 4250, 4251, "1.3.0")
    steps = plan_steps(
        AdminAction(Verb.TOMBSTONE, "events", nsqd="127.0.0.1:4251"), NSQDS, LOOKUPDS, producer
    )
    assert described(steps) == [
        on_lookupds("POST /topic/tombstone", topic="events", node="127.0.0.1:4251"),
        [("nsqd", "127.0.0.1:4251", "POST /topic/delete", {"topic": "events"})],
    ]


def test_a_tombstone_needs_its_producer() -> None:
    with pytest.raises(ValueError, match="producer"):
        plan_steps(AdminAction(Verb.TOMBSTONE, "events", nsqd="127.0.0.1:4251"), NSQDS, LOOKUPDS)


def test_steps_without_nodes_are_left_out() -> None:
    assert described(plan_steps(AdminAction(Verb.DELETE, "events"), [], LOOKUPDS)) == [
        on_lookupds("POST /topic/delete", topic="events")
    ]
    assert described(plan_steps(AdminAction(Verb.DELETE, "events"), NSQDS, [])) == [
        on_nsqds("POST /topic/delete", topic="events")
    ]


def test_only_delete_empty_and_tombstone_lose_messages() -> None:
    assert {verb for verb in Verb if verb.destructive} == {Verb.DELETE, Verb.EMPTY, Verb.TOMBSTONE}


def test_actions_describe_themselves() -> None:
    assert str(AdminAction(Verb.PAUSE, "events")) == "pause topic events"
    assert (
        str(AdminAction(Verb.EMPTY, "events", "archive")) == "empty channel archive of topic events"
    )
    tombstone = AdminAction(Verb.TOMBSTONE, "events", nsqd="127.0.0.1:4151")
    assert str(tombstone) == "tombstone topic events on nsqd 127.0.0.1:4151"


def test_each_answer_is_read_as_ok_absent_or_failed() -> None:
    from nsqtools.httpapi import nsqd

    call = nsqd.delete_channel("127.0.0.1:4151", "events", "archive")
    missing = call.error("HTTP 404 CHANNEL_NOT_FOUND", "CHANNEL_NOT_FOUND")
    refused = call.error("connection refused")
    assert NodeOutcome.of(call, None) == NodeOutcome(
        "nsqd", "127.0.0.1:4151", "POST /channel/delete", Result.OK
    )
    assert NodeOutcome.of(call, missing).result is Result.ABSENT
    failed = NodeOutcome.of(call, refused)
    assert (failed.result, failed.detail) == (Result.FAILED, "connection refused")


def test_a_lookup_that_failed_is_an_outcome_naming_its_request() -> None:
    error = HttpApiError("nsqlookupd", "127.0.0.1:4161", "GET /lookup: timed out")
    assert NodeOutcome.failed(error) == NodeOutcome(
        "nsqlookupd", "127.0.0.1:4161", "GET /lookup", Result.FAILED, "timed out"
    )


def test_an_action_succeeds_when_no_node_failed_and_one_did_it() -> None:
    def outcome(result: Result) -> NodeOutcome:
        return NodeOutcome("nsqd", "127.0.0.1:4151", "POST /topic/pause", result)

    ok, absent, failed = outcome(Result.OK), outcome(Result.ABSENT), outcome(Result.FAILED)
    assert succeeded([ok, absent])
    assert not succeeded([ok, failed])
    assert not succeeded([absent, absent])
    assert not succeeded([])
