"""A month's figures and its three checks; the wrong-eviction rule; the month's totals.

Replay and the service judge a month through these same functions: the service
sums its billed hours with `month_totals` and judges them with `checks`, as the
verdict of a replayed month does.
"""

from __future__ import annotations

import numpy as np

from fleet.core.billing import HoursBill
from fleet.core.month import Month
from fleet.core.scenario import Scenario
from fleet.core.units import HOUR_S



def median_ticket_tps(evicted: np.ndarray, judged: np.ndarray, ticket_tps: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """For each evicted card, the median lottery ticket of its own class among the run set judged (NaN: none judged)."""
    evicted = np.asarray(evicted, dtype=np.int64)
    judged = np.asarray(judged, dtype=bool)
    ticket = np.asarray(ticket_tps, dtype=np.float64)
    kinds = np.zeros(ticket.size, dtype=np.int64) if groups is None else np.asarray(groups)
    out = np.full(evicted.size, np.nan)
    for g in np.unique(kinds[evicted]):
        peers = judged & (kinds == g)
        if peers.any():
            out[kinds[evicted] == g] = float(np.median(ticket[peers]))
    return out


def wrong_evictions(evicted: np.ndarray, judged: np.ndarray, ticket_tps: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """For each evicted card, whether it was wrong: its lottery ticket at or above the median ticket of its class in the
    run set judged.

    The ticket (rated × quality) is the card's truth; a dip it was riding is transient,
    so a card thrown out during a dip is a healthy card lost. A bargain card is judged
    among bargain cards, not by a flagship's median.
    """
    evicted = np.asarray(evicted, dtype=np.int64)
    return np.asarray(ticket_tps, dtype=np.float64)[evicted] >= median_ticket_tps(evicted, judged, ticket_tps, groups)


def month_totals(
    warm_usd: np.ndarray,
    churn_usd: np.ndarray,
    idle_usd: np.ndarray,
    ideal_usd: np.ndarray,
    demand_tps: np.ndarray,
    delivered_tps: np.ndarray,
    evictions: int,
    wrong_evictions: int,
) -> dict[str, float]:
    """Sums of billed hours: dollars, tokens, and the two ratios the checks read."""
    bill_warm = float(np.sum(warm_usd))
    churn = float(np.sum(churn_usd))
    bill = bill_warm + churn
    ideal = float(np.sum(ideal_usd))
    demand_sum, delivered_sum = float(np.sum(demand_tps)), float(np.sum(delivered_tps))
    demand, delivered = demand_sum * HOUR_S, delivered_sum * HOUR_S
    return {
        "bill_usd": bill,
        "bill_warm_usd": bill_warm,
        "bill_churn_usd": churn,
        "idle_usd": float(np.sum(idle_usd)),
        "ideal_bill_usd": ideal,
        "convergence": ideal / bill if bill > 0 else float("nan"),
        "demand_tokens": demand,
        "delivered_tokens": delivered,
        "unmet_tokens": demand - delivered,
        "unmet_share": (demand_sum - delivered_sum) / demand_sum if demand_sum > 0 else 0.0,
        "evictions": int(evictions),
        "wrong_evictions": int(wrong_evictions),
    }


def checks(figs: dict, marks) -> dict:
    """Pass or fail of capacity, convergence and eviction, each with its mark and the figure it read; under a
    promise, capacity reads the demand not served within it, and a fourth check, latency, the share of delivered
    tokens that kept it."""
    promised = "goodput_share" in figs
    unmet = figs["unmet_goodput_share"] if promised else figs["unmet_share"]
    out = {
        "capacity": {
            "pass": bool(unmet <= marks.max_unmet_share + 1e-12),
            "value": unmet,
            "mark": (f"tokens {'not served within the promise' if promised else 'lost'} <= {marks.max_unmet_share:.1%} "
                     "of demand (step by step, after the queue)" if "traffic" in figs
                     else f"unmet demand <= {marks.max_unmet_share:.1%} of demand" + (" (served within the promise)" if promised else "")),
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
    if promised:
        out["latency"] = {
            "pass": bool(figs["goodput_share"] >= marks.latency_share - 1e-12),
            "value": figs["goodput_share"],
            "mark": f"tokens within the promise >= {marks.latency_share:.1%} of delivered",
        }
    return out


def figures(s: Scenario, month: Month, warm: np.ndarray, b: HoursBill, wrong_by_eviction: np.ndarray, eviction_budget: int,
            at_promise: tuple[np.ndarray, np.ndarray] | None = None,
            promise_sums: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Every figure of the verdict, as plain numbers (the `--json` object), from a month's run sets, bill and evictions
    (under a promise, `at_promise`: the cards' true rates and slots at it, and `promise_sums`: those summed over the
    run sets, when the caller has them)."""
    H = max(1, month.hours)
    wrong = int(np.sum(wrong_by_eviction))
    n_evicted = int(np.size(wrong_by_eviction))
    t = month_totals(b.warm_usd, b.churn_usd, b.idle_usd, b.ideal_usd, b.demand_tps, b.delivered_tps, n_evicted, wrong)
    run_class = s.policy.class_label
    wanted = [month.class_names.index(c) for c in s.policy.run_classes(month.class_names)]
    pool_cards = int(np.isin(month.card_class, wanted).sum())
    bill = t["bill_usd"]
    figs = {
        "preset": s.name,
        "fix": False,
        "seed": s.seed,
        "hours": month.hours,
        "card_class": run_class,
        "pool_cards": pool_cards,
        "window": s.policy.window,
        "mode": s.policy.mode,
        "headroom": s.policy.headroom,
        "eviction_rule": s.policy.eviction.rule,
        "eviction_window": s.policy.eviction_window,
        "eviction_share": s.policy.eviction.share,
        "demand_avg_tps": float(b.demand_tps.sum()) / H,
        "demand_peak_tps": float(b.demand_tps.max()) if b.demand_tps.size else 0.0,
        "capacity_avg_tps": float(b.capacity_tps.sum()) / H,
        "delivered_avg_tps": float(b.delivered_tps.sum()) / H,
        "unmet_avg_tps": (float(b.demand_tps.sum()) - float(b.delivered_tps.sum())) / H,
        "unmet_share": t["unmet_share"],
        "short_hours": int((b.delivered_tps < b.demand_tps - 1e-6).sum()),
        "cards_warm_avg": float(b.cards_warm.mean()) if b.cards_warm.size else 0.0,
        "cards_warm_max": int(b.cards_warm.max()) if b.cards_warm.size else 0,
        "cards_used": int(warm.any(axis=1).sum()),
        "bill_usd": bill,
        "bill_warm_usd": t["bill_warm_usd"],
        "bill_churn_usd": t["bill_churn_usd"],
        "idle_usd": t["idle_usd"],
        "idle_share": t["idle_usd"] / bill if bill > 0 else 0.0,
        "ideal_bill_usd": t["ideal_bill_usd"],
        "convergence": t["convergence"],
        "evictions": n_evicted,
        "eviction_budget": eviction_budget,
        "wrong_evictions": wrong,
        "wrong_eviction_share": wrong / n_evicted if n_evicted else 0.0,
    }
    if s.slo is not None:
        from fleet.core.latency import month_promise, promise_month_figures

        figs.update(promise_month_figures(s, month_promise(s, month, warm, b.delivered_tps, b.demand_tps, at_promise,
                                                                promise_sums),
                                          b.delivered_tps, b.demand_tps))
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
