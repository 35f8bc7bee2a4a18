"""The sweep's engine interface, which local processes and a Dask cluster both plug into, and dask kept optional.

None of these need dask installed: a Dask cluster is tested in tests/cli/test_compare_dask.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from fleet.core.compare import expand_grid, replay_month
from fleet.core.month import draw_month
from fleet.presets import load_preset, resolve_policy
from fleet.sweep import LocalEngine, Sweep, combo_scenarios

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "core" / "compare_small.toml"


def _scenarios(windows=("hour", "day", "week")):
    preset = load_preset(str(SMALL))
    return combo_scenarios(preset, expand_grid(preset.resolve(), window=list(windows)))


class Backwards:
    """An engine whose batches complete last first (as a cluster's may), run in this process."""

    slots = 3

    def __init__(self):
        self.items: list[int] = []

    def run(self, fn, work, common=None):
        self.items.append(len(work))
        extra = () if common is None else (common,)
        for i in reversed(range(len(work))):
            yield i, fn(work[i], *extra)

    def close(self, cancel):
        pass


def test_results_do_not_depend_on_the_order_batches_complete_in():
    scenarios = _scenarios(("hour", "day"))
    seeds = range(3, 7)
    with Sweep(jobs=1) as sweep:
        months, headrooms = sweep.months(scenarios, seeds), sweep.headrooms(scenarios, seeds)
    done: list[int] = []
    engine = Backwards()
    with Sweep(engine=engine, on_months=done.append) as sweep:
        months_b, headrooms_b = sweep.months(scenarios, seeds), sweep.headrooms(scenarios, seeds)
    assert engine.items == [4, 4] and done == [1] * 8  # one batch per seed at three slots, each reported once
    assert [m.seed for m in months_b] == list(seeds)
    assert all(np.array_equal(a.figures, b.figures) and np.array_equal(a.passes, b.passes) for a, b in zip(months, months_b))
    assert np.array_equal(headrooms, headrooms_b)


def test_a_stored_month_is_split_into_one_share_per_slot_and_joined_in_order():
    scenarios = _scenarios()
    month = draw_month(scenarios[0])
    whole = replay_month(scenarios, [resolve_policy(s) for s in scenarios], month, 3)
    engine = Backwards()  # three slots, three combinations: three shares of one, joined back in grid order
    with Sweep(engine=engine) as sweep:
        backwards = sweep.stored_month(scenarios, month, 3)
    with Sweep(engine=LocalEngine(2)) as sweep:  # two processes: shares of two and one
        on_processes = sweep.stored_month(scenarios, month, 3)
    assert engine.items == [3]
    for got in (backwards, on_processes):
        assert np.array_equal(got.figures, whole.figures) and np.array_equal(got.passes, whole.passes)
        assert (got.seed, got.ideal_exact_usd, got.ideal_greedy_usd) == (whole.seed, whole.ideal_exact_usd, whole.ideal_greedy_usd)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_without_dask_the_option_names_the_extra_and_exits_2():
    p = _python(
        "import sys\n"
        "sys.modules['dask'] = sys.modules['distributed'] = None  # as if the extra were not installed\n"
        f"sys.argv = ['fleet', 'compare', '-p', {str(SMALL)!r}, '--months', '1', '--dask', 'local']\n"
        "from fleet.cli.app import main\n"
        "main()\n"
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "fleet: error: --dask: dask is not installed (distributed is missing); install the extra: pip install -e '.[dask]' in the checkout"
    ]


def test_a_local_compare_imports_no_dask():
    p = _python(
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from fleet.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['compare', '-p', {str(SMALL)!r}, '--months', '2', '--jobs', '1', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
