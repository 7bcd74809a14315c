"""ClientConfig: go-nsq's option keys, defaults, text parsing, ranges and cross-field checks."""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import nsqtools
from nsqtools.config import OPTION_NAMES, ClientConfig, ConfigError
from nsqtools.durations import format_duration, parse_duration

DEFAULTS: dict[str, Any] = {
    "dial_timeout": 1.0,
    "read_timeout": 60.0,
    "write_timeout": 1.0,
    "local_addr": "",
    "lookupd_poll_interval": 60.0,
    "lookupd_poll_jitter": 0.3,
    "lookupd_poll_timeout": 60.0,
    "max_requeue_delay": 900.0,
    "default_requeue_delay": 90.0,
    "backoff_strategy": "exponential",
    "max_backoff_duration": 120.0,
    "backoff_multiplier": 1.0,
    "max_attempts": 0,  # ours: never give up (go-nsq's default is 5)
    "low_rdy_idle_timeout": 10.0,
    "low_rdy_timeout": 30.0,
    "rdy_redistribute_interval": 5.0,
    "client_id": "box",
    "hostname": "box.example.com",
    "user_agent": f"nsqtools/{nsqtools.__version__}",
    "topology_region": "",
    "topology_zone": "",
    "desired_tag": "",  # the Youzan fork's go-nsq (DesiredTag)
    "partition_wait": 10.0,  # ours, for the Youzan fork
    "heartbeat_interval": 30.0,
    "sample_rate": 0,
    "tls_v1": False,
    "tls_root_ca_file": "",
    "tls_insecure_skip_verify": False,
    "tls_cert": "",
    "tls_key": "",
    "tls_min_version": "",
    "deflate": False,
    "deflate_level": 6,
    "snappy": False,
    "output_buffer_size": 16384,
    "output_buffer_timeout": 0.25,
    "max_in_flight": 1,
    "msg_timeout": 0.0,
    "auth_secret": "",
    "skip_lookupd_authorization": True,
}
BOOL_OPTIONS = [
    "tls_v1",
    "tls_insecure_skip_verify",
    "deflate",
    "snappy",
    "skip_lookupd_authorization",
]
INT_OPTIONS = [
    "max_attempts",
    "sample_rate",
    "deflate_level",
    "output_buffer_size",
    "max_in_flight",
]
DURATION_OPTIONS = [name for name, value in DEFAULTS.items() if isinstance(value, float)]
DURATION_OPTIONS.remove("lookupd_poll_jitter")
TEXT_OPTIONS = [name for name, value in DEFAULTS.items() if isinstance(value, str)]
TRUE_TEXTS = ["1", "t", "T", "TRUE", "true", "True"]
FALSE_TEXTS = ["0", "f", "F", "FALSE", "false", "False"]
# Same examples on every run, and nothing carried over from earlier runs.
DETERMINISTIC = settings(derandomize=True, database=None)


class Bounds(NamedTuple):
    """An option's inclusive range and a value just outside each end; None: unbounded."""

    name: str
    low: str
    high: str | None
    below: str
    above: str | None


RANGES = [
    Bounds(*row)
    for row in [
        ("read_timeout", "100ms", "5m0s", "99ms", "5m0.001s"),
        ("write_timeout", "100ms", "5m0s", "99.999999ms", "6m0s"),
        ("lookupd_poll_interval", "10ms", "5m0s", "9ms", "5m1s"),
        ("lookupd_poll_jitter", "0", "1", "-0.1", "1.5"),
        ("max_requeue_delay", "0s", "1h0m0s", "-1ns", "1h0m0.000000001s"),
        ("default_requeue_delay", "0s", "1h0m0s", "-1s", "61m"),
        ("max_backoff_duration", "0s", "1h0m0s", "-1s", "2h"),
        ("backoff_multiplier", "0s", "1h0m0s", "-1ms", "1h1s"),
        ("max_attempts", "0", "65535", "-1", "70000"),
        ("low_rdy_idle_timeout", "1s", "5m0s", "999ms", "5m1s"),
        ("low_rdy_timeout", "1s", "5m0s", "0s", "10m"),
        ("rdy_redistribute_interval", "1ms", "5s", "999\u00b5s", "5.001s"),
        ("sample_rate", "0", "99", "-1", "100"),
        ("deflate_level", "1", "9", "0", "10"),
        ("max_in_flight", "0", None, "-1", None),
        ("msg_timeout", "0s", None, "-1ns", None),
        ("partition_wait", "0s", "1h0m0s", "-1s", "61m"),
    ]
]


@pytest.fixture(autouse=True)
def fixed_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "box.example.com")


def config_with(*pairs: str) -> ClientConfig:
    config = ClientConfig()
    config.apply_options(pairs)
    return config


def set_error(key: str, value: str | None) -> str:
    with pytest.raises(ConfigError) as raised:
        ClientConfig().set(key, value)
    return str(raised.value)


def test_defaults_are_go_nsq_v1_1_0() -> None:
    assert dataclasses.asdict(ClientConfig()) == DEFAULTS


def test_defaults_are_valid() -> None:
    ClientConfig().validate()


def test_hostname_defaults_are_read_when_a_config_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "plain")
    config = ClientConfig()
    assert (config.client_id, config.hostname) == ("plain", "plain")


def test_option_names_are_the_field_names_in_order() -> None:
    assert isinstance(OPTION_NAMES, tuple)
    assert list(OPTION_NAMES) == list(DEFAULTS)
    assert tuple(field.name for field in dataclasses.fields(ClientConfig)) == OPTION_NAMES


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("name", BOOL_OPTIONS)
@pytest.mark.parametrize("text", TRUE_TEXTS)
def test_bool_true_texts(name: str, text: str) -> None:
    config = ClientConfig()
    setattr(config, name, False)
    config.set(name, text)
    assert getattr(config, name) is True


@pytest.mark.parametrize("name", BOOL_OPTIONS)
@pytest.mark.parametrize("text", FALSE_TEXTS)
def test_bool_false_texts(name: str, text: str) -> None:
    config = ClientConfig()
    setattr(config, name, True)
    config.set(name, text)
    assert getattr(config, name) is False


@pytest.mark.parametrize("text", ["yes", "no", "on", "tRUE", "", " true", "2", "-1", "y"])
def test_bool_rejects_other_texts(text: str) -> None:
    assert set_error("snappy", text) == (
        f'invalid value "{text}" for option snappy: not a boolean (use true or false)'
    )


@pytest.mark.parametrize("name", BOOL_OPTIONS)
def test_bare_key_sets_a_bool_true(name: str) -> None:
    config = ClientConfig()
    setattr(config, name, False)
    config.set(name, None)
    assert getattr(config, name) is True


@pytest.mark.parametrize("name", INT_OPTIONS + DURATION_OPTIONS + TEXT_OPTIONS)
def test_bare_key_needs_a_value_for_other_options(name: str) -> None:
    assert set_error(name, None) == f"option {name} needs a value: use {name},VALUE"


def test_bare_key_for_the_float_option() -> None:
    message = "option lookupd_poll_jitter needs a value: use lookupd_poll_jitter,VALUE"
    assert set_error("lookupd_poll_jitter", None) == message


@pytest.mark.parametrize(
    ("text", "number"),
    [("0", 0), ("7", 7), ("+7", 7), ("007", 7), ("-0", 0), ("16384", 16384), ("4096", 4096)],
)
def test_int_texts(text: str, number: int) -> None:
    config = ClientConfig()
    config.set("output_buffer_size", text)
    assert config.output_buffer_size == number


@pytest.mark.parametrize(
    "text", ["", "abc", "1.0", "1e3", " 1", "1 ", "1_000", "0x10", "++1", "+", "\uff11", "\u0663"]
)
def test_int_rejects_non_integers(text: str) -> None:
    assert set_error("max_in_flight", text) == (
        f'invalid value "{text}" for option max_in_flight: not an integer'
    )


@pytest.mark.parametrize(
    ("text", "number"),
    [("9223372036854775807", (1 << 63) - 1), ("-9223372036854775808", -(1 << 63))],
)
def test_int_accepts_the_int64_range(text: str, number: int) -> None:
    config = ClientConfig()
    config.set("output_buffer_size", text)
    assert config.output_buffer_size == number


@pytest.mark.parametrize(
    "text", ["9223372036854775808", "-9223372036854775809", "1" * 20, "9" * 5000]
)
def test_int_rejects_beyond_int64(text: str) -> None:
    assert set_error("output_buffer_size", text) == (
        f'invalid value "{text}" for option output_buffer_size: out of range for a 64-bit integer'
    )


def test_int_ignores_leading_zeros_however_many() -> None:
    config = ClientConfig()
    config.set("max_in_flight", "0" * 5000 + "42")
    assert config.max_in_flight == 42


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0.5", 0.5),
        (".5", 0.5),
        ("1.", 1.0),
        ("5e-1", 0.5),
        ("5E-1", 0.5),
        ("+0.25", 0.25),
        ("-0", 0.0),
        ("1", 1.0),
        ("0x1p-1", 0.5),
        ("0X.8P0", 0.5),
        ("1e-400", 0.0),
    ],
)
def test_float_texts(text: str, number: float) -> None:
    config = ClientConfig()
    config.set("lookupd_poll_jitter", text)
    assert config.lookupd_poll_jitter == number


@pytest.mark.parametrize(
    "text", ["", "abc", "0.5 ", "1_0.5", "0x1", "0x1.8", ".", "e5", "1e", "--1", "+nan", "\uff10.5"]
)
def test_float_rejects_non_numbers(text: str) -> None:
    assert set_error("lookupd_poll_jitter", text) == (
        f'invalid value "{text}" for option lookupd_poll_jitter: not a number'
    )


@pytest.mark.parametrize("text", ["1e400", "-1e400", "0x1p99999"])
def test_float_rejects_overflow(text: str) -> None:
    assert set_error("lookupd_poll_jitter", text) == (
        f'invalid value "{text}" for option lookupd_poll_jitter: out of range for a 64-bit float'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("inf", "option lookupd_poll_jitter must be at most 1.0, got inf"),
        ("+Infinity", "option lookupd_poll_jitter must be at most 1.0, got inf"),
        ("-INF", "option lookupd_poll_jitter must be at least 0.0, got -inf"),
        ("nan", "option lookupd_poll_jitter must be at least 0.0, got nan"),
        ("NaN", "option lookupd_poll_jitter must be at least 0.0, got nan"),
    ],
)
def test_float_special_values_parse_but_fail_the_range(text: str, message: str) -> None:
    assert set_error("lookupd_poll_jitter", text) == message


@pytest.mark.parametrize("name", DURATION_OPTIONS)
def test_durations_use_go_syntax(name: str) -> None:
    config = ClientConfig()
    config.set(name, "1.5s")
    assert getattr(config, name) == 1.5


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1000", 'invalid duration "1000": missing unit'),
        ("1d", 'unknown unit "d" in duration "1d"'),
        ("", 'invalid duration "": expected a number with a unit, like 300ms or 2h45m'),
        ("1 s", 'unknown unit " s" in duration "1 s"'),
    ],
)
def test_durations_reject_other_syntax(text: str, reason: str) -> None:
    assert set_error("read_timeout", text) == (
        f'invalid value "{text}" for option read_timeout: {reason}'
    )


@pytest.mark.parametrize("name", TEXT_OPTIONS)
def test_text_is_taken_as_is(name: str, tmp_path: Path) -> None:
    config = ClientConfig()
    value = {
        "local_addr": "127.0.0.1:0",
        "backoff_strategy": "full_jitter",
        "tls_min_version": "tls1.2",
    }.get(name, " any text, with commas ")
    config.set(name, value)
    assert getattr(config, name) == value


def test_dashes_in_the_key_read_as_underscores() -> None:
    config = ClientConfig()
    config.set("max-in-flight", "200")
    config.set("tls-v1", None)
    assert (config.max_in_flight, config.tls_v1) == (200, True)


def test_messages_use_the_underscored_name() -> None:
    assert set_error("max-in-flight", "x") == (
        'invalid value "x" for option max_in_flight: not an integer'
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("max_inflight", 'unknown option "max_inflight" (did you mean max_in_flight?)'),
        ("max-inflight", 'unknown option "max-inflight" (did you mean max_in_flight?)'),
        ("tls_v2", 'unknown option "tls_v2" (did you mean tls_v1, tls_key?)'),
        ("bogus", 'unknown option "bogus"'),
        ("", 'unknown option ""'),
        ("MAX_IN_FLIGHT", 'unknown option "MAX_IN_FLIGHT"'),
        ("tls_config", 'unknown option "tls_config"'),
        ("deflate_lvl", 'unknown option "deflate_lvl" (did you mean deflate_level, deflate?)'),
        ("a\nb", 'unknown option "a\\nb"'),
    ],
)
def test_unknown_options_are_named_with_close_matches(key: str, message: str) -> None:
    assert set_error(key, "1") == message


@pytest.mark.parametrize("bounds", RANGES, ids=[bounds.name for bounds in RANGES])
def test_range_bounds_are_inclusive(bounds: Bounds) -> None:
    for bound in (bounds.low, bounds.high):
        if bound is not None:
            config = ClientConfig()
            config.set("heartbeat_interval", "-1s")  # so that read_timeout may go down to 100ms
            config.set(bounds.name, bound)
            config.validate()
            assert getattr(config, bounds.name) == parsed(bounds.name, bound)


@pytest.mark.parametrize("bounds", RANGES, ids=[bounds.name for bounds in RANGES])
def test_values_below_the_range_are_rejected(bounds: Bounds) -> None:
    name, low, below = bounds.name, bounds.low, bounds.below
    assert set_error(name, below) == (
        f"option {name} must be at least {shown(name, low)}, got {shown(name, below)}"
    )


BOUNDED_ABOVE = [bounds for bounds in RANGES if bounds.high is not None]


@pytest.mark.parametrize("bounds", BOUNDED_ABOVE, ids=[bounds.name for bounds in BOUNDED_ABOVE])
def test_values_above_the_range_are_rejected(bounds: Bounds) -> None:
    name, high, above = bounds.name, bounds.high, bounds.above
    assert high is not None
    assert above is not None
    assert set_error(name, above) == (
        f"option {name} must be at most {shown(name, high)}, got {shown(name, above)}"
    )


UNBOUNDED = [
    (name, extreme)
    for name in DURATION_OPTIONS + INT_OPTIONS
    if name not in {bounds.name for bounds in RANGES}
    for extreme in (["-1000h", "1000h"] if name in DURATION_OPTIONS else ["-1", str(1 << 40)])
]


@pytest.mark.parametrize(("name", "extreme"), UNBOUNDED)
def test_options_without_a_range_take_any_value(name: str, extreme: str) -> None:
    config = ClientConfig()
    config.set(name, extreme)
    assert getattr(config, name) == parsed(name, extreme)


def parsed(name: str, text: str) -> float:
    """The value an option's text stands for, worked out without ClientConfig."""
    return parse_duration(text) if name in DURATION_OPTIONS else float(text)


def shown(name: str, text: str) -> str:
    """How a range message shows a value: durations in Go syntax, numbers as Python prints them."""
    if name in DURATION_OPTIONS:
        return format_duration(parse_duration(text))
    if name == "lookupd_poll_jitter":
        return str(float(text))
    return text


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("max_attempts", "70000", "option max_attempts must be at most 65535, got 70000"),
        ("read_timeout", "10ms", "option read_timeout must be at least 100ms, got 10ms"),
        (
            "rdy_redistribute_interval",
            "6s",
            "option rdy_redistribute_interval must be at most 5s, got 6s",
        ),
        ("max_requeue_delay", "2h", "option max_requeue_delay must be at most 1h0m0s, got 2h0m0s"),
        ("lookupd_poll_jitter", "2", "option lookupd_poll_jitter must be at most 1.0, got 2.0"),
        ("max_in_flight", "-1", "option max_in_flight must be at least 0, got -1"),
    ],
)
def test_range_messages(name: str, text: str, message: str) -> None:
    assert set_error(name, text) == message


def test_out_of_range_leaves_the_value_alone() -> None:
    config = ClientConfig()
    with pytest.raises(ConfigError):
        config.set("max_attempts", "70000")
    assert config.max_attempts == 0


@pytest.mark.parametrize(
    ("text", "value"), [("-1s", -1.0), ("-1ms", -0.001), ("-9999h", -35996400.0)]
)
def test_heartbeat_interval_may_be_negative_to_disable_heartbeats(text: str, value: float) -> None:
    config = config_with(f"heartbeat_interval,{text}")
    assert config.heartbeat_interval == value


@pytest.mark.parametrize("value", ["exponential", "full_jitter"])
def test_backoff_strategies(value: str) -> None:
    assert config_with(f"backoff_strategy,{value}").backoff_strategy == value


@pytest.mark.parametrize("value", ["linear", "", "Exponential", "full-jitter"])
def test_backoff_strategy_rejects_others(value: str) -> None:
    assert set_error("backoff_strategy", value) == (
        f'option backoff_strategy must be one of exponential, full_jitter, got "{value}"'
    )


@pytest.mark.parametrize("value", ["", "tls1.0", "tls1.1", "tls1.2", "tls1.3"])
def test_tls_min_versions(value: str) -> None:
    assert config_with(f"tls_min_version,{value}").tls_min_version == value


def test_tls_min_version_refuses_ssl3() -> None:
    assert set_error("tls_min_version", "ssl3.0") == (
        "option tls_min_version does not support ssl3.0 (SSL 3.0 is insecure); use tls1.0 or later"
    )


@pytest.mark.parametrize("value", ["tls1.4", "TLS1.2", "1.2", "tls12"])
def test_tls_min_version_rejects_others(value: str) -> None:
    assert set_error("tls_min_version", value) == (
        "option tls_min_version must be one of tls1.0, tls1.1, tls1.2, tls1.3 or empty,"
        f' got "{value}"'
    )


@pytest.mark.parametrize(
    "value",
    ["", "127.0.0.1:0", "10.0.0.1:4150", ":4150", "[::1]:4150", "[fe80::1%eth0]:0", "h:65535"],
)
def test_local_addr_accepts_host_port(value: str) -> None:
    assert config_with(f"local_addr,{value}").local_addr == value


@pytest.mark.parametrize(
    "value",
    ["host", "host:", ":", "::1:80", "host:65536", "host:http", "[::1]", "a b:1", "h:-1", "h:1 "],
)
def test_local_addr_rejects_others(value: str) -> None:
    assert set_error("local_addr", value) == (
        f'option local_addr must be a host:port address (IPv6 in brackets), got "{value}"'
    )


def test_apply_options_splits_at_the_first_comma() -> None:
    config = config_with("user_agent,a,b", "auth_secret,", "max_in_flight,10", "snappy")
    assert config.user_agent == "a,b"
    assert config.auth_secret == ""
    assert config.max_in_flight == 10
    assert config.snappy is True


def test_apply_options_later_pairs_win() -> None:
    assert config_with("max_in_flight,10", "max_in_flight,20").max_in_flight == 20


def test_apply_options_validates_after_all_pairs() -> None:
    config = config_with("heartbeat_interval,90s", "read_timeout,2m")
    assert (config.heartbeat_interval, config.read_timeout) == (90.0, 120.0)


def test_apply_options_validates_at_the_end() -> None:
    with pytest.raises(ConfigError, match="heartbeat_interval must not be more than read_timeout"):
        config_with("heartbeat_interval,90s")


def test_apply_options_overrides_win_over_pairs_and_are_validated() -> None:
    config = ClientConfig()
    config.apply_options(["snappy", "max_in_flight,10"], {"max_in_flight": 3, "deflate": True})
    assert (config.snappy, config.max_in_flight, config.deflate) == (True, 3, True)
    with pytest.raises(ConfigError, match="tls_cert needs option tls_key"):
        ClientConfig().apply_options([], {"tls_cert": __file__})
    with pytest.raises(ConfigError, match="max_in_flight must be at least 0"):
        ClientConfig().apply_options(["max_in_flight,5"], {"max_in_flight": -1})


def test_the_cli_builds_its_config_through_apply_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """One path from option text to a ClientConfig: the one the fuzz test below exercises."""
    from nsqtools.commands.options import build_config

    applied: list[list[str]] = []
    apply_options = ClientConfig.apply_options

    def spy(config: ClientConfig, pairs: Iterable[str], *args: Any) -> None:
        applied.append(list(pairs))
        apply_options(config, applied[-1], *args)

    monkeypatch.setattr(ClientConfig, "apply_options", spy)
    options = {"client_options": ("max_in_flight,10", "snappy,false"), "snappy": True}
    config = build_config("nsq_tail", options, max_in_flight=3)
    assert applied == [["max_in_flight,10", "snappy,false"]]
    assert (config.max_in_flight, config.snappy) == (3, True)  # the program's own options win


def test_apply_options_stops_at_the_first_bad_pair() -> None:
    with pytest.raises(ConfigError, match='unknown option "nope"'):
        config_with("nope,1", "max_in_flight,x")


@pytest.mark.parametrize(
    ("heartbeat", "read_timeout", "message"),
    [
        ("1m0.001s", "60s", "must not be more than read_timeout (1m0s), got 1m0.001s"),
        ("5s", "1s", "must not be more than read_timeout (1s), got 5s"),
    ],
)
def test_heartbeat_must_not_be_more_than_read_timeout(
    heartbeat: str, read_timeout: str, message: str
) -> None:
    config = ClientConfig()
    config.set("heartbeat_interval", heartbeat)
    config.set("read_timeout", read_timeout)
    with pytest.raises(ConfigError) as raised:
        config.validate()
    assert str(raised.value) == f"option heartbeat_interval {message}"


@pytest.mark.parametrize("heartbeat", ["-1s", "-1ms", "-1h", "0s", "59.999s", "60s"])
def test_disabled_zero_shorter_or_equal_heartbeats_pass(heartbeat: str) -> None:
    config_with(f"heartbeat_interval,{heartbeat}", "read_timeout,60s")


def test_validate_checks_ranges_of_assigned_fields() -> None:
    config = ClientConfig()
    config.max_in_flight = -5
    with pytest.raises(ConfigError) as raised:
        config.validate()
    assert str(raised.value) == "option max_in_flight must be at least 0, got -5"


def test_validate_checks_text_of_assigned_fields() -> None:
    config = dataclasses.replace(ClientConfig(), backoff_strategy="linear")
    with pytest.raises(ConfigError, match="backoff_strategy must be one of"):
        config.validate()


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for path in files.values():
        path.write_text("-----BEGIN PLACEHOLDER-----\n")
    return {name: str(path) for name, path in files.items()}


def test_readable_tls_files_pass(tls_files: dict[str, str]) -> None:
    config = config_with(
        f"tls_root_ca_file,{tls_files['ca']}",
        f"tls_cert,{tls_files['cert']}",
        f"tls_key,{tls_files['key']}",
        "tls_v1",
    )
    assert (config.tls_cert, config.tls_key) == (tls_files["cert"], tls_files["key"])


@pytest.mark.parametrize(("given", "missing"), [("tls_cert", "tls_key"), ("tls_key", "tls_cert")])
def test_tls_cert_and_key_come_together(
    tls_files: dict[str, str], given: str, missing: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        config_with(f"{given},{tls_files['cert']}")
    assert str(raised.value) == (
        f"option {given} needs option {missing} too (give both or neither)"
    )


@pytest.mark.parametrize("name", ["tls_root_ca_file", "tls_cert", "tls_key"])
def test_missing_tls_files_are_named(name: str, tls_files: dict[str, str], tmp_path: Path) -> None:
    config = dataclasses.replace(
        ClientConfig(), tls_cert=tls_files["cert"], tls_key=tls_files["key"]
    )
    missing = str(tmp_path / "absent.pem")
    setattr(config, name, missing)
    with pytest.raises(ConfigError) as raised:
        config.validate()
    assert str(raised.value) == f'option {name} cannot read "{missing}": No such file or directory'


def test_a_directory_is_not_a_readable_tls_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        config_with(f"tls_root_ca_file,{tmp_path}")
    assert str(raised.value) == f'option tls_root_ca_file cannot read "{tmp_path}": Is a directory'


@DETERMINISTIC
@given(st.integers(min_value=0, max_value=65535))
@example(0)
@example(65535)
def test_every_int_in_range_round_trips(number: int) -> None:
    config = ClientConfig()
    config.set("max_attempts", str(number))
    assert config.max_attempts == number


@DETERMINISTIC
@given(st.integers(min_value=0, max_value=3_600_000_000_000))
@example(0)
@example(3_600_000_000_000)
def test_every_duration_in_range_round_trips(nanoseconds: int) -> None:
    text = format_duration(nanoseconds / 1e9)
    config = ClientConfig()
    config.set("max_requeue_delay", text)
    assert format_duration(config.max_requeue_delay) == text


@DETERMINISTIC
@given(
    st.sampled_from((*OPTION_NAMES, "nope", "max-in-flight")),
    st.one_of(st.none(), st.text(max_size=30)),
)
def test_set_raises_only_one_line_config_errors(key: str, value: str | None) -> None:
    try:
        ClientConfig().set(key, value)
    except ConfigError as error:
        assert "\n" not in str(error)
        assert re.search(r"option|unknown", str(error))


# What the programs' own options may override (nsqtools.commands.options.build_config).
FIRST_CLASS_SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "snappy": st.booleans(),
        "deflate": st.booleans(),
        "deflate_level": st.integers(-3, 12),
        "max_in_flight": st.integers(-3, 10_000),
        "tls_min_version": st.sampled_from(["", "tls1.2", "ssl3.0"]),
    },
)


@DETERMINISTIC
@given(
    st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-,0123456789.", max_size=30)),
    FIRST_CLASS_SETTINGS,
)
def test_apply_options_raises_only_config_errors(
    pairs: list[str], overrides: dict[str, Any]
) -> None:
    try:
        ClientConfig().apply_options(pairs, overrides)
    except ConfigError as error:
        assert "\n" not in str(error)


def test_lookupd_headers_carry_the_secret_only_when_there_is_one() -> None:
    assert ClientConfig().lookupd_headers() == {}
    assert config_with("auth_secret,s").lookupd_headers() == {"Authorization": "Bearer s"}
    assert config_with("auth_secret,s", "skip_lookupd_authorization,false").lookupd_headers() == {}
