"""What every console script sets up as it starts (nsqtools.entry), so that start-up and
the run cost less: OpenSSL loaded only by a run that uses it, and the garbage
collector's thresholds.

trio imports `ssl` (for SSLStream) and `hmac` (for DTLS) as it starts, and those load
OpenSSL's libraries: about 6 MiB of resident memory and 15 ms of every start, which a
run without TLS, HTTPS or hashing never uses. The console scripts (nsqtools.entry)
put a stand-in for each in sys.modules before anything imports them: `import ssl`
then binds the stand-in, and the first attribute read from it (ssl.SSLContext, an
`except ssl.SSLError` that a raised error reaches, `from ssl import ...`) imports the
real module and makes the stand-in a copy of it.

The collector runs a pass of its young generation every 700 new objects by default:
imports make objects that all live, and a consumer makes a few per message (messages in
memory are bounded by RDY). What start-up made is frozen out of every pass once the
imports are done (front.run_event_loop).
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from typing import Any

DEFERRED = ("ssl", "hmac")
GC_THRESHOLDS = (100_000, 50, 100)  # a young pass every 100,000 new objects


class _StandIn(types.ModuleType):
    """A module not imported yet; reading any attribute it lacks imports it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_load(self), name)


def _load(stand_in: _StandIn) -> types.ModuleType:
    if sys.modules.get(stand_in.__name__) is stand_in:
        del sys.modules[stand_in.__name__]
    real = importlib.import_module(stand_in.__name__)
    stand_in.__dict__.update(real.__dict__)
    return real


def defer_openssl() -> None:
    """Put the stand-ins in place; a module imported already is left as it is."""
    for name in DEFERRED:
        if name not in sys.modules:
            stand_in = _StandIn(name)
            stand_in.__spec__ = None  # for the import system: not being initialised
            sys.modules[name] = stand_in


def prepare_process() -> None:
    """Everything above, before the command's modules are imported."""
    defer_openssl()
    gc.set_threshold(*GC_THRESHOLDS)
