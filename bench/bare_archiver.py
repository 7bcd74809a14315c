"""The ceiling for bench/to_file.py: the least a durable archiver does, in plain Python.

One blocking socket to one nsqd, RDY --max-in-flight; every message's body appended to
one file; when a window of max-in-flight messages is held (or at SIGTERM): one write, one
fsync, then one FIN per message. No event loop, no options, no rotation, no recovery: what
is left when nsq_to_file's contract (FIN only after fsync, Go's window of 200) is all
that remains. With --gzip each sync writes one gzip member, as nsq_to_file does.

SIGTERM is let in only while the loop waits in recv(), so it never lands between a
write and its FINs: the loop then syncs and FINs what it holds, and exits 0.

With --trio, the same loop on trio's sockets (its event loop, epoll, a task woken per
read, trio imported at the start), as nsq_to_file's own must be: the floor of any
archiver built on trio. SIGTERM then cancels the wait for data; a sync is shielded.

    python bench/bare_archiver.py --nsqd-tcp-address=H:P --topic=T --channel=C \
        --output-dir=DIR [--gzip] [--max-in-flight=200] [--trio]
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


def write_durably(fd: int, bodies: list[bytes], level: int | None) -> None:
    """The bodies as lines (one gzip member with a level), written and fsynced."""
    data = b"\n".join(bodies) + b"\n"
    os.write(fd, data if level is None else gzip.compress(data, level, mtime=0))
    os.fsync(fd)


def archive(sock: socket.socket, fd: int, window: int, level: int | None) -> None:
    buffer = b""
    ids: list[bytes] = []
    bodies: list[bytes] = []

    def sync() -> None:
        write_durably(fd, bodies, level)
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


def archive_on_trio(
    address: str, subscription: bytes, fd: int, window: int, level: int | None
) -> None:
    """archive()'s loop on trio's sockets; SIGTERM cancels the wait for data."""
    import trio  # only here: the blocking loop's start-up stays the interpreter's alone

    buffer = b""
    ids: list[bytes] = []
    bodies: list[bytes] = []

    async def sync(stream: trio.SocketStream) -> None:
        with trio.CancelScope(shield=True):
            write_durably(fd, bodies, level)
            await stream.send_all(commands.fin_many(ids))
        ids.clear()
        bodies.clear()

    async def stop_at_sigterm(scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                scope.cancel()
                return

    async def run() -> None:
        nonlocal buffer
        host, port = address.rsplit(":", 1)
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(subscription)
            async with trio.open_nursery() as nursery:
                with trio.CancelScope() as receiving:
                    nursery.start_soon(stop_at_sigterm, receiving)
                    while data := await stream.receive_some(RECEIVE_SIZE):
                        buffer = take_messages(buffer + data, ids, bodies)
                        if len(ids) >= window:
                            await sync(stream)
                if ids:
                    await sync(stream)
                nursery.cancel_scope.cancel()

    trio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--trio", action="store_true", help="the loop on trio's sockets")
    args = parser.parse_args()
    name = f"{args.topic}.bare.log" + (".gz" if args.gzip else "")
    fd = os.open(args.output_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    subscription = (
        commands.MAGIC_V2
        + commands.sub(args.topic, args.channel)
        + commands.rdy(args.max_in_flight)
    )
    level = 6 if args.gzip else None
    if args.trio:
        archive_on_trio(args.nsqd_tcp_address, subscription, fd, args.max_in_flight, level)
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        signal.signal(signal.SIGTERM, stop)
        host, port = args.nsqd_tcp_address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(subscription)
            archive(sock, fd, args.max_in_flight, level)
    os.close(fd)


if __name__ == "__main__":
    main()
