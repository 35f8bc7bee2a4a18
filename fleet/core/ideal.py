"""The ideal operator: each hour, perfect knowledge of every card's true rate, the cheapest whole-card set covering demand, no churn.

Two ways to find it, one module: the greedy (best true tokens per dollar first,
exact with one rent) and the exact search below, which the yardstick uses.

Cards at the same rent (the cards of one class) differ only in rate, so a set
holding k of them is at its best when it holds that hour's k fastest. The
covering problem over cards therefore shrinks to one over counts per rent
group: choose k_g in 0..n_g for each group g, minimise sum(k_g × rent_g) so
that sum(top_g(k_g)) covers demand, where top_g(k) is the summed rate of the
group's k fastest cards that hour (a concave prefix sum).

- One group: the fewest fastest cards, which is what the greedy does; exact,
  and not solved again (`one_rent`, below, says why).
- Several groups, few count combinations: enumerate the counts of every group
  but the largest and find the largest group's count by binary search on its
  prefix sums, for every hour at once.
- Otherwise: a tiny integer program per hour (`scipy.optimize.milp`) over the
  counts, with each concave prefix sum written as the minimum of its linear
  pieces (exact at whole counts).

An hour that no set covers takes every card, as the greedy does, so the exact
bill never exceeds the greedy's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from fleet.core import ideal_dips
from fleet.core.greedy import greedy_run_set, run_set_usd_by_hour

COVER_TOL_TPS = 1e-9
"""A set covers demand when its rate reaches demand less this; the greedy uses the same tolerance."""

ENUMERATION_LIMIT = 50_000
"""Most count combinations (over every group but the largest) enumerated before the MILP takes over."""

ENUMERATION_CELLS = 2_000_000
"""Combinations × hours handled at once by the enumeration, to bound its memory."""


def ideal_greedy_usd_by_hour(
    true_rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray, demand_tps: np.ndarray, block_hours: int = 96
) -> np.ndarray:
    """The ideal bill of each hour by the greedy on true tokens per dollar over every card on the market.

    With one class this is the exact minimum (fewest cards, best first); with
    several it can overshoot by part of a card, which the exact ideal removes.
    The bill is summed `block_hours` at a time (`run_set_usd_by_hour`), and the run sets are found a piece of whole
    blocks at a time (each hour's is its own), so they take a piece's memory, not the month's.
    """
    n, hours = true_rate_tps.shape
    demand = np.broadcast_to(np.asarray(demand_tps, dtype=np.float64), (hours,))
    piece = max(1, _PIECE_CELLS // max(n * block_hours, 1)) * block_hours
    if ideal_dips.applies(true_rate_tps, rent_usd_per_hour):
        # A drawn month at one rent: the same run sets from its cards sorted once and its few dipped card-hours.
        got = ideal_dips.ideal_usd_by_hour(true_rate_tps, rent_usd_per_hour, demand, piece, block_hours)
        if got is not None:
            return got
    if piece >= hours:
        chosen = greedy_run_set(true_rate_tps, rent_usd_per_hour, demand)
        return run_set_usd_by_hour(chosen, rent_usd_per_hour, block_hours)
    out = np.empty(hours, dtype=np.float64)
    for a in range(0, hours, piece):
        b = min(hours, a + piece)
        chosen = greedy_run_set(true_rate_tps[:, a:b], rent_usd_per_hour, demand[a:b])
        out[a:b] = run_set_usd_by_hour(chosen, rent_usd_per_hour, block_hours)
    return out


_PIECE_CELLS = 1 << 23
"""Card-hours of the greedy's run sets held at once (8 MiB)."""


@dataclass(frozen=True)
class RentGroups:
    """The pool split by rent, each group's true rates sorted fastest first per hour, as prefix sums."""

    rent_usd_per_hour: np.ndarray  # (groups,)
    cards: np.ndarray  # (groups,) cards per group
    prefix_tps: tuple[np.ndarray, ...]  # per group, (cards + 1, hours): summed rate of the k fastest


def rent_groups(true_rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray) -> RentGroups:
    """Group cards by rent and sort each group's rates per hour, fastest first."""
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    rate = np.maximum(np.asarray(true_rate_tps, dtype=np.float64), 0.0)
    values, inverse = np.unique(rent, return_inverse=True)
    prefixes = []
    counts = []
    for g in range(values.size):
        r = rate[inverse == g]
        r = -np.sort(-r, axis=0)
        p = np.zeros((r.shape[0] + 1, r.shape[1]))
        np.cumsum(r, axis=0, out=p[1:])
        prefixes.append(p)
        counts.append(r.shape[0])
    return RentGroups(values, np.array(counts, dtype=np.int64), tuple(prefixes))


def _cards_needed(prefix_tps: np.ndarray, need_tps: np.ndarray) -> np.ndarray:
    """Fewest fastest cards of one group covering `need_tps` (combos, hours); n + 1 where none do."""
    n1, hours = prefix_tps.shape
    combos = need_tps.shape[0]
    threshold = need_tps - COVER_TOL_TPS
    if combos * n1 * hours <= ENUMERATION_CELLS:
        # Prefix sums are non-decreasing in k: the count of those below the need is the first k reaching it.
        return (prefix_tps[None, :, :] < threshold[:, None, :]).sum(axis=1)
    out = np.empty(need_tps.shape, dtype=np.int64)
    for h in range(hours):
        out[:, h] = np.searchsorted(prefix_tps[:, h], threshold[:, h], side="left")
    return out


def _enumerate_usd(groups: RentGroups, demand_tps: np.ndarray) -> np.ndarray:
    """Cheapest covering cost per hour by enumerating counts of all groups but the largest."""
    last = int(np.argmax(groups.cards))
    others = [g for g in range(groups.cards.size) if g != last]
    listed = list(itertools.product(*(range(groups.cards[g] + 1) for g in others)))
    combos = np.array(listed, dtype=np.int64).reshape(len(listed), len(others))
    usd = combos @ groups.rent_usd_per_hour[others] if others else np.zeros(1)
    hours = demand_tps.size
    out = np.empty(hours)
    # Hours go in blocks so the (combos, hours) arrays stay near a few million cells.
    block = max(1, ENUMERATION_CELLS // combos.shape[0])
    for a in range(0, hours, block):
        b = min(hours, a + block)
        cap = np.zeros((combos.shape[0], b - a))
        for j, g in enumerate(others):
            cap += groups.prefix_tps[g][combos[:, j], a:b]
        k_last = _cards_needed(groups.prefix_tps[last][:, a:b], demand_tps[None, a:b] - cap)
        total = np.where(k_last <= groups.cards[last], usd[:, None] + k_last * groups.rent_usd_per_hour[last], np.inf)
        out[a:b] = total.min(axis=0)
    return out


def _hour(groups: RentGroups, h: int) -> RentGroups:
    return RentGroups(groups.rent_usd_per_hour, groups.cards, tuple(p[:, h : h + 1] for p in groups.prefix_tps))


def _milp_hour_usd(groups: RentGroups, h: int, demand: float) -> float:
    """One hour's cheapest covering cost as an integer program over counts per group.

    Variables: k_g (whole cards of group g) and y_g (the rate they give). y_g is
    held under every linear piece of the group's concave prefix sum, so at a
    whole count it is at most the summed rate of that many fastest cards. Rates
    are capped at demand (a card faster than demand covers it either way) and
    put in units of demand, so the solver works on numbers near 1.

    The solver's feasibility tolerance can accept a set short of demand by a
    millionth; its answer is checked against the prefix sums, and when it falls
    short the hour is enumerated (one hour at a time is cheap) or, past that,
    asked again with the shortfall added.
    """
    G = groups.cards.size
    prefix = []
    for g in range(G):
        rate = np.minimum(np.diff(groups.prefix_tps[g][:, h]), demand) / demand
        prefix.append(np.concatenate([[0.0], np.cumsum(rate)]))
    rows, hi = [], []
    for g in range(G):
        n = int(groups.cards[g])
        slopes = np.diff(prefix[g])  # rate of the (j+1)-th fastest card, j = 0..n-1
        block = np.zeros((n, 2 * G))
        block[:, g] = -slopes
        block[:, G + g] = 1.0
        rows.append(block)
        hi.append(prefix[g][:-1] - np.arange(n) * slopes)
    pieces = LinearConstraint(np.vstack(rows), -np.inf, np.concatenate(hi))
    cover_row = np.concatenate([np.zeros(G), np.ones(G)])[None, :]
    c = np.concatenate([groups.rent_usd_per_hour, np.zeros(G)])
    top = np.array([p[-1] for p in prefix])
    bounds = Bounds(np.zeros(2 * G), np.concatenate([groups.cards.astype(np.float64), top]))
    integrality = np.concatenate([np.ones(G), np.zeros(G)])
    need = 1.0 - COVER_TOL_TPS / demand
    for _ in range(8):
        res = milp(
            c,
            constraints=[pieces, LinearConstraint(cover_row, need, np.inf)],
            bounds=bounds,
            integrality=integrality,
            options={"mip_rel_gap": 0.0},
        )
        if res.status != 0 or res.x is None:
            raise RuntimeError(f"exact ideal: the integer program for hour {h} did not solve ({res.message})")
        counts = np.round(res.x[:G]).astype(np.int64)
        covered = sum(groups.prefix_tps[g][counts[g], h] for g in range(G))
        short = demand - COVER_TOL_TPS - covered
        if short <= 0:
            return float(_drop_spare(groups, h, counts, demand) @ groups.rent_usd_per_hour)
        if _combinations(groups) <= 64 * ENUMERATION_LIMIT:
            return float(_enumerate_usd(_hour(groups, h), np.array([demand]))[0])
        need += max(2 * short / demand, 2e-6)
    raise RuntimeError(f"exact ideal: the integer program for hour {h} kept returning a set short of demand")


def _drop_spare(groups: RentGroups, h: int, counts: np.ndarray, demand: float) -> np.ndarray:
    """The solver's tolerance can also keep a card the cover does not need (a card of a millionth of demand beside
    one that covers it): drop the slowest card of a group, dearest first, while the rest still covers demand."""
    counts = counts.copy()
    order = np.argsort(-groups.rent_usd_per_hour, kind="stable")
    dropped = True
    while dropped:
        dropped = False
        covered = sum(groups.prefix_tps[g][counts[g], h] for g in range(counts.size))
        for g in order:
            if counts[g] > 0:
                slowest = groups.prefix_tps[g][counts[g], h] - groups.prefix_tps[g][counts[g] - 1, h]
                if covered - slowest >= demand - COVER_TOL_TPS:
                    counts[g] -= 1
                    dropped = True
                    break
    return counts


def _combinations(groups: RentGroups) -> int:
    """Count combinations the enumeration walks: every group's counts but the largest group's."""
    return int(np.prod([n + 1 for n in np.delete(groups.cards, np.argmax(groups.cards))]))


def one_rent(rent_usd_per_hour: np.ndarray) -> bool:
    """Whether every card on the market bills the same rent: then the greedy ideal is the exact one.

    Why: at one rent r a set of k cards costs k × r, so the cheapest cover is the one with fewest cards. Of all
    k-card sets the k fastest sum to the most, so if any k cards cover demand the k fastest do, and the fewest
    cards covering it are the fastest k* where k* is the first k whose k fastest reach demand. The greedy orders
    cards by tokens per dollar, which at one rent is their rate, and adds them until the running sum reaches demand
    (less the same tolerance, `COVER_TOL_TPS`): it stops at exactly that k*, its running sums being the prefix sums
    the exact search compares (the same rates, added in the same order). Where no set covers, both take every card;
    only a demand within the tolerance of zero differs (no card at all against the greedy's one), which
    `ideal_exact_usd_by_hour` sets to zero. A property test holds the shortcut to the exact search on random
    one-class months.
    """
    return np.unique(np.asarray(rent_usd_per_hour)).size == 1


def ideal_exact_usd_by_hour(
    true_rate_tps: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    demand_tps: np.ndarray,
    method: str = "auto",
    greedy_usd: np.ndarray | None = None,
) -> np.ndarray:
    """The exact ideal bill of each hour over every card on the market (fits `replay(ideal=...)`).

    `method` is "auto" (the greedy at one rent, where it is exact; else enumeration when the count combinations
    are few, else the MILP), "enumerate" or "milp"; all give the same bill. `greedy_usd` is the greedy ideal
    when the caller has it (a sweep computes both): at one rent it is the answer, not computed again.
    """
    if method not in ("auto", "enumerate", "milp"):
        raise ValueError(f"method {method!r}: expected auto, enumerate or milp")
    demand = np.asarray(demand_tps, dtype=np.float64)
    hours = demand.size
    if true_rate_tps.shape[0] == 0 or hours == 0:
        return np.zeros(hours)
    if method == "auto" and one_rent(rent_usd_per_hour):
        # One rent: the fewest fastest cards, which the greedy finds without sorting every card.
        greedy = ideal_greedy_usd_by_hour(true_rate_tps, rent_usd_per_hour, demand) if greedy_usd is None else greedy_usd
        return np.where(demand <= COVER_TOL_TPS, 0.0, greedy)
    groups = rent_groups(true_rate_tps, rent_usd_per_hour)
    everything_usd = float(groups.cards @ groups.rent_usd_per_hour)
    total_tps = sum(p[-1] for p in groups.prefix_tps)
    coverable = total_tps >= demand - COVER_TOL_TPS
    use_milp = method == "milp" or (method == "auto" and _combinations(groups) > ENUMERATION_LIMIT)
    if not use_milp:
        out = _enumerate_usd(groups, demand)
    else:
        out = np.empty(hours)
        for h in range(hours):
            if demand[h] <= COVER_TOL_TPS:
                out[h] = 0.0  # no card at all covers it
            elif coverable[h]:
                out[h] = _milp_hour_usd(groups, h, float(demand[h]))
    out = np.where(demand <= COVER_TOL_TPS, 0.0, out)
    return np.where(coverable, out, everything_usd)


@dataclass(frozen=True)
class IdealGap:
    """The greedy ideal against the exact one over a month."""

    greedy_usd: float
    exact_usd: float
    hours_with_gap: int

    @property
    def gap_usd(self) -> float:
        return self.greedy_usd - self.exact_usd

    @property
    def gap_share(self) -> float:
        """The greedy's overspend as a share of the exact bill."""
        return self.gap_usd / self.exact_usd if self.exact_usd > 0 else 0.0


GAP_TOL_USD = 1e-6
"""The greedy ideal bills more than the exact one when it bills more by this (an hour's or a month's sum)."""


def ideal_gap(greedy_usd_by_hour: np.ndarray, exact_usd_by_hour: np.ndarray) -> IdealGap:
    """How much more the greedy ideal bills than the exact one, and in how many hours."""
    g = np.asarray(greedy_usd_by_hour, dtype=np.float64)
    e = np.asarray(exact_usd_by_hour, dtype=np.float64)
    return IdealGap(float(g.sum()), float(e.sum()), int((g > e + GAP_TOL_USD).sum()))


def month_ideals(month, exact: bool = True, promise=None, true_at_promise_tps: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The month's greedy and exact ideal bills by hour (the exact is the greedy's at one rent, not solved again;
    without `exact`, the greedy stands for both). Under a promise the ideal operator keeps it: each card at its true
    rate at the promise (`true_at_promise_tps` when the caller has it), each hour's demand lifted to the slots its first
    tokens need."""
    true_month, demand = ideal_terms(month.true_rate_tps[:, month.warmup_hours :], month.demand_tps, promise,
                                     true_at_promise_tps)
    greedy = ideal_greedy_usd_by_hour(true_month, month.rent_usd_per_hour, demand)
    return greedy, ideal_exact_usd_by_hour(true_month, month.rent_usd_per_hour, demand, greedy_usd=greedy) if exact else greedy


def ideal_terms(true_rate_tps: np.ndarray, demand_tps: np.ndarray, promise=None,
                true_at_promise_tps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(each card's rate, each hour's demand) the ideal operator covers: the true rates and the demand, or under a
    promise (a `PromiseView`) each card at its true rate at the promise (`true_at_promise_tps` when the caller has it)
    and each hour's demand lifted to the slots its first tokens need. A replayed month and the service's billed
    hours take their ideal under the promise through this one rule."""
    demand = np.asarray(demand_tps).astype(np.float64)
    if promise is None:
        return true_rate_tps, demand
    rate = promise.rates_tps(true_rate_tps) if true_at_promise_tps is None else true_at_promise_tps
    return rate, promise.target_tps(demand)
