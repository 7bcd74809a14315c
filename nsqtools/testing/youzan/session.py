"""One client connection to an nsqd of the fork, on the TCP protocol: a reader thread
reads commands (reader.py), records them, and runs them against the shared state
(IDENTIFY, the PUB and SUB families, RDY, FIN, REQ, TOUCH, CLS); a delivery thread sends
heartbeats and messages while RDY allows, and requeues what timed out. Fatal errors
close the connection after the client read them.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from nsqtools.testing.youzan.arguments import (
    CHANNEL_NAME,
    TOPIC_NAME,
    PositionError,
    check_ext_support,
    check_name,
    int_field,
    output_buffer_timeout,
    partition_param,
    publish_answer,
    read_drafts,
    read_position,
    refuse_create_topic,
    start_index,
)
from nsqtools.testing.youzan.reader import Closed, read_command, read_exactly
from nsqtools.testing.youzan.state import (
    Channel,
    Partition,
    Store,
    StoredMessage,
    move_refusal,
    take_refusal,
)
from nsqtools.testing.youzan.wire import (
    DEFAULT_HEARTBEAT_MS,
    DEFAULT_MSG_TIMEOUT_MS,
    EXT_VERSION_JSON,
    EXT_VERSION_NONE,
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    HEARTBEAT,
    MAGIC,
    MAX_MSG_TIMEOUT_MS,
    MAX_RDY_COUNT,
    MAX_REQ_TIMEOUT_MS,
    OK,
    OUTPUT_BUFFER_SIZE,
    PUB_COMMANDS,
    SUB_COMMANDS,
    VERSION,
    Refusal,
    invalid,
    not_in_flight,
    unknown_command,
)

# A peer that stopped reading still gets its fatal error frame: how long to wait for it
# to close its end before closing ours.
LINGER_SECONDS = 1.0
# The delivery threads re-check their timers at least this often.
MAX_WAIT_SECONDS = 1.0

_INIT, _SUBSCRIBED, _CLOSING = "init", "subscribed", "closing"


class ForkSession:
    """A client's connection: a reader thread runs its commands, a delivery thread sends
    its messages and heartbeats. Socket writes are serialised by write_lock."""

    def __init__(self, store: Store, nsqd: int, sock: socket.socket) -> None:
        self.store = store
        self.nsqd = nsqd
        self.sock = sock
        # Closed by the reader thread only: closing it while a read blocks is not safe.
        self.file: BinaryIO = sock.makefile("rb")
        self.write_lock = threading.Lock()
        self.closed = False
        # For nsqd's /stats: who the client is and since when.
        self.remote_address = _peer_of(sock)
        self.connect_ts = int(time.time())
        self.identity: dict[str, Any] = {}  # what IDENTIFY sent
        # Negotiated in IDENTIFY.
        self.identified = False
        self.heartbeat_ms = DEFAULT_HEARTBEAT_MS
        self.next_heartbeat = time.monotonic() + DEFAULT_HEARTBEAT_MS / 1000
        self.msg_timeout_ms = DEFAULT_MSG_TIMEOUT_MS
        self.sample_rate = 0
        self.extend_support = False
        self.desired_tag = ""
        # Subscription.
        self.state = _INIT
        self.channel: Channel | None = None
        self.detail = False  # offset and raw size in MESSAGE frames
        self.rdy = 0
        self.in_flight = 0
        self.copy: bytes | None = None  # a MESSAGE frame to send again at once (Channel.order)

    # The reader thread.

    def serve(self, spawn: Callable[[Callable[[], None]], None]) -> None:
        try:
            if read_exactly(self.file, 4) != MAGIC:
                self._refuse(Refusal("E_BAD_PROTOCOL", "bad protocol magic"))
                return
            spawn(self._deliver)
            while not self.closed:
                self._run(*self._read_command())
        except Refusal as refusal:  # a command that cannot be read: the stream is lost
            self._refuse(refusal)
        except (Closed, OSError):
            pass
        finally:
            self.close()
            self.file.close()

    def _run(self, name: bytes, params: list[bytes], body: bytes) -> None:
        try:
            answer = self._answer(name, params, body)
        except Refusal as refusal:
            self._refuse(refusal)
            return
        if answer is not None:
            self._send(FRAME_RESPONSE, answer)

    def _answer(self, name: bytes, params: list[bytes], body: bytes) -> bytes | None:
        if name == b"IDENTIFY":
            return self._identify(body)
        if name in PUB_COMMANDS:
            return self._publish(name, params, body)
        if name in SUB_COMMANDS:
            return self._subscribe(name, params)
        handlers: dict[bytes, Callable[[list[bytes]], bytes | None]] = {
            b"RDY": self._ready,
            b"FIN": self._finish,
            b"REQ": self._requeue,
            b"TOUCH": self._touch,
            b"NOP": lambda _: None,
            b"CLS": self._close_wait,
        }
        if name == b"AUTH":
            raise Refusal("E_AUTH_DISABLED", "AUTH Disabled")  # auth_required is false
        if name == b"INTERNAL_CREATE_TOPIC":
            refuse_create_topic(params)
        if name not in handlers:
            raise unknown_command([name, *params])  # SUB_ORDER (the design doc's name) too
        return handlers[name](params)

    def _refuse(self, refusal: Refusal) -> None:
        self._send(FRAME_ERROR, refusal.frame_data)
        if refusal.fatal:
            self._linger_close()

    def _read_command(self) -> tuple[bytes, list[bytes], bytes]:
        """The next command, recorded as it was received."""
        command = read_command(self.file)
        with self.store.lock:
            self.store.commands.append((self.nsqd, command.raw))
        return command.name, command.params, command.body

    # Commands.

    def _identify(self, body: bytes) -> bytes:
        if self.identified:
            raise invalid("cannot IDENTIFY in current state")
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):
            request = None
        if not isinstance(request, dict):
            raise Refusal("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        heartbeat = int_field(request, "heartbeat_interval", 0)
        msg_timeout = int_field(request, "msg_timeout", 0)
        with self.store.lock:
            self.identified = True
            self.identity = request
            # -1 disables heartbeats, 0 keeps the default. Any positive interval is
            # taken as it is (nsqd wants 1 s or more): fast heartbeats for tests.
            if heartbeat:
                self.heartbeat_ms = heartbeat
                self.next_heartbeat = time.monotonic() + heartbeat / 1000
            if msg_timeout > 0:
                self.msg_timeout_ms = min(msg_timeout, MAX_MSG_TIMEOUT_MS)
            self.sample_rate = int_field(request, "sample_rate", 0)
            self.extend_support = request.get("extend_support") is True
            tag = request.get("desired_tag", "")
            self.desired_tag = tag if isinstance(tag, str) else ""
            # ext_filter is read by the fork; the page says nothing of what it does.
            self.store.lock.notify_all()  # the delivery thread's heartbeat timer
        if request.get("feature_negotiation") is not True:
            return OK
        return json.dumps(self._identify_answer(request), separators=(",", ":")).encode()

    def _identify_answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """Upstream nsqd 1.x's answer, in its order, with the fork's version and desired_tag.
        TLS, snappy and deflate are never granted: the client goes on in plain text."""
        answer: dict[str, Any] = {
            "max_rdy_count": MAX_RDY_COUNT,
            "version": VERSION,
            "max_msg_timeout": MAX_MSG_TIMEOUT_MS,
            "msg_timeout": self.msg_timeout_ms,
            "tls_v1": False,
            "deflate": False,
            "deflate_level": 0,  # the fork says 0 unless it grants deflate (never, here)
            "max_deflate_level": 6,
            "snappy": False,
            "sample_rate": self.sample_rate,
            "auth_required": False,
            "output_buffer_size": OUTPUT_BUFFER_SIZE,
            "output_buffer_timeout": output_buffer_timeout(
                int_field(request, "output_buffer_timeout", 0)
            ),
        }
        if self.desired_tag:  # omitempty
            answer["desired_tag"] = self.desired_tag
        return answer

    def _publish(self, name: bytes, params: list[bytes], body: bytes) -> bytes:
        command = name.decode()
        if not params or not params[0]:
            raise invalid(f"{command} insufficient number of parameters")
        topic_name = params[0].decode(errors="replace")
        check_name(command, "topic", topic_name, TOPIC_NAME)
        number = partition_param(params[1]) if len(params) > 1 else None
        drafts = read_drafts(name, body)
        timestamp = time.time_ns()
        with self.store.lock:
            moving = move_refusal(self.store, self.nsqd, topic_name, number)
            if moving is not None:
                raise moving
            partition = self.store.resolve(self.nsqd, topic_name, number, publishing=True)
            refusal = take_refusal(partition, "pub")
            if refusal is not None:
                raise refusal
            if not self.store.topics[topic_name].writable:
                raise Refusal("E_FAILED_ON_NOT_WRITABLE", fatal=False)
            check_ext_support(name, drafts, partition)
            stored = [self.store.append(partition, draft, timestamp) for draft in drafts]
        return publish_answer(name, drafts, stored)

    def _subscribe(self, name: bytes, params: list[bytes]) -> bytes:
        command = name.decode()
        position = _start_position(name, params)
        if self.state != _INIT:
            raise invalid(f"cannot {command} in current state")
        if self.heartbeat_ms <= 0:  # spec, Observed: Consuming; the fork says "SUB" for all
            raise invalid("cannot SUB with heartbeats disabled")
        if len(params) < (3 if name == b"SUB_ORDERED" else 2):
            raise invalid(f"{command} insufficient number of parameters")
        topic_name, channel_name = (param.decode(errors="replace") for param in params[:2])
        check_name(command, "topic", topic_name, TOPIC_NAME)
        check_name(command, "channel", channel_name, CHANNEL_NAME)
        # The fork parses the partition only when the command has exactly 4 parameters
        # (with the command's name): with a start position it serves the partition this
        # nsqd leads, ignoring the one named (spec, "Observed on a running fork"; the
        # fork picks one by Go map order, this server the lowest).
        rest = params[2:] if position is None else []
        number = partition_param(rest[0]) if rest else None
        with self.store.lock:
            partition = self.store.resolve(self.nsqd, topic_name, number)
            self._check_subscription(name, partition)
            channel = self._join(partition, channel_name, position)
            if name == b"SUB_ORDERED":
                channel.order()
            self.detail = name != b"SUB"
        return OK

    def _check_subscription(self, name: bytes, partition: Partition) -> None:
        refusal = take_refusal(partition, "sub")
        if refusal is not None:
            raise refusal
        topic = partition.topic
        # The page names plain SUB; SUB_ADVANCED is no ordered sub either.
        if topic.ordered and name != b"SUB_ORDERED":
            raise Refusal("E_SUB_ORDER_IS_MUST")
        if name == b"SUB_ORDERED" and self.sample_rate != 0:
            raise invalid("order consume is not allowed while sample rate is not 0")
        if topic.extend and not self.extend_support:
            raise Refusal("E_SUB_EXTEND_NEED")
        if self.extend_support and not topic.extend:
            raise Refusal("E_SUB_EXTEND_FORBIDDON")

    def _join(self, partition: Partition, name: str, position: tuple[str, int] | None) -> Channel:
        if name not in partition.channels and partition.topic.disable_channel_auto_create:
            raise Refusal("E_SUB_CHANNEL_NOT_REGISTERED")
        channel = partition.channel(name)
        if not partition.topic.extend:
            self.desired_tag = ""  # the fork drops a tag on a topic without tags
        # "Only the channel's first client can set it": later ones subscribe where the
        # channel is (the fork logs it and answers OK).
        if position is not None and not channel.sessions:
            try:
                channel.seek(start_index(partition.messages, *position))
            except PositionError as error:
                raise invalid(str(error)) from None
        channel.sessions.append(self)
        self.channel = channel
        self.state = _SUBSCRIBED
        self.store.lock.notify_all()  # a new tag's messages are for this consumer now
        return channel

    def _ready(self, params: list[bytes]) -> None:
        if self.state == _CLOSING:
            return None  # nsqd ignores RDY after CLS
        if self.state != _SUBSCRIBED:
            raise invalid("cannot RDY in current state")
        try:
            count = int(params[0]) if params else 1
        except ValueError:
            raise invalid(f"RDY could not parse RDY count {params[0]!r}") from None
        if not 0 <= count <= MAX_RDY_COUNT:
            raise invalid(f"RDY count {count} out of range 0-{MAX_RDY_COUNT}")
        with self.store.lock:
            self.rdy = count
            self.store.lock.notify_all()
        return None

    def _finish(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("FIN", params)
        with self.store.lock:
            if channel.settle(self, params[0]) is None:
                raise not_in_flight("FIN", params[0])
            channel.attempts.pop(params[0], None)
            key = (channel.partition.topic.name, channel.name)
            self.store.finished.setdefault(key, []).append(params[0])
            self.store.lock.notify_all()
        return None

    def _requeue(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("REQ", params)
        if len(params) < 2:
            raise invalid("REQ insufficient number of params")
        try:
            delay_ms = int(params[1])
        except ValueError:
            raise invalid(f"REQ could not parse timeout {params[1]!r}") from None
        delay_ms = min(max(delay_ms, 0), MAX_REQ_TIMEOUT_MS)  # clamped, as nsqd 1.x does
        with self.store.lock:
            entry = channel.settle(self, params[0])
            if entry is None:
                raise not_in_flight("REQ", params[0])
            channel.requeue(entry.message, time.monotonic() + delay_ms / 1000)
            self.store.lock.notify_all()
        return None

    def _touch(self, params: list[bytes]) -> None:
        channel = self._subscribed_channel("TOUCH", params)
        with self.store.lock:
            entry = channel.in_flight.get(params[0])
            if entry is None or entry.session is not self:
                raise not_in_flight("TOUCH", params[0])
            entry.deadline = time.monotonic() + self.msg_timeout_ms / 1000
            self.store.lock.notify_all()
        return None

    def _close_wait(self, params: list[bytes]) -> bytes:
        if self.state != _SUBSCRIBED:
            raise invalid("cannot CLS in current state")
        with self.store.lock:
            self.state = _CLOSING  # no more messages; the client closes when it is done
        return b"CLOSE_WAIT"

    def _subscribed_channel(self, command: str, params: list[bytes]) -> Channel:
        if self.channel is None:
            raise invalid(f"cannot {command} in current state")
        if not params:
            raise invalid(f"{command} insufficient number of params")
        return self.channel

    # The delivery thread: heartbeats, messages while RDY allows, timeouts.

    def _deliver(self) -> None:
        while True:
            with self.store.lock:
                frame = self._next_frame()
            if frame is None:
                return
            self._send(*frame)

    def _next_frame(self) -> tuple[int, bytes] | None:
        """The next frame to send, waiting for one; None once the session is closed."""
        lock = self.store.lock
        while not self.closed:
            if self.copy is not None:
                frame, self.copy = self.copy, None
                return FRAME_MESSAGE, frame
            now = time.monotonic()
            if self.heartbeat_ms > 0 and now >= self.next_heartbeat:
                self.next_heartbeat = now + self.heartbeat_ms / 1000
                return FRAME_RESPONSE, HEARTBEAT
            channel = self.channel
            if channel is not None and channel.expire(now):
                lock.notify_all()  # other consumers of the channel may take them
            if channel is not None and self.state == _SUBSCRIBED and self.in_flight < self.rdy:
                taken = channel.take(self, now)
                if taken is not None:
                    frame = self._message_frame(*taken)
                    if channel.sends_twice():
                        self.copy = frame
                    return FRAME_MESSAGE, frame
            lock.wait(self._wait_time(now))
        return None

    def _wait_time(self, now: float) -> float:
        times = [now + MAX_WAIT_SECONDS]
        if self.heartbeat_ms > 0:
            times.append(self.next_heartbeat)
        if self.channel is not None:
            event = self.channel.next_event(now)
            times += [] if event is None else [event]
        return max(min(times) - now, 0.001)

    def _message_frame(self, message: StoredMessage, attempts: int) -> bytes:
        """[8B ts][2B attempts][16B id][ext][detail][body], as the page lays it out."""
        parts = [struct.pack(">QH", message.timestamp, attempts), message.id]
        # A client with extend_support is subscribed to an extend topic only.
        if self.extend_support:
            if message.ext:
                parts += [bytes([EXT_VERSION_JSON]), struct.pack(">H", len(message.ext))]
                parts.append(message.ext)
            else:
                parts.append(bytes([EXT_VERSION_NONE]))
        if self.detail:  # after SUB_ORDERED or SUB_ADVANCED
            parts.append(struct.pack(">QI", message.offset, message.raw_size))
        parts.append(message.body)
        return b"".join(parts)

    # Writing and closing.

    def _send(self, frame_type: int, data: bytes) -> None:
        frame = struct.pack(">ii", len(data) + 4, frame_type) + data
        try:
            with self.write_lock:
                self.sock.sendall(frame)
        except OSError:
            self.close()

    def _linger_close(self) -> None:
        """Close after a fatal error, so that the client reads the error frame: closing
        with its later commands unread would reset the connection and lose the frame."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(LINGER_SECONDS)
            while self.file.read(4096):
                pass
        self.close()

    def close(self) -> None:
        """Safe twice, from any thread."""
        with self.store.lock:
            if self.closed:
                return
            self.closed = True
            if self.channel is not None:
                self.channel.drop_session(self, time.monotonic())
            self.store.sessions.discard(self)
            self.store.lock.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _peer_of(sock: socket.socket) -> str:
    """The client's "ip:port"; "" when it is gone already."""
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return ""
    return f"{host}:{port}"


def _start_position(name: bytes, params: list[bytes]) -> tuple[str, int] | None:
    """SUB_ADVANCED's 5th parameter (with the command's name), read before anything else
    as the fork does: a bad one is a fatal E_INVALID with the fork's text."""
    if name != b"SUB_ADVANCED" or len(params) < 4 or not params[3]:
        return None
    try:
        return read_position(params[3])
    except PositionError as error:
        raise invalid(str(error)) from None
