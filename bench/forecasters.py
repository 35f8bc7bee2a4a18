"""The forecasters side by side on generated demand: accuracy of each hour's one-step forecast, and time per month.

    python bench/forecasters.py                 # 40 months of each demand kind
    python bench/forecasters.py --months 10

Every forecaster forecasts each month hour from the hours before it (the week of history included), through the
core's `one_step`, as replay and the service do. Beside fleet's own `holt-winters` (additive seasonal exponential
smoothing of log-demand with a damped trend, its constants fitted once on a grid over the first week), statsmodels'
`ExponentialSmoothing` with the same model, fitted (by its own optimiser) on the week of history and then run over
the month with those constants fixed: its `fittedvalues` are one-step forecasts, each from the hours before it.
Needs statsmodels (`pip install statsmodels`) for that row; the rest run without it.

Prints, per demand kind and forecaster, the median over months of the mean absolute relative error and of the
90th percentile of |error|, and the median milliseconds per month.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = {
    "diurnal, noise 6% over 6 h": {"shape": "diurnal", "peak_to_avg": 1.8, "noise": 0.06, "noise_hours": 6},
    "diurnal, drift, weekends": {"shape": "diurnal", "peak_to_avg": 2.0, "noise": 0.04, "day_to_day": 0.05,
                                 "weekend_factor": 0.7},
    "flat, bursts": {"shape": "flat", "noise": 0.03, "burst_prob_per_hour": 0.01, "burst_mult": 1.5, "burst_hours": 3},
    "diurnal 4x peak, everything": {"shape": "diurnal", "peak_to_avg": 4.0, "noise": 0.08, "noise_hours": 4,
                                    "day_to_day": 0.04, "weekend_factor": 0.75, "burst_prob_per_hour": 0.005,
                                    "burst_mult": 1.4, "burst_hours": 2},
}


def statsmodels_one_step(history: np.ndarray, month: np.ndarray) -> np.ndarray:
    """statsmodels' Holt-Winters fitted on the history, then filtered over the month with its constants fixed."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    y_hist = np.log(np.maximum(history, 1e-6))
    y_all = np.log(np.maximum(np.concatenate([history, month]), 1e-6))
    spec = dict(trend="add", damped_trend=True, seasonal="add", seasonal_periods=24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ExponentialSmoothing(y_hist, initialization_method="estimated", **spec).fit()
        p = fit.params
        init = dict(initial_level=p["initial_level"], initial_trend=p["initial_trend"],
                    initial_seasonal=np.asarray(p["initial_seasons"]))
        run = ExponentialSmoothing(y_all, initialization_method="known", **spec, **init).fit(
            smoothing_level=p["smoothing_level"], smoothing_trend=p["smoothing_trend"],
            smoothing_seasonal=p["smoothing_seasonal"], damping_trend=p["damping_trend"], optimized=False)
    return np.exp(np.asarray(run.fittedvalues)[history.size :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--months", type=int, default=40)
    args = ap.parse_args()

    import policies
    from fleet.core.forecast import one_step
    from fleet.core.month import draw_demand, stream
    from fleet.core.scenario import Demand

    try:
        import statsmodels  # noqa: F401

        have_sm = True
    except ImportError:
        have_sm = False
    names = ["last-hour", "seasonal", "holt-winters"] + (["statsmodels"] if have_sm else [])
    print(f"{args.months} months of each kind, one-step forecasts of the month's 720 hours from a week of history")
    print(f"{'demand':32} {'forecaster':14} {'mean |err|':>10} {'p90 |err|':>10} {'ms / month':>11}")
    for kind, table in KINDS.items():
        demand = Demand(avg_tps=100_000, **table)
        errs: dict[str, list] = {n: [] for n in names}
        p90: dict[str, list] = {n: [] for n in names}
        ms: dict[str, list] = {n: [] for n in names}
        for seed in range(args.months):
            history, month = draw_demand(demand, 720, 168, stream(seed, "demand"), seed)
            observed = np.concatenate([history, month[:-1]])
            for n in names:
                t0 = time.perf_counter()
                if n == "statsmodels":
                    f = statsmodels_one_step(history, month)
                else:
                    fc = policies.forecaster(policies.Policy(card_class="x", forecast=n))
                    f = one_step(fc, observed)[history.size :]
                ms[n].append((time.perf_counter() - t0) * 1000)
                rel = np.abs(f - month) / month
                errs[n].append(float(np.mean(rel)))
                p90[n].append(float(np.percentile(rel, 90)))
        for n in names:
            print(f"{kind:32} {n:14} {np.median(errs[n]):>10.2%} {np.median(p90[n]):>10.2%} {np.median(ms[n]):>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
