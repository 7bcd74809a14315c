"""Each layer imports only from the layers below it: import-linter checks the contracts of
pyproject.toml's [tool.importlinter] (the layers, the sans-IO protocol and policies, click
and rich in the commands only, sinks that settle through Delivery alone, the test harness
out of the package) on this checkout.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_layer_contracts_are_kept() -> None:
    # This checkout's nsqtools, whatever the virtual environment has installed.
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [LINT_IMPORTS, "--no-logo", "--no-cache"],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_two_public_classes_share_a_name() -> None:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "nsqtools").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert shared == {}
