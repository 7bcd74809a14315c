"""One client connection to nsqd as a state machine, sans-IO, in h11's manner: bytes
received go in, and out come what the I/O layer must do, send or hand on.

The I/O layer (nsqtools.transport) moves bytes and starts TLS and compression when
told to; this decides what the protocol decides:

- the set-up sequence, in the order nsqd requires: magic and IDENTIFY; the TLS
  handshake and its OK; snappy or deflate and its OK; AUTH. Set-up answers are read
  one frame at a time, so the bytes after one, which may belong to the layer started
  next (a compressed OK can come with the plain IDENTIFY answer), are handed to that
  layer (take_unconsumed), never lost;
- the answers owed: nsqd answers the commands that expect it (SUB, PUB, MPUB, DPUB,
  CLS, ...) in the order they were sent, so each answer settles the oldest request
  owed one; a heartbeat is answered with NOP; a FIN, REQ or TOUCH is answered only
  when it fails;
- which error frames are fatal: nsqd closes the connection after any error but a
  failed FIN, REQ or TOUCH and the Youzan fork's leader errors (ErrorFrame.fatal);
- a sticky error state: once the session met a protocol error or a fatal error
  frame, every later call raises that error (close() excepted).

How the I/O layer drives it (transport/negotiation.py, then transport/conn.py):

    session = Session(address, identify_request, auth_secret)
    until session.next_step() is READY: send session.data_to_send(), then do the
        step: NEED_DATA, read and session.receive_data(); START_TLS, the handshake;
        START_SNAPPY or START_DEFLATE, wrap the stream, fed take_unconsumed() first.
    then, for each command nsqd answers, session.expect_answer(request); for each
    read, session.receive_data(), act on session.next_events(), send
    session.data_to_send(); when the connection ends, session.close().
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

from nsqtools.protocol import commands
from nsqtools.protocol.errors import (
    AuthDeniedError,
    AuthSecretMissingError,
    ErrorFrameError,
    LocalProtocolError,
    NotNsqError,
    ProtocolError,
    RemoteProtocolError,
    TlsNotOfferedError,
)
from nsqtools.protocol.frames import (
    ErrorFrame,
    Event,
    FrameDecoder,
    Heartbeat,
    MessageBatch,
    Response,
)
from nsqtools.protocol.identify import AuthResponse, IdentifyRequest, IdentifyResponse
from nsqtools.wrong_port import ANSWER_START, not_nsqd_tcp

# What the I/O layer sends with a command nsqd answers, to have it back with the answer.
Request = TypeVar("Request")


class Phase(enum.Enum):
    """Where the session is; the set-up phases are named after the answer awaited."""

    IDENTIFY = "IDENTIFY"
    TLS = "TLS"
    SNAPPY = "snappy"
    DEFLATE = "deflate"
    AUTH = "AUTH"
    READY = "ready"  # set up: commands, answers and messages flow
    CLOSED = "closed"  # ended by close(), by a protocol error or by a fatal error frame


class SetupStep(enum.Enum):
    """What the I/O layer does next during set-up, once it sent data_to_send()."""

    NEED_DATA = "need data"  # receive bytes and pass them to receive_data()
    START_TLS = "start TLS"  # the TLS handshake, over the stream as it is
    START_SNAPPY = "start snappy"  # wrap the stream; it decodes take_unconsumed() first
    START_DEFLATE = "start deflate"  # likewise, at identify.deflate_level
    READY = "ready"  # set up: identify (and auth, if nsqd required it) are known


_UPGRADES = {
    Phase.TLS: SetupStep.START_TLS,
    Phase.SNAPPY: SetupStep.START_SNAPPY,
    Phase.DEFLATE: SetupStep.START_DEFLATE,
}


@dataclass(frozen=True, slots=True)
class Answered(Generic[Request]):
    """nsqd answered the oldest request owed an answer."""

    request: Request
    data: bytes


@dataclass(frozen=True, slots=True)
class Refused(Generic[Request]):
    """nsqd refused the oldest request owed an answer with an error frame. When the
    frame is fatal it ends the connection, and request is None if nothing was owed."""

    request: Request | None
    frame: ErrorFrame


# What next_events() yields: messages delivered, answers, refusals, and the error frame
# of a failed FIN, REQ or TOUCH (the message timed out or was answered already), which
# answers no request and leaves the connection open.
SessionEvent = MessageBatch | Answered[Request] | Refused[Request] | ErrorFrame


class Session(Generic[Request]):
    """The protocol state of one client connection to nsqd, from the magic on.

    address names the peer in error messages. accepts_messages: the connection has a
    consumer for messages; without one, a message is a protocol error.
    """

    def __init__(
        self,
        address: str,
        identify_request: IdentifyRequest,
        auth_secret: str = "",
        *,
        accepts_messages: bool = False,
    ) -> None:
        self.address = address
        self.auth: AuthResponse | None = None  # nsqd's answer to AUTH, if it required it
        self._identify_request = identify_request
        self._auth_secret = auth_secret
        self._accepts_messages = accepts_messages
        self._decoder = FrameDecoder()
        self._outgoing = [commands.MAGIC_V2 + commands.identify(identify_request.to_json())]
        self._phase = Phase.IDENTIFY
        self._phases_left: list[Phase] = []  # the set-up phases after IDENTIFY's answer
        self._upgrade_due = False  # the phase begins with the I/O layer starting a layer
        self._answer_start = b""  # the first bytes received, which say what answered
        self._identify: IdentifyResponse | None = None
        self._owed: deque[Request] = deque()
        self._error: ProtocolError | None = None
        # Heartbeats received once set up: nsqd sends them from the loop that sends the
        # messages, so one that comes shows that loop alive (read to the end).
        self.heartbeats = 0

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def identify(self) -> IdentifyResponse:
        """What nsqd granted in its answer to IDENTIFY."""
        if self._identify is None:
            raise LocalProtocolError(f"{self.address} has not answered IDENTIFY yet")
        return self._identify

    @property
    def oldest_owed(self) -> Request | None:
        """The oldest request still owed an answer, if any."""
        return self._owed[0] if self._owed else None

    def data_to_send(self) -> bytes:
        """What the protocol has to send now (the magic and IDENTIFY, AUTH, NOPs for
        heartbeats), emptied by the call; nothing once the session is closed."""
        outgoing = b"".join(self._outgoing)
        self._outgoing.clear()
        return outgoing

    def receive_data(self, data: bytes | bytearray) -> None:
        """Add bytes received from nsqd; next_step() or next_events() reads them."""
        self._check_open()
        if len(self._answer_start) < ANSWER_START:
            # Another server's answer to the magic ("HTTP/1.1 400 Bad Request", read as a
            # frame, would be a 1.2 GB one) says which port was given instead.
            self._answer_start += data[: ANSWER_START - len(self._answer_start)]
            wrong_port = not_nsqd_tcp(self._answer_start)
            if wrong_port is not None:
                self._fail(NotNsqError(f"{self.address} is {wrong_port}"))
        self._decoder.receive_data(data)

    # -- set-up ----------------------------------------------------------------------

    def next_step(self) -> SetupStep:
        """Go through the set-up as far as the bytes received allow; return what the
        I/O layer does next (each START_ step once). Raises why the set-up failed."""
        self._check_open()
        try:
            while self._phase is not Phase.READY:
                if self._upgrade_due:
                    self._upgrade_due = False
                    return _UPGRADES[self._phase]
                answer = self._next_setup_answer()
                if answer is None:
                    return SetupStep.NEED_DATA
                self._take_setup_answer(answer)
        except ProtocolError as error:
            self._fail(error)
        return SetupStep.READY

    def take_unconsumed(self) -> bytes:
        """The bytes received after the last set-up answer: the start of the layer
        being started (START_SNAPPY, START_DEFLATE), which must decode them first."""
        return self._decoder.take_unconsumed()

    def _next_setup_answer(self) -> bytes | None:
        """The next response to the set-up, or None until more bytes come."""
        while (event := self._decoder.next_event()) is not None:
            if type(event) is Response:
                return event.data
            if type(event) is Heartbeat:
                self._outgoing.append(commands.NOP)
            elif type(event) is ErrorFrame:
                if self._phase is Phase.AUTH:
                    raise AuthDeniedError(
                        f"{self.address} denied AUTH: {event.code} {event.message}"
                    )
                raise ErrorFrameError(self.address, event)
            else:
                raise RemoteProtocolError(
                    f"{self.address} sent a message during {self._phase.value}"
                )
        return None

    def _take_setup_answer(self, answer: bytes) -> None:
        if self._phase is Phase.IDENTIFY:
            self._identify = IdentifyResponse.parse(answer)
            self._phases_left = self._phases_after_identify(self._identify)
        elif self._phase is Phase.AUTH:
            self.auth = AuthResponse.parse(answer)
        elif answer != b"OK":
            raise RemoteProtocolError(
                f"{self.address} answered {self._phase.value} set-up with {answer[:80]!r}"
            )
        self._begin_next_phase()

    def _phases_after_identify(self, identify: IdentifyResponse) -> list[Phase]:
        phases = []
        if self._identify_request.tls_v1:
            if not identify.tls_v1:
                raise TlsNotOfferedError(
                    f"{self.address} does not offer TLS (nsqd needs --tls-cert and --tls-key)"
                )
            phases.append(Phase.TLS)
        # Snappy and deflate are exclusive; nsqd grants at most one.
        if identify.snappy:
            phases.append(Phase.SNAPPY)
        elif identify.deflate:
            phases.append(Phase.DEFLATE)
        if identify.auth_required:
            phases.append(Phase.AUTH)
        return phases

    def _begin_next_phase(self) -> None:
        if not self._phases_left:
            self._phase = Phase.READY
            return
        self._phase = self._phases_left.pop(0)
        if self._phase is Phase.AUTH:
            if not self._auth_secret:
                raise AuthSecretMissingError(
                    f"{self.address} requires AUTH, but no auth secret was given"
                )
            self._outgoing.append(commands.auth(self._auth_secret))
            return
        # Bytes past the answer before a TLS handshake cannot be TLS's: nsqd speaks
        # only after the client's hello.
        if self._phase is Phase.TLS and self._decoder.take_unconsumed():
            raise RemoteProtocolError(f"{self.address} sent data before the TLS handshake")
        self._upgrade_due = True

    # -- after set-up ----------------------------------------------------------------

    def expect_answer(self, request: Request) -> None:
        """The I/O layer sent a command nsqd answers: it is owed the next answer after
        those of the requests sent before it."""
        self._check_ready()
        self._owed.append(request)

    def next_events(self) -> Iterator[SessionEvent[Request]]:
        """Decode every whole frame received and yield what the I/O layer acts on, in
        order; the NOPs for heartbeats go to data_to_send(). A malformed frame raises
        at once; a frame out of place (an unrequested answer, a message nobody
        consumes) after the events before it were yielded. A fatal error frame's
        Refused is the last event: the session is closed once iteration goes past it
        (and by close() at once)."""
        self._check_ready()
        try:
            events = self._decoder.feed(b"")
        except RemoteProtocolError as error:
            self._fail(error)
        return self._interpret(events)

    def _interpret(self, events: list[Event]) -> Iterator[SessionEvent[Request]]:
        for event in events:
            if self._phase is not Phase.READY:
                return  # closed meanwhile by the I/O layer: nothing after counts
            if type(event) is MessageBatch:
                if not self._accepts_messages:
                    self._fail(RemoteProtocolError(f"{self.address} sent a message before any SUB"))
                yield event
            elif type(event) is Heartbeat:
                self.heartbeats += 1
                self._outgoing.append(commands.NOP)
            elif type(event) is Response:
                yield Answered(self._settle_oldest(event.data), event.data)
            elif type(event) is ErrorFrame:
                yield self._error_frame(event)
                if event.fatal:
                    # nsqd closes the connection after a fatal error and reads nothing
                    # more. Closed only now, after the I/O layer acted on the refusal:
                    # what it did then (a request sent from the refused one's callback)
                    # is settled by its own close(), in order.
                    self._enter_error(ErrorFrameError(self.address, event))
                    return

    def _error_frame(self, frame: ErrorFrame) -> SessionEvent[Request]:
        if not frame.refuses_request:
            return frame  # E_FIN_FAILED and friends: the message timed out or was answered
        if not frame.fatal:
            # The Youzan fork's leader errors refuse a PUB and keep the connection.
            return Refused(self._settle_oldest(b""), frame)
        return Refused(self._owed.popleft() if self._owed else None, frame)

    def _settle_oldest(self, answer: bytes) -> Request:
        if not self._owed:
            self._fail(
                RemoteProtocolError(f"{self.address} sent an unrequested answer: {answer!r}")
            )
        return self._owed.popleft()

    # -- the end ---------------------------------------------------------------------

    def close(self) -> list[Request]:
        """The connection ended, whichever side ended it. Returns the requests still
        owed an answer, which will never come, oldest first."""
        self._phase = Phase.CLOSED
        self._outgoing.clear()
        owed = list(self._owed)
        self._owed.clear()
        return owed

    def _fail(self, error: ProtocolError) -> NoReturn:
        """Enter the sticky error state with `error` and raise it."""
        self._enter_error(error)
        raise error

    def _enter_error(self, error: ProtocolError) -> None:
        self._error = error
        self._phase = Phase.CLOSED
        self._outgoing.clear()

    def _check_open(self) -> None:
        if self._phase is Phase.CLOSED:
            raise self._error or LocalProtocolError(f"the session with {self.address} is closed")

    def _check_ready(self) -> None:
        self._check_open()
        if self._phase is not Phase.READY:
            raise LocalProtocolError(
                f"the set-up with {self.address} is not done: {self._phase.value} is awaited"
            )
