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
    """`slots_for_wait` for many arrival rates at once (a month's hours), by the same gallop and bisection run on
    every rate together: the fewest slots whose wait at `percentile` is at most `wait_s` (0 where no load)."""
    arrival = np.asarray(arrival_rate_per_s, dtype=np.float64)
    load = arrival * float(service_s)
    live = load > 0
    lo = np.floor(load)
    step = np.maximum(1.0, np.floor(np.sqrt(load)))
    hi = lo + step
    late = live.copy()
    while late.any():
        over = wait_at_percentile_many_s(hi[late], arrival[late], service_s, percentile) > wait_s
        idx = np.flatnonzero(late)
        moved = idx[over]
        lo[moved], step[moved] = hi[moved], step[moved] * 2
        hi[moved] = lo[moved] + step[moved]
        late[idx[~over]] = False
    while True:
        gap = live & (hi - lo > 1)
        if not gap.any():
            break
        idx = np.flatnonzero(gap)
        mid = np.floor((lo[idx] + hi[idx]) / 2)
        over = wait_at_percentile_many_s(mid, arrival[idx], service_s, percentile) > wait_s
        lo[idx[over]] = mid[over]
        hi[idx[~over]] = mid[~over]
    return np.where(live, hi, 0.0).astype(np.int64)
