"""--topic-pattern: Go's regexp syntax (RE2's), matched anywhere in a topic name by RE2,
in linear time; what Go refuses is refused in one line."""

from __future__ import annotations

import pytest

from nsqtools.runtime.topics import BadTopicPattern, TopicPattern


@pytest.mark.parametrize(
    ("pattern", "topic", "matches"),
    [
        ("^orders\\.", "orders.eu", True),
        ("eu", "orders.eu", True),  # anywhere, as Go's MatchString
        ("^eu", "orders.eu", False),
        # Go's syntax that Python's re does not know, or reads otherwise:
        ("^\\pL+$", "orders", True),
        ("^[[:digit:]]+$", "2026", True),
        ("\\Qa.b\\E", "a.b", True),
        ("\\Qa.b\\E", "axb", False),
        ("^a{,3}$", "a{,3}", True),  # a literal in Go (Python: a between 0 and 3 times)
        ("^a{,3}$", "aa", False),
        ("(?<name>x)", "x", True),
        ("\\z", "x", True),
        # Made to backtrack without end, against names made for them: at once.
        ("^(a+)+$", "a" * 63 + "b", False),
        ("^(x+x+)+y$", "x" * 64, False),
        ("(.*a){12}", "a" * 11 + "b" * 53, False),
    ],
)
def test_go_syntax_matched_anywhere(pattern: str, topic: str, matches: bool) -> None:
    assert TopicPattern(pattern).search(topic) is matches


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(", "missing ): ("),
        ("(?=x)", "invalid perl operator: (?="),
        ("(?<!x)", "invalid perl operator: (?<!"),
        ("(a)\\1", "invalid escape sequence: \\1"),
        ("a++", "bad repetition operator: ++"),
        ("\\Z", "invalid escape sequence: \\Z"),
        ("a{1001}", "invalid repetition size: {1001}"),
    ],
)
def test_what_go_refuses_is_refused(pattern: str, reason: str) -> None:
    with pytest.raises(BadTopicPattern) as refused:
        TopicPattern(pattern)
    assert str(refused.value) == reason
