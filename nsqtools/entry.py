"""Console-script entry points: each program answers `-version`/`--version` without
importing click or anything else, then hands over to its command module.

Start-up is part of the experience: `nsq_tail --version` should cost an interpreter
start and no more.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from nsqtools import __version__

VERSION_FLAGS = (["-version"], ["--version"])


def _entry_point(program: str, module: str) -> Callable[[], None]:
    def main() -> None:
        if sys.argv[1:] in VERSION_FLAGS:
            sys.stdout.write(f"{program} v{__version__}\n")
            return
        importlib.import_module(module).main()

    main.__name__ = program
    return main


nsq = _entry_point("nsq", "nsqtools.commands")
nsq_tail = _entry_point("nsq_tail", "nsqtools.commands.tail")
to_nsq = _entry_point("to_nsq", "nsqtools.commands.pub")
nsq_to_file = _entry_point("nsq_to_file", "nsqtools.commands.to_file")
nsq_to_nsq = _entry_point("nsq_to_nsq", "nsqtools.commands.relay_nsq")
nsq_to_http = _entry_point("nsq_to_http", "nsqtools.commands.relay_http")
nsq_stat = _entry_point("nsq_stat", "nsqtools.commands.stat")
