"""Policies side by side over many seeded months, with common random numbers.

A grid of policy choices (window, eviction share, sizing mode, headroom, card
class) is replayed over the same months: each seed's month is drawn once and
every combination replays that very draw, so a difference between two
combinations is the policy's, not the lottery's. The ideal bill depends only
on the month, so it is also computed once per seed.

Everything here is pure (scenarios, their resolved policies and seeds in, arrays
and summaries out). Running the batches on processes or a cluster is the shell's
(`fleet.sweep`); a batch is a plain picklable value and `run_batch` a plain function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from fleet.core.headroom import (  # noqa: F401  (re-exported)
    HEADROOM_SEARCH, REACTIVE_HEADROOM_SEARCH, SEARCH_CONFIDENCE, headroom_search, least_passing_step, passing_headroom,
)
from fleet.core.latency import promise_key, promise_view
from fleet.core.ideal import GAP_TOL_USD, ideal_gap, month_ideals  # noqa: F401  (re-exported)
from fleet.core.month import draw_month
from fleet.core.plugins import PolicyParts
from fleet.core.replay import fine_ideal, demand_key, month_demand, replay, score_month
from fleet.core.grid import (  # noqa: F401  (re-exported)
    AXES, DEFAULT_EVICTION_WINDOWS, DEFAULT_SHARES, Combo, combo_of, default_grid_axes, distinct, expand_grid,
)
from fleet.core.scenario import Scenario

FIGURES = ("convergence", "wrong_evictions", "evictions", "unmet_avg_tps", "bill_usd", "idle_usd", "convergence_capped",
           "unmet_share", "goodput_share")
"""The figures summarised per combination, in the order tables and files show them. `convergence_capped` is each
month's convergence capped at 100%: a month short of capacity can show more than 100%, and the ranking must not
reward a shortfall. `unmet_share` is the figure the capacity check reads (unmet over demand; under a promise, not
served within it); `goodput_share` the latency check's (1 with no promise)."""

CHECKS = ("capacity", "convergence", "eviction", "latency")
"""The checks a month is judged by; with no promise, latency passes and tables leave it out."""

MIN_PASS_RATE = 0.95
"""A combination is recommendable when at least this share of months passes every check."""


@dataclass(frozen=True)
class MonthBatch:
    """One worker's share: the combinations' scenarios, their resolved policies, and the seeds to replay them on."""

    scenarios: tuple[Scenario, ...]
    parts: tuple[PolicyParts, ...]
    seeds: tuple[int, ...]
    exact: bool
    demand_file_tps: np.ndarray | None = None  # a `file` demand, as the shell read it


@dataclass(frozen=True)
class MonthFigures:
    """One seed's month under every combination: figures (combos, figures) and check passes (combos, checks)."""

    seed: int
    figures: np.ndarray
    passes: np.ndarray
    ideal_greedy_usd: float
    ideal_exact_usd: float
    gap_hours: int


class MonthCache:
    """One month's ideal bill and its scores under each estimator, computed once for every combination.

    `ideals` is `month_ideals` when the caller has it (a stored month's grid split over workers computes it once);
    `scenario` the pool the month is replayed for: under its promise the ideal is the promise's. Policies under
    another promise (a promise axis) get theirs, each computed once."""

    def __init__(self, month, exact: bool = True, ideals: tuple[np.ndarray, np.ndarray] | None = None,
                 scenario: Scenario | None = None):
        self.month = month
        self.exact = exact
        self._key = None if scenario is None else promise_key(scenario, month.class_names)
        self._ideals: dict = {} if ideals is None else {self._key: ideals}  # `ideals` are `scenario`'s
        if self._key not in self._ideals:
            self._ideals[self._key] = month_ideals(month, exact, None if scenario is None else promise_view(
                scenario, month.class_names, month.card_class))
        self.greedy_usd, self.exact_usd = self._ideals[self._key]
        self._scores: dict = {}
        self._demand: dict = {}
        self._fine_ideal: dict = {}

    def ideal_usd(self, scenario: Scenario) -> np.ndarray:
        """The month's ideal bill by hour for `scenario`'s promise (or none)."""
        key, m = promise_key(scenario, self.month.class_names), self.month
        if key not in self._ideals:
            self._ideals[key] = month_ideals(m, self.exact, promise_view(scenario, m.class_names, m.card_class))
        return self._ideals[key][1 if self.exact else 0]

    def replay(self, scenario: Scenario, parts: PolicyParts, capacity_only: bool = False):
        scores = score_month(self.month, parts, self._scores)
        seen = demand_key(parts)
        if seen not in self._demand:
            self._demand[seen] = month_demand(self.month, parts)
        fine = None
        if scenario.fine:
            clock = (scenario.step_minutes, scenario.billing_minutes)
            if clock not in self._fine_ideal:
                self._fine_ideal[clock] = fine_ideal(scenario, self.month)
            fine = self._fine_ideal[clock]
        return replay(scenario, parts, month=self.month, ideal_usd=self.ideal_usd(scenario), scores=scores,
                      demand=self._demand[seen], fine_ideal_usd=fine, capacity_only=capacity_only)


def month_row(f: dict) -> list[float]:
    """A replay's figures in `FIGURES` order: the capacity and latency checks' own figures (no promise: the unmet
    share, and every token within it)."""
    read = {"convergence_capped": min(f["convergence"], 1.0), "unmet_share": f["checks"]["capacity"]["value"],
            "goodput_share": f.get("goodput_share", 1.0)}
    return [read[k] if k in read else f[k] for k in FIGURES]


def replay_month(scenarios: Sequence[Scenario], parts: Sequence[PolicyParts], month, seed: int, exact: bool = True,
                 ideals: tuple[np.ndarray, np.ndarray] | None = None, ideals_of: Scenario | None = None) -> MonthFigures:
    """Replay one month (drawn or stored) under every combination; its ideal bill and scores are computed once
    (`ideals`, when given, are `ideals_of`'s: the first combination's unless said)."""
    cache = MonthCache(month, exact, ideals, ideals_of or (scenarios[0] if scenarios else None))
    gap = ideal_gap(cache.greedy_usd, cache.exact_usd)
    figs = np.empty((len(scenarios), len(FIGURES)))
    passes = np.empty((len(scenarios), len(CHECKS)), dtype=bool)
    for i, (s, kit) in enumerate(zip(scenarios, parts)):
        f = cache.replay(s, kit).figures
        figs[i] = month_row(f)
        passes[i] = [f["checks"][c]["pass"] if c in f["checks"] else True for c in CHECKS]
    return MonthFigures(
        seed=seed,
        figures=figs,
        passes=passes,
        ideal_greedy_usd=gap.greedy_usd,
        ideal_exact_usd=gap.exact_usd,
        gap_hours=gap.hours_with_gap,
    )


def with_headroom(scenario: Scenario, parts: PolicyParts, headroom: float) -> tuple[Scenario, PolicyParts]:
    policy = parts.policy.model_copy(update={"headroom": float(headroom)})
    return scenario.model_copy(update={"policy": policy}), replace(parts, policy=policy)


def min_headroom(cache: MonthCache, scenario: Scenario, parts: PolicyParts, search: tuple = HEADROOM_SEARCH,
                 guess: float | None = None) -> float:
    """The smallest headroom on the search's steps at which this month passes the capacity check (inf: none does).

    The search gallops from `guess` (another month's answer: most months need about the same; the lowest headroom
    when there is none), up while the month fails and down while it passes, then halves the bracket. It takes a
    month that passes at one headroom to pass at the next step up: the greedy takes the same cards first, and more
    of them; so wherever it starts, it finds the same step.
    """
    lo, hi, step = search
    top = int(round((hi - lo) / step))

    def passes(k: int) -> bool:
        s, p = with_headroom(scenario, parts, lo + k * step)
        return bool(cache.replay(s, p, capacity_only=True).figures["checks"]["capacity"]["pass"])

    # No guess: the lowest step. A month before that no headroom passed: the top (one test says if this one is too).
    start = 0 if guess is None else top if not np.isfinite(guess) else min(top, max(0, int(round((guess - lo) / step))))
    k = least_passing_step(passes, top, start)
    return float("inf") if k is None else lo + k * step


@dataclass(frozen=True)
class HeadroomBatch:
    """One worker's share of a headroom search: the combinations and the seeds to search them on."""

    scenarios: tuple[Scenario, ...]
    parts: tuple[PolicyParts, ...]
    seeds: tuple[int, ...]
    search: tuple = HEADROOM_SEARCH
    demand_file_tps: np.ndarray | None = None
    guesses: tuple | None = None  # where each combination's first search starts (None: from the combination before)


def run_headroom_batch(batch: HeadroomBatch) -> list[tuple[int, np.ndarray]]:
    """(seed, each combination's smallest passing headroom) for each seed's month; each month's search starts from
    the month before's answer, and the batch's first month's from the combination before's (most need about the
    same; wherever a search starts, it finds the same step)."""
    out = []
    guesses: list[float | None] = list(batch.guesses) if batch.guesses is not None else [None] * len(batch.scenarios)
    for seed in batch.seeds:
        scenarios = [s.model_copy(update={"seed": seed}) for s in batch.scenarios]
        cache = MonthCache(draw_month(scenarios[0], batch.demand_file_tps), exact=False, scenario=scenarios[0])
        found: list[float] = []
        for s, p, g in zip(scenarios, batch.parts, guesses):
            found.append(min_headroom(cache, s, p, batch.search, g if g is not None or not found else found[-1]))
        guesses = found
        out.append((seed, np.array(found)))
    return out


def run_batch(batch: MonthBatch) -> list[MonthFigures]:
    """Replay each seed's month, drawn once, under every combination."""
    out = []
    for seed in batch.seeds:
        scenarios = [s.model_copy(update={"seed": seed}) for s in batch.scenarios]
        month = draw_month(scenarios[0], batch.demand_file_tps)
        out.append(replay_month(scenarios, batch.parts, month, seed, batch.exact))
    return out


def same_month(scenarios: Sequence[Scenario]) -> None:
    """Every combination must draw the same month: they may differ in policy and promise only (a promise judges
    the month, it does not draw it)."""
    first = scenarios[0].model_dump(exclude={"policy", "seed", "slo"})
    for s in scenarios[1:]:
        if s.model_dump(exclude={"policy", "seed", "slo"}) != first:
            raise ValueError("combinations differ outside the policy, so they cannot share a month's draw")


def _quantiles(v: np.ndarray) -> dict:
    return {"median": float(np.median(v)), "p05": float(np.percentile(v, 5)), "p95": float(np.percentile(v, 95))}


@dataclass(frozen=True)
class ComboSummary:
    """A combination's figures over the months: median and 90% interval, and each check's pass rate."""

    combo: Combo
    months: int
    figures: dict  # figure -> {median, p05, p95}
    pass_rate: dict  # check -> share of months passing
    all_checks_pass_rate: float

    def as_dict(self, ideal: dict | None = None, rank: int | None = None) -> dict:
        d = {
            "window": self.combo.window,
            "size_window": self.combo.size_window,
            "share": self.combo.share,
            "mode": self.combo.mode,
            "headroom": self.combo.headroom,
            "card_class": self.combo.card_class,
            "score": self.combo.score,
            "forecast": self.combo.forecast,
            "forecast_quantile": self.combo.forecast_quantile,
            "size_to": self.combo.size_to, "stream_tps": self.combo.stream_tps, "ttft_ms": self.combo.ttft_ms,
            "knew_demand": self.combo.knows_demand,
            "months": self.months,
            "set": self.combo.overrides(),
        }
        d.update({k: dict(v) for k, v in self.figures.items()})
        d["pass_rate"] = dict(self.pass_rate)
        d["all_checks_pass_rate"] = self.all_checks_pass_rate
        if ideal is not None:
            d["ideal"] = ideal
        d["recommendation"] = {1: "best", 2: "runner-up"}.get(rank) if rank else None
        return d


def summarise(combos: Sequence[Combo], months: Sequence[MonthFigures]) -> list[ComboSummary]:
    """Per combination, the median and 5th/95th percentiles of each figure and each check's pass rate."""
    if not months:
        raise ValueError("no month to summarise")
    figs = np.stack([m.figures for m in months])  # (months, combos, figures)
    passes = np.stack([m.passes for m in months])  # (months, combos, checks)
    out = []
    for i, c in enumerate(combos):
        out.append(
            ComboSummary(
                combo=c,
                months=len(months),
                figures={k: _quantiles(figs[:, i, j]) for j, k in enumerate(FIGURES)},
                pass_rate={k: float(passes[:, i, j].mean()) for j, k in enumerate(CHECKS)},
                all_checks_pass_rate=float(passes[:, i, :].all(axis=1).mean()),
            )
        )
    return out


def ideal_summary(months: Sequence[MonthFigures], exact: bool) -> dict:
    """Which ideal the convergence is against, and the greedy ideal's overspend over the exact one."""
    greedy = np.array([m.ideal_greedy_usd for m in months])
    exact_usd = np.array([m.ideal_exact_usd for m in months])
    gap = greedy - exact_usd
    return {
        "method": "exact" if exact else "greedy",
        "greedy_gap_usd": _quantiles(gap) if exact else None,
        "greedy_gap_share": _quantiles(np.divide(gap, exact_usd, out=np.zeros_like(gap), where=exact_usd > 0)) if exact else None,
        "months_with_gap": int((gap > GAP_TOL_USD).sum()) if exact else None,
        "hours_with_gap": _quantiles(np.array([m.gap_hours for m in months], dtype=np.float64)) if exact else None,
    }


@dataclass(frozen=True)
class Recommendation:
    """The best and second-best recommendable combinations; with none, the one nearest to passing, to show what fails."""

    best: ComboSummary | None
    runner_up: ComboSummary | None
    eligible: int
    considered: int
    min_pass_rate: float
    closest: ComboSummary | None = field(default=None)


def _rank_key(s: ComboSummary) -> tuple:
    # Median convergence with each month capped at 100% (a shortfall cannot raise it); ties to the lower median bill.
    return (-s.figures["convergence_capped"]["median"], s.figures["bill_usd"]["median"])


def recommend(summaries: Sequence[ComboSummary], min_pass_rate: float = MIN_PASS_RATE) -> Recommendation:
    """The combination with the highest median capped convergence among those whose months pass all three
    checks (no shortage, no wrong eviction, convergence at its mark) in at least `min_pass_rate` of
    months, ties to the lower median bill, and the runner-up.

    The checks are counted together, month by month: a combination that is short in a few months and
    under the convergence mark in a few others fails more months than either rate shows. Convergence is
    capped at 100% per month before the median, so a month short of capacity (whose ideal / real bill
    can exceed 100%) never ranks a policy higher. With none passing there is no recommendation; `closest`
    is the combination passing in most months, shown with what it fails."""
    eligible = [s for s in summaries if s.all_checks_pass_rate >= min_pass_rate - 1e-12]
    ranked = sorted(eligible, key=_rank_key)
    closest = None
    if not ranked and summaries:
        closest = max(summaries, key=lambda s: (s.all_checks_pass_rate, s.figures["convergence_capped"]["median"]))
    return Recommendation(
        best=ranked[0] if ranked else None,
        runner_up=ranked[1] if len(ranked) > 1 else None,
        eligible=len(ranked),
        considered=len(summaries),
        min_pass_rate=min_pass_rate,
        closest=closest,
    )


def rank_of(rec: Recommendation, summary: ComboSummary) -> int | None:
    if rec.best is summary:
        return 1
    if rec.runner_up is summary:
        return 2
    return None


def csv_rows(summaries: Sequence[ComboSummary], rec: Recommendation | None = None) -> list[dict]:
    """One flat row per combination, for a CSV."""
    rows = []
    for s in summaries:
        row = {
            "window": s.combo.window,
            "size_window": s.combo.size_window,
            "share": s.combo.share,
            "mode": s.combo.mode,
            "headroom": s.combo.headroom,
            "card_class": s.combo.class_label,
            "score": s.combo.score,
            "forecast": s.combo.forecast,
            "forecast_quantile": "" if s.combo.forecast_quantile is None else s.combo.forecast_quantile,
            "size_to": s.combo.size_to,
            "stream_tps": "" if s.combo.stream_tps is None else s.combo.stream_tps,
            "ttft_ms": "" if s.combo.ttft_ms is None else s.combo.ttft_ms,
            "knew_demand": s.combo.knows_demand,
            "months": s.months,
        }
        for k in FIGURES:
            for q in ("median", "p05", "p95"):
                row[f"{k}_{q}"] = s.figures[k][q]
        for c in CHECKS:
            row[f"pass_rate_{c}"] = s.pass_rate[c]
        row["all_checks_pass_rate"] = s.all_checks_pass_rate
        rank = rank_of(rec, s) if rec else None
        row["recommendation"] = {1: "best", 2: "runner-up"}.get(rank, "") if rank else ""
        rows.append(row)
    return rows
