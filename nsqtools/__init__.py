"""nsqtools: command-line tools for NSQ on a trio core.

This module owns only the version; everything else lives in the subpackages.
"""

__version__ = "0.1.0"
