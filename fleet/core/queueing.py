"""The wait for a batch slot before the first token: the run set's slots as one M/M/c queue (Erlang C).

The model, stated once: requests arrive at random (a Poisson stream of `arrival_rate_per_s`); the run set offers
`slots` streams in all (each card's batch at the promise, summed); a request holds a slot for its decode, whose
length is exponential with mean `service_s` (its output tokens at the promised stream speed); a request that finds
every slot busy waits in one first-come queue. Then the probability of waiting is Erlang's C formula, and the wait
of a request that waits is exponential with rate `(slots − offered load) / service_s`, so

    P(wait > t) = C(slots, load) × exp(−(slots − load) × t / service_s)

and the wait at a percentile is the `t` where that falls to `1 − percentile` (zero when fewer than that share wait at
all). The first token then comes a prefill later. The formula's square-root law is what makes a small pool need
proportionally more spare slots than a large one for the same percentile. `tests/core/test_queueing.py` holds it to a
discrete-event simulation of the same slots.

Real engines break the textbook in known ways (a step shared by prefill and decode, output lengths that are not
exponential, chunked prefill); the docs page "Throughput and latency" says which ones move the figure and how.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, pdtr, xlogy
from scipy.stats import poisson


def erlang_c(slots: int, load: float) -> float:
    """The probability that an arrival finds every slot busy, at `load` = arrival rate × mean service (in slots).

    Computed from Erlang B as Poisson pmf over cdf (scipy's, in logs): stable at tens of thousands of slots, where the
    textbook sum of powers and factorials overflows. 1.0 when the load fills every slot (the queue grows without end).
    """
    if load <= 0:
        return 0.0
    if load >= slots:
        return 1.0
    b = math.exp(poisson.logpmf(slots, load) - poisson.logcdf(slots, load))  # Erlang B
    return slots * b / (slots - load * (1.0 - b))


def wait_at_percentile_s(slots: int, arrival_rate_per_s: float, service_s: float, percentile: float = 0.99) -> float:
    """The wait for a slot at `percentile` (inf when the slots cannot carry the load)."""
    load = arrival_rate_per_s * service_s
    if load <= 0:
        return 0.0
    if load >= slots:
        return math.inf
    c = erlang_c(slots, load)
    tail = 1.0 - percentile
    if c <= tail:
        return 0.0
    return math.log(c / tail) * service_s / (slots - load)


def slots_for_wait(arrival_rate_per_s: float, service_s: float, wait_s: float, percentile: float = 0.99) -> int:
    """The fewest slots whose wait at `percentile` is at most `wait_s`: the load itself plus the spare the
    percentile asks for (found by galloping up from the load, then bisecting; the wait falls as slots rise)."""
    load = arrival_rate_per_s * service_s
    if load <= 0:
        return 0
    lo = int(math.floor(load))  # never enough: it cannot carry the load
    step = max(1, int(math.sqrt(load)))
    hi = lo + step
    while wait_at_percentile_s(hi, arrival_rate_per_s, service_s, percentile) > wait_s:
        lo, step = hi, step * 2
        hi = lo + step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wait_at_percentile_s(mid, arrival_rate_per_s, service_s, percentile) > wait_s:
            lo = mid
        else:
            hi = mid
    return hi


def simulated_waits_s(slots: int, arrival_rate_per_s: float, service_s: float, requests: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Each request's wait for a slot in a discrete-event run of the model above (first come, first served): the
    check the formula is held to. Exponential gaps between arrivals and exponential service, drawn from `rng`."""
    import heapq

    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, requests))
    services = rng.exponential(service_s, requests)
    free = [0.0] * slots  # when each slot frees, as a heap
    waits = np.empty(requests)
    for i, (t, s) in enumerate(zip(arrivals.tolist(), services.tolist())):
        first_free = free[0]
        start = t if first_free <= t else first_free
        waits[i] = start - t
        heapq.heapreplace(free, start + s)
    return waits


def erlang_c_many(slots: np.ndarray, load: np.ndarray) -> np.ndarray:
    """`erlang_c` over arrays of slots and loads at once (a month's hours): the same formula, one scipy call."""
    slots = np.asarray(slots, dtype=np.float64)
    load = np.asarray(load, dtype=np.float64)
    out = np.where(load >= slots, 1.0, 0.0)
    inside = (load > 0) & (load < slots)
    if inside.any():
        c, a = slots[inside], load[inside]
        b = np.exp(_poisson_logpmf(c, a) - _poisson_logcdf(c, a))
        out[inside] = c * b / (c - a * (1.0 - b))
    return out


def _poisson_logpmf(k: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """`scipy.stats.poisson.logpmf` at whole `k` >= 0 and `mu` > 0 (as `erlang_c_many` calls it), by its own formula:
    the same numbers without the distribution's argument checks, which cost more than the arithmetic at a month's
    hours. Any other `k` goes to scipy."""
    if not (np.all(k >= 0) and np.all(k == np.floor(k))):
        return poisson.logpmf(k, mu)
    return xlogy(k, mu) - gammaln(k + 1) - mu


def _poisson_logcdf(k: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """`scipy.stats.poisson.logcdf` at `k` >= 0 and `mu` > 0, by its own formula (`_poisson_logpmf` says why)."""
    if not np.all(k >= 0):
        return poisson.logcdf(k, mu)
    with np.errstate(divide="ignore"):
        return np.log(pdtr(np.floor(k), mu))


def wait_at_percentile_many_s(slots: np.ndarray, arrival_rate_per_s: np.ndarray, service_s: np.ndarray,
                              percentile: float = 0.99) -> np.ndarray:
    """`wait_at_percentile_s` over arrays (inf where the slots cannot carry the load, 0 where no load)."""
    slots = np.asarray(slots, dtype=np.float64)
    service = np.broadcast_to(np.asarray(service_s, dtype=np.float64), slots.shape)
    load = np.asarray(arrival_rate_per_s, dtype=np.float64) * service
    c = erlang_c_many(slots, load)
    tail = 1.0 - percentile
    out = np.zeros(slots.shape)
    out[load >= slots] = np.inf
    waits = (load > 0) & (load < slots) & (c > tail)
    out[waits] = np.log(c[waits] / tail) * service[waits] / (slots[waits] - load[waits])
    return out


def slots_for_wait_many(arrival_rate_per_s: np.ndarray, service_s: float, wait_s: float,
                        percentile: float = 0.99) -> np.ndarray:
    """`slots_for_wait` for many arrival rates at once (a month's hours): the fewest slots whose wait at `percentile`
    is at most `wait_s` (0 where no load).

    The wait falls as slots rise, so the fewest is the one slot count where it crosses `wait_s`, whichever way it is
    searched; the search starts near it. The spare over the load grows about as its square root, so a few hours spread
    over the loads are solved first (`_slots_by_gallop`, as `slots_for_wait` searches) and every hour starts from its
    load plus the spare their ratio to the square root gives at its load; from there a short gallop brackets the
    crossing and a bisection finds it. Most hours are within a slot or two of their start: a few evaluations of the
    wait over the month, where searching up from the load takes about twice as many.
    """
    arrival = np.asarray(arrival_rate_per_s, dtype=np.float64)
    load = arrival * float(service_s)
    live = load > 0
    out = np.zeros(arrival.shape, dtype=np.int64)
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return out
    a, lam = load[idx], arrival[idx]
    if idx.size <= _SAMPLED_HOURS:
        out[idx] = _slots_by_gallop(lam, a, service_s, wait_s, percentile)
        return out
    order = np.argsort(a, kind="stable")
    picks = order[np.unique(np.linspace(0, a.size - 1, _SAMPLED_HOURS).round().astype(np.int64))]
    solved = _slots_by_gallop(lam[picks], a[picks], service_s, wait_s, percentile)
    ratio = (solved - a[picks]) / np.sqrt(a[picks])  # spare over the square root of the load, by increasing load
    floor_a = np.floor(a)
    guess = np.maximum(floor_a + 1, np.floor(a + np.interp(a, a[picks], ratio) * np.sqrt(a)))
    enough = _enough(guess, lam, service_s, wait_s, percentile)
    # lo: a count known short (the load's floor carries nothing); hi: one known enough (inf: not found yet).
    lo = np.where(enough, floor_a, guess)
    hi = np.where(enough, guess, np.inf)
    step = np.ones(a.size)
    open_ = np.ones(a.size, dtype=bool)  # still galloping away from the start
    while open_.any():
        j = np.flatnonzero(open_)
        down = np.isfinite(hi[j])
        t = np.where(down, hi[j] - step[j], lo[j] + step[j])
        t = np.where(down, np.maximum(t, lo[j]), t)
        probe = t > lo[j]
        ok = np.zeros(j.size, dtype=bool)
        if probe.any():
            ok[probe] = _enough(t[probe], lam[j[probe]], service_s, wait_s, percentile)
        hi[j[ok]] = t[ok]
        lo[j[probe & ~ok]] = t[probe & ~ok]
        # Down: bracketed once a probe falls short (or reaches the known short count). Up: once one is enough.
        done = np.where(down, ~probe | ~ok, ok)
        step[j] *= 2
        open_[j[done]] = False
    while True:
        gap = np.flatnonzero(hi - lo > 1)
        if gap.size == 0:
            break
        mid = np.floor((lo[gap] + hi[gap]) / 2)
        over = ~_enough(mid, lam[gap], service_s, wait_s, percentile)
        lo[gap[over]] = mid[over]
        hi[gap[~over]] = mid[~over]
    out[idx] = hi.astype(np.int64)
    return out


_SAMPLED_HOURS = 16
"""Hours solved first by `slots_for_wait_many`, spread over the loads, to start every other hour near its answer."""


def _slots_by_gallop(arrival: np.ndarray, load: np.ndarray, service_s: float, wait_s: float,
                     percentile: float) -> np.ndarray:
    """The fewest slots for each of a few loaded hours, searched as `slots_for_wait` does: galloping up from the
    load, then bisecting."""
    lo = np.floor(load)
    step = np.maximum(1.0, np.floor(np.sqrt(load)))
    hi = lo + step
    late = np.ones(load.size, dtype=bool)
    while late.any():
        over = ~_enough(hi[late], arrival[late], service_s, wait_s, percentile)
        idx = np.flatnonzero(late)
        moved = idx[over]
        lo[moved], step[moved] = hi[moved], step[moved] * 2
        hi[moved] = lo[moved] + step[moved]
        late[idx[~over]] = False
    while True:
        gap = hi - lo > 1
        if not gap.any():
            break
        idx = np.flatnonzero(gap)
        mid = np.floor((lo[idx] + hi[idx]) / 2)
        over = ~_enough(mid, arrival[idx], service_s, wait_s, percentile)
        lo[idx[over]] = mid[over]
        hi[idx[~over]] = mid[~over]
    return hi


def _enough(slots: np.ndarray, arrival_rate_per_s: np.ndarray, service_s: float, wait_s: float,
            percentile: float) -> np.ndarray:
    """Whether each slot count's wait at `percentile` is at most `wait_s`: `wait_at_percentile_many_s`'s numbers, for
    counts above their load (all a search for slots probes), without its cases for the others."""
    load = arrival_rate_per_s * float(service_s)
    b = np.exp(_poisson_logpmf(slots, load) - _poisson_logcdf(slots, load))  # Erlang B
    c = slots * b / (slots - load * (1.0 - b))  # Erlang C, as `erlang_c_many`
    tail = 1.0 - percentile
    with np.errstate(divide="ignore"):
        wait = np.where(c > tail, np.log(c / tail) * float(service_s) / (slots - load), 0.0)
    return wait <= wait_s


def admitted_in_time_share_many(slots: np.ndarray, load: np.ndarray, service_s: np.ndarray,
                                budget_s: np.ndarray | float) -> np.ndarray:
    """The share of requests that start on a slot within `budget_s`, under a router that keeps the slots' promise.

    The router (stated once, held to `simulated_router_shares` in the tests): a request that finds a slot free
    starts at once; one that finds them all busy joins the queue when its place in it is expected to start within the
    budget (`m = ⌊budget × slots / service⌋` places: the slots free one every `service / slots` seconds), and is
    otherwise sent at once to a larger batch, whose stream misses the promise. The slots and their queue are then an
    M/M/c/K queue (K = slots + m); an arrival seeing `j` ahead in the queue starts after `j + 1` completions, in time
    with the Poisson probability `P(N(x) > j)`, `x = budget × slots / service`. Summed over the states in closed form:
    with ρ = load / slots and Erlang B's `B`,

        share = 1 − B × (1 + S − T) / (1 + B × S),   S = Σ_{j=1..m} ρ^j,   T = Σ_{j<m} ρ^j P(N(x) > j)
        T = [1 − e^{x(ρ−1)} P(N(xρ) < m) − ρ^m P(N(x) ≥ m)] / (1 − ρ)

    which holds past a full load (ρ ≥ 1: the queue stays bounded; what it cannot hold leaves for a larger batch), so
    an hour a little short of slots loses about what it is short, where a first-come queue that holds everyone would
    lose nearly the whole hour. 0 where the budget is negative (the prefill alone misses the promise), 1 with no load.
    """
    c = np.asarray(slots, dtype=np.float64)
    a = np.asarray(load, dtype=np.float64)
    s = np.broadcast_to(np.asarray(service_s, dtype=np.float64), c.shape)
    b = np.broadcast_to(np.asarray(budget_s, dtype=np.float64), c.shape)
    out = np.where(b < 0, 0.0, 1.0)
    run = (a > 0) & (c >= 1) & (b >= 0)
    if not run.any():
        return out
    c, a, s, b = c[run], a[run], s[run], b[run]
    x = b * c / s
    m = np.floor(x)
    rho = a / c
    logb = poisson.logpmf(c, a) - poisson.logcdf(c, a)  # Erlang B, in logs
    big = np.exp(logb)
    sf_m = poisson.sf(m - 1, x)  # P(N(x) >= m)
    near = np.abs(rho - 1.0) < 1e-6
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        lr = np.log(rho)
        # Scaled by u = ρ^-m where ρ > 1, so nothing overflows; u = 1 where ρ <= 1.
        up = rho > 1.0
        logu = np.where(up, -m * lr, 0.0)
        u = np.exp(logu)
        rho_m_u = np.exp(m * lr + logu)  # ρ^m × u
        sum_u = np.where(near, m * u, rho * (u - rho_m_u) / (1.0 - rho))  # S × u
        e_u = np.exp(x * (rho - 1.0) + logu + poisson.logcdf(m - 1, x * rho))  # e^{x(ρ−1)} P(N(xρ) < m) × u
        t_u = np.where(near, (x * poisson.cdf(m - 2, x) + m * sf_m) * u, (u - e_u - rho_m_u * sf_m) / (1.0 - rho))
        loss_u = u + sum_u - t_u
        share = 1.0 - big * loss_u / (u + big * sum_u)
    out[run] = np.clip(np.nan_to_num(share, nan=0.0), 0.0, 1.0)
    return out


def simulated_router_shares(slots: int, arrival_rate_per_s: float, service_s: float, budget_s: float, requests: int,
                            rng: np.random.Generator) -> float:
    """The share of requests that start on a slot within `budget_s` in a discrete-event run of the router of
    `admitted_in_time_share_many` (exponential gaps and services from `rng`): the check its closed form is held to."""
    import heapq

    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, requests))
    services = rng.exponential(service_s, requests)
    places = math.floor(budget_s * slots / service_s)
    free = [0.0] * slots  # when each slot frees, as a heap
    starts: list[float] = []  # start times of admitted requests still waiting, in order (first come, first served)
    in_time = 0
    for t, s in zip(arrivals.tolist(), services.tolist()):
        while starts and starts[0] <= t:
            starts.pop(0)
        if len(starts) >= places and free[0] > t:
            continue  # every slot busy and the queue's admitted places full: sent to a larger batch
        start = max(t, free[0])
        if start > t:
            starts.append(start)
        heapq.heapreplace(free, start + s)
        in_time += start - t <= budget_s
    return in_time / requests
