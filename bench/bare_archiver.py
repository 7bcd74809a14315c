"""The ceiling for bench/to_file.py: the least a durable archiver does, in plain Python.

One blocking socket to one nsqd, RDY --max-in-flight; every message's body appended to
one file; when a window of max-in-flight messages is held (or at SIGTERM): one write, one
fsync, then one FIN per message. No event loop, no options, no rotation, no recovery: what
is left when nsq_to_file's contract (FIN only after fsync, Go's window of 200) is all
that remains. With --gzip each sync writes one gzip member, as nsq_to_file does.

SIGTERM is let in only while the loop waits in recv(), so it never lands between a
write and its FINs: the loop then syncs and FINs what it holds, and exits 0.

    python bench/bare_archiver.py --nsqd-tcp-address=H:P --topic=T --channel=C \
        --output-dir=DIR [--gzip] [--max-in-flight=200]
"""

from __future__ import annotations

import argparse
import gzip
import os
import signal
import socket
import struct
from pathlib import Path

from nsqtools.protocol import commands

RECEIVE_SIZE = 256 * 1024
_FRAME_HEADER = struct.Struct(">II")
_MESSAGE = 2  # frame type
_ID_START, _BODY_START = 4 + 4 + 8 + 2, 4 + 4 + 8 + 2 + 16  # after size, type, ts, attempts


class Stop(Exception):
    """SIGTERM arrived while waiting for data."""


def take_messages(buffer: bytes, ids: list[bytes], bodies: list[bytes]) -> bytes:
    """Append the ids and bodies of the whole message frames in buffer; return the rest."""
    pos, end_of_data = 0, len(buffer)
    while end_of_data - pos >= 8:
        size, frame_type = _FRAME_HEADER.unpack_from(buffer, pos)
        end = pos + 4 + size
        if end > end_of_data:
            break
        if frame_type == _MESSAGE:
            ids.append(buffer[pos + _ID_START : pos + _BODY_START])
            bodies.append(buffer[pos + _BODY_START : end])
        pos = end
    return buffer[pos:]


def stop(signum: int, frame: object) -> None:
    raise Stop


def receive(sock: socket.socket) -> bytes:
    """recv() with SIGTERM let in (raised as Stop) only while it waits."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        return sock.recv(RECEIVE_SIZE)
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def archive(sock: socket.socket, fd: int, window: int, level: int | None) -> None:
    buffer = b""
    ids: list[bytes] = []
    bodies: list[bytes] = []

    def sync() -> None:
        data = b"\n".join(bodies) + b"\n"
        os.write(fd, data if level is None else gzip.compress(data, level, mtime=0))
        os.fsync(fd)
        sock.sendall(commands.fin_many(ids))
        ids.clear()
        bodies.clear()

    try:
        while data := receive(sock):
            buffer = take_messages(buffer + data, ids, bodies)
            if len(ids) >= window:
                sync()
    except Stop:
        pass
    if ids:
        sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--max-in-flight", type=int, default=200)
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, stop)
    name = f"{args.topic}.bare.log" + (".gz" if args.gzip else "")
    fd = os.open(args.output_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    host, port = args.nsqd_tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            commands.MAGIC_V2
            + commands.sub(args.topic, args.channel)
            + commands.rdy(args.max_in_flight)
        )
        archive(sock, fd, args.max_in_flight, 6 if args.gzip else None)
    os.close(fd)


if __name__ == "__main__":
    main()
