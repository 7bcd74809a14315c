"""What every command shares at its edge: Go flag syntax, one-line errors, exit codes.

Go's flag package accepts `-flag=v`, `-flag v`, `--flag=v`, `--flag v`, `-bool`,
`-bool=false`; click accepts some of these. GoFlagsCommand rewrites a command line into
click's dialect before parsing, so an existing Go command line works unchanged. Its help
names the Go tool it replaces and shows Go's own options first, then ours under the
headings of HELP_GROUPS (an option chooses its heading by being a GroupedOption).

run() is every entry point. Exit statuses are Go's: a flag that does not parse exits 2
(click.UsageError); a check of values that fails (fail(), where Go calls log.Fatal) and
a runtime failure exit 1; each as one line on stderr, a traceback only with --debug (or
NSQTOOLS_DEBUG=1).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from itertools import chain, islice
from typing import Any, NoReturn, TypeVar

import click

from nsqtools import __version__, version_line

# click settings every command shares: Go's -h as well as --help, readable help width.
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])

_GO_FLAG = re.compile(r"--?([A-Za-z0-9][\w.-]*)(?:=(.*))?", re.DOTALL)
HELP = ("h", "help")  # Go's help flags, -h and -help (and --help)
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


# Help headings for the options Go's tool does not have, in the order help shows them.
TLS_AND_AUTH = "TLS, compression and AUTH"
OUTPUT = "Output and delivery"
YOUZAN = "The Youzan fork (partitioned and ordered topics)"
LOGGING = "Logging"
OTHER = "Other options"
HELP_GROUPS = (TLS_AND_AUTH, OUTPUT, YOUZAN, LOGGING, OTHER)


class GroupedOption(click.Option):
    """An option that help shows under one of HELP_GROUPS, after Go's own options."""

    def __init__(self, *args: Any, help_group: str, **kwargs: Any) -> None:
        if help_group not in HELP_GROUPS:
            raise ValueError(f"not a help group: {help_group!r}")
        super().__init__(*args, **kwargs)
        self.help_group = help_group


def grouped_option(help_group: str, *param_decls: str, **attrs: Any) -> Callable[[F], F]:
    """click.option, shown in help under `help_group`."""
    return click.option(*param_decls, cls=GroupedOption, help_group=help_group, **attrs)


class GoFlagsCommand(click.Command):
    """A click command that also accepts Go's flag syntax, replacing Go's `go_tool`."""

    def __init__(
        self, *args: Any, go_tool: str, flags_anywhere_as: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.go_tool = go_tool
        # The name (under nsq) with which the command also takes its flags after its
        # arguments, as other brokers' CLIs do (`nsq pub TOPIC BODY --count 5`); under
        # its Go name, flags end at the first argument, as in Go.
        self.flags_anywhere_as = flags_anywhere_as

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help_text(ctx, formatter)
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(
                f"Drop-in replacement for Go's {self.go_tool}: its flags (in Go's -flag=value "
                "syntax too), defaults and output."
            )

    def option_sections(self, ctx: click.Context) -> list[tuple[str, list[click.Option]]]:
        """The visible options under their headings: Go's own first, then HELP_GROUPS."""
        go_heading = f"Options of Go's {self.go_tool}"
        sections: dict[str, list[click.Option]] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:  # arguments: in usage
                heading = param.help_group if isinstance(param, GroupedOption) else go_heading
                sections.setdefault(heading, []).append(param)
        return [
            (heading, sections[heading])
            for heading in (go_heading, *HELP_GROUPS)
            if heading in sections
        ]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for heading, options in self.option_sections(ctx):
            records = [option.get_help_record(ctx) for option in options]
            with formatter.section(heading):
                formatter.write_dl([record for record in records if record is not None])

    # Go's flag package stops at the first word that is not a flag; what follows is the
    # command's arguments (to_nsq's files, nsq_to_file's error), or ignored as Go does.
    allow_interspersed_args = False
    allow_extra_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.info_name == self.flags_anywhere_as and not ctx.resilient_parsing:
            args = self._flags_first(args)
        converted = go_flags_to_click(self, args, ctx.resilient_parsing)
        if not ctx.resilient_parsing and "--" not in args:
            self._refuse_flags_among_arguments(converted)
        rest = super().parse_args(ctx, converted)
        if ctx.args and not ctx.resilient_parsing:
            ignored = " ".join(ctx.args)
            sys.stderr.write(
                f"{ctx.command_path}: warning: ignoring {ignored!r}: flags end at the first "
                "word that is not a flag, as in Go\n"
            )
        return rest

    def _flags_first(self, args: list[str]) -> list[str]:
        """The command line with its flags moved before its arguments, then `--`: every
        word that looks like a flag is one, with its value if it takes one; an argument
        that starts with "-" goes after a `--`, which ends the flags."""
        spellings = _option_spellings(self)
        flags: list[str] = []
        arguments: list[str] = []
        words = iter(args)
        for word in words:
            if word == "--":
                arguments += words
                break
            match = _GO_FLAG.fullmatch(word) if word.startswith("-") else None
            if match is None:
                arguments.append(word)
                continue
            flags.append(word)
            option = spellings.get(match[1])
            if option is not None and not option[0].is_flag and match[2] is None:
                flags += islice(words, 1)  # its value, whatever it looks like
        return [*flags, "--", *arguments]

    def _refuse_flags_among_arguments(self, converted: list[str]) -> None:
        """A flag of the command after its first argument (`to_nsq FILE -topic t`): Go
        would take it as an argument too; this command, which reads its arguments (files
        that do not exist), says where the flag should go instead."""
        takes_files = any(
            isinstance(param, click.Argument) and isinstance(param.type, click.Path)
            for param in self.params
        )
        if "--" not in converted or not takes_files:
            return
        arguments = converted[converted.index("--") + 1 :]
        spellings = _option_spellings(self)
        for word in arguments:
            match = _GO_FLAG.fullmatch(word)
            if match is not None and match[1] in spellings:
                raise click.UsageError(
                    f"flag {word} after the argument {arguments[0]!r}: flags go before "
                    "arguments, as in Go"
                )


def _option_spellings(command: click.Command) -> dict[str, tuple[click.Option, str, bool]]:
    """Flag name without dashes → (option, the spelling click knows, is the negative form)."""
    spellings: dict[str, tuple[click.Option, str, bool]] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for opt in param.opts:
                spellings[opt.lstrip("-")] = (param, opt, False)
            for opt in param.secondary_opts:
                spellings[opt.lstrip("-")] = (param, opt, True)
    return spellings


def go_flags_to_click(
    command: click.Command, args: Sequence[str], resilient: bool = False
) -> list[str]:
    """Rewrite Go-style flags into click's spelling, up to the first word that is not a
    flag (or `--`), where Go stops: that word and all after it are arguments.

    As in Go, the last occurrence of a boolean flag wins (click would keep any true one),
    and a flag that takes a value takes the next argument whatever it looks like. A flag
    the command does not have is refused as typed, with the closest one suggested.
    `resilient` (shell completion) leaves a flag it cannot read as it is, never raising.
    """
    spellings = _option_spellings(command)
    rewritten: list[str] = []
    booleans: dict[str | None, list[str]] = {}  # option → its last occurrence, in click's words
    remaining = iter(args)
    for arg in remaining:
        if arg == "--" or len(arg) < 2 or not arg.startswith("-"):
            arguments = list(remaining) if arg == "--" else [arg, *remaining]
            return [*rewritten, *chain.from_iterable(booleans.values()), "--", *arguments]
        match = _GO_FLAG.fullmatch(arg)
        if match is not None and match[1] in HELP and match[2] is None:
            rewritten.append("--help")
            continue
        if match is None or match[1] not in spellings:
            if not resilient:
                raise click.UsageError(_unknown_flag(arg, spellings))
            rewritten.append(arg)
            continue
        option, spelling, negative = spellings[match[1]]
        value = match[2]
        if option.is_flag and not option.count:
            try:
                booleans[option.name] = _bool_spelling(option, spelling, negative, value)
            except click.UsageError:
                if not resilient:
                    raise
                rewritten.append(arg)
        elif value is not None:
            rewritten += [spelling, value]
        else:
            following = list(islice(remaining, 1))
            if not following and not resilient:
                raise click.UsageError(f"flag needs an argument: {arg}")
            rewritten += [spelling, *following]
    return [*rewritten, *chain.from_iterable(booleans.values())]


def _unknown_flag(arg: str, spellings: dict[str, tuple[click.Option, str, bool]]) -> str:
    """Go's words for a flag the command does not have, naming it as typed, with the
    closest flag the command has spelled with the same dashes."""
    dashes = "--" if arg.startswith("--") else "-"
    name = arg[len(dashes) :].partition("=")[0]
    if not name or name[0] in "-=":
        return f"bad flag syntax: {arg}"
    visible = [known for known, (option, _, _) in spellings.items() if not option.hidden]
    import difflib

    closest = difflib.get_close_matches(name, visible, n=1, cutoff=0.5)
    hint = f" (did you mean {dashes}{closest[0]}?)" if closest else f" (see {dashes}help)"
    return f"flag provided but not defined: {dashes}{name}{hint}"


def _bool_spelling(
    option: click.Option, spelling: str, negative: bool, value: str | None
) -> list[str]:
    """`-gzip=false` → what click expects: the negative spelling, or nothing at all
    when false is the flag's default."""
    if value is None:
        return [spelling]
    if value not in _GO_TRUE | _GO_FALSE:
        raise click.UsageError(f'invalid boolean value "{value}" for {spelling}')
    wanted = (value in _GO_TRUE) != negative
    if wanted:
        return [option.opts[0]]
    if option.secondary_opts:
        return [option.secondary_opts[0]]
    if not option.get_default(click.Context(click.Command(None))):
        return []
    raise click.UsageError(f"{option.opts[0]} cannot be set to false")


def version_option(tool: str, go_has_it: bool = True) -> Callable[[F], F]:
    """`-version` / `--version`: prints `<tool> v<version>` like the Go tools, and the
    NSQ release matched (to_nsq has none: `go_has_it` False shows ours among the other
    options). The entry point answers first; this is for `nsq tail --version`."""
    grouping: dict[str, Any] = {} if go_has_it else {"cls": GroupedOption, "help_group": OTHER}
    return click.version_option(
        __version__,
        "-version",
        "--version",
        message=version_line(tool),
        help="Print the version and exit.",
        **grouping,
    )


def run_event_loop(main: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run a command's async main on trio, once its flags are checked: trio is imported
    only now (`--help` and a failed check do without it). What start-up made is frozen
    out of the collector's passes (its thresholds are nsqtools.runtime.startup's GC_THRESHOLDS)."""
    import gc

    import trio

    gc.freeze()
    trio.run(main, *args)


def debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or "-debug" in argv or os.environ.get("NSQTOOLS_DEBUG") == "1"


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """End the command with one line on stderr: for a check of values that fails (exit 1,
    as Go's log.Fatal) and for a runtime failure."""
    raise CommandFailed(message, code)


class CommandFailed(Exception):
    """A command ends with a message and an exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def run(command: click.Command, prog_name: str, argv: Sequence[str] | None = None) -> NoReturn:
    """Run a command as a program: every error becomes one line and an exit status."""
    from nsqtools.errors import single_errors

    args = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(args)
    try:
        with single_errors():
            command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except click.exceptions.Abort:
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as error:
        _print_error(prog_name, error.format_message(), debug)
        sys.exit(EXIT_USAGE)
    except click.ClickException as error:
        _print_error(prog_name, error.format_message(), debug)
        sys.exit(error.exit_code)
    except CommandFailed as error:
        _print_error(prog_name, str(error), debug)
        sys.exit(error.code)
    except Exception as error:
        if not _is_operational(error):
            raise
        _print_error(prog_name, _describe(error), debug)
        sys.exit(EXIT_FAILURE)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(0)


# Operational error classes by module, looked up only once their module is imported.
_LAZY_ERRORS = (("nsqtools.config", "ConfigError"), ("nsqtools.protocol", "ProtocolError"))


def _is_operational(error: Exception) -> bool:
    """A failure to report in one line (not a bug, which keeps its traceback). The error
    classes are looked up only in modules already imported, since a module never
    imported raised nothing: importing nsqtools.config here would cost every program's
    start-up (nsq_stat's, measured) for an except clause."""
    from nsqtools.errors import NsqError

    kinds: list[type[Exception]] = [NsqError, OSError]
    for module, name in _LAZY_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None:
            kinds.append(getattr(loaded, name))
    return isinstance(error, tuple(kinds))


def _describe(error: BaseException) -> str:
    from nsqtools.errors import describe_file_error

    if isinstance(error, OSError) and error.strerror and error.filename:
        return describe_file_error(error)
    return str(error) or type(error).__name__


def _print_error(prog_name: str, message: str, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc()
    error_line(prog_name, message)


def error_line(prog_name: str, message: str) -> None:
    """`<program>: error: <the message's first line>` on stderr: how every command ends
    when it fails. Written as it is (no console): it may come before anything is set up."""
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"{prog_name}: error: {as_text_on(sys.stderr, first_line)}\n")
    sys.stderr.flush()


# -- what logs need of the front (nsqtools.commands.logs has the rest) -------------------

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")


def as_text_on(stream: Any, text: str) -> str:
    """`text` as a terminal should show it if `stream` is one (control characters
    escaped: an error or a log line may quote what the cluster said); as it is else."""
    from nsqtools.commands.consoles import printable

    try:
        terminal = stream.isatty()
    except ValueError:  # closed
        terminal = False
    return printable(text) if terminal else text
