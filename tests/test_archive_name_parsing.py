"""nsq_to_file's names read back (NameParser): topic, host, revision and datetime from a
file's name and the --filename-format and --datetime-format that gave it.

The round trip runs names made by FilenameFormat, which tests/test_archive_names.py holds
to Go's own nsq_to_file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from nsqtools.archive.nameparsing import NameParser, ParsedName
from nsqtools.archive.names import BadName, FilenameFormat

DEFAULT_FORMAT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
DEFAULT_DATETIME = "%Y-%m-%d_%H"
SUBDIRECTORIES = "<TOPIC>/<DATETIME>/<HOST><REV>.log"
NEW_YORK = ZoneInfo("America/New_York")
KATHMANDU = ZoneInfo("Asia/Kathmandu")


def parse(
    name: str,
    filename_format: str = DEFAULT_FORMAT,
    datetime_format: str = DEFAULT_DATETIME,
    zone: tzinfo | None = UTC,
) -> ParsedName | None:
    return NameParser.build(filename_format, datetime_format, zone=zone).parse(name)


def test_gos_default_name_with_gzip_and_a_revision() -> None:
    assert parse("orders.myhost-000003.2026-11-23_14.log.gz") == ParsedName(
        topic="orders",
        host="myhost",
        when=datetime(2026, 11, 23, 14, tzinfo=UTC),
        rev=3,
        gzip=True,
        pid=None,
    )


@pytest.mark.parametrize(
    ("name", "rev", "gzip"),
    [
        ("orders.myhost.2026-11-23_14.log", None, False),  # Go dropped <REV>
        ("orders.myhost-000000.2026-11-23_14.log", 0, False),  # rotation without --gzip
        ("orders.myhost-1234567.2026-11-23_14.log.gz", 1234567, True),
    ],
)
def test_gos_default_names_with_and_without_rev_and_gz(
    name: str, rev: int | None, gzip: bool
) -> None:
    parsed = parse(name)
    assert parsed is not None
    assert (parsed.topic, parsed.host, parsed.rev, parsed.gzip) == ("orders", "myhost", rev, gzip)


@pytest.mark.parametrize(
    "name",
    [
        "orders.myhost.2026-11-23_14.txt",
        "orders.myhost.2026-11-23.log",  # no hour
        "orders.2026-11-23_14.log",  # no host
        "sub/orders.myhost.2026-11-23_14.log",  # a directory the format has not
        "orders.myhost.2026-11-23_14.log.gz.tmp",
        "orders.myhost.2026-11-23_14.log.zst",
        "or ders.myhost.2026-11-23_14.log",  # no topic has a space
        "x" * 65 + ".myhost.2026-11-23_14.log",  # nor more than 64 characters
        "orders#durable.myhost.2026-11-23_14.log",
        "orders.myhost.2026-13-23_14.log",  # month 13
        "orders.myhost.2026-02-29_14.log",  # 2026 is no leap year
        "orders.myhost.2026-11-23_24.log",
        "orders.myhost.2026-1-23_14.log",  # Go pads %m
        "orders.myhost.\uff12\uff10\uff12\uff16-11-23_14.log",  # digits, not ASCII ones
        "",
    ],
)
def test_names_the_format_does_not_give_are_none(name: str) -> None:
    assert parse(name) is None


def test_a_topic_with_dots_is_read_whole() -> None:
    parsed = parse("orders.v2.eu.myhost-000001.2026-11-23_14.log.gz")
    assert parsed is not None
    assert (parsed.topic, parsed.host, parsed.rev) == ("orders.v2.eu", "myhost", 1)


def test_a_dotted_host_after_a_dotted_topic_is_read_as_the_topic() -> None:
    """The documented choice: the topic as long as it can be (Go's default host is the
    short one, without dots)."""
    parsed = parse("orders.box.example.2026-11-23_14.log")
    assert parsed is not None
    assert (parsed.topic, parsed.host) == ("orders.box", "example")


def test_an_ephemeral_topic() -> None:
    parsed = parse("clicks#ephemeral.myhost.2026-11-23_14.log")
    assert parsed is not None
    assert (parsed.topic, parsed.host) == ("clicks#ephemeral", "myhost")


def test_a_format_with_subdirectories() -> None:
    parsed = parse("orders.v2/2026-11-23_14/my.host-000002.log.gz", SUBDIRECTORIES)
    assert parsed is not None
    assert (parsed.topic, parsed.host, parsed.rev) == ("orders.v2", "my.host", 2)
    assert parsed.when == datetime(2026, 11, 23, 14, tzinfo=UTC)
    assert parse("orders/2026-11-23_14/x/myhost.log", SUBDIRECTORIES) is None


def test_a_datetime_format_with_slashes_makes_directories() -> None:
    parsed = parse("orders.h.2026/11/23/14.log", datetime_format="%Y/%m/%d/%H")
    assert parsed is not None
    assert parsed.when == datetime(2026, 11, 23, 14, tzinfo=UTC)


def test_the_format_is_placed_as_gos_path_join_places_it() -> None:
    parsed = parse("a/orders.log", "/a/./b/../<TOPIC>.log")
    assert parsed is not None and parsed.topic == "orders"


def test_a_rev_right_after_the_topic_is_read_as_the_rev() -> None:
    assert parse("orders-000003.log", "<TOPIC><REV>.log") == ParsedName(
        topic="orders", host=None, when=None, rev=3, gzip=False, pid=None
    )
    parsed = parse("orders-3.log", "<TOPIC><REV>.log")
    assert parsed is not None and (parsed.topic, parsed.rev) == ("orders-3", None)


def test_a_host_ending_in_six_digits_is_read_as_its_revision() -> None:
    """The documented choice: the host as short as it can be."""
    parsed = parse("orders.box-000042.2026-11-23_14.log")
    assert parsed is not None and (parsed.host, parsed.rev) == ("box", 42)


def test_the_pid() -> None:
    parsed = parse("orders/myhost-4242/2026-11-23_14.log", "<TOPIC>/<HOST>-<PID>/<DATETIME>.log")
    assert parsed is not None and (parsed.host, parsed.pid) == ("myhost", 4242)


def test_without_datetime_in_the_format_there_is_no_when() -> None:
    assert parse("orders/box.log", "<TOPIC>/<HOST>.log", datetime_format="%H") == ParsedName(
        topic="orders", host="box", when=None, rev=None, gzip=False, pid=None
    )


def test_a_token_twice_in_the_format_is_the_same_text_twice() -> None:
    filename_format = "<TOPIC>/<DATETIME>/<TOPIC>.<DATETIME><REV>.log"
    parsed = parse("t/2026-11-23_14/t.2026-11-23_14-000001.log", filename_format)
    assert parsed is not None and (parsed.topic, parsed.rev) == ("t", 1)
    assert parse("t/2026-11-23_14/u.2026-11-23_14.log", filename_format) is None
    assert parse("t/2026-11-23_14/t.2026-11-23_15.log", filename_format) is None


def test_a_field_twice_in_the_datetime_format_must_agree() -> None:
    assert parse("t.h.2026/2026-11-23_14.log", datetime_format="%Y/" + DEFAULT_DATETIME)
    assert parse("t.h.2025/2026-11-23_14.log", datetime_format="%Y/" + DEFAULT_DATETIME) is None


def test_gz_in_the_format_is_not_appended_again() -> None:
    parsed = parse("t/42.gz", "<TOPIC>/<PID>.gz")
    assert parsed is not None and (parsed.topic, parsed.pid, parsed.gzip) == ("t", 42, True)
    assert parse("t/42.gz.gz", "<TOPIC>/<PID>.gz") is None


def test_naive_datetimes_are_in_the_zone_given() -> None:
    parsed = parse("t.h.2026-07-01_14.log", zone=NEW_YORK)
    assert parsed is not None and parsed.when is not None
    assert parsed.when.astimezone(UTC) == datetime(2026, 7, 1, 18, tzinfo=UTC)


def test_naive_datetimes_are_local_by_default() -> None:
    parsed = parse("t.h.2026-07-01_14.log", zone=None)
    assert parsed is not None
    assert parsed.when == datetime(2026, 7, 1, 14).astimezone()


def test_an_offset_in_the_name_wins_over_the_zone() -> None:
    parsed = parse("t.h.2026-11-23T14+0545.log", datetime_format="%Y-%m-%dT%H%z", zone=NEW_YORK)
    assert parsed is not None
    assert parsed.when == datetime(2026, 11, 23, 14, tzinfo=KATHMANDU)
    assert parsed.when is not None and parsed.when.utcoffset() == timedelta(hours=5, minutes=45)


@pytest.mark.parametrize(
    ("name", "utc"),
    [
        ("t.h.2026-11-01_01_EDT.log", datetime(2026, 11, 1, 5, tzinfo=UTC)),
        ("t.h.2026-11-01_01_EST.log", datetime(2026, 11, 1, 6, tzinfo=UTC)),  # an hour on
        ("t.h.2026-11-01_01_UTC.log", datetime(2026, 11, 1, 1, tzinfo=UTC)),
        ("t.h.2026-11-01_01_CET.log", None),  # not New York's: no instant
        ("t.h.2026-11-01_01_+0545.log", datetime(2026, 10, 31, 19, 15, tzinfo=UTC)),
    ],
)
def test_a_zone_abbreviation_is_the_zones_own(name: str, utc: datetime | None) -> None:
    """It tells which of autumn's two 01:00 hours; one the zone never has names no time."""
    parsed = parse(name, datetime_format="%Y-%m-%d_%H_%Z", zone=NEW_YORK)
    when = None if parsed is None or parsed.when is None else parsed.when.astimezone(UTC)
    assert when == utc


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("t.2026131 Sat", datetime(2026, 1, 31, tzinfo=UTC)),  # not month 13
        ("t.2026121 Tue", datetime(2026, 12, 1, tzinfo=UTC)),  # as Go reads: month first
        ("t.2026121 Wed", datetime(2026, 1, 21, tzinfo=UTC)),  # 1 Dec is no Wednesday
        ("t.2026121 Sun", None),
    ],
)
def test_unpadded_fields_run_together_read_as_the_valid_date(
    name: str, expected: datetime | None
) -> None:
    """Go's quirk: "12" in --datetime-format is an unpadded month and day."""
    parsed = parse(name, "<TOPIC>.<DATETIME>", datetime_format="%Y12 %a")
    assert (None if parsed is None else parsed.when) == expected


def test_go_layout_tokens_in_the_literal_text_are_read_too() -> None:
    parsed = parse("t.h.v11 2026-11-23_14.log", datetime_format="v1 " + DEFAULT_DATETIME)
    assert parsed is not None and parsed.when == datetime(2026, 11, 23, 14, tzinfo=UTC)
    assert parse("t.h.v12 2026-11-23_14.log", datetime_format="v1 " + DEFAULT_DATETIME) is None


def test_twelve_hour_clock_and_fractions() -> None:
    datetime_format = "%Y%m%d %I%M%S.000 %p"
    parsed = parse("t.h.20261123 120509.250 AM.log", datetime_format=datetime_format)
    assert parsed is not None
    assert parsed.when == datetime(2026, 11, 23, 0, 5, 9, 250000, tzinfo=UTC)
    trimmed = parse("t.h.20261123 01.log", datetime_format="%Y%m%d %H.999")
    assert trimmed is not None and trimmed.when == datetime(2026, 11, 23, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("filename_format", "datetime_format", "complaint"),
    [
        ("<HOST>.<DATETIME>.log", DEFAULT_DATETIME, "no <TOPIC>"),
        ("<TOPIC>/..", DEFAULT_DATETIME, "no <TOPIC>"),
        ("<TOPIC>.<DATETIME>.log", "%H", "gives no date"),
        ("<TOPIC>.<DATETIME>.log", "%Y-%m_%H", "gives no date"),
        ("<TOPIC>\x00.log", DEFAULT_DATETIME, "NUL"),
    ],
)
def test_a_format_names_cannot_be_read_from_is_a_bad_name(
    filename_format: str, datetime_format: str, complaint: str
) -> None:
    with pytest.raises(BadName, match=re.escape(complaint)) as raised:
        NameParser.build(filename_format, datetime_format)
    assert "\n" not in str(raised.value)


def test_a_day_of_the_year_gives_the_date() -> None:
    parsed = parse("t.h.2026-064.log", datetime_format="%Y-002")
    assert parsed is not None and parsed.when == datetime(2026, 3, 5, tzinfo=UTC)


# ---------------------------------------------------------------------------------------
# Round trip: every name FilenameFormat gives reads back as what it was made from.

# Each with the unit it keeps, and whether the name holds the zone.
DATETIME_FORMATS = [
    (DEFAULT_DATETIME, "hour", False),
    ("%Y%m%d%H%M%S", "second", False),
    ("%Y/%m/%d/%H", "hour", False),
    ("%a %d %b %Y %H%M", "minute", False),
    ("%A, %B %d %y %I%p", "hour", False),
    ("%y%m%d-%H%M%S.000", "millisecond", False),
    ("v1 %Y-%m-%d_%H", "hour", False),  # Go's quirk: v1 prints the month
    ("%Y%m%dT%H%M%z", "minute", True),
    ("%Y-%m-%d %H %Z", "hour", True),
]
ZONES = [UTC, NEW_YORK, KATHMANDU, ZoneInfo("America/St_Johns"), ZoneInfo("Australia/Sydney")]
TOPICS = st.from_regex(r"[.a-zA-Z0-9_-]{1,64}(#ephemeral)?", fullmatch=True)
HOSTNAMES = st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9-]{0,15}(\.[a-z0-9-]{1,10}){0,2}", fullmatch=True)


# when to a unit, on its own wall clock (replace() keeps the fold: which of two 01:00s).
TRUNCATED: dict[str, Callable[[datetime], datetime]] = {
    "hour": lambda when: when.replace(minute=0, second=0, microsecond=0),
    "minute": lambda when: when.replace(second=0, microsecond=0),
    "second": lambda when: when.replace(microsecond=0),
    "millisecond": lambda when: when.replace(microsecond=when.microsecond // 1000 * 1000),
}


@given(
    topic=TOPICS,
    hostname=HOSTNAMES,
    when=st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(2068, 12, 30),
        timezones=st.sampled_from(ZONES),
        allow_imaginary=False,
    ),
    formats=st.sampled_from(DATETIME_FORMATS),
    filename_format=st.sampled_from([DEFAULT_FORMAT, SUBDIRECTORIES]),
    rev=st.integers(min_value=0, max_value=10**7),
    gzip=st.booleans(),
    rev_required=st.booleans(),
)
@example(
    topic="orders",
    hostname="host-1.example",
    when=datetime(2026, 11, 23, 14, 30, tzinfo=UTC),
    formats=DATETIME_FORMATS[0],
    filename_format=DEFAULT_FORMAT,
    rev=3,
    gzip=True,
    rev_required=True,
)
def test_names_read_back_as_they_were_made(
    topic: str,
    hostname: str,
    when: datetime,
    formats: tuple[str, str, bool],
    filename_format: str,
    rev: int,
    gzip: bool,
    rev_required: bool,
) -> None:
    datetime_format, unit, zoned = formats
    assume(topic not in (".", ".."))  # a directory of their own in SUBDIRECTORIES
    # The documented choice: a host ending in -NNNNNN reads as the revision.
    assume(not re.search(r"-[0-9]{6,}$", hostname.split(".")[0]))
    name_format = FilenameFormat.build(
        filename_format,
        datetime_format=datetime_format,
        host_identifier="",
        gzip=gzip,
        rev_required=rev_required or gzip,
        hostname=hostname,
    )
    name = name_format.relative_path(name_format.stem(topic, when), rev)

    # nsq_to_file names by its local time: where it ran, but an offset is enough.
    zone = NEW_YORK if "%z" in datetime_format else when.tzinfo
    parsed = NameParser.build(filename_format, datetime_format, zone=zone).parse(str(name))

    assert parsed is not None, name
    assert (parsed.topic, parsed.host) == (topic, hostname.split(".")[0])
    assert parsed.rev == (rev if rev_required or gzip else None)
    assert parsed.gzip == gzip and parsed.pid is None and parsed.when is not None
    expected = TRUNCATED[unit](when)
    if zoned:
        assert parsed.when.astimezone(UTC) == expected.astimezone(UTC)
    else:  # the wall clock, the earlier of two when clocks go back
        assert parsed.when.tzinfo is when.tzinfo
        assert parsed.when.replace(tzinfo=None) == expected.replace(tzinfo=None)
        assert parsed.when.fold == 0


def test_a_fixed_offset_round_trips_with_z() -> None:
    zone = timezone(timedelta(hours=-3, minutes=-30))
    when = datetime(2026, 11, 23, 14, 7, tzinfo=zone)
    parsed = parse(f"t.h.{when:%Y%m%dT%H%M%z}.log", datetime_format="%Y%m%dT%H%M%z")
    assert parsed is not None and parsed.when == when
    assert parsed.when.utcoffset() == zone.utcoffset(when)
