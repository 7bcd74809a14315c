"""Go time.Duration syntax: parse_duration and format_duration against Go's own test tables."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nsqtools.durations import DurationError, format_duration, parse_duration, quote

NS = 1
US = 1_000 * NS
MS = 1_000 * US
S = 1_000 * MS
M = 60 * S
H = 60 * M
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

# What time.ParseDuration accepts, written independently of the parser (overflow aside).
GO_DURATION = re.compile(r"[-+]?(?:0|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+)")


# Same examples on every run, and nothing carried over from earlier runs.
DETERMINISTIC = settings(derandomize=True, database=None)


def seconds(nanoseconds: int) -> float:
    """The float the parser must return: integer nanoseconds divided once, correctly rounded."""
    return nanoseconds / 1_000_000_000


# From Go's time_test.go parseDurationTests, plus the examples in the time package docs.
@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        ("1.s", 1 * S),
        (".5s", 500 * MS),
        ("1.0s", 1 * S),
        ("1.00s", 1 * S),
        ("1.004s", 1 * S + 4 * MS),
        ("1.0040s", 1 * S + 4 * MS),
        ("100.00100s", 100 * S + 1 * MS),
        ("10ns", 10 * NS),
        ("11us", 11 * US),
        ("12\u00b5s", 12 * US),
        ("12\u03bcs", 12 * US),
        ("13ms", 13 * MS),
        ("14s", 14 * S),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("3h30m", 3 * H + 30 * M),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        ("1h2m3s4ms5us6ns", 1 * H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("52763797000ns", 52763797000 * NS),
        ("0.3333333333333333333h", 20 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", INT64_MAX),
        ("9223372036854775.807us", INT64_MAX),
        ("9223372036s854ms775us807ns", INT64_MAX),
        ("-9223372036854775808ns", INT64_MIN),
        ("-9223372036854775.808us", INT64_MIN),
        ("-9223372036s854ms775us808ns", INT64_MIN),
        ("0.100000000000000000000h", 6 * M),
        ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
        ("300ms", 300 * MS),
        ("-1.5h", -(H + 30 * M)),
        ("2h45m", 2 * H + 45 * M),
        ("1m30s", 90 * S),
        ("0s", 0),
        ("00001s", 1 * S),
        ("1.5ns", 1 * NS),
        ("0" * 5000 + "1s", 1 * S),
        ("1." + "0" * 5000 + "1s", 1 * S),
    ],
)
def test_parse_matches_go(text: str, nanoseconds: int) -> None:
    assert parse_duration(text) == seconds(nanoseconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'invalid duration "": expected a number with a unit, like 300ms or 2h45m'),
        ("3", 'invalid duration "3": missing unit'),
        ("10", 'invalid duration "10": missing unit'),
        ("00", 'invalid duration "00": missing unit'),
        ("1.5.3s", 'invalid duration "1.5.3s": missing unit'),
        ("1s2", 'invalid duration "1s2": missing unit'),
        ("-", 'invalid duration "-": expected a number with a unit, like 300ms or 2h45m'),
        ("+", 'invalid duration "+": expected a number with a unit, like 300ms or 2h45m'),
        ("s", 'invalid duration "s": expected a number with a unit, like 300ms or 2h45m'),
        (".", 'invalid duration ".": expected a number with a unit, like 300ms or 2h45m'),
        ("-.", 'invalid duration "-.": expected a number with a unit, like 300ms or 2h45m'),
        (".s", 'invalid duration ".s": expected a number with a unit, like 300ms or 2h45m'),
        ("+.s", 'invalid duration "+.s": expected a number with a unit, like 300ms or 2h45m'),
        ("--1s", 'invalid duration "--1s": expected a number with a unit, like 300ms or 2h45m'),
        (" 1s", 'invalid duration " 1s": expected a number with a unit, like 300ms or 2h45m'),
        ("1d", 'unknown unit "d" in duration "1d"'),
        ("1 s", 'unknown unit " s" in duration "1 s"'),
        ("1s ", 'unknown unit "s " in duration "1s "'),
        ("1S", 'unknown unit "S" in duration "1S"'),
        ("1sec", 'unknown unit "sec" in duration "1sec"'),
        ("1\u00b5", 'unknown unit "\u00b5" in duration "1\u00b5"'),
        ("1s\n", 'unknown unit "s\\n" in duration "1s\\n"'),
        ('1"', 'unknown unit "\\"" in duration "1\\""'),
        ("9223372036854775810ns", 'invalid duration "9223372036854775810ns": out of range'),
        ("9223372036854775808ns", 'invalid duration "9223372036854775808ns": out of range'),
        ("-9223372036854775809ns", 'invalid duration "-9223372036854775809ns": out of range'),
        ("9223372036854776us", 'invalid duration "9223372036854776us": out of range'),
        ("3000000h", 'invalid duration "3000000h": out of range'),
        ("9223372036854775.808us", 'invalid duration "9223372036854775.808us": out of range'),
        (
            "9223372036854ms775us808ns",
            'invalid duration "9223372036854ms775us808ns": out of range',
        ),
        ("99999999999999999999d", 'invalid duration "99999999999999999999d": out of range'),
    ],
)
def test_parse_rejects_like_go(text: str, message: str) -> None:
    with pytest.raises(DurationError) as raised:
        parse_duration(text)
    assert str(raised.value) == message


def test_duration_error_is_a_value_error() -> None:
    assert issubclass(DurationError, ValueError)


# From Go's time_test.go durationTests, plus the cases this project relies on.
@pytest.mark.parametrize(
    ("nanoseconds", "text"),
    [
        (0, "0s"),
        (1 * NS, "1ns"),
        (1100 * NS, "1.1\u00b5s"),
        (1500 * NS, "1.5\u00b5s"),
        (2200 * US, "2.2ms"),
        (250 * MS, "250ms"),
        (999_999_999 * NS, "999.999999ms"),
        (3300 * MS, "3.3s"),
        (4 * M + 5 * S, "4m5s"),
        (4 * M + 5001 * MS, "4m5.001s"),
        (5 * H + 6 * M + 7001 * MS, "5h6m7.001s"),
        (8 * M + 1 * NS, "8m0.000000001s"),
        (60 * S, "1m0s"),
        (90 * S, "1m30s"),
        (3600 * S, "1h0m0s"),
        (-1500 * MS, "-1.5s"),
        (-1 * NS, "-1ns"),
        (-(H + 30 * M), "-1h30m0s"),
    ],
)
def test_format_matches_go(nanoseconds: int, text: str) -> None:
    assert format_duration(seconds(nanoseconds)) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(60, "1m0s"), (0.25, "250ms"), (90, "1m30s"), (3600, "1h0m0s"), (0, "0s"), (1.5e-6, "1.5µs")],
)
def test_format_examples(value: float, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(4e-10, "0s"), (6e-10, "1ns"), (1.4e-9, "1ns"), (-0.0, "0s"), (0.1, "100ms")],
)
def test_format_rounds_to_whole_nanoseconds(value: float, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_format_rejects_non_finite(value: float) -> None:
    with pytest.raises(DurationError, match="cannot format"):
        format_duration(value)


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("abc", '"abc"'),
        ("", '""'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("tab\there", '"tab\\there"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("\u2028", '"\\u2028"'),
        ("\x85", '"\\x85"'),
        ("\u00b5s", '"\u00b5s"'),
    ],
)
def test_quote_keeps_messages_on_one_line(text: str, quoted: str) -> None:
    assert quote(text) == quoted


@DETERMINISTIC
@given(st.integers(min_value=-(1 << 52), max_value=1 << 52))
@example(0)
@example(1)
@example(-1)
def test_integer_nanoseconds_round_trip(nanoseconds: int) -> None:
    value = seconds(nanoseconds)
    text = format_duration(value)
    assert parse_duration(text) == value
    assert format_duration(parse_duration(text)) == text


@DETERMINISTIC
@given(st.floats(min_value=-9e9, max_value=9e9))
@example(1e-10)
@example(8999999999.999998)
def test_formatted_text_is_stable(value: float) -> None:
    text = format_duration(value)
    assert format_duration(parse_duration(text)) == text


@DETERMINISTIC
@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
@example(INT64_MIN)
@example(INT64_MAX)
def test_every_int64_parses_in_nanoseconds(nanoseconds: int) -> None:
    assert parse_duration(f"{nanoseconds}ns") == seconds(nanoseconds)


@DETERMINISTIC
@given(
    st.one_of(
        st.text(),
        st.text(alphabet="0123456789.+-nsuµμmhd ", max_size=24),
        st.from_regex(GO_DURATION, fullmatch=True),
    )
)
def test_parse_agrees_with_go_grammar(text: str) -> None:
    try:
        parse_duration(text)
    except DurationError as error:
        message = str(error)
        assert "\n" not in message
        assert quote(text) in message
        assert GO_DURATION.fullmatch(text) is None or message.endswith(": out of range")
    else:
        assert GO_DURATION.fullmatch(text) is not None
