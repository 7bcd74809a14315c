"""nsq_to_file's file names: Go's strftime, the filename format, the directory they may not
leave, and finding what an earlier run left behind.

Expected texts come from Go (NSQ v1.3.0's strftime and Go's time.Format, run for these
instants); one test runs Go's nsq_to_file itself and compares the file it makes.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest

from nsqtools.archive.names import go_strftime, short_hostname

KATHMANDU = ZoneInfo("Asia/Kathmandu")  # +05:45, named "+0545"
# A Thursday, the 64th day of the year, 14:07:09.1205 at +05:45.
THURSDAY = datetime(2026, 3, 5, 14, 7, 9, 120500, tzinfo=KATHMANDU)
# Go's own example of the quirk, in UTC: a Sunday, 00:56:37.
SUNDAY = datetime(2026, 11, 22, 0, 56, 37, tzinfo=UTC)
DEFAULT_FORMAT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
DEFAULT_DATETIME = "%Y-%m-%d_%H"


def test_the_default_datetime_format_is_the_hour() -> None:
    assert go_strftime(DEFAULT_DATETIME, SUNDAY) == "2026-11-22_00"


def test_go_layout_tokens_in_the_literal_text_expand_too() -> None:
    assert go_strftime("v1 %Y%m%d-%H%M%S %% Jan", SUNDAY) == "v11 20261122-005637 % Nov"


@pytest.mark.parametrize(
    ("directive", "expected"),
    [
        ("%B", "November"), ("%b", "Nov"), ("%m", "11"), ("%A", "Sunday"), ("%a", "Sun"),
        ("%d", "22"), ("%H", "00"), ("%I", "12"), ("%M", "56"), ("%S", "37"), ("%Y", "2026"),
        ("%y", "26"), ("%p", "AM"), ("%Z", "UTC"), ("%z", "+0000"), ("%%", "%"),
        ("%q", "%q"), ("%", "%"), ("%%Y", "%Y"), ("%q%Y", "%q2026"),
    ],
)  # fmt: skip
def test_each_strftime_directive(directive: str, expected: str) -> None:
    assert go_strftime(directive, SUNDAY) == expected


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("January", "March"), ("Jan", "Mar"), ("1", "3"), ("01", "03"),
        ("Monday", "Thursday"), ("Mon", "Thu"), ("2", "5"), ("_2", " 5"), ("02", "05"),
        ("__2", " 64"), ("002", "064"), ("15", "14"), ("3", "2"), ("03", "02"), ("4", "7"),
        ("04", "07"), ("5", "9"), ("05", "09"), ("2006", "2026"), ("06", "26"),
        ("PM", "PM"), ("pm", "pm"), ("MST", "+0545"),
        ("Z070000", "+054500"), ("Z07:00:00", "+05:45:00"), ("Z0700", "+0545"),
        ("Z07:00", "+05:45"), ("Z07", "+05"), ("-070000", "+054500"),
        ("-07:00:00", "+05:45:00"), ("-0700", "+0545"), ("-07:00", "+05:45"), ("-07", "+05"),
        (".000", ".120"), (".999", ".12"), (",000", ",120"), (",9", ",1"), (".9", ".1"),
        (".0000000000", ".120500000"),  # at most 9 digits
    ],
)  # fmt: skip
def test_each_go_layout_token(layout: str, expected: str) -> None:
    assert go_strftime(layout, THURSDAY) == expected


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("Janx", "Janx"), ("JanX", "MarX"), ("Month", "Month"), ("MonX", "ThuX"),
        ("_2006", "_2026"), ("__2006", " 64026"), ("20067", "20267"), ("12", "35"),
        (".01", ".03"), (".0001", ".0003"), ("v1", "v3"), ("Mo", "Mo"), ("P", "P"),
    ],
)  # fmt: skip
def test_go_reads_tokens_by_its_own_rules(layout: str, expected: str) -> None:
    """A word does not hold "Jan" or "Mon"; "_2006" is "_" and a year; a fraction is
    a run of 0s or 9s that no other digit follows."""
    assert go_strftime(layout, THURSDAY) == expected


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        (UTC, "UTC Z +00:00:00 Z "),
        (ZoneInfo("America/St_Johns"), "NST -03:30:00 -03:30:00 -03 "),
    ],
)
def test_zones_west_and_utc(zone: tzinfo, expected: str) -> None:
    """Z forms print "Z" for UTC only; no fraction prints for a whole second with .9."""
    when = datetime(2026, 3, 5, 12, 0, 0, tzinfo=zone)
    assert go_strftime("MST Z07:00:00 -07:00:00 Z07 .9", when) == expected


class Nameless(tzinfo):
    """A zone without an abbreviation, as Go has for a fixed offset it made up."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=-2, minutes=-30)

    def tzname(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)


def test_a_zone_without_a_name_prints_its_offset() -> None:
    assert go_strftime("%Z", datetime(2026, 3, 5, tzinfo=Nameless())) == "-0230"


def test_a_sub_minute_negative_offset_prints_as_go_does() -> None:
    """Go divides with truncation: Accra's LMT (-0:00:52) prints "+00" and "-52"."""
    when = datetime(1900, 1, 1, tzinfo=UTC).astimezone(ZoneInfo("Africa/Accra"))
    assert go_strftime("-07:00:00 Z070000 MST", when) == "+00:00:-52 +0000-52 LMT"


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        go_strftime("%z", datetime(2026, 3, 5))


def test_the_short_hostname_stops_at_the_first_dot() -> None:
    assert short_hostname() == socket.gethostname().split(".")[0]
    assert "." not in short_hostname()
