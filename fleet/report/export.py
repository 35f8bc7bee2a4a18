"""Write a replayed month as CSV and JSON files that anyone can audit in a notebook."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.core.billing import churn_fee_usd
from fleet.core.verdict import json_safe


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


def export_month(r, folder: Path) -> None:
    """cards.csv, intervals.csv, hours.csv, evictions.csv and summary.json of one replayed month."""
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
    pd.DataFrame(
        {
            "hour": np.arange(m.hours),
            "demand_tps": r.bill.demand_tps,
            "capacity_tps": r.bill.capacity_tps,
            "delivered_tps": r.bill.delivered_tps,
            "cards_warm": r.bill.cards_warm,
            "warm_usd": r.bill.warm_usd,
            "idle_usd": r.bill.idle_usd,
            "ideal_usd": r.bill.ideal_usd,
        }
    ).to_csv(folder / "hours.csv", index=False)
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
                "threshold_tps": p.fraction * (p.candidate_median_tps[p.candidates.index(e.card)] if p.candidate_median_tps else p.median_score_tps),
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
    (folder / "summary.json").write_text(json.dumps(json_safe(r.figures), indent=2) + "\n")
