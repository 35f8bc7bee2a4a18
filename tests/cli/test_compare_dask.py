"""`fleet compare --dask` against a real two-worker Dask cluster on 127.0.0.1: the same JSON as the local run, the
same months seed for seed, a stored month's combinations spread over the workers, and a Ctrl-C that stops the work.

The cluster is a `LocalCluster` of two single-threaded worker processes, started once for the module.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

distributed = pytest.importorskip("distributed", reason="dask is not installed (pip install -e '.[dask]'): no cluster to run on")

from fleet.cli.app import app  # noqa: E402
from fleet.core.compare import expand_grid, replay_month  # noqa: E402
from fleet.core.month import draw_month  # noqa: E402
from fleet.core.errors import ConfigError  # noqa: E402
from fleet.dask_runner import ClusterUnreachable, DaskEngine  # noqa: E402
from fleet.presets import load_preset, resolve_policy  # noqa: E402
from fleet.sweep import Sweep, combo_scenarios  # noqa: E402
from tests.signals import sigint_default  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
SMALL = ROOT / "tests" / "core" / "compare_small.toml"


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"}, silence_logs=logging.ERROR,
    ) as c:
        yield c


def _compare(*args: str, status: int = 0) -> list[dict]:
    result = CliRunner().invoke(app, ["compare", *args, "--json"])
    assert result.exit_code == status, result.output
    return json.loads(result.stdout)


def test_the_cluster_gives_the_local_json(cluster):
    args = ["-p", "noise-evictor", "--months", "6", "--window", "hour,week"]
    local = _compare(*args, "--jobs", "1")
    on_cluster = _compare(*args, "--dask", cluster.scheduler_address)
    assert on_cluster == local
    assert [r["window"] for r in local] == ["hour", "week"] and local[0]["months"] == 6


def test_the_recommend_search_on_the_cluster_gives_the_local_json(cluster):
    args = ["-p", str(SMALL), "--recommend", "--class", "flagship", "--score", "mean", "--months", "4"]
    # Over 4 months nothing passes (status 4): the rows, the nearest one's shortfall among them, match all the same.
    local = _compare(*args, "--jobs", "1", status=4)
    assert _compare(*args, "--dask", cluster.scheduler_address, status=4) == local
    assert len(local) > 1 and len({r["headroom"] for r in local}) > 1  # headrooms searched, not one given
    assert sum("shortfall" in r for r in local) == 1


class Counting:
    """An engine that counts the items it is given and the order results come back in, then defers to another."""

    def __init__(self, inner):
        self.inner, self.slots, self.items, self.order = inner, inner.slots, [], []

    def run(self, fn, work, common=None):
        self.items.append(len(work))
        for i, got in self.inner.run(fn, work, common):
            self.order.append(i)
            yield i, got

    def close(self, cancel):
        self.inner.close(cancel)


def _small(windows=("hour", "day")):
    preset = load_preset(str(SMALL))
    return preset, combo_scenarios(preset, expand_grid(preset.resolve(), window=list(windows)))


def test_every_month_on_the_cluster_is_the_local_month(cluster):
    _, scenarios = _small()
    seeds = range(3, 9)
    with Sweep(jobs=1) as sweep:
        local = sweep.months(scenarios, seeds)
    done: list[int] = []
    engine = Counting(DaskEngine.open(cluster.scheduler_address))
    with Sweep(engine=engine, on_months=done.append) as sweep:
        remote = sweep.months(scenarios, seeds)
    assert engine.slots == 2 and sorted(engine.order) == list(range(engine.items[0]))
    assert sum(done) == len(seeds) and len(done) == engine.items[0]  # progress: one report per batch, every month
    assert [m.seed for m in remote] == list(seeds)
    for a, b in zip(local, remote):
        assert (a.seed, a.ideal_greedy_usd, a.ideal_exact_usd, a.gap_hours) == (b.seed, b.ideal_greedy_usd, b.ideal_exact_usd, b.gap_hours)
        assert np.array_equal(a.figures, b.figures) and np.array_equal(a.passes, b.passes)


def test_a_stored_month_spreads_its_combinations_over_the_workers(cluster):
    preset, scenarios = _small(("hour", "day", "week"))
    month = draw_month(scenarios[0])
    whole = replay_month(scenarios, [resolve_policy(s) for s in scenarios], month, 3)
    engine = Counting(DaskEngine.open(cluster.scheduler_address))
    with Sweep(engine=engine) as sweep:
        spread = sweep.stored_month(scenarios, month, 3)
    assert engine.items == [2]  # three combinations, two workers: two shares
    assert np.array_equal(spread.figures, whole.figures) and np.array_equal(spread.passes, whole.passes)
    assert (spread.seed, spread.ideal_exact_usd, spread.gap_hours) == (whole.seed, whole.ideal_exact_usd, whole.gap_hours)


def test_a_stored_telemetry_file_gives_the_local_json_on_the_cluster(cluster, tmp_path):
    import pandas as pd

    preset, scenarios = _small()
    drawn = draw_month(preset.resolve())
    cards, hours = drawn.measured_tps.shape
    c, h = np.repeat(np.arange(cards), hours), np.tile(np.arange(hours), cards)
    telemetry = tmp_path / "telemetry.csv"
    pd.DataFrame({"card_id": drawn.card_ids[c], "ts": 1_767_225_600 + h * 3600,
                  "tokens_per_s": drawn.measured_tps.ravel().astype(float)}).to_csv(telemetry, index=False)
    args = ["-p", str(SMALL), "--telemetry", str(telemetry), "--window", "hour,day,week"]
    assert _compare(*args, "--dask", cluster.scheduler_address) == _compare(*args, "--jobs", "1")


def _fleet(*args: str, env: dict | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_a_port_that_accepts_and_never_answers_is_one_line_and_exit_1():
    """The mistake of giving a dashboard's port: the connection is accepted and nothing a scheduler says comes back."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    held = []
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    try:
        p = _fleet("compare", "-p", str(SMALL), "--months", "1", "--dask", address, env={"FLEET_DASK_CONNECT_TIMEOUT": "1"})
    finally:
        silent.close()
    assert p.returncode == 1, p.stderr
    assert _one_error_line(p) == f"fleet: error: --dask {address!r}: no Dask scheduler answered within 1 s"
    assert p.stdout == ""


def test_a_refused_address_and_a_bad_one():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    s.close()  # nothing listens there now
    with pytest.raises(ClusterUnreachable, match=f"^--dask '{address}': no Dask scheduler answered"):
        DaskEngine.open(address, timeout_s=1)
    with pytest.raises(ConfigError, match="^--dask 'no-port-here': not a scheduler address"):
        DaskEngine.open("no-port-here", timeout_s=1)


@pytest.mark.sigint
def test_ctrl_c_stops_the_work_on_the_cluster_and_exits_130(cluster):
    """Interrupted once its first task is on the scheduler (a chosen point, not a chosen second): exit 130, and the
    scheduler is left with nothing to run."""
    scheduler = cluster.scheduler
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli.app", "compare", "-p", str(SMALL), "--months", "5000", "--json",
         "--dask", cluster.scheduler_address],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default,  # Ctrl-C as at a terminal, whatever the suite was started with
    )
    try:
        deadline = time.monotonic() + 90
        while not scheduler.tasks and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler.tasks, "the sweep never reached the scheduler"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "fleet: interrupted" and "Traceback" not in err
    assert out == ""
    deadline = time.monotonic() + 60
    while scheduler.tasks and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not scheduler.tasks  # the client's futures went with it: nothing queued or running
