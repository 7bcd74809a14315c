"""nsq_to_file's file names: Go's strftime, the filename format, and the directory they may
not leave.

Expected texts come from Go (NSQ v1.3.0's strftime and Go's time.Format, run for these
instants); one test runs Go's nsq_to_file itself and compares the file it makes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path, PurePosixPath
from zoneinfo import ZoneInfo

import pytest

from nsqtools.archive.names import BadName, FilenameFormat
from nsqtools.archive.timelayout import go_strftime
from nsqtools.testing import Nsqd, find_binary, wait_until

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


def names(
    filename_format: str = DEFAULT_FORMAT,
    *,
    datetime_format: str = DEFAULT_DATETIME,
    host_identifier: str = "",
    gzip: bool = False,
    rev_required: bool = False,
    pid: int | None = 4242,
) -> FilenameFormat:
    return FilenameFormat.build(
        filename_format,
        datetime_format=datetime_format,
        host_identifier=host_identifier,
        gzip=gzip,
        rev_required=rev_required,
        pid=pid,
        hostname="box.example.com",
    )


def path_of(name_format: FilenameFormat, topic: str, rev: int = 0) -> str:
    return str(name_format.relative_path(name_format.stem(topic, SUNDAY), rev))


def test_without_rev_required_the_rev_is_removed() -> None:
    name_format = names()
    assert name_format.stem("t", SUNDAY) == "t.box.2026-11-22_00.log"
    assert path_of(name_format, "t", rev=3) == "t.box.2026-11-22_00.log"


@pytest.mark.parametrize("filename_format", ["<TOPIC>.log", "<TOPIC><rev>.log"])
def test_rev_required_and_missing_is_a_bad_name(filename_format: str) -> None:
    with pytest.raises(BadName) as raised:
        names(filename_format, rev_required=True)
    message = str(raised.value)
    assert "--filename-format" in message and "<REV>" in message and "--gzip" in message
    assert "\n" not in message


def test_the_rev_is_six_digits_or_more() -> None:
    name_format = names(rev_required=True)
    stem = name_format.stem("t", SUNDAY)
    assert stem == "t.box<REV>.2026-11-22_00.log"
    assert path_of(name_format, "t") == "t.box-000000.2026-11-22_00.log"
    assert path_of(name_format, "t", 42) == "t.box-000042.2026-11-22_00.log"
    assert path_of(name_format, "t", 1234567) == "t.box-1234567.2026-11-22_00.log"


def test_gzip_appends_gz_unless_the_name_ends_in_it() -> None:
    assert path_of(names(gzip=True, rev_required=True), "t").endswith(".log.gz")
    assert path_of(names("<TOPIC><REV>.gz", gzip=True, rev_required=True), "t") == "t-000000.gz"
    topic_last = names("<REV>/<TOPIC>", gzip=True, rev_required=True)
    assert path_of(topic_last, "t") == "-000000/t.gz"
    assert path_of(topic_last, "t.gz") == "-000000/t.gz"  # Go looks at the topic too


@pytest.mark.parametrize(
    ("identifier", "host"),
    [("", "box"), ("x-<SHORT_HOST>", "x-box"), ("<HOSTNAME>", "box.example.com"),
     ("<SHORT_HOST>+<SHORT_HOST>", "box+box"), ("fixed", "fixed")],
)  # fmt: skip
def test_the_host_identifier(identifier: str, host: str) -> None:
    assert names("<HOST>", host_identifier=identifier).stem("t", SUNDAY) == host


def test_the_pid_is_ours_unless_given() -> None:
    assert names("<PID>").stem("t", SUNDAY) == "4242"
    assert names("<PID>", pid=None).stem("t", SUNDAY) == str(os.getpid())


def test_tokens_are_replaced_in_gos_order() -> None:
    """The host identifier goes in after <TOPIC> and before <PID> and <DATETIME>."""
    identifier = "<TOPIC>,<PID>,<DATETIME>"
    name_format = names("<HOST>", host_identifier=identifier, datetime_format="%H")
    assert name_format.stem("t", SUNDAY) == "<TOPIC>,4242,00"


def test_the_stem_changes_with_the_datetime_only() -> None:
    name_format = names(rev_required=True)
    later_same_hour = SUNDAY + timedelta(minutes=3)
    assert name_format.stem("t", later_same_hour) == name_format.stem("t", SUNDAY)
    assert name_format.stem("t", SUNDAY + timedelta(hours=1)) != name_format.stem("t", SUNDAY)


def test_a_nul_character_is_a_bad_name() -> None:
    with pytest.raises(BadName, match="NUL"):
        names("<TOPIC>\x00.log")


@pytest.mark.parametrize(
    ("filename_format", "datetime_format", "topic"),
    [
        ("<TOPIC>/x.log", DEFAULT_DATETIME, ".."),
        ("<TOPIC>", DEFAULT_DATETIME, ".."),
        ("../<TOPIC>.log", DEFAULT_DATETIME, "t"),
        ("a/../../<TOPIC>.log", DEFAULT_DATETIME, "t"),
        ("/abs/../../<TOPIC>.log", DEFAULT_DATETIME, "t"),
        ("<DATETIME>/<TOPIC>.log", "%Y/../..", "t"),
        ("<HOST>/<TOPIC>.log", DEFAULT_DATETIME, "t"),  # with host identifier ".."
    ],
)
def test_a_name_outside_the_directory_is_a_bad_name(
    filename_format: str, datetime_format: str, topic: str
) -> None:
    name_format = names(filename_format, datetime_format=datetime_format, host_identifier="..")
    with pytest.raises(BadName, match="outside"):
        path_of(name_format, topic)
    with pytest.raises(BadName, match=f"topic {topic!r}: .*outside"):
        name_format.check_topic(topic)


@pytest.mark.parametrize(
    ("filename_format", "topic", "expected"),
    [
        ("/abs/<TOPIC>.log", "t", "abs/t.log"),  # Go's path.Join: still inside
        ("a/../<TOPIC>.log", "t", "t.log"),
        ("<TOPIC>//./x/", "t", "t/x"),
        ("a/<TOPIC>/x", "..", "x"),
        ("a/<TOPIC>/x", ".", "a/x"),
        ("<TOPIC>.log", "..", "...log"),
    ],
)
def test_names_inside_the_directory_are_normalised_as_go_joins_them(
    filename_format: str, topic: str, expected: str
) -> None:
    name_format = names(filename_format)
    assert name_format.relative_path(name_format.stem(topic, SUNDAY), 0) == PurePosixPath(expected)
    name_format.check_topic(topic)


@pytest.mark.parametrize("filename_format", ["<REV>", "/", "a/..", "./<REV>"])
def test_an_empty_name_is_a_bad_name(filename_format: str) -> None:
    with pytest.raises(BadName, match="empty"):
        path_of(names(filename_format), "t")


# Every strftime directive and Go layout token whose value stays the same within an hour
# (minutes are allowed for by trying the minute before and after).
DIFFERENTIAL_DATETIME = (
    "%Y %y %m %B %b %d %A %a %H %I %p %M %Z %z %% "
    "Jan January Mon Monday 2006 06 01 02 _2 __2 002 1 2 3 03 15 4 04 PM pm MST "
    "Z070000 Z07:00:00 Z0700 Z07:00 Z07 -070000 -07:00:00 -0700 -07:00 -07"
)


def test_gos_nsq_to_file_names_its_file_as_we_do(nsqd: Nsqd, tmp_path: Path) -> None:
    topic = "names.diff"
    nsqd.publish(topic, b"waiting")
    output = tmp_path / "out"
    options = {
        "filename_format": "<TOPIC>/sub/<HOST>-<PID>/<DATETIME><REV>.log",
        "datetime_format": DIFFERENTIAL_DATETIME,
        "host_identifier": "x-<SHORT_HOST>",
    }
    go_flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    before = datetime.now(KATHMANDU)
    with (tmp_path / "nsq_to_file.log").open("wb") as log:
        go = subprocess.Popen(
            [str(find_binary("nsq_to_file")), f"--nsqd-tcp-address={nsqd.tcp_address}",
             f"--topic={topic}", f"--output-dir={output}", "--gzip", *go_flags],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TZ": "Asia/Kathmandu"},
        )  # fmt: skip
    try:
        wait_until(lambda: any(p.is_file() for p in output.rglob("*")), 15, "Go's file")
        go.send_signal(signal.SIGTERM)
        assert go.wait(timeout=15) == 0
    finally:
        go.kill()
        go.wait()
    after = datetime.now(KATHMANDU)
    [made] = [path for path in output.rglob("*") if path.is_file()]

    ours = our_format(**options, pid=go.pid)
    expected = {
        ours.relative_path(ours.stem(topic, when), 0)
        for when in (before, after, before + (after - before) / 2)
    }
    assert PurePosixPath(made.relative_to(output).as_posix()) in expected
    assert made.relative_to(output).parts[:3] == (
        topic,
        "sub",
        f"x-{socket.gethostname().split('.')[0]}-{go.pid}",
    )


def our_format(
    filename_format: str, datetime_format: str, host_identifier: str, pid: int
) -> FilenameFormat:
    return FilenameFormat.build(
        filename_format,
        datetime_format=datetime_format,
        host_identifier=host_identifier,
        gzip=True,
        rev_required=True,
        pid=pid,
    )
