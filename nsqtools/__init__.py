"""nsqtools: command-line tools for NSQ on a trio core.

This module owns only the versions (ours, and the NSQ release whose tools ours
replace) and the line `--version` prints; everything else lives in the subpackages.
"""

__version__ = "0.1.0"
NSQ_VERSION = "1.3.0"  # the NSQ release whose Go tools ours match, flag for flag


def version_line(program: str) -> str:
    """What `program --version` prints: our version first, where Go's tool prints its
    own (`nsq_tail v1.3.0`), then the NSQ release matched."""
    return f"{program} v{__version__} (nsqtools; matches NSQ v{NSQ_VERSION})"
