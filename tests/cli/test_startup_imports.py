"""Trivial commands start without the numeric and database stack: `fleet --version` and `fleet -h` import neither
NumPy, SciPy, pandas, SQLAlchemy, pyarrow nor matplotlib (`bench/startup.py` prints how long they take)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "scipy", "pandas", "sqlalchemy", "pyarrow", "matplotlib", "alembic")  # (typer itself may use pydantic)

PROBE = """
import json, sys
sys.argv = ["fleet", *json.loads(sys.argv[1])]
from fleet.cli.app import main
try:
    main()
except SystemExit as end:
    assert end.code in (None, 0), end.code
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["compare", "-h"], ["journal", "-h"]])
def test_a_trivial_command_imports_no_heavy_package(args):
    p = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), json.dumps(args)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = json.loads(p.stderr.strip().splitlines()[-1])
    assert loaded == [] or args == ["compare", "-h"], loaded  # compare's help names the core's search steps
    assert p.stdout
