"""Options every command shares, defined once, and the settings they build.

Addresses (also from NSQ_NSQD_TCP_ADDRESS / NSQ_NSQD_HTTP_ADDRESS /
NSQ_LOOKUPD_HTTP_ADDRESS, which an address flag of any kind replaces), integers read as
Go reads them, the go-nsq `--consumer-opt`/`--producer-opt` passthrough, first-class TLS,
compression and AUTH options (the secret also from NSQ_AUTH_SECRET or a file, so it never
shows in `ps`), and logging. First-class options win over the passthrough, which wins over defaults.

A saved cluster (nsqtools.contexts) is the layer below the environment: every command
that takes addresses has --context, whose eager callback puts the selected context's
settings in click's default_map (flags > environment > default_map > defaults). With
no context selected, nothing is added.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from nsqtools import __version__, contexts
from nsqtools.commands import completers
from nsqtools.commands.front import (
    LOG_LEVELS,
    LOGGING,
    OTHER,
    OUTPUT,
    TLS_AND_AUTH,
    YOUZAN,
    GroupedOption,
    fail,
    grouped_option,
)

if TYPE_CHECKING:
    from nsqtools.contexts.store import ClusterContext

F = TypeVar("F", bound=Callable[..., Any])


class GoDuration(click.ParamType[float]):
    """A duration in Go syntax (500ms, 2s, 1m30s, 1.5h), as float seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        from nsqtools.durations import DurationError, parse_duration

        try:
            return parse_duration(value)
        except DurationError as error:
            self.fail(str(error), param, ctx)


DURATION = GoDuration()

_GO_BASE_PREFIXES = {"0b": 2, "0o": 8, "0x": 16}
_GO_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
_GO_INT64 = range(-(2**63), 2**63)
_GO_PREFIX = re.compile(r"^0[box]", re.IGNORECASE)


class GoInt(click.IntRange):
    """An integer as Go's flag package reads it, strconv.ParseInt(s, 0, 64): 010 is 8,
    0x10 is 16, 0o and 0b prefixes too, and `_` between digits; with optional bounds."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                value = parse_go_int(value)
            except ValueError as error:
                self.fail(str(error), param, ctx)
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


def consumed_topics(function: F) -> F:
    """--topic, any number of times: what the consuming tools read."""
    return click.option(
        "--topic",
        "topics",
        multiple=True,
        shell_complete=completers.topics,
        help="NSQ topic (may be given multiple times).",
    )(function)


def negative_as_zero(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """A click callback for the Go integers whose negative values mean what 0 means
    (`if n > 0`): to_nsq's --rate, nsq_to_file's --rotate-size, the relays' --status-every."""
    return max(value, 0)


def parse_go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): an optional sign, then a base prefix, or 0 for
    octal; `_` only between digits (a prefix counts as one); nothing else, no spaces."""
    sign, number = (text[:1], text[1:]) if text[:1] in ("+", "-") else ("", text)
    base, digits = _go_base(number)
    if "_" in number and not re.fullmatch(r"[^_]+(_[^_]+)*", _GO_PREFIX.sub("0", number)):
        raise ValueError(f"{text!r} is not a valid integer: misplaced _")
    digits = digits.replace("_", "")
    if number != "0" and not (digits and all(digit in _GO_DIGITS[base] for digit in digits)):
        raise ValueError(f"{text!r} is not a valid integer")
    value = int(sign + (digits or "0"), base)
    if value not in _GO_INT64:
        raise ValueError(f"{text!r} is out of range")
    return value


def _go_base(number: str) -> tuple[int, str]:
    """The base a number is written in, and its digits after the prefix."""
    prefix = number[:2].lower()
    if prefix in _GO_BASE_PREFIXES and len(number) > 2:
        return _GO_BASE_PREFIXES[prefix], number[2:]
    if number.startswith("0"):
        return 8, number[1:]
    return 10, number


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(function: F) -> F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


ADDRESS_PARAMS = frozenset({"nsqd_tcp_addresses", "nsqd_http_addresses", "lookupd_http_addresses"})
AUTH_PARAMS = frozenset({"auth_secret", "auth_secret_file"})


class LayeredOption(click.Option):
    """An option of a `layer` of options that replace one another as a whole: a flag of
    any of them replaces what the others would take from the environment or a context,
    and an environment variable of any of them what they would take from a context. So
    NSQ_NSQD_TCP_ADDRESS never clashes with --lookupd-http-address (Go reads no
    environment), nor a context's lookupd with NSQ_NSQD_TCP_ADDRESS."""

    layer: frozenset[str] = frozenset()

    def consume_value(
        self, ctx: click.Context, opts: Mapping[str, Any]
    ) -> tuple[Any, ParameterSource]:
        value, source = super().consume_value(ctx, opts)
        flag_given = not self.layer.isdisjoint(opts)
        if source is ParameterSource.ENVIRONMENT and flag_given:
            return self._unset(), ParameterSource.DEFAULT
        if source is ParameterSource.DEFAULT_MAP:
            if flag_given or self._layer_in_environment(ctx):
                return self._unset(), ParameterSource.DEFAULT
            if isinstance(value, SecretFromEnvironment):  # a Tab needs no secret
                value = None if ctx.resilient_parsing else value.read()
        return value, source

    def _unset(self) -> Any:
        return () if self.multiple else None

    def _layer_in_environment(self, ctx: click.Context) -> bool:
        return any(
            param.resolve_envvar_value(ctx)
            for param in ctx.command.params
            if isinstance(param, LayeredOption) and param.name in self.layer
        )


class AddressOption(LayeredOption):
    """An address option (nsqd TCP, nsqd HTTP, lookupd HTTP)."""

    layer = ADDRESS_PARAMS


class AuthOption(LayeredOption, GroupedOption):
    """--auth-secret and --auth-secret-file."""

    layer = AUTH_PARAMS


@dataclass(frozen=True)
class SecretFromEnvironment:
    """A context's auth_secret_env: read only if the context's AUTH is the one used."""

    variable: str
    context: str

    def read(self) -> str:
        secret = os.environ.get(self.variable)
        if not secret:
            fail(f"context {self.context!r} reads its AUTH secret from ${self.variable}: not set")
        return secret


def context_option(function: F) -> F:
    """--context NAME: added by each address option, once per command."""
    if any(param.name == "context" for param in getattr(function, "__click_params__", ())):
        return function
    return grouped_option(
        OTHER,
        "--context",
        metavar="NAME",
        envvar=contexts.ENVIRONMENT,
        is_eager=True,  # before the options whose defaults it sets
        expose_value=False,
        callback=_use_context,
        shell_complete=completers.contexts,
        help="Saved cluster (see `nsq context`) whose settings are the defaults, below "
        "flags and environment variables  [default: the one `nsq context use` selected]",
    )(function)


def _use_context(ctx: click.Context, param: click.Parameter, name: str | None) -> None:
    """The selected context's settings, as defaults of this command's options."""
    from nsqtools.errors import NsqError

    from_environment = ctx.get_parameter_source("context") is ParameterSource.ENVIRONMENT
    try:
        context = contexts.selected(name, contexts.ENVIRONMENT if from_environment else "--context")
    except NsqError as error:  # a ContextError (its module is loaded only when needed)
        if ctx.resilient_parsing:  # a Tab completes without the context
            return
        fail(str(error))
    if context is not None:
        ctx.default_map = {**(ctx.default_map or {}), **context_defaults(ctx.command, context)}


def context_defaults(command: click.Command, context: ClusterContext) -> dict[str, Any]:
    """A context's settings by the names of the command's options. Addresses go to its
    address options only (to_nsq's --lookupd-http-address is the Youzan fork's), and a
    command that takes lookupd addresses gets only those when the context has some (a
    consumer takes one kind, and nsqds are found through lookupds)."""
    settings: dict[str, Any] = context.settings()
    takes = {param.name for param in command.params if isinstance(param, AddressOption)}
    for name in ADDRESS_PARAMS - takes:
        settings.pop(name, None)
    if "lookupd_http_addresses" in settings:
        settings.pop("nsqd_tcp_addresses", None)
        settings.pop("nsqd_http_addresses", None)
    if context.tls:
        settings["tls_v1"] = settings.pop("tls")
    if context.auth_secret_env:
        variable = settings.pop("auth_secret_env")
        settings["auth_secret"] = SecretFromEnvironment(variable, context.name)
    return settings


def address_option(flag: str, help_text: str, envvar: str | None = None) -> Callable[[F], F]:
    """An address option: `--nsqd-tcp-address` → nsqd_tcp_addresses, repeatable."""
    return click.option(
        flag,
        flag.removeprefix("--").replace("-", "_") + "es",
        cls=AddressOption,
        multiple=True,
        envvar=envvar,
        metavar="HOST:PORT",
        help=help_text,
    )


def _tool_address_option(flag: str, envvar: str, help_text: str) -> Callable[[F], F]:
    """A command's address option, from its environment variable too, and --context."""
    return _stack(address_option(flag, help_text, envvar), context_option)


def nsqd_addresses(help_text: str) -> Callable[[F], F]:
    return _tool_address_option("--nsqd-tcp-address", "NSQ_NSQD_TCP_ADDRESS", help_text)


def lookupd_addresses(help_text: str) -> Callable[[F], F]:
    return _tool_address_option("--lookupd-http-address", "NSQ_LOOKUPD_HTTP_ADDRESS", help_text)


def nsqd_and_lookupd_addresses(nsqd_help: str, lookupd_help: str) -> Callable[[F], F]:
    return _stack(nsqd_addresses(nsqd_help), lookupd_addresses(lookupd_help))


def nsqd_http_addresses(help_text: str) -> Callable[[F], F]:
    return _tool_address_option("--nsqd-http-address", "NSQ_NSQD_HTTP_ADDRESS", help_text)


def nsqd_http_and_lookupd_addresses(nsqd_help: str, lookupd_help: str) -> Callable[[F], F]:
    """The addresses of the commands that speak to nsqd's HTTP API (nsq_stat, the
    inspection and admin commands)."""
    return _stack(nsqd_http_addresses(nsqd_help), lookupd_addresses(lookupd_help))


def http_client_timeouts(request_default: str, of_what: str = "") -> Callable[[F], F]:
    """Go's --http-client-connect-timeout (2s) and --http-client-request-timeout, whose
    default differs by tool; `of_what` says which requests they bound, when not all."""
    suffix = f" ({of_what})" if of_what else ""
    return _stack(
        click.option(
            "--http-client-connect-timeout",
            type=DURATION,
            default="2s",
            show_default=True,
            help=f"Timeout for HTTP connect{suffix}.",
        ),
        click.option(
            "--http-client-request-timeout",
            type=DURATION,
            default=request_default,
            show_default=True,
            help=f"Timeout for HTTP request{suffix}.",
        ),
    )


def connection_options(passthrough: str) -> Callable[[F], F]:
    """TLS, compression and AUTH, plus the go-nsq passthrough named `passthrough`
    ("consumer-opt" or "producer-opt")."""
    # --reader-opt: the consumer option's older name, still in NSQ's documentation.
    aliases = ["--reader-opt"] if passthrough == "consumer-opt" else []
    return _stack(
        click.option(
            f"--{passthrough}",
            *aliases,
            "client_options",
            multiple=True,
            metavar="KEY,VALUE",
            help="go-nsq option to pass through (may be given multiple times), e.g. "
            "max_attempts,10 or snappy (a bare key means true).",
        ),
        tls_and_compression_options(),
        click.option(
            "--auth-secret",
            cls=AuthOption,
            help_group=TLS_AND_AUTH,
            envvar="NSQ_AUTH_SECRET",
            metavar="SECRET",
            help="Secret for nsqd's AUTH (better: NSQ_AUTH_SECRET or --auth-secret-file).",
        ),
        auth_secret_file_option(AuthOption),
    )


def tls_and_compression_options() -> Callable[[F], F]:
    """The first-class TLS and compression options (a context keeps them too)."""
    return _stack(
        grouped_option(
            TLS_AND_AUTH, "--tls", "tls_v1", is_flag=True, default=None, help="Connect with TLS."
        ),
        grouped_option(
            TLS_AND_AUTH,
            "--tls-root-ca-file",
            metavar="FILE",
            shell_complete=completers.files,
            help="CA file to verify nsqd with (enables TLS).",
        ),
        grouped_option(
            TLS_AND_AUTH,
            "--tls-cert",
            metavar="FILE",
            shell_complete=completers.files,
            help="Client certificate for TLS (enables TLS).",
        ),
        grouped_option(
            TLS_AND_AUTH,
            "--tls-key",
            metavar="FILE",
            shell_complete=completers.files,
            help="Client key for TLS.",
        ),
        grouped_option(
            TLS_AND_AUTH,
            "--tls-insecure-skip-verify",
            is_flag=True,
            default=None,
            help="Do not verify nsqd's certificate (enables TLS).",
        ),
        grouped_option(
            TLS_AND_AUTH,
            "--tls-min-version",
            type=click.Choice(["tls1.0", "tls1.1", "tls1.2", "tls1.3"]),
            help="Lowest TLS version to accept.",
        ),
        grouped_option(
            TLS_AND_AUTH, "--snappy", is_flag=True, default=None, help="Compress with snappy."
        ),
        grouped_option(
            TLS_AND_AUTH, "--deflate", is_flag=True, default=None, help="Compress with deflate."
        ),
        grouped_option(
            TLS_AND_AUTH, "--deflate-level", type=GoInt(1, 9), help="Deflate level (1..9)."
        ),
    )


def auth_secret_file_option(option_class: type[GroupedOption]) -> Callable[[F], F]:
    """--auth-secret-file (of a tool; of `nsq context add`, which keeps the path)."""
    return click.option(
        "--auth-secret-file",
        cls=option_class,
        help_group=TLS_AND_AUTH,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Read the AUTH secret from this file (first line).",
    )


def relay_options(receiver: str) -> Callable[[F], F]:
    """--mode, --max-in-flight and --status-every of Go's relays (nsq_to_nsq,
    nsq_to_http); `receiver` names what gets the messages ("destination", "address")."""
    return _stack(
        click.option(
            "--mode",
            default="hostpool",
            show_default=True,
            metavar="MODE",
            shell_complete=completers.modes,
            help=f"Which {receiver} gets each message: round-robin, hostpool, epsilon-greedy, "
            f"or all (every {receiver} gets every message).",
        ),
        click.option(
            "--max-in-flight",
            type=GoInt(),
            default=200,
            show_default=True,
            help="Max number of messages to allow in flight.",
        ),
        click.option(
            "--status-every",
            type=GoInt(),
            callback=negative_as_zero,
            default=250,
            show_default=True,
            help=f"The # of requests between logging status (per {receiver}), 0 disables.",
        ),
    )


def check_relay_options(options: dict[str, Any]) -> None:
    """An unknown --mode is an error (Go's relays quietly pick one)."""
    from nsqtools.hostpolicy import MODES

    if options["mode"] not in MODES:
        fail(f"--mode {options['mode']!r} is unknown: use one of {', '.join(MODES)}")


def dead_letter_options() -> Callable[[F], F]:
    """Where a consuming tool keeps the messages it gives up on: past max_attempts, or
    refused for good by their destination (nsq_to_nsq: over its size limit)."""
    given_up = (
        "each message given up (past max_attempts, or refused for good by its destination), "
        'as its JSON envelope (nsq_tail --format json\'s) with a "reason",'
    )
    return _stack(
        grouped_option(
            OUTPUT,
            "--dead-letter-file",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="PATH",
            help=f"Append {given_up} to this file, synced before the message is FIN'd.",
        ),
        grouped_option(
            OUTPUT,
            "--dead-letter-topic",
            metavar="TOPIC",
            help=f"Publish {given_up} to this topic on the nsqd that delivered it, "
            "acknowledged before the message is FIN'd.",
        ),
    )


# What "the end" of --exit-at-end is, said once for every consuming tool's --help (1s:
# nsqtools.runtime.consuming.END_QUIET, not imported here: it loads trio).
EXIT_AT_END_HELP = (
    "Read what the channel holds, then exit 0: once every nsqd of every topic (through "
    "lookupd: each one listed) is subscribed, has had room for more and was sent nothing "
    "for 1s but a heartbeat (asked of nsqd every 1s). Deferred messages and those in "
    "flight to other consumers are not waited for; an nsqd that cannot be reached ends "
    "the run with exit 1."
)


def exit_at_end_option(function: F) -> F:
    """--exit-at-end: stop once nsqd has nothing more for the channel."""
    return grouped_option(OUTPUT, "--exit-at-end", is_flag=True, help=EXIT_AT_END_HELP)(function)


def dead_letter_settings(options: dict[str, Any]) -> Any:
    """--dead-letter-file and --dead-letter-topic, checked, as the runtime's
    DeadLetterSettings (imported here: it loads trio)."""
    from nsqtools.protocol import LocalProtocolError, check_topic
    from nsqtools.runtime.deadletters import DeadLetterSettings

    topic = options["dead_letter_topic"] or None
    if topic is not None:
        try:
            check_topic(topic)
        except LocalProtocolError as error:
            fail(f"--dead-letter-topic: {error}")
    return DeadLetterSettings(options["dead_letter_file"], topic)


def logging_options(tool: str) -> Callable[[F], F]:
    return _stack(
        grouped_option(
            LOGGING,
            "--log-level",
            default="info",
            show_default=True,
            metavar="LEVEL",
            help=f"Log level: {', '.join(LOG_LEVELS)} (any case, as Go's).",
        ),
        grouped_option(
            LOGGING,
            "--log-prefix",
            default=f"[{tool}] ",
            show_default=True,
            help="Log line prefix.",
        ),
        grouped_option(
            OUTPUT,
            "--no-color",
            is_flag=True,
            help="No colors, even on a terminal (or set NO_COLOR).",
        ),
        grouped_option(LOGGING, "--debug", is_flag=True, hidden=True, help="Show tracebacks."),
    )


def build_config(tool: str, options: dict[str, Any], **fixed: Any) -> Any:
    """ClientConfig from defaults, then the passthrough, then first-class options.

    Returns nsqtools.config.ClientConfig (imported here so --help stays fast). As in Go,
    an option that does not parse is a usage error (exit 2), while options that go-nsq's
    Config.Validate refuses together, or a negative --max-in-flight, fail the check of
    values (exit 1).
    """
    from nsqtools.config import ClientConfig, ConfigError, ConfigRefused

    if fixed.get("max_in_flight", 0) < 0:
        fail(f"--max-in-flight must not be negative, got {fixed['max_in_flight']}")
    config = ClientConfig(user_agent=f"{tool}/{__version__} nsqtools/{__version__}")
    overrides = _first_class_settings(options) | fixed
    try:
        config.apply_options(options.get("client_options") or (), overrides)
    except ConfigRefused as error:
        fail(str(error))
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    return config


def passthrough_config(tool: str, options: dict[str, Any], flag: str, **fixed: Any) -> Any:
    """build_config for a go-nsq passthrough flag (`flag`: "consumer-opt", "producer-opt"),
    whose bad option, as in Go, is a flag that does not parse (exit 2), named."""
    try:
        return build_config(tool, options, **fixed)
    except click.UsageError as error:
        raise click.UsageError(f"--{flag}: {error.format_message()}") from None


def _first_class_settings(options: dict[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name in ("tls_root_ca_file", "tls_cert", "tls_key", "tls_min_version", "deflate_level"):
        if options.get(name) is not None:
            settings[name] = options[name]
    for name in ("tls_v1", "tls_insecure_skip_verify", "snappy", "deflate"):
        if options.get(name):
            settings[name] = True
    if any(
        options.get(name) for name in ("tls_root_ca_file", "tls_cert", "tls_insecure_skip_verify")
    ):
        settings["tls_v1"] = True
    secret = _auth_secret(options)
    if secret:
        settings["auth_secret"] = secret
    if options.get("desired_tag"):
        settings["desired_tag"] = options["desired_tag"]
    return settings


def partition_option(what: str) -> Callable[[F], F]:
    """--partition N: the Youzan fork's partition to consume or publish to."""
    return grouped_option(
        YOUZAN, "--partition", type=GoInt(min=0), metavar="N", help=f"{what} (Youzan fork)."
    )


def fork_consumer_options() -> Callable[[F], F]:
    """The Youzan fork's consumer options: a partition, a start position, a tag."""
    return _stack(
        partition_option("Consume only this partition"),
        grouped_option(
            YOUZAN,
            "--start-at",
            metavar="end|timestamp:SEC|offset:N|count:N",
            help="Start the channel here: the end, a time in Unix seconds, a queue offset, "
            "or the Nth message (count:1 is the first). Through --lookupd-http-address it "
            "is set on each partition's leader over HTTP, moving the channel for all its "
            "clients; with --nsqd-tcp-address it needs --partition, only a channel's "
            "first client sets it (SUB_ADVANCED), and an ordered topic refuses it.",
        ),
        grouped_option(
            YOUZAN,
            "--desired-tag",
            metavar="TAG",
            help="Receive only messages tagged so (an extend topic's dispatch tag).",
        ),
    )


def start_position(options: dict[str, Any]) -> Any:
    """--start-at as a youzan.StartPosition, or None; a bad one is a usage error."""
    text = options.get("start_at")
    if text is None:
        return None
    from nsqtools.protocol import LocalProtocolError, youzan

    try:
        return youzan.parse_start_position(text)
    except LocalProtocolError as error:
        raise click.BadParameter(str(error), param_hint="--start-at") from None


def _auth_secret(options: dict[str, Any]) -> str:
    path: Path | None = options.get("auth_secret_file")
    if path is None:
        return str(options.get("auth_secret") or "")
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise click.UsageError(f"cannot read --auth-secret-file {path}: {error.strerror}") from None
    return lines[0].strip() if lines else ""


def consumer_addresses(options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A consumer's nsqd and lookupd addresses, checked: exactly one kind, each valid."""
    nsqd, lookupd = list(options["nsqd_tcp_addresses"]), list(options["lookupd_http_addresses"])
    check_one_address_kind(nsqd, lookupd)
    check_addresses(nsqd, "--nsqd-tcp-address")
    check_addresses(lookupd, "--lookupd-http-address")
    return nsqd, lookupd


def check_one_address_kind(nsqd: Sequence[str], lookupd: Sequence[str]) -> None:
    """Consumers take nsqd addresses or lookupd addresses: exactly one kind."""
    if nsqd and lookupd:
        fail("use --nsqd-tcp-address or --lookupd-http-address, not both")
    if not nsqd and not lookupd:
        fail("--nsqd-tcp-address or --lookupd-http-address is required")


def check_addresses(addresses: Sequence[str], option: str) -> None:
    from nsqtools.addresses import AddressError, split_address

    for address in addresses:
        if "://" in address and option == "--lookupd-http-address":
            continue  # go-nsq takes a URL for lookupd
        try:
            split_address(address)
        except AddressError as error:
            fail(f"{option}: {error}")


def metrics_option(function: F) -> F:
    """--metrics-address: the long-running tools' counters for Prometheus
    (nsqtools.runtime.metrics), on an address checked here (a usage error, exit 2)."""

    def checked(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from nsqtools.addresses import AddressError, split_bind_address

        if value is not None:
            try:
                split_bind_address(value)
            except AddressError as error:
                raise click.BadParameter(str(error)) from None
        return value

    return grouped_option(
        OTHER,
        "--metrics-address",
        metavar="HOST:PORT",
        callback=checked,
        help="Serve the tool's counters in Prometheus's text format at "
        "http://HOST:PORT/metrics (port 0: any free port, logged).",
    )(function)
