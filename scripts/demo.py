"""The README's demo: a local nsqlookupd and nsqd, a few lines in, the same lines out.

Everything runs in a temporary folder and is stopped at the end, whatever happens.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from nsqtools.testing import Nsqd, Nsqlookupd, find_binary

TOPIC = "demo"
LINES = [b"hello from nsqtools", b"a second line", b"and a third"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="nsqtools-demo-") as tmp:
        root = Path(tmp)
        with Nsqlookupd(root / "lookupd", "nsqlookupd") as lookupd:
            nsqd = Nsqd(root / "nsqd", lookupds=[lookupd])
            with nsqd:
                lookupd.wait_for_nsqd(nsqd)
                print(f"nsqlookupd on {lookupd.http_address}, nsqd on {nsqd.tcp_address}")
                for line in LINES:
                    nsqd.publish(TOPIC, line)
                print(f"published {len(LINES)} lines to topic {TOPIC!r}; reading them back:")
                tail = [
                    str(find_binary("nsq_tail")),
                    f"--lookupd-http-address={lookupd.http_address}",
                    f"--topic={TOPIC}",
                    f"-n={len(LINES)}",
                ]
                received = subprocess.run(tail, capture_output=True, timeout=30, check=True)
                sys.stdout.buffer.write(received.stdout)
                return 0 if received.stdout.splitlines() == LINES else 1


if __name__ == "__main__":
    sys.exit(main())
