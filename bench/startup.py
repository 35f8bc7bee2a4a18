"""How long trivial commands take to start: `fleet --version`, `fleet -h`, `fleet journal -h`, each run N times in a
fresh interpreter (the installed console script), median and range printed. A benchmark, not a test: it prints
figures (the target is under 0.3 s for each on an idle machine).

    python bench/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--version"], ["-h"], ["journal", "-h"], ["compare", "-h"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    fleet = shutil.which("fleet", path=str(Path(sys.executable).parent)) or "fleet"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"fleet startup: {os.cpu_count()} cores, load {load:.1f} at start, {args.repeats} runs each")
    for cmd in COMMANDS:
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            subprocess.run([fleet, *cmd], capture_output=True, check=True)
            times.append(time.perf_counter() - t0)
        print(f"  fleet {' '.join(cmd):<14} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
