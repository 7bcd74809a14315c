"""The fork's wire, as the spec page gives it: its version, frame types, sizes and limits,
the command families, the error codes and their texts, and Refusal, the error frame a
command earns (fatal ones close the connection).
"""

from __future__ import annotations

import struct

VERSION = "0.3.7-HA.1.12.7"
MAGIC = b"  V2"
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
HOSTNAME = "host"  # the page's example shows "host"
V1_ACCEPT = "application/vnd.nsq; version=1.0"

PARTITION_SHIFT = 50  # internal id = (partition << 50) + sequence: "partition 1 gave 2^50+seq"
FIRST_SEQUENCE = 2  # "A partition's first message has sequence 2: internal id (p << 50) + 2"
MESSAGE_HEADER_SIZE = 26  # 8B timestamp + 2B attempts + 16B id
DISK_LENGTH_PREFIX = 4  # the disk queue writes each message after its 4-byte length
EXT_VERSION_NONE, EXT_VERSION_JSON = 0, 4
TRACE_ID_SIZE = 8  # PUB_TRACE: [8B trace id][payload]
EXT_LENGTH_SIZE = 2  # PUB_EXT: [2B json length][json header][payload]
TRACE_ID_KEY = "##trace_id"
TAG_KEY = "##client_dispatch_tag"

MAX_BODY_SIZE = 5 * 1024 * 1024  # nsqd's default max-body-size
MAX_LINE_SIZE = 64 * 1024
MAX_RDY_COUNT = 2500
DEFAULT_MSG_TIMEOUT_MS = 60_000
MAX_MSG_TIMEOUT_MS = 900_000
MAX_REQ_TIMEOUT_MS = 3_600_000
DEFAULT_HEARTBEAT_MS = 30_000
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 50  # "output_buffer_timeout 50" when the client sent none
MIN_OUTPUT_BUFFER_TIMEOUT_MS = 10
OUTPUT_BUFFER_SIZE = 100  # "output_buffer_size reports 100 until the client subscribes"

PUB_COMMANDS = frozenset({b"PUB", b"MPUB", b"PUB_TRACE", b"MPUB_TRACE", b"PUB_EXT", b"MPUB_EXT"})
SUB_COMMANDS = frozenset({b"SUB", b"SUB_ADVANCED", b"SUB_ORDERED"})
BODY_COMMANDS = PUB_COMMANDS | {b"IDENTIFY", b"AUTH"}
FIXED_ID_COMMANDS = frozenset({b"FIN", b"REQ", b"TOUCH"})
ID_SIZE = 16

# The fork's texts (the page's, else nsqdserver/protocol_v2.go's); for the others,
# "CODE short description".
ERROR_DESCRIPTIONS: dict[str, str] = {
    "E_TOPIC_NOT_EXIST": "",  # "note the trailing space: the description is empty"
    "E_FAILED_ON_NOT_LEADER": "",  # empty too, as observed during a leader move
    "E_FAILED_ON_NOT_WRITABLE": "",
    "E_BAD_PARTITION": "topic partition is not valid",
    "E_SUB_ORDER_IS_MUST": "this topic is configured only allow ordered sub",
    "E_SUB_EXTEND_NEED": "this topic is extended and should identify as extend support.",
    "E_SUB_EXTEND_FORBIDDON": "this topic is not extended and should not identify as extend "
    "support.",
    "E_SUB_CHANNEL_NOT_REGISTERED": "channel is not registered under topic.",
    "E_EXT_NOT_SUPPORT": "ext content not supported in topic",
    "E_INVALID_JSON_HEADER": "fail to parse json header:",
    # The fork adds the bytes waiting to be written; a scripted refusal has none.
    "E_PUB_TOO_MUCH_WAITING": "pub too much waiting in the queue",
    "E_BAD_EXT": "the extend header is malformed",
    "E_BAD_TAG": "the dispatch tag is not valid",
}
# The codes the fork answers a PUB-family command with and keeps the connection:
# not-leader and not-writable ("but fatal on SUB"), the extend header's errors and a
# failed write. Every other code closes it, E_PUB_TOO_MUCH_WAITING too: the fork sends
# it as a FatalClientErr (the page's "treat it as retryable" is the client's business).
NON_FATAL_ON_PUB = frozenset(
    {
        "E_FAILED_ON_NOT_LEADER",
        "E_FAILED_ON_NOT_WRITABLE",
        "E_EXT_NOT_SUPPORT",
        "E_INVALID_JSON_HEADER",
        "INVALID_TRACE_ID",
        "E_PUB_FAILED",
        "E_MPUB_FAILED",
    }
)


def trace_answer(internal_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The 30-byte answer: "OK" + 8B internal id + 8B trace id + 8B offset + 4B raw size."""
    return OK + struct.pack(">QQQI", internal_id, trace_id, offset, raw_size)


class Refusal(Exception):
    """An error frame for the client: "CODE description"; fatal ones close the connection."""

    def __init__(self, code: str, description: str | None = None, *, fatal: bool = True) -> None:
        if description is None:
            description = ERROR_DESCRIPTIONS.get(code, code.lower().removeprefix("e_"))
        super().__init__(f"{code} {description}")
        self.code = code
        self.fatal = fatal

    @property
    def frame_data(self) -> bytes:
        return str(self).encode()


def invalid(description: str) -> Refusal:
    return Refusal("E_INVALID", description)


def go_bytes(data: bytes) -> str:
    """Bytes as Go's %v prints a byte slice or array: "[48 48 10]"."""
    return "[" + " ".join(str(byte) for byte in data) + "]"


def unknown_command(words: list[bytes]) -> Refusal:
    """The fork prints the command's words with %v: "invalid command [[83 85 66] [116]]"."""
    return invalid("invalid command [" + " ".join(go_bytes(word) for word in words) + "]")


def not_in_flight(command: str, message_id: bytes) -> Refusal:
    """ "FIN [0 4 ...] failed ErrType:7 ErrCode:0 : Message ID not in flight": the id as Go
    prints a byte array; FIN goes through the fork's coordinator, whose local error
    (type 7) wraps the channel's."""
    code = {"FIN": "E_FIN_FAILED", "REQ": "E_REQ_FAILED", "TOUCH": "E_TOUCH_FAILED"}[command]
    reason = "Message ID not in flight"
    if command == "FIN":
        reason = f"ErrType:7 ErrCode:0 : {reason}"
    return Refusal(code, f"{command} {go_bytes(message_id)} failed {reason}", fatal=False)
