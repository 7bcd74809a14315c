"""OpenSSL left unloaded until used (nsqtools.runtime.startup): each case in an
interpreter of its own, as a console script starts."""

from __future__ import annotations

import subprocess
import sys

from nsqtools.testing.binaries import PACKAGE_ROOT

PREAMBLE = (
    f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
    "from nsqtools.runtime.startup import defer_openssl\n"
    "defer_openssl()\n"
    "import trio, ssl, hmac\n"
    "assert '_ssl' not in sys.modules and '_hashlib' not in sys.modules\n"
)


def run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PREAMBLE + code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_first_attribute_read_loads_the_real_module() -> None:
    code = (
        "context = ssl.create_default_context()\n"
        "assert isinstance(context, sys.modules['ssl'].SSLContext)\n"
        "print(hmac.new(b'k', b'm', 'sha256').hexdigest()[:8])\n"
    )
    assert run(code) == "b60090e3\n"


def test_from_import_and_except_clauses_work() -> None:
    code = (
        "from ssl import SSLError\n"
        "assert '_ssl' in sys.modules\n"
        "try:\n"
        "    raise SSLError('handshake')\n"
        "except ssl.SSLError:\n"
        "    print('caught')\n"
    )
    assert run(code) == "caught\n"
