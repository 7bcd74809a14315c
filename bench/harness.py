"""What the whole-program benchmarks share: one topic of 100-byte messages, watching a
channel's /stats cheaply, waiting with a deadline, finding a tool under its wrappers,
a local nginx that answers 200 (installed with apt-get when missing), nsqtools
byte-compiled as an installed copy is (for the start-up figures), and a tool run under
py-spy with its profile summed up by function (the scripts' --profile).

Imported by the scripts in bench/ (run as `python bench/<script>.py`: their folder is on
sys.path).
"""

from __future__ import annotations

import compileall
import re
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import httpx

from nsqtools.httpapi import nsqd as nsqd_api
from nsqtools.httpapi import send_sync
from nsqtools.httpapi.nsqd import ChannelStats
from nsqtools.testing import Nsqd, wait_until

CHECKOUT = Path(__file__).resolve().parent.parent
TOPIC = "bench"
BODY = b"x" * 92  # after an 8-digit index: 100 bytes
POLL_SECONDS = 0.02
STOP_SECONDS = 60.0
PY_SPY = str(Path(sys.executable).parent / "py-spy")  # pip install py-spy
PROFILE_TOP = 15  # functions shown of a profile


class ChannelWatch:
    """One channel's /stats over a kept-alive connection: cheap enough to poll often."""

    def __init__(self, client: httpx.Client, nsqd: Nsqd, channel: str) -> None:
        self.client = client
        self.channel = channel
        self.call = nsqd_api.stats(nsqd.http_address, TOPIC, channel, include_clients=False)

    def counts(self) -> ChannelStats:
        return send_sync(self.client, self.call).topic(TOPIC).channel(self.channel)

    def holds(self, count: int) -> bool:
        return self.counts().depth == count

    def emptied(self) -> bool:
        return self.counts().depth == 0

    def idle(self) -> bool:
        return self.counts().in_flight_count == 0

    def waiting(self) -> int:
        """Messages back in the channel: requeued at once, or deferred."""
        stats = self.counts()
        return stats.depth + stats.deferred_count


def fill(nsqd: Nsqd, watches: list[ChannelWatch], count: int) -> None:
    """N messages in every watched channel, waiting until nsqd has copied them all in."""
    nsqd.create_channels(TOPIC, *(watch.channel for watch in watches))
    nsqd.publish_many(TOPIC, (b"%08d" % index + BODY for index in range(count)))
    for watch in watches:
        wait_for(partial(watch.holds, count), None, STOP_SECONDS, f"{count} in {watch.channel}")


def wait_for(
    condition: Callable[[], bool],
    process: subprocess.Popen[bytes] | None,
    timeout: float,
    what: str,
) -> None:
    """Poll until the condition holds; exit if the process ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            sys.exit(f"{what}: the tool exited ({process.returncode}) first")
        if time.monotonic() > deadline:
            sys.exit(f"{what}: not done after {timeout:g}s")
        time.sleep(POLL_SECONDS)


def innermost(pid: int) -> int:
    """The tool under its wrappers (perf, time, py-spy): each one's child, to the last."""
    while children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        pid = int(children[0])
    return pid


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path {root};
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def nginx_binary() -> str:
    """nginx, installed (Debian's nginx-light) if it is not there yet."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else "")
    if not found:
        print("installing nginx-light (apt-get)", file=sys.stderr, flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], check=True)
        found = shutil.which("nginx") or "/usr/sbin/nginx"
    return found


@contextmanager
def running_nginx(root: Path) -> Iterator[str]:
    """A local nginx answering every request 200 (one worker, no access log, keep-alive
    without a request limit), its files in `root`; yields its URL."""
    port = free_port()
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, port=port))
    server = subprocess.Popen([nginx_binary(), "-c", str(root / "nginx.conf"), "-p", str(root)])
    try:
        wait_until(lambda: listening(port), 10, "nginx")
        yield f"http://127.0.0.1:{port}/in"
    finally:
        server.terminate()
        server.wait()


def compile_package() -> None:
    """Byte-compile nsqtools as pip does when it installs it. Run from a checkout with
    PYTHONDONTWRITEBYTECODE set (or never run before), every start would first compile
    our modules from source (about 25 ms, measured), which no installed copy pays."""
    compileall.compile_dir(CHECKOUT / "nsqtools", quiet=1)


def under_py_spy(argv: list[str], stacks: Path) -> list[str]:
    """argv run under py-spy, its stacks sampled 500 times a second into `stacks` (raw)."""
    return [PY_SPY, "record", "-r", "500", "-f", "raw", "-o", str(stacks), "--", *argv]


def print_profile(stacks: Path) -> None:
    """Self time (the innermost frame) and inclusive time (anywhere in the stack) by function,
    lines merged: py-spy's raw lines are "frame;frame;... samples", a frame "name (file:line)".
    """
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        own[frames[-1]] += int(count)
        inclusive.update(dict.fromkeys(frames, int(count)))
    total = sum(own.values())
    print(f"{total:,} samples; self time:")
    for frame, samples in own.most_common(PROFILE_TOP):
        print(f"  {samples / total:6.1%}  {frame}")
    print("inclusive time, nsqtools:")
    ours = Counter({frame: samples for frame, samples in inclusive.items() if "nsqtools" in frame})
    for frame, samples in ours.most_common(PROFILE_TOP):
        print(f"  {samples / total:6.1%}  {frame}")
