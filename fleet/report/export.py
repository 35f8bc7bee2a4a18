"""Write a replayed month as CSV and JSON files that anyone can audit in a notebook."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.core.billing import churn_fee_usd
from fleet.core.verdict import json_safe


def cents(obj, dollars: bool = False):
    """Figures as printed: every dollar figure (a key ending in `_usd`, and everything under one) rounded to the
    cent, so JSON shows 28840.0, not the sum's float noise 28839.999999999993. Only output is rounded: the figures
    the checks and tests read are the sums as computed."""
    if isinstance(obj, dict):
        return {k: cents(v, dollars or _is_dollars(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [cents(v, dollars) for v in obj]
    if dollars and isinstance(obj, float) and not isinstance(obj, bool):
        return round(obj, 2)
    return obj


def _is_dollars(key) -> bool:
    """A figure in dollars: its name ends in `_usd` (`tokens_per_usd` is tokens, not dollars)."""
    return isinstance(key, str) and key.endswith("_usd") and not key.endswith("_per_usd")


def export_folder_problem(folder: Path) -> str | None:
    """Why files cannot be written into `folder` (made here if missing), or None: asked before a replay starts,
    so a bad `--export` is one line at once, not a traceback after the work."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fleet-probe-"):
            pass
    except OSError as err:
        return f"cannot write files there ({err.strerror or err})"
    if not os.access(folder, os.W_OK):
        return "cannot write files there (permission denied)"
    return None


def run_set_intervals(warm: np.ndarray, evicted_at: dict[int, int]) -> pd.DataFrame:
    """Each card's stretches in the run set, `end_hour` exclusive, with why each one ended."""
    n, H = warm.shape
    padded = np.zeros((n, H + 2), dtype=np.int8)
    padded[:, 1:-1] = warm
    edges = np.diff(padded, axis=1)
    start_c, start_h = np.nonzero(edges == 1)
    end_c, end_h = np.nonzero(edges == -1)
    # np.nonzero walks row-major, so starts and ends of each card pair up in order.
    reason = np.where(end_h == H, "month_end", "released").astype(object)
    for i, (c, h) in enumerate(zip(end_c, end_h)):
        if evicted_at.get(int(c)) == int(h):
            reason[i] = "evicted"
    return pd.DataFrame({"card_id": start_c, "start_hour": start_h, "end_hour": end_h, "end_reason": reason})


def month_hours(r) -> dict:
    """hours.csv's columns: the bill hour by hour, and under a promise goodput and what it was read from. A month at
    a finer clock is read from its walk (`fine_hours`): capacity and delivered tokens step by step, the reactive
    loop's rent, the idle cost of both, and the finer clock's ideal; the plan's run sets and rent stay the plan's."""
    m, b = r.month, r.bill
    fine = r.traffic is not None and not r.traffic.stopped
    if fine:
        from fleet.core.replay import fine_ideal_by_period
        from fleet.core.traffic_figures import fine_hours

        f = fine_hours(r.traffic, b.warm_usd, m.step_demand_tps)
        hours = {"hour": np.arange(m.hours), "demand_tps": f.demand_tps, "capacity_tps": f.capacity_tps,
                 "delivered_tps": f.delivered_tps, "cards_warm": b.cards_warm, "warm_usd": b.warm_usd,
                 "reactive_usd": f.reactive_usd, "idle_usd": f.idle_usd,
                 "ideal_usd": fine_ideal_by_period(r.scenario, m).reshape(m.hours, -1).sum(axis=1)}
    else:
        hours = {"hour": np.arange(m.hours), "demand_tps": b.demand_tps, "capacity_tps": b.capacity_tps,
                 "delivered_tps": b.delivered_tps, "cards_warm": b.cards_warm, "warm_usd": b.warm_usd,
                 "idle_usd": b.idle_usd, "ideal_usd": b.ideal_usd}
    if r.scenario.slo is not None:  # the promise hour by hour: goodput and what it was read from
        if fine and r.traffic.fresh_step_tokens is not None:
            from fleet.core.replay import step_promise_hours

            p = step_promise_hours(r.scenario, m, r.traffic)[0]
        else:
            from fleet.core.latency import month_promise

            p = month_promise(r.scenario, m, r.warm, b.delivered_tps, b.demand_tps)
        hours.update({"rate_at_promise_tps": p.rate_at_promise_tps, "slots": p.slots, "ttft_s": p.ttft_s,
                      "ttft_ok_share": p.ttft_ok_share, "goodput_tps": p.goodput_tps})
    return hours


def reactive_adds_frame(r) -> pd.DataFrame:
    """adds.csv: each card the reactive loop added, at the step it was decided at, with what it read and why."""
    m, t = r.month, r.traffic
    per_hour = t.capacity_step_tps.size // max(1, m.hours)
    step_minutes = 60 // max(1, per_hour)
    rows = [{"step": a.step, "hour": a.step // per_hour, "minute": (a.step % per_hour) * step_minutes,
             "card_id": m.card_ids[a.card], "card_class": m.class_names[int(m.card_class[a.card])],
             "score_tps": a.score_tps, "tokens_per_usd": a.tokens_per_usd, "observed_tps": a.observed_tps,
             "backlog_tps": a.backlog_tps, "scored_tps": a.scored_tps,
             "need_tps": a.need_tps, "reason": a.reason} for a in t.adds]
    return pd.DataFrame(rows, columns=["step", "hour", "minute", "card_id", "card_class", "score_tps", "tokens_per_usd",
                                       "observed_tps", "backlog_tps", "scored_tps", "need_tps", "reason"])


def export_month(r, folder: Path) -> None:
    """cards.csv, intervals.csv, hours.csv, evictions.csv and summary.json of one replayed month; adds.csv too when
    a reactive loop ran."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    m = r.month
    ids = m.card_ids
    pd.DataFrame(
        {
            "card_id": ids,
            "class": np.array(m.class_names, dtype=object)[m.card_class],
            "rated_tps": m.rated_tps,
            "true_tps": m.true_tps,
            "rent_usd_per_month": m.rent_usd_per_month,
        }
    ).to_csv(folder / "cards.csv", index=False)
    iv = run_set_intervals(r.warm, {e.card: e.hour for e in r.evictions})
    iv["card_id"] = ids[iv["card_id"].to_numpy()]
    iv.to_csv(folder / "intervals.csv", index=False)
    pd.DataFrame(month_hours(r)).to_csv(folder / "hours.csv", index=False)
    if r.traffic is not None and r.scenario.policy.reactive is not None:
        reactive_adds_frame(r).to_csv(folder / "adds.csv", index=False)
    rows = []
    k = 0  # r.wrong and r.median_ticket_tps follow the evictions in order
    for p in r.passes:
        for e in p.evictions:
            rows.append({
                "hour": e.hour,
                "card_id": ids[e.card],
                "card_class": m.class_names[int(m.card_class[e.card])],
                "score_tps": e.score_tps,
                "median_score_tps": p.candidate_median_tps[p.candidates.index(e.card)] if p.candidate_median_tps else p.median_score_tps,
                "threshold_tps": p.threshold_of(e.card),
                "true_tps": m.true_tps[e.card],
                "median_true_tps": r.median_ticket_tps[k],
                "wrong": bool(r.wrong[k]),
                "churn_fee_usd": float(churn_fee_usd(m.rent_usd_per_month[e.card])),
                "reason": p.reason,
            })
            k += 1
    pd.DataFrame(
        rows,
        columns=["hour", "card_id", "card_class", "score_tps", "median_score_tps", "threshold_tps", "true_tps", "median_true_tps", "wrong", "churn_fee_usd", "reason"],
    ).to_csv(folder / "evictions.csv", index=False)
    # The files keep the sums as computed, so every figure follows from the CSVs exactly; `--json` prints them to the cent.
    # Dollars to the cent, as `--json` prints them (28840.0, not 28839.999999999993); the CSV files keep every
    # figure unrounded, so the summary still follows from them within a cent.
    (folder / "summary.json").write_text(json.dumps(cents(json_safe(r.figures)), indent=2) + "\n")
