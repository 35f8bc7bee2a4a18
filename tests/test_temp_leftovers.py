"""What a run leaves in the temporary folder: nothing of its own once it ends (a `--dask local` compare, the config
property tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "core" / "compare_small.toml"


def _run(args: list[str], tmp: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_a_local_dask_compare_leaves_no_scratch_space(tmp_path):
    pytest.importorskip("distributed", reason="dask is not installed (pip install -e '.[dask]')")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _run(["-m", "fleet.cli.app", "compare", "-p", str(SMALL), "--months", "1", "--dask", "local", "--jobs", "1",
              "--json"], tmp, tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in tmp.iterdir()) == []


def test_the_config_property_tests_leave_no_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--basetemp", str(tmp_path / "base"),
              "tests/cli/test_config_properties.py"], tmp, ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert [x.name for x in tmp.iterdir() if x.name.startswith("fleet-")] == []
