"""Helpers for tests that run `fleet serve` as a process and read its /metrics."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.signals import sigint_default

# The installed console script, next to this interpreter (`python -m fleet.cli.app` would load the CLI twice).
FLEET = [str(Path(sys.executable).with_name("fleet"))]

TINY_PRESET = """\
name = "tiny-evictor"
story = "a small pool judged through the hour window"
seed = 5
hours = 96
warmup_hours = 24

[[classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
pool_cards = 12

[lottery]
sigma = 0.2

[dips]
start_prob_per_hour = 0.01
hours = 4
depth = 0.5

[demand]
shape = "flat"
avg_tps = 40000

[policy]
card_class = "flagship"
window = "day"
mode = "steady"
headroom = 1.05

[policy.eviction]
rule = "below-median"
window = "hour"
cadence_hours = 24
share = 0.25

[policy.eviction.rules.below-median]
fraction = 0.85
"""


def wait_for(pred, timeout_s: float, what: str, every_s: float = 0.1):
    """Poll `pred` until it returns something truthy; fail naming `what` after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


class Served:
    """A `fleet serve` process in its own session (so a kill takes its actuator commands with it)."""

    def __init__(self, args: list[str], workdir: Path, name: str = "serve"):
        self.log = workdir / f"{name}.stderr"
        self.proc = subprocess.Popen(
            FLEET + ["serve", *args], stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"),
            cwd=workdir, start_new_session=True, preexec_fn=sigint_default,  # Ctrl-C as at a terminal
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.port = int(wait_for(self._port, 60, f"the metrics line in {self.log}"))

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def _port(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"fleet serve exited {self.proc.returncode}: {self.stderr()}")
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.stderr())
        return m and m.group(1)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as resp:
            return resp.read().decode()

    def families(self) -> dict:
        return {f.name: f for f in text_string_to_metric_families(self.metrics_text())}

    def terminate(self, timeout_s: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def value(families: dict, name: str, **labels) -> float:
    """The value of the one sample of family `name` (or its `_total`) with these labels."""
    fam = families[name]
    got = [s.value for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items()) and not s.name.endswith("_created")]
    assert len(got) == 1, f"{name} {labels}: {len(got)} samples"
    return got[0]
