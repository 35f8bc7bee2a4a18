"""bench/ingest_memory.py runs (at a tiny size: the 10,000,000-row figure is the benchmark's, not the suite's) and
prints its peak-memory figure with the counts checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_memory_benchmark_runs_at_a_tiny_size(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "ingest_memory.py"), "--rows", "3000", "--batch", "500", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any("counts and reasons as written: True" in ln for ln in lines), proc.stdout
    (peak,) = [ln for ln in lines if ln.startswith("peak resident memory: ")]
    assert "for 3,000 rows" in peak and "target < 500 MB" in peak
