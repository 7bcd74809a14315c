"""Which processes are which, from /proc: those connected to a port (the consumers of
an nsqd, wherever Spark or a tool started them), and whether a process descends from
another (this test's, not another run's on the same machine)."""

from __future__ import annotations

import contextlib
from pathlib import Path

_PROC = Path("/proc")
_ESTABLISHED = "01"


def connected_to(port: int) -> set[int]:
    """The processes with an established TCP connection to `port` (IPv4 or IPv6)."""
    inodes = _socket_inodes_to(port)
    found = set()
    for process in _PROC.glob("[0-9]*"):
        with contextlib.suppress(OSError):  # gone, or not ours to look into
            for fd in (process / "fd").iterdir():
                link = fd.readlink().name if fd.is_symlink() else ""
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    found.add(int(process.name))
                    break
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is pid's parent, or its parent's, and so on."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = (_PROC / str(pid) / "stat").read_text()
        except OSError:
            return False
        pid = int(stat.rpartition(")")[2].split()[1])  # comm may hold spaces: after ')'
    return False


def _socket_inodes_to(port: int) -> set[str]:
    """The inodes of established TCP sockets whose remote end is on `port`."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in (_PROC / "net" / table).read_text().splitlines()[1:]:
                fields = line.split()
                remote, state, inode = fields[2], fields[3], fields[9]
                if state == _ESTABLISHED and int(remote.rpartition(":")[2], 16) == port:
                    inodes.add(inode)
    return inodes
