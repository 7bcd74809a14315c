"""Client settings: go-nsq's option table, as fed by --consumer-opt and --producer-opt.

Owns ClientConfig (one typed field per go-nsq v1.1.0 option key, with its default, go-nsq's
but for max_attempts, and its allowed range), the reading of `key,value` option text the
way go-nsq's ConfigFlag and Config.Set read it, and the checks that make a whole config
usable (ranges, heartbeat against read timeout, TLS files). Durations are float seconds,
written in Go syntax.
"""

from __future__ import annotations

import difflib
import math
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TypeAlias, TypeVar

from nsqtools import __version__
from nsqtools.durations import format_duration, parse_duration, quote

_Value: TypeAlias = bool | int | float | str
_T = TypeVar("_T")

_BOOLEANS: Mapping[str, bool] = MappingProxyType(
    {text: True for text in ("1", "t", "T", "TRUE", "true", "True")}
    | {text: False for text in ("0", "f", "F", "FALSE", "false", "False")}
)
_INTEGER = re.compile(r"([+-]?)0*([0-9]+)")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# strconv.ParseFloat's syntax: decimal, hexadecimal with a p exponent, or inf/infinity/nan.
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")
_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)
# Like net.SplitHostPort: the host may be empty, and an IPv6 host needs brackets.
_HOST_PORT = re.compile(r"(?:\[[^\[\]]*\]|[^:\[\]\s]*):([0-9]{1,5})")
_BACKOFF_STRATEGIES = ("exponential", "full_jitter")
_TLS_VERSIONS = ("tls1.0", "tls1.1", "tls1.2", "tls1.3")
_TLS_FILE_OPTIONS = ("tls_root_ca_file", "tls_cert", "tls_key")
_SPEC_KEY = "nsq_option"
_NO_OVERRIDES: Mapping[str, _Value] = MappingProxyType({})


class ConfigError(ValueError):
    """A bad option or setting; the message is one line, meant for the user as is."""


class ConfigRefused(ConfigError):
    """Options each valid alone that go-nsq's Config.Validate refuses together: the Go
    tools fail when they make their consumer (exit 1), not when they parse flags."""


def _parse_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text not in _BOOLEANS:
        raise ValueError("not a boolean (use true or false)")
    return _BOOLEANS[text]


def _parse_int(text: str) -> int:
    """strconv.ParseInt(text, 10, 64): optional sign and ASCII digits, nothing else."""
    match = _INTEGER.fullmatch(text)
    if match is None:
        raise ValueError("not an integer")
    sign, digits = match.groups()
    # 64 bits need at most 19 digits; counting first keeps int() away from huge input.
    if len(digits) > 19 or not _INT64_MIN <= int(sign + digits) <= _INT64_MAX:
        raise ValueError("out of range for a 64-bit integer")
    return int(sign + digits)


def _parse_float(text: str) -> float:
    """strconv.ParseFloat(text, 64), which refuses finite text that overflows to infinity."""
    if _SPECIAL_FLOAT.fullmatch(text):
        return float(text)
    if _DECIMAL_FLOAT.fullmatch(text):
        number = float(text)
    elif _HEX_FLOAT.fullmatch(text):
        number = _float_from_hex(text)
    else:
        raise ValueError("not a number")
    if math.isinf(number):
        raise ValueError("out of range for a 64-bit float")
    return number


def _float_from_hex(text: str) -> float:
    try:
        return float.fromhex(text)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class _Kind:
    """How an option's text becomes its value, and how a value is shown in messages."""

    parse: Callable[[str], _Value]
    show: Callable[[float], str] = str


_BOOL = _Kind(_parse_bool)
_INT = _Kind(_parse_int)
_FLOAT = _Kind(_parse_float)
_DURATION = _Kind(parse_duration, show=format_duration)
_TEXT = _Kind(str)


@dataclass(frozen=True)
class _Spec:
    """One option's kind and what its value must satisfy (an inclusive range, or a check)."""

    kind: _Kind
    low: float | None = None
    high: float | None = None
    # For text: returns what is wrong with a value, or None when it is fine.
    check: Callable[[str], str | None] | None = None


def _option(
    kind: _Kind,
    default: _T,
    *,
    low: float | None = None,
    high: float | None = None,
    check: Callable[[str], str | None] | None = None,
) -> _T:
    return field(default=default, metadata={_SPEC_KEY: _Spec(kind, low, high, check)})


def _duration(default: str, low: str | None = None, high: str | None = None) -> float:
    """A duration option, its default and range in Go syntax as go-nsq's struct tags have them."""
    return _option(
        _DURATION,
        parse_duration(default),
        low=None if low is None else parse_duration(low),
        high=None if high is None else parse_duration(high),
    )


def _computed(factory: Callable[[], str]) -> str:
    return field(default_factory=factory, metadata={_SPEC_KEY: _Spec(_TEXT)})


def _full_hostname() -> str:
    return socket.gethostname()


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def problem(value: str) -> str | None:
        if value in choices:
            return None
        return f"must be one of {', '.join(choices)}, got {quote(value)}"

    return problem


def _tls_version_problem(value: str) -> str | None:
    if value == "ssl3.0":
        return "does not support ssl3.0 (SSL 3.0 is insecure); use tls1.0 or later"
    if value in ("", *_TLS_VERSIONS):
        return None
    return f"must be one of {', '.join(_TLS_VERSIONS)} or empty, got {quote(value)}"


def _host_port_problem(value: str) -> str | None:
    match = _HOST_PORT.fullmatch(value)
    if not value or (match and int(match[1]) <= 65535):
        return None
    return f"must be a host:port address (IPv6 in brackets), got {quote(value)}"


@dataclass
class ClientConfig:
    """go-nsq's Config: one field per option key, go-nsq v1.1.0 defaults (but for
    max_attempts: 0, never give up), durations in seconds."""

    dial_timeout: float = _duration("1s")
    read_timeout: float = _duration("60s", "100ms", "5m")
    write_timeout: float = _duration("1s", "100ms", "5m")
    local_addr: str = _option(_TEXT, "", check=_host_port_problem)
    lookupd_poll_interval: float = _duration("60s", "10ms", "5m")
    lookupd_poll_jitter: float = _option(_FLOAT, 0.3, low=0.0, high=1.0)
    lookupd_poll_timeout: float = _duration("60s")
    max_requeue_delay: float = _duration("15m", "0", "60m")
    default_requeue_delay: float = _duration("90s", "0", "60m")
    backoff_strategy: str = _option(_TEXT, "exponential", check=_one_of(*_BACKOFF_STRATEGIES))
    max_backoff_duration: float = _duration("2m", "0", "60m")
    backoff_multiplier: float = _duration("1s", "0", "60m")
    # Ours: 0, never give a message up (go-nsq's 5 FINs it, lost, on its 6th delivery).
    max_attempts: int = _option(_INT, 0, low=0, high=65535)
    low_rdy_idle_timeout: float = _duration("10s", "1s", "5m")
    low_rdy_timeout: float = _duration("30s", "1s", "5m")
    rdy_redistribute_interval: float = _duration("5s", "1ms", "5s")
    client_id: str = _computed(_short_hostname)
    hostname: str = _computed(_full_hostname)
    user_agent: str = _option(_TEXT, f"nsqtools/{__version__}")
    topology_region: str = _option(_TEXT, "")
    topology_zone: str = _option(_TEXT, "")
    desired_tag: str = _option(_TEXT, "")  # the Youzan fork's: only messages with this tag
    # Ours, for the Youzan fork: how long a publish waits for its partition to take writes
    # again (a leader move, nsqd's back pressure), looking it up again, before it fails.
    partition_wait: float = _duration("10s", "0", "60m")
    heartbeat_interval: float = _duration("30s")  # negative: heartbeats disabled
    sample_rate: int = _option(_INT, 0, low=0, high=99)
    tls_v1: bool = _option(_BOOL, False)
    tls_root_ca_file: str = _option(_TEXT, "")
    tls_insecure_skip_verify: bool = _option(_BOOL, False)
    tls_cert: str = _option(_TEXT, "")
    tls_key: str = _option(_TEXT, "")
    tls_min_version: str = _option(_TEXT, "", check=_tls_version_problem)  # "": library default
    deflate: bool = _option(_BOOL, False)
    deflate_level: int = _option(_INT, 6, low=1, high=9)
    snappy: bool = _option(_BOOL, False)
    output_buffer_size: int = _option(_INT, 16384)
    output_buffer_timeout: float = _duration("250ms")
    max_in_flight: int = _option(_INT, 1, low=0)
    msg_timeout: float = _duration("0", "0")  # 0: the server's default
    auth_secret: str = _option(_TEXT, "")
    # Despite its name, true sends auth_secret to nsqlookupd: see lookupd_headers.
    skip_lookupd_authorization: bool = _option(_BOOL, True)

    def set(self, key: str, value: str | None) -> None:
        """Set one option from its text, as go-nsq's Config.Set does for a --*-opt flag.

        A "-" in key reads as "_". value None (a bare key) means true, so suits only booleans.
        """
        name = key.replace("-", "_")
        spec = _spec_for(key, name)
        parsed = _parse(name, spec, value)
        _check(name, spec, parsed)
        setattr(self, name, parsed)

    def apply_options(
        self, pairs: Iterable[str], overrides: Mapping[str, _Value] = _NO_OVERRIDES
    ) -> None:
        """Set each `key,value` text (split at the first comma; no comma: a bare key), then
        the overrides (typed values that win over the text: a program's own options), then
        validate, so that options that depend on each other may come in any order."""
        for pair in pairs:
            key, comma, value = pair.partition(",")
            self.set(key, value if comma else None)
        for name, setting in overrides.items():
            _spec_for(name, name)  # an unknown name is refused, never silently added
            setattr(self, name, setting)
        self.validate()

    def lookupd_headers(self) -> dict[str, str]:
        """The headers of every nsqlookupd query: auth_secret as a bearer token, as go-nsq
        v1.1.0 sends it. Its option skip_lookupd_authorization sets a field named
        LookupdAuthorization, so true (the default) sends the token and false keeps it
        from nsqlookupd; the Go tools behave so, and so do we."""
        if self.auth_secret and self.skip_lookupd_authorization:
            return {"Authorization": f"Bearer {self.auth_secret}"}
        return {}

    def validate(self) -> None:
        """Check every option's range, then the options that depend on each other."""
        for name, spec in _SPECS.items():
            _check(name, spec, getattr(self, name))
        self._check_heartbeat()
        self._check_tls_pair()
        for name in _TLS_FILE_OPTIONS:
            _check_readable(name, getattr(self, name))

    def _check_heartbeat(self) -> None:
        # A negative (disabled) interval always passes: read_timeout is at least 100ms by now.
        # Equal passes, as in go-nsq's Validate (30s against a read_timeout of 30s).
        if self.heartbeat_interval > self.read_timeout:
            raise ConfigRefused(
                "option heartbeat_interval must not be more than read_timeout"
                f" ({format_duration(self.read_timeout)}),"
                f" got {format_duration(self.heartbeat_interval)}"
            )

    def _check_tls_pair(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            given, missing = ("tls_cert", "tls_key") if self.tls_cert else ("tls_key", "tls_cert")
            raise ConfigError(f"option {given} needs option {missing} too (give both or neither)")


_SPECS: Mapping[str, _Spec] = MappingProxyType(
    {option.name: option.metadata[_SPEC_KEY] for option in fields(ClientConfig)}
)
OPTION_NAMES: tuple[str, ...] = tuple(_SPECS)


def _spec_for(key: str, name: str) -> _Spec:
    if name in _SPECS:
        return _SPECS[name]
    suggestions = difflib.get_close_matches(name, OPTION_NAMES)
    hint = f" (did you mean {', '.join(suggestions)}?)" if suggestions else ""
    raise ConfigError(f"unknown option {quote(key)}{hint}")


def _parse(name: str, spec: _Spec, text: str | None) -> _Value:
    if text is None:
        if spec.kind is _BOOL:
            return True
        raise ConfigError(f"option {name} needs a value: use {name},VALUE")
    try:
        return spec.kind.parse(text)
    except ValueError as error:
        raise ConfigError(f"invalid value {quote(text)} for option {name}: {error}") from error


def _check(name: str, spec: _Spec, value: _Value) -> None:
    problem = _problem(spec, value)
    if problem is not None:
        raise ConfigError(f"option {name} {problem}")


def _problem(spec: _Spec, value: _Value) -> str | None:
    if isinstance(value, str):
        return None if spec.check is None else spec.check(value)
    show = spec.kind.show
    # Written as "not >=" and "not <=" so that NaN fails both.
    if spec.low is not None and not value >= spec.low:
        return f"must be at least {show(spec.low)}, got {show(value)}"
    if spec.high is not None and not value <= spec.high:
        return f"must be at most {show(spec.high)}, got {show(value)}"
    return None


def _check_readable(name: str, path: str) -> None:
    if not path:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise ConfigError(f"option {name} cannot read {quote(path)}: {error.strerror}") from error
