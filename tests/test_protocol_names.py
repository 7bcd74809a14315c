"""Topic and channel name rules (nsqtools.protocol.names), as nsqd v1.3.0 applies them."""

from __future__ import annotations

import re
import string
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqtools.protocol import (
    LocalProtocolError,
    ProtocolError,
    check_channel,
    check_topic,
    is_ephemeral,
    is_valid_name,
)
from nsqtools.protocol.names import EPHEMERAL_SUFFIX, MAX_NAME_LENGTH

ALLOWED = string.ascii_letters + string.digits + "._-"

VALID = [
    "a",
    "Z",
    "0",
    "a" * 64,
    ".",
    "..",
    "-",
    "_",
    "test",
    "Topic_1.2-x",
    "a#ephemeral",
    "..#ephemeral",
    "a" * 54 + "#ephemeral",  # 64 characters, suffix included
]

INVALID = [
    "",
    "a" * 65,
    "a" * 55 + "#ephemeral",  # 65 characters: the suffix counts
    "a b",
    " a",
    "a ",
    "a\tb",
    "a\n",
    "\na",
    "a\x00",
    "a/b",
    "a:b",
    "a,b",
    "#ephemeral",
    "a#ephemeralx",
    "a#ephemeral#ephemeral",
    "a#Ephemeral",
    "a#",
    "a#b",
    "é",
    "naïve",
    "\uff54\uff4f\uff50\uff49\uff43",  # "topic" in fullwidth letters
    "٣",  # an Arabic-Indic digit
    "ǅ",
]

Checker = Callable[[str], str]
CHECKERS: list[tuple[str, Checker]] = [("topic", check_topic), ("channel", check_channel)]


@pytest.mark.parametrize("name", VALID)
def test_valid_names(name: str) -> None:
    assert len(name) <= MAX_NAME_LENGTH
    assert is_valid_name(name)
    assert check_topic(name) is name
    assert check_channel(name) is name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(LocalProtocolError):
        check_topic(name)
    with pytest.raises(LocalProtocolError):
        check_channel(name)


def test_boundary_lengths() -> None:
    assert len("a" * 54 + EPHEMERAL_SUFFIX) == 64
    assert is_valid_name("x" * MAX_NAME_LENGTH)
    assert not is_valid_name("x" * (MAX_NAME_LENGTH + 1))


def test_is_ephemeral() -> None:
    assert is_ephemeral("a#ephemeral")
    assert is_ephemeral("a" * 54 + "#ephemeral")
    assert not is_ephemeral("a")
    assert not is_ephemeral("ephemeral")
    assert not is_ephemeral("a#ephemeralx")


def test_error_is_a_value_error_and_a_protocol_error() -> None:
    with pytest.raises(LocalProtocolError) as caught:
        check_topic("a b")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ProtocolError)


@pytest.mark.parametrize(("kind", "check"), CHECKERS)
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("a" * 65, "longer than 64"),
        ("a b", "letters, digits"),
        ("#ephemeral", "letters, digits"),
        ("naïve", "letters, digits"),
    ],
)
def test_error_message_names_kind_and_name(
    kind: str, check: Checker, name: str, reason: str
) -> None:
    with pytest.raises(LocalProtocolError) as caught:
        check(name)
    message = str(caught.value)
    assert f"{kind} name" in message
    assert repr(name) in message
    assert reason in message
    assert "\n" not in message


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=ALLOWED, min_size=1, max_size=MAX_NAME_LENGTH))
def test_any_allowed_name_is_valid(name: str) -> None:
    assert is_valid_name(name)
    assert check_topic(name) == name
    suffixed = name + EPHEMERAL_SUFFIX
    assert is_valid_name(suffixed) == (len(suffixed) <= MAX_NAME_LENGTH)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=ALLOWED, min_size=MAX_NAME_LENGTH + 1, max_size=100))
def test_any_overlong_name_is_invalid(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(LocalProtocolError, match="longer than"):
        check_channel(name)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=ALLOWED, max_size=20),
    st.characters(blacklist_characters=ALLOWED + "#"),
    st.text(alphabet=ALLOWED, max_size=20),
)
def test_any_foreign_character_makes_a_name_invalid(head: str, bad: str, tail: str) -> None:
    name = head + bad + tail
    assert not is_valid_name(name)
    assert not is_valid_name(name + EPHEMERAL_SUFFIX)
    with pytest.raises(LocalProtocolError, match=re.escape(repr(name))):
        check_topic(name)
