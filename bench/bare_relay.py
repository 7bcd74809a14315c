"""The ceiling for bench/relays.py's nsq_to_nsq: the least a relay does, in plain Python.

Blocking sockets: SUB on the source nsqd (RDY --max-in-flight); the messages of each
read go as one MPUB to the destination nsqd; once it answered OK, one FIN each. No event
loop, no options, no reconnects: what is left when nsq_to_nsq's contract (FIN only
after the destination acknowledged, Go's window of 200) is all that remains. SIGTERM
is let in only while waiting for the source (bare_archiver.receive), then it exits 0.

    python bench/bare_relay.py --nsqd-tcp-address=H:P --topic=T --channel=C \\
        --destination-nsqd-tcp-address=H:P --destination-topic=D [--max-in-flight=200]
"""

from __future__ import annotations

import argparse
import signal
import socket
import struct

from bare_archiver import Stop, receive, stop, take_messages

from nsqtools.protocol import commands

_FRAME_HEADER = struct.Struct(">II")
_OK = b"OK"


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(commands.MAGIC_V2)
    return sock


def wait_for_ok(sock: socket.socket) -> None:
    """Read the destination's answer to one MPUB: it must be OK."""
    data = b""
    while len(data) < 8 or len(data) < 4 + _FRAME_HEADER.unpack_from(data)[0]:
        data += sock.recv(4096)
    if data[8:] != _OK:
        raise SystemExit(f"destination answered {data[8:]!r}")


def relay(source: socket.socket, destination: socket.socket, topic: str) -> None:
    buffer = b""
    ids: list[bytes] = []
    bodies: list[bytes] = []
    try:
        while data := receive(source):
            buffer = take_messages(buffer + data, ids, bodies)
            if ids:
                destination.sendall(commands.mpub(topic, bodies))
                wait_for_ok(destination)
                source.sendall(commands.fin_many(ids))
                ids.clear()
                bodies.clear()
    except Stop:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--destination-nsqd-tcp-address", required=True)
    parser.add_argument("--destination-topic", required=True)
    parser.add_argument("--max-in-flight", type=int, default=200)
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, stop)
    with (
        connect(args.nsqd_tcp_address) as source,
        connect(args.destination_nsqd_tcp_address) as destination,
    ):
        source.sendall(commands.sub(args.topic, args.channel) + commands.rdy(args.max_in_flight))
        relay(source, destination, args.destination_topic)


if __name__ == "__main__":
    main()
