"""What Tab offers for an option's value: the words of --format and --mode, paths for
path options, and topic names from the nsqlookupd given on the command line or in
NSQ_LOOKUPD_HTTP_ADDRESS; a lookupd that never answers makes a Tab offer nothing,
never hang.

Each case runs the installed program as the shell's completion function does (click's
protocol: the COMP_WORDS and COMP_CWORD of bash, the program's _COMPLETE variable).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nsqtools.commands.completers import LOOKUPD_ENV
from nsqtools.commands.completion import complete_var

BIN = Path(sys.executable).parent
TOPICS = ["events", "orders", "orders.eu"]


def complete(program: str, line: str, **environment: str) -> list[str]:
    """What the program offers for the last word of `line` ("" after a trailing space),
    as `type,value` lines."""
    words = line.split() + ([""] if line.endswith(" ") else [])
    variables = {
        complete_var(program): "bash_complete",
        "COMP_WORDS": " ".join(words),
        "COMP_CWORD": str(len(words) - 1),
    }
    inherited = {name: value for name, value in os.environ.items() if name != LOOKUPD_ENV}
    result = subprocess.run(
        [BIN / program],
        env=inherited | variables | environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    return [offer for offer in result.stdout.splitlines() if offer]  # none: one empty line


class TopicsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"topics": TOPICS}).encode() if self.path == "/topics" else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def lookupd() -> Iterator[str]:
    """An nsqlookupd's /topics, answering TOPICS."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), TopicsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def silent_lookupd() -> Iterator[str]:
    """A lookupd that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize(
    ("program", "line", "offered"),
    [
        ("nsq_tail", "nsq_tail --format ", ["plain,raw", "plain,json"]),
        ("nsq", "nsq tail --format j", ["plain,json"]),
        ("nsq_to_file", "nsq_to_file --format ", ["plain,raw", "plain,json"]),
        (
            "nsq_stat",
            "nsq_stat --format ",
            ["plain,auto", "plain,table", "plain,plain", "plain,json", "plain,prometheus"],
        ),
        (
            "nsq_to_nsq",
            "nsq_to_nsq --mode ",
            ["plain,round-robin", "plain,hostpool", "plain,epsilon-greedy", "plain,all"],
        ),
        ("nsq", "nsq to-http --mode h", ["plain,hostpool"]),
        ("nsq", "nsq bench --mode ", ["plain,both", "plain,publish", "plain,consume"]),
    ],
)
def test_the_words_of_an_option(program: str, line: str, offered: list[str]) -> None:
    assert sorted(complete(program, line)) == sorted(offered)


@pytest.mark.parametrize(
    ("program", "line", "offered"),
    [
        ("nsq_to_file", "nsq_to_file --output-dir /va", ["dir,/va"]),
        ("nsq_to_file", "nsq_to_file --work-dir ", ["dir,"]),
        ("nsq_tail", "nsq_tail --tls-cert ce", ["file,ce"]),
        ("to_nsq", "to_nsq --failed-file ", ["file,"]),
        ("to_nsq", "to_nsq --topic=t records", ["file,records"]),
        ("nsq", "nsq tail --dead-letter-file d", ["file,d"]),
    ],
)
def test_paths_are_left_to_the_shell(program: str, line: str, offered: list[str]) -> None:
    assert complete(program, line) == offered


def test_topics_from_the_lookupd_in_the_environment(lookupd: str) -> None:
    offered = complete("to_nsq", "to_nsq --topic ", **{LOOKUPD_ENV: lookupd})
    assert offered == [f"plain,{topic}" for topic in TOPICS]
    assert complete("nsq", "nsq channels or", **{LOOKUPD_ENV: lookupd}) == [
        "plain,orders",
        "plain,orders.eu",
    ]


def test_topics_from_the_lookupd_on_the_command_line(lookupd: str) -> None:
    line = f"nsq_tail --lookupd-http-address={lookupd} --topic ev"
    assert complete("nsq_tail", line) == ["plain,events"]


def test_no_lookupd_offers_no_topic() -> None:
    assert complete("nsq_tail", "nsq_tail --topic ") == []


def test_a_lookupd_that_never_answers_offers_nothing(silent_lookupd: str) -> None:
    assert complete("nsq", "nsq topic ", **{LOOKUPD_ENV: silent_lookupd}) == []
