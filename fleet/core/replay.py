"""Replay a month under a policy: size the run set, run the eviction policy, bill it, judge it.

The replay is a pure function of a scenario, its resolved policy and its month
(drawn or stored). It walks the month through the step (`fleet.core.step.step`)
the service takes one hour at a time: one step from each decision hour to the
next (its eviction pass, then its hours sized in one stretch), each handing the
next its `Carry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleet.core.billing import HoursBill, bill_hours
from fleet.core.forecast import DemandView, demand_view
from fleet.core.greedy import copy_in_tiles
from fleet.core.ideal import month_ideals
from fleet.core.latency import (PromiseFigures, promise_month_figures, promise_view, run_set_promise, sizing_promise,
                                true_at_promise)
from fleet.core.month import Month, draw_month
from fleet.core.run_set_sums import BlockSums
from fleet.core.carry import Carry, run_class_mask
from fleet.core.plugins import PolicyParts, Scored
from fleet.core.scenario import Scenario, budget_cards
from fleet.core.scores import AtHours, of_rows, unscored_as_zero, window_mean, window_scores_many
from fleet.core.step import CardDecision, EvictionPass, StepInput, is_decision_hour, step
from fleet.core.traffic import Traffic, TrafficInput, boot_steps_of, run_traffic
from fleet.core.traffic_figures import fine_hours, ideal_usd_by_period, traffic_figures
from fleet.core.verdict import checks, figures, median_ticket_tps, wrong_evictions


_PIECE_CELLS = 1 << 23
"""Card-hours sized at once (8 MiB of run sets; a month of 10,000 cards in one piece)."""


@dataclass
class MonthResult:
    """A replayed month: its run sets, eviction passes, bill, and the verdict's figures."""

    scenario: Scenario
    month: Month
    warm: np.ndarray  # (cards, hours) bool: the run set of each hour (a transposed view: hours-major in memory)
    passes: list[EvictionPass]
    eviction_budget: int
    bill: HoursBill
    wrong: np.ndarray  # (evictions,) bool, in the order of `evictions`
    median_ticket_tps: np.ndarray  # (evictions,) the median ticket of its class in the run set each eviction was judged in
    in_dip: np.ndarray | None = None  # (cards, hours) bool: scored on its recent level, as in a dip (dip-aware scores)
    demand: DemandView | None = None  # what the policy believed of each hour's demand
    traffic: Traffic | None = None  # the month at its finer clock (a finer step, a queue or a reactive loop)
    figures: dict = field(default_factory=dict)

    @property
    def evictions(self) -> list[CardDecision]:
        """Every eviction, in the order they were made."""
        return [e for p in self.passes for e in p.evictions]

    @property
    def cards_warm(self) -> np.ndarray:
        """Cards warm in each hour (the bill's count)."""
        return self.bill.cards_warm


def month_class_mask(month: Month, policy) -> np.ndarray:
    """The month's cards of the classes the policy rents."""
    return run_class_mask(month.card_class, month.class_names, policy)


def dip_allowance(scored: Scored, hours_ahead: float) -> np.ndarray | None:
    """Share of capacity held each hour for dips the scores cannot see yet: the pool's measured dip onsets per
    card-hour × their mean depth × the hours ahead held for (None when off or the estimator measures no dips)."""
    if not hours_ahead or scored.dip_rate is None or scored.dip_depth is None:
        return None
    return np.asarray(scored.dip_rate) * np.asarray(scored.dip_depth) * float(hours_ahead)


def estimate_scores(hourly_tps: np.ndarray, rows: np.ndarray, history_hours: int, hours: int, parts: PolicyParts
                    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(score, in dip, dip allowance) of `hours` hours through the policy's estimator, from (cards, history_hours +
    hours) hourly means (NaN: no telemetry), of the cards in `rows` (the run classes'; others score zero): the one
    call replay's month and the service's score job make."""
    scored: list[Scored] = []

    def estimate(rows_tps: np.ndarray) -> list:
        got = parts.score.score(rows_tps, history_hours, hours, parts.size_window_hours)
        scored.append(got)
        return [got.score_tps, got.in_dip]

    score, in_dip = of_rows(hourly_tps, rows, hours, estimate)
    return score, in_dip, dip_allowance(scored[0], parts.policy.dip_allowance_hours) if scored else None


@dataclass(frozen=True)
class MonthScores:
    """What the autoscaler believed all month: the sizing score, the eviction window's mean, dips seen, capacity held."""

    score_tps: np.ndarray  # (cards, hours); cards outside the run classes score zero
    evict_score_tps: np.ndarray | AtHours  # (cards, hours), read at decision hours
    in_dip: np.ndarray | None  # (cards, hours) bool, from a dip-aware estimator
    allowance: np.ndarray | None  # (hours,) share of capacity held for dips to come


def score_month(month: Month, parts: PolicyParts, cache: dict | None = None) -> MonthScores:
    """Score the month's run classes through the policy's estimator, and the eviction rule's window as a plain mean.

    `cache` (a sweep's, one per month) keeps each sizing score and each window mean once for every policy that
    reads it: policies that differ only in their eviction window share the estimator's work.
    """
    cache = {} if cache is None else cache
    H, W = month.hours, month.warmup_hours
    classes = parts.policy.run_classes(month.class_names)
    size_w, evict_w = parts.size_window_hours, parts.evict_window_hours
    size_key = ("size", parts.score, size_w, classes, parts.policy.dip_allowance_hours)
    reads_mean = parts.evicts and (evict_w != size_w or not parts.score.is_window_mean)
    cadence = parts.policy.eviction.cadence_hours
    at = np.arange(cadence, H, cadence)  # the only hours an eviction pass reads its window's mean
    mean_key = ("mean", evict_w, classes, cadence)
    if reads_mean and parts.score.is_window_mean and size_key not in cache and mean_key not in cache:
        _window_means_together(month, parts, cache, size_key, mean_key, at)
    if size_key not in cache:
        score, in_dip, allowance = estimate_scores(month.measured_tps, np.flatnonzero(month_class_mask(month, parts.policy)), W, H, parts)
        cache[size_key] = (unscored_as_zero(score), in_dip, allowance)
    score, in_dip, allowance = cache[size_key]
    evict = score
    # The eviction rule reads the plain mean of its own window, unless the sizing score is that very mean.
    if reads_mean:
        if mean_key not in cache:
            cache[mean_key] = AtHours(at, _mean_at(month, parts, evict_w))
        evict = cache[mean_key]
    return MonthScores(score, evict, in_dip, allowance)


def _mean_at(month: Month, parts: PolicyParts, window_hours: int):
    """The run classes' plain mean of a window at given month hours, (cards, len(hours)); other cards zero."""
    idx = np.flatnonzero(month_class_mask(month, parts.policy))
    W, H = month.warmup_hours, month.hours
    return lambda hours: unscored_as_zero(of_rows(
        month.measured_tps, idx, hours.size, lambda rows: [window_mean(rows, W, H, window_hours, hours)])[0])


def _window_means_together(month: Month, parts: PolicyParts, cache: dict, size_key: tuple, mean_key: tuple,
                           at: np.ndarray) -> None:
    """A window-mean estimator's score and the eviction window's mean from one running sum of the telemetry.

    The estimator's score is the plain mean of its window (`is_window_mean`), which is `window_mean`'s number, so
    both come out of one pass over the month instead of two. Only where every hour has finite telemetry (then no
    card is unscored; the pass's running sums tell, `finite_only`); a month with gaps is scored the usual way, one
    window at a time.
    """
    idx = np.flatnonzero(month_class_mask(month, parts.policy))
    if idx.size == 0:
        return
    W, H = month.warmup_hours, month.hours
    with np.errstate(invalid="ignore"):  # an infinity less itself: that month is refused, its numbers never read
        score, mean = of_rows(month.measured_tps, idx, (H, at.size), lambda rows: window_scores_many(
            rows, W, H, (parts.size_window_hours, parts.evict_window_hours), each_at=(None, at), finite_only=True) or [None, None])
    if score is None:
        return
    cache[size_key] = (score, None, None)
    cache[mean_key] = AtHours(at, _mean_at(month, parts, parts.evict_window_hours), score_tps=mean)


def demand_key(parts: PolicyParts) -> tuple:
    """Policies with the same key see the same `month_demand` (a sweep forecasts a month once per key)."""
    p = parts.policy
    if parts.knows_demand:
        return ("known",)
    own = p.forecasters.get(p.forecast, {})
    return (p.forecast, tuple(sorted((k, repr(v)) for k, v in own.items())), p.forecast_quantile, p.forecast_error_hours,
            p.cold_start)


def month_demand(month: Month, parts: PolicyParts) -> DemandView:
    """What the policy believes of each hour's demand: forecasts from the demand before each hour (the history before
    the month included), or the month's own demand under the seed's clairvoyant view."""
    history = month.demand_history_tps if month.demand_history_tps is not None else np.empty(0)
    observed = np.concatenate([np.asarray(history, dtype=np.float64), np.asarray(month.demand_tps, dtype=np.float64)[:-1]])
    p = parts.policy
    return demand_view(parts.forecast, observed, len(history), p.forecast_quantile, p.forecast_error_hours,
                       known_tps=month.demand_tps if parts.knows_demand else None, cold_start_tps=p.cold_start)


def demand_figures(view: DemandView, demand_tps: np.ndarray, policy) -> dict:
    """How the policy saw demand: the forecaster, its margin, and its mean absolute error over the month's hours."""
    f = np.asarray(view.forecast_tps, dtype=np.float64)
    d = np.asarray(demand_tps, dtype=np.float64)[: f.size]
    ok = np.isfinite(f) & (d > 0)
    error = float(np.mean(np.abs(f[ok] - d[ok]) / d[ok])) if ok.any() else float("nan")
    return {"knew_demand": view.knew_demand, "forecast": policy.forecast, "forecast_quantile": policy.forecast_quantile,
            "forecast_error": 0.0 if view.knew_demand else error}


def replay(scenario: Scenario, parts: PolicyParts, month: Month | None = None, ideal_usd: np.ndarray | None = None,
           scores: MonthScores | None = None, demand: DemandView | None = None,
           fine_ideal_usd: float | None = None, capacity_only: bool = False) -> MonthResult:
    """Replay one month of `scenario` under its resolved policy (drawing the month unless given) and judge it.

    `ideal_usd` is the month's ideal bill by hour, `scores` its `score_month`, `demand` its `month_demand` and
    `fine_ideal_usd` its `fine_ideal` when the caller has them (a sweep computes each once per month); otherwise
    they are computed. `capacity_only` (a headroom search, which reads the capacity check alone): the finer clock's
    walk stops once the month has lost more than the check allows, so that check is right and the rest partial.
    """
    month = month if month is not None else draw_month(scenario)
    policy = parts.policy
    H, W = month.hours, month.warmup_hours
    n = month.n_cards
    rent_h = month.rent_usd_per_hour

    in_class = month_class_mask(month, policy)
    idx = np.flatnonzero(in_class)
    ms = scores if scores is not None else score_month(month, parts)
    score, evict_score, in_dip, allowance = ms.score_tps, ms.evict_score_tps, ms.in_dip, ms.allowance
    budget = budget_cards(policy.eviction.share, int(idx.size))
    promise = sizing_promise(scenario, month.class_names, month.card_class)
    at_promise = true_at_promise(scenario, month) if scenario.slo is not None else None
    ideal_usd = ideal_usd if ideal_usd is not None or at_promise is None else promise_ideal_usd(scenario, month, at_promise[0])
    view = demand if demand is not None else month_demand(month, parts)
    cadence = policy.eviction.cadence_hours
    decision_hours = [h for h in range(cadence, H, cadence) if is_decision_hour(h, parts, budget)]

    # Hours-major, as the greedy sizes them (each hour's run set contiguous); read as (cards, hours) through `.T`.
    warm_hm = np.zeros((H, n), dtype=bool)
    piece = max(1, _PIECE_CELLS // max(n, 1))
    passes: list[EvictionPass] = []
    carry = Carry.month_start(in_class, budget)
    a = 0
    for b in [*decision_hours, H]:
        if b <= a:
            continue  # the budget was spent before this decision hour
        # One step from a decision hour to the next, a piece of hours at a time (sizing reads nothing but the hour
        # before), so the mode's and the hysteresis' arrays are a piece's, not the month's.
        c = a
        while c < b:
            d = min(b, c + piece)
            stepped = step(carry, StepInput(
                hours=np.arange(c, d),
                score_tps=score[:, c:d],
                rent_usd_per_hour=rent_h,
                demand_tps=view.sizing_tps[c:d],
                peak_demand_tps=view.peak_tps[c:d],
                pool_cards=int(idx.size),
                evict_score_tps=evict_score[:, c] if c == a > 0 else None,  # a stretch's first hour: a decision hour
                groups=month.card_class,
                peak_before_tps=float(view.peak_tps[c - 1]) if c > 0 else float("nan"),
                allowance=None if allowance is None else allowance[c:d], promise=promise,
            ), parts)
            if stepped.eviction is not None:
                passes.append(stepped.eviction)
            copy_in_tiles(warm_hm[c:d], np.asarray(stepped.warm, dtype=bool).T, axis=1)  # the greedy's: a plain copy
            carry = stepped.next
            del stepped
            if carry.budget_left == 0:
                b = H  # budget spent: the rest of the month is one stretch
            c = d
        a = b

    plan_scores = None if scenario.policy.reactive is None else score if promise is None else promise.rates_tps(score)
    del score, evict_score, ms  # the month's scores are not read again: the bill's arrays take their place
    warm = warm_hm.T
    evicted_at: list[list[int]] = [[] for _ in range(H)]
    for p in passes:
        evicted_at[p.hour] = list(p.evicted)
    bill, sums = bill_month(month, warm, at_promise, evicted_at, ideal_usd)
    wrong, medians = judge_evictions(passes, warm, month)
    result = MonthResult(scenario=scenario, month=month, warm=warm, passes=passes, eviction_budget=budget, bill=bill,
                         wrong=wrong, median_ticket_tps=medians, in_dip=in_dip, demand=view)
    result.figures = figures(scenario, month, warm, bill, result.wrong, budget, at_promise, sums)
    result.figures.update(demand_figures(view, month.demand_tps, policy))
    if scenario.fine:
        fine_figures(result, plan_scores, in_class, fine_ideal_usd, capacity_only, at_promise)
    return result


def bill_month(month: Month, warm: np.ndarray, at_promise: tuple[np.ndarray, np.ndarray] | None,
               evicted_at: list[list[int]], ideal_usd: np.ndarray | None) -> tuple[HoursBill, tuple | None]:
    """The month's bill, and under a promise (`at_promise`) its rate and slots summed over the run sets on the bill's
    pass over them (`BlockSums`; None where they cannot ride on it, and `month_promise` sums them itself)."""
    served = serving_rate_tps(month, at_promise)
    n, hours = warm.shape
    sums = BlockSums(*at_promise, n, hours, served) if at_promise is not None and BlockSums.applies(
        *at_promise, n, hours) else None
    bill = bill_hours(warm, month.rent_usd_per_hour, month.rent_usd_per_month, served, month.demand_tps, evicted_at,
                      ideal_usd, boot_hours=month.boot_hours, each_block=None if sums is None else sums.add)
    return bill, None if sums is None else sums.sums


def served_rate_tps(true_rate_tps: np.ndarray, rate_at_promise_tps: np.ndarray) -> np.ndarray:
    """What each card serves an hour under a promise, from its true rate and its rate at the promise ((cards, hours)
    arrays each): the larger, in the true rates' type. `serving_rate_tps` reads a month by it (two levels a card, or
    whole), the service's bill a stretch of hours."""
    return np.maximum(true_rate_tps, np.asarray(rate_at_promise_tps).astype(true_rate_tps.dtype, copy=False))


def serving_rate_tps(month: Month, at_promise: tuple[np.ndarray, np.ndarray] | None):
    """What each card serves an hour: its true rate at the rated batch, or under a promise whose floor lets it run a
    larger batch than that (its memory allowing), its rate at the promise: the router keeps it at its promised batch."""
    W = month.warmup_hours
    if at_promise is None:
        return month.true_rate_tps[:, W:]
    true, at = month.true_rate_tps[:, W:W + month.hours], at_promise[0]
    if hasattr(true, "with_levels") and hasattr(at, "dipped_tps") and at.shape == true.shape:
        # A drawn month's: two levels a card, each the larger of its true rate and its rate at the promise (the
        # float32 numbers the month's array would hold), billed a block of hours at a time as the true rates are.
        return true.with_levels(served_rate_tps(np.asarray(true.ticket_tps, dtype=true.dtype), at.ticket_tps),
                                served_rate_tps(np.asarray(true.dipped_tps, dtype=true.dtype), at.dipped_tps))
    true = np.asarray(true)
    return served_rate_tps(true, at[:, :true.shape[1]])


def promise_ideal_usd(scenario: Scenario, month: Month, true_at_promise_tps: np.ndarray | None = None) -> np.ndarray:
    """The month's ideal bill by hour under the pool's promise: the ideal operator keeps it, whatever the policy
    sizes to."""
    return month_ideals(month, True, promise_view(scenario, month.class_names, month.card_class), true_at_promise_tps)[1]


def fine_ideal_by_period(scenario: Scenario, month: Month) -> np.ndarray:
    """The ideal operator's bill of each billing period at the scenario's finer clock (`ideal_usd_by_period`); under
    a promise it keeps it there too: each card at its true rate at the promise, each step lifted to the slots its
    first tokens need."""
    rate, warmup, demand = month.true_rate_tps, month.warmup_hours, month.step_demand_tps
    if scenario.slo is not None:
        rate, warmup = true_at_promise(scenario, month)[0], 0
        demand = promise_view(scenario, month.class_names, month.card_class).target_tps(demand)
    return ideal_usd_by_period(rate, warmup, month.rent_usd_per_hour, demand, scenario.step_minutes,
                               scenario.billing_minutes or scenario.step_minutes)


def fine_ideal(scenario: Scenario, month: Month) -> float:
    """The ideal operator's bill of the month at the scenario's finer clock."""
    return float(fine_ideal_by_period(scenario, month).sum())


def fine_figures(result: MonthResult, plan_scores: np.ndarray | None, in_class: np.ndarray,
                 ideal_usd: float | None = None, capacity_only: bool = False,
                 at_promise: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """The month at its finer clock (`fleet.core.traffic`): the plan's run sets served step by step, with the queue
    and the reactive loop (ranking spares by `plan_scores`: at the promise when the plan sizes to it); the bill, the
    ideal, lost tokens and the checks become the finer clock's. Under a promise
    (`at_promise`: the cards' true rates and slots at it) it is judged step by step too, over the cards serving each
    step, the loop's included."""
    s, month = result.scenario, result.month
    step_minutes = s.step_minutes
    billing = s.billing_minutes or step_minutes
    evicted_hour = np.full(month.n_cards, month.hours, dtype=np.int64)
    for p in result.passes:
        evicted_hour[list(p.evicted)] = p.hour
    eligible = in_class[:, None] & (evicted_hour[:, None] > np.arange(month.hours)[None, :]) if plan_scores is not None else None
    sized_to = None if plan_scores is None else sizing_promise(s, month.class_names, month.card_class)
    loop_target = None if sized_to is None else sized_to.target_tps  # the loop lifts demand as the plan does
    stop = None
    if capacity_only and "goodput_share" not in result.figures:  # under a promise, capacity reads more than the loss
        stop = s.checks.max_unmet_share
    t = run_traffic(TrafficInput(
        plan_warm=result.warm, true_rate_tps=month.true_rate_tps, warmup_hours=month.warmup_hours,
        rent_usd_per_hour=month.rent_usd_per_hour, step_demand_tps=month.step_demand_tps, step_minutes=step_minutes,
        billing_minutes=billing, boot_steps=boot_steps_of(month.boot_hours, month.n_cards, step_minutes),
        max_wait_s=s.demand.max_wait_s, reactive=s.policy.reactive, score_tps=plan_scores, eligible=eligible,
        stop_lost_share=stop, promise_rate_tps=None if at_promise is None else at_promise[0],
        promise_slots=None if at_promise is None else at_promise[1], need_target=loop_target))
    ideal = fine_ideal(s, month) if ideal_usd is None else float(ideal_usd)
    figs = result.figures
    tf = traffic_figures(t, figs["bill_usd"], ideal, step_minutes, billing, s.demand.max_wait_s, s.policy.reactive is not None)
    result.traffic = t
    figs["traffic"] = tf
    figs.update(bill_usd=tf["bill_usd"], ideal_bill_usd=ideal, convergence=tf["convergence"], unmet_share=tf["lost_share"],
                unmet_avg_tps=t.lost_tokens / (month.hours * 3600.0))  # what compare's tables read: the tokens lost
    if stop is None and not t.stopped:  # a walk that bills, by the hour: idle cost, capacity and delivered read from it
        figs.update(fine_hours(t, result.bill.warm_usd, month.step_demand_tps).figures(tf["bill_usd"]))
    if t.fresh_step_tokens is not None and not t.stopped:
        figs.update(step_promise_figures(s, month, t))
    figs["checks"] = checks(figs, s.checks)


def step_promise_figures(s: Scenario, month: Month, t) -> dict:
    """The promise judged step by step and read by the hour: each step's first tokens queue for the slots of the cards
    serving it; tokens served from the backlog waited past their step and are outside the first-token promise."""
    hourly, delivered, demand = step_promise_hours(s, month, t)
    return promise_month_figures(s, hourly, delivered, demand)


def step_promise_hours(s: Scenario, month: Month, t) -> tuple[PromiseFigures, np.ndarray, np.ndarray]:
    """`step_promise_figures`' hours: the promise read by the hour, and each hour's delivered tokens (those of its
    arrivals served, on time or late) and demand, a second."""
    view = promise_view(s, month.class_names, month.card_class)
    demand = np.asarray(month.step_demand_tps, dtype=np.float64)[: t.fresh_step_tokens.size]
    p = run_set_promise(t.promise_rate_step_tps, t.promise_slots_step, t.fresh_step_tokens / t.step_s, demand, s.slo,
                        view.shape, view.prefill_s)
    per_hour = demand.size // month.hours
    by_hour = lambda a: np.asarray(a).reshape(month.hours, per_hour)  # noqa: E731
    hourly = PromiseFigures(by_hour(p.goodput_tps).mean(axis=1), by_hour(p.rate_at_promise_tps).mean(axis=1),
                            by_hour(p.slots).mean(axis=1), by_hour(p.ttft_s).max(axis=1),
                            by_hour(p.ttft_ok_share).min(axis=1))
    delivered = by_hour(demand * t.step_s - t.lost_step_tokens).sum(axis=1) / 3600.0
    return hourly, delivered, by_hour(demand).mean(axis=1)


def judge_evictions(passes: list[EvictionPass], warm: np.ndarray, month: Month) -> tuple[np.ndarray, np.ndarray]:
    """Each eviction in hindsight, in the order made: wrong or not (the verdict's rule), and the median ticket of
    its class in the run set it was judged in."""
    wrong, medians = [], []
    for p in passes:
        judged = warm[:, p.hour - 1]
        evicted = np.array(p.evicted, dtype=np.int64)
        wrong.extend(wrong_evictions(evicted, judged, month.true_tps, month.card_class).tolist())
        medians.extend(median_ticket_tps(evicted, judged, month.true_tps, month.card_class).tolist())
    return np.array(wrong, dtype=bool), np.array(medians, dtype=np.float64)
