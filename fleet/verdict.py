"""A month's figures and its three checks, from a replay's hourly series and evictions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fleet.replay import MonthResult


def checks(figs: dict, marks) -> dict:
    """Pass or fail of capacity, convergence and eviction, each with its mark and the figure it read."""
    return {
        "capacity": {
            "pass": bool(figs["unmet_share"] <= marks.max_unmet_share + 1e-12),
            "value": figs["unmet_share"],
            "mark": f"unmet demand <= {marks.max_unmet_share:.1%} of demand",
        },
        "convergence": {
            "pass": bool(figs["convergence"] >= marks.min_convergence - 1e-12),
            "value": figs["convergence"],
            "mark": f"ideal bill / real bill >= {marks.min_convergence:.1%}",
        },
        "eviction": {
            "pass": bool(figs["wrong_evictions"] <= marks.max_wrong_evictions),
            "value": figs["wrong_evictions"],
            "mark": f"wrong evictions <= {marks.max_wrong_evictions}",
        },
    }


def figures(r: "MonthResult") -> dict:
    """Every figure of the verdict, as plain numbers (the `--json` object)."""
    s = r.scenario
    H = max(1, r.month.hours)
    demand_sum = float(r.demand_tps.sum())
    delivered_sum = float(r.delivered_tps.sum())
    unmet_sum = demand_sum - delivered_sum
    bill_warm = float(r.warm_usd.sum())
    bill = bill_warm + r.churn_usd
    ideal = float(r.ideal_usd.sum())
    idle = float(r.idle_usd.sum())
    wrong = sum(e.wrong for e in r.evictions)
    run_class = s.policy.card_class
    pool_cards = int((r.month.card_class == r.month.class_names.index(run_class)).sum())
    figs = {
        "preset": s.name,
        "fix": False,
        "seed": s.seed,
        "hours": r.month.hours,
        "card_class": run_class,
        "pool_cards": pool_cards,
        "window": s.policy.window,
        "mode": s.policy.mode,
        "headroom": s.policy.headroom,
        "eviction_rule": s.policy.eviction.rule,
        "eviction_window": s.policy.eviction_window,
        "eviction_share": s.policy.eviction.share,
        "demand_avg_tps": demand_sum / H,
        "demand_peak_tps": float(r.demand_tps.max()) if r.demand_tps.size else 0.0,
        "capacity_avg_tps": float(r.capacity_tps.sum()) / H,
        "delivered_avg_tps": delivered_sum / H,
        "unmet_avg_tps": unmet_sum / H,
        "unmet_share": unmet_sum / demand_sum if demand_sum > 0 else 0.0,
        "short_hours": int((r.delivered_tps < r.demand_tps - 1e-6).sum()),
        "cards_warm_avg": float(r.cards_warm.mean()) if r.cards_warm.size else 0.0,
        "cards_warm_max": int(r.cards_warm.max()) if r.cards_warm.size else 0,
        "cards_used": int(r.warm.any(axis=1).sum()),
        "bill_usd": bill,
        "bill_warm_usd": bill_warm,
        "bill_churn_usd": r.churn_usd,
        "idle_usd": idle,
        "idle_share": idle / bill if bill > 0 else 0.0,
        "ideal_bill_usd": ideal,
        "convergence": ideal / bill if bill > 0 else float("nan"),
        "evictions": len(r.evictions),
        "eviction_budget": r.eviction_budget,
        "wrong_evictions": int(wrong),
        "wrong_eviction_share": wrong / len(r.evictions) if r.evictions else 0.0,
    }
    figs["checks"] = checks(figs, s.checks)
    return figs


def json_safe(obj):
    """Figures as JSON-ready values (NaN becomes null)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return None if not np.isfinite(v) else v
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
