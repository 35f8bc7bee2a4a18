"""Why no combination passes: each check the nearest one fails, by how much, and the mark it would pass at; and
whether the same policy told the demand (the clairvoyant view) passes at all.

A recommendation that finds nothing still has to say what to change. A check may fail because its mark is
stricter than the pool can meet (then a mark is named that passes), or because no forecast follows the demand
(then the clairvoyant view passes where the forecasters fail), or because the pool is too small for its demand's
peak (then even the clairvoyant view fails, and no policy of this pool passes). Pure: the nearest combination's
months (as `fleet.core.compare.replay_month` gives them) and its clairvoyant twin's summary in, frozen values out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fleet.core.compare import CHECKS, FIGURES, Combo, ComboSummary
from fleet.core.noise_ceiling import NoiseCeiling
from fleet.core.scenario import KNOWN_FORECAST, Checks, Scenario

CHECK_FIGURE = {"capacity": "unmet_share", "convergence": "convergence", "eviction": "wrong_evictions",
                "latency": "goodput_share"}
"""The month figure each check reads."""

CHECK_MARK = {"capacity": "max_unmet_share", "convergence": "min_convergence", "eviction": "max_wrong_evictions",
              "latency": "latency_share"}
"""Each check's mark under `[checks]` (`--set checks.NAME=VALUE`)."""


@dataclass(frozen=True)
class CheckShortfall:
    """One check the nearest combination fails in some month: how often it passes, its figure in the median month
    against the mark, and the mark at which it alone would pass in `min_pass` of the months."""

    check: str
    pass_rate: float
    mark: float
    median: float
    passing_mark: float  # rounded the way that still passes: up for a most-allowed mark, down for a least-required one

    @property
    def setting(self) -> str:
        """The `--set` option that moves the mark there."""
        return f"checks.{CHECK_MARK[self.check]}={self.passing_mark:g}"

    def as_dict(self) -> dict:
        return {"check": self.check, "pass_rate": self.pass_rate, "mark": self.mark, "median": self.median,
                "passing_mark": self.passing_mark, "set": self.setting}


@dataclass(frozen=True)
class Shortfall:
    """What the nearest combination fails and what would pass, with its clairvoyant twin's outcome."""

    combo: Combo
    min_pass_rate: float
    checks: tuple[CheckShortfall, ...]  # every check failing in some month, in `CHECKS` order
    together_pass_rate: float  # months passing all three with each check short of `min_pass` at its passing mark
    clairvoyant: ComboSummary | None  # the same policy told each hour's demand; None: the combination already is
    demand_peak_tps: float  # the demand's peak hour, in the median month
    pool_rated_tps: float  # every card of the classes the combination rents, at its rated rate
    noise: NoiseCeiling | None = None  # what the demand's hour-to-hour noise caps a plan set before the hour at

    @property
    def binding(self) -> tuple[CheckShortfall, ...]:
        """The checks short of `min_pass` on their own: the marks that would have to move."""
        return tuple(c for c in self.checks if c.pass_rate < self.min_pass_rate - 1e-12)

    @property
    def clairvoyant_passes_capacity(self) -> bool:
        return self.clairvoyant is None or self.clairvoyant.pass_rate["capacity"] >= self.min_pass_rate - 1e-12

    def as_dict(self) -> dict:
        twin = self.clairvoyant
        return {
            "checks": [c.as_dict() for c in self.checks],
            "together_pass_rate": self.together_pass_rate,
            "clairvoyant": None if twin is None else {"pass_rate": dict(twin.pass_rate),
                                                      "all_checks_pass_rate": twin.all_checks_pass_rate,
                                                      "set": twin.combo.overrides()},
            "demand_peak_tps": self.demand_peak_tps,
            "pool_rated_tps": self.pool_rated_tps,
            "noise_ceiling": None if self.noise is None else self.noise.as_dict(),
        }


def clairvoyant_twin(combo: Combo) -> Combo | None:
    """The same combination told each hour's demand (the seed's clairvoyant view); None when it already is."""
    return None if combo.knows_demand else replace(combo, forecast=KNOWN_FORECAST, forecast_quantile=None)


def pool_rated_tps(scenario: Scenario) -> float:
    """The rated rate of every card on offer in the classes the scenario's policy rents."""
    renting = set(scenario.policy.run_classes([c.name for c in scenario.classes]))
    return float(sum(c.pool_cards * c.rated_tps for c in scenario.classes if c.name in renting))


def _order_statistic(values: np.ndarray, min_pass: float, largest: bool) -> float:
    """The k-th best month's figure, k the fewest months making `min_pass` of them: the mark passing exactly those."""
    v = np.sort(values)[::-1] if largest else np.sort(values)
    k = max(1, math.ceil(min_pass * v.size - 1e-9))
    return float(v[k - 1])


def passing_mark(check: str, values: np.ndarray, min_pass: float) -> float:
    """The mark at which `check` passes in `min_pass` of the months whose figures are `values`, rounded the way that
    still passes (a share to 0.01%, convergence down to 0.1%, wrong evictions whole)."""
    if check == "capacity":
        return math.ceil(_order_statistic(values, min_pass, largest=False) * 10_000 - 1e-9) / 10_000
    if check == "convergence":
        return math.floor(_order_statistic(values, min_pass, largest=True) * 1_000 + 1e-9) / 1_000
    if check == "latency":
        return math.floor(_order_statistic(values, min_pass, largest=True) * 10_000 + 1e-9) / 10_000
    return float(math.ceil(_order_statistic(values, min_pass, largest=False) - 1e-9))


def _passes_at(check: str, values: np.ndarray, mark: float) -> np.ndarray:
    """Each month's pass of `check` at `mark`, with the checks' own tolerance (`fleet.core.verdict.checks`)."""
    if check in ("convergence", "latency"):
        return values >= mark - 1e-12
    return values <= mark + 1e-12


def shortfall(combo: Combo, figures: np.ndarray, passes: np.ndarray, marks: Checks, min_pass: float,
              clairvoyant: ComboSummary | None, demand_peak_tps: float, pool_tps: float,
              noise: NoiseCeiling | None = None) -> Shortfall:
    """The nearest combination's shortfall from its months' figures (months, `FIGURES`) and check passes (months,
    `CHECKS`) at `marks`; `noise` is the demand's noise ceiling where the plan is set before each hour."""
    failing, ok = [], np.array(passes, dtype=bool)
    for j, check in enumerate(CHECKS):
        rate = float(ok[:, j].mean())
        if rate >= 1.0:
            continue
        values = np.asarray(figures[:, FIGURES.index(CHECK_FIGURE[check])], dtype=np.float64)
        mark = float(getattr(marks, CHECK_MARK[check]))
        moved = passing_mark(check, values, min_pass) if rate < min_pass - 1e-12 else mark
        failing.append(CheckShortfall(check, rate, mark, float(np.median(values)), moved))
    together = ok.copy()
    for c in failing:
        j = CHECKS.index(c.check)
        together[:, j] = _passes_at(c.check, np.asarray(figures[:, FIGURES.index(CHECK_FIGURE[c.check])]), c.passing_mark)
    return Shortfall(combo, min_pass, tuple(failing), float(together.all(axis=1).mean()), clairvoyant,
                     float(demand_peak_tps), float(pool_tps), noise)
