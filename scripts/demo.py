"""The README's demo: a local nsqlookupd and nsqd; lines published with our to_nsq,
read back through nsqlookupd with our nsq_tail, then as JSON envelopes.

Everything runs in a temporary folder and is stopped at the end, whatever happens.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from nsqtools.testing import Nsqd, Nsqlookupd

TOPIC = "demo"
LINES = [b"hello from nsqtools", b'{"event": "signup", "user": 42}', b"and a third line"]
BIN = Path(sys.executable).parent


def show(command: list[str], stdin: bytes = b"") -> bytes:
    print("$", " ".join(command), flush=True)
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=True,
    )
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.flush()
    return result.stdout


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="nsqtools-demo-") as tmp:
        root = Path(tmp)
        with Nsqlookupd(root / "lookupd", "nsqlookupd") as lookupd:
            nsqd = Nsqd(root / "nsqd", lookupds=[lookupd])
            with nsqd:
                lookupd.wait_for_nsqd(nsqd)
                print(f"nsqlookupd on {lookupd.http_address}, nsqd on {nsqd.tcp_address}\n")
                nsqd.create_channels(TOPIC, "raw", "json")
                show(
                    ["to_nsq", f"--nsqd-tcp-address={nsqd.tcp_address}", f"--topic={TOPIC}"],
                    b"\n".join(LINES),
                )
                print(f"(published {len(LINES)} lines)\n")
                lookup = f"--lookupd-http-address={lookupd.http_address}"
                raw = show(
                    [
                        "nsq_tail",
                        lookup,
                        f"--topic={TOPIC}",
                        "--channel=raw",
                        f"-n={len(LINES)}",
                        "--log-level=warn",
                    ]
                )
                print()
                show(
                    [
                        "nsq_tail",
                        lookup,
                        f"--topic={TOPIC}",
                        "--channel=json",
                        "-n=1",
                        "--format=json",
                        "--log-level=warn",
                    ]
                )
                return 0 if raw.splitlines() == LINES else 1


if __name__ == "__main__":
    sys.exit(main())
