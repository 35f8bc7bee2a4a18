"""A promise to the users (`[slo]`): a stream-speed floor and a first-token wait at a percentile, and how much of what
a run set delivered kept it (goodput).

Throughput is the operator's number and latency the user's. A card serves a fluid of tokens at its rated batch,
but a user sees one token a step, and the step grows with the batch (`fleet.core.serving`). Under a promise each
card of the run set can carry only the batch whose streams keep the floor: its rate at the promise. An hour's
tokens are within the promise when

- its stream speed held: the run set's rate at the promise carries them (a router that keeps every card at its
  promised batch serves what is beyond it at a larger batch, slower than the floor: delivered, not good);
- and its first tokens came in time: the run set's slots at the promise (each card's promised batch) are one queue
  behind the same router, which queues a request only where it is expected to start within `ttft_ms` (less the
  prefill) and sends the rest to a larger batch (`fleet.core.queueing.admitted_in_time_share_many`).

So an hour's goodput is `min(delivered, rate at the promise)` where its first tokens keep the promise at its
percentile, else the demand of the requests that started on a promised slot in time. No `[slo]`: the fluid's figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from fleet.core.queueing import admitted_in_time_share_many, slots_for_wait_many, wait_at_percentile_many_s
from fleet.core.run_set_sums import run_set_sums
from fleet.core.serving import UNLIMITED_BATCH, StepCurve, over_chunks, prefill_s, rates_at_floor_tps
from fleet.core.tables import Strict


class Slo(Strict):
    """The promise: every stream at least `stream_tps` (a TPOT ceiling of 1 / stream_tps), and the first token within
    `ttft_ms` for `percentile` of requests. Either may be left out."""

    stream_tps: float | None = Field(default=None, gt=0, le=100_000)
    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    percentile: float = Field(default=0.99, gt=0, lt=1)


def describe_slo(slo: Slo) -> str:
    """The promise in words: "30 tok/s a stream, first token within 2000 ms at p99"."""
    parts = []
    if slo.stream_tps is not None:
        parts.append(f"{slo.stream_tps:g} tok/s a stream")
    if slo.ttft_ms is not None:
        parts.append(f"first token within {slo.ttft_ms:g} ms at p{slo.percentile * 100:g}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ClassServing:
    """What the promise needs of one card class: its curve, its rated rate (to read a card's speed from its rate),
    and its prefill for the mean prompt."""

    curve: StepCurve
    rated_tps: float
    rated_batch: int
    prefill_s: float


@dataclass(frozen=True)
class RequestShape:
    """Demand as requests: the mean output and prompt tokens of one."""

    output_tokens: float
    prompt_tokens: float = 0.0


@dataclass(frozen=True)
class PromiseFigures:
    """An hour-by-hour reading of the promise over a run of hours."""

    goodput_tps: np.ndarray  # (hours,) tokens/s served within the promise
    rate_at_promise_tps: np.ndarray  # (hours,) the run set's true rate at the promise
    slots: np.ndarray  # (hours,) streams the run set decodes at the promise
    ttft_s: np.ndarray  # (hours,) the first-token wait at the percentile (inf: the slots cannot carry the requests)
    ttft_ok_share: np.ndarray  # (hours,) share of requests whose first token came within ttft_ms


def class_servings(classes, shape: RequestShape | None) -> list[ClassServing | None]:
    """Each market class's serving, in the market's order (None for a class with no `[classes.serving]`)."""
    out: list[ClassServing | None] = []
    for c in classes:
        s = c.serving
        if s is None:
            out.append(None)
            continue
        prefill = prefill_s(s.params_b, shape.prompt_tokens, s.effective_tflops) if (
            shape is not None and s.params_b is not None) else 0.0
        out.append(ClassServing(s.curve, float(c.rated_tps), int(s.batch), prefill))
    return out


def card_rates_at_promise(true_rate_tps: np.ndarray, card_class: np.ndarray, servings: list[ClassServing | None],
                          stream_floor_tps: float | None, with_slots: bool = True, dtype=np.float64
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """Each card's rate at the promise and its slots (None unless `with_slots`), (cards, hours) each, from its true
    rate (its speed is its rate over its class's rated rate: the lottery and the dips scale the step). No floor: the
    rated batch's rate and batch. The rates are worked in float64 and kept as `dtype`."""
    rate = np.asarray(true_rate_tps)
    card_class = np.asarray(card_class)
    one = [k for k, sv in enumerate(servings) if sv is not None and card_class.size and (card_class == k).all()]
    if one and stream_floor_tps is not None:  # one class: no rows to pick, no copies
        sv = servings[one[0]]
        rated = sv.rated_tps
        out = rates_at_floor_tps(sv.curve, stream_floor_tps, rated, rate, dtype)
        return out, over_chunks(lambda r: sv.curve.batch_at_floor(stream_floor_tps, r / rated), rate) if with_slots else None
    out_rate = np.zeros(rate.shape, dtype=dtype)
    out_slots = np.zeros(rate.shape) if with_slots else None
    for k, sv in enumerate(servings):
        if sv is None:
            continue
        every = bool(card_class.size) and bool((card_class == k).all())
        rows = slice(None) if every else np.flatnonzero(card_class == k)
        if not every and rows.size == 0:
            continue
        if stream_floor_tps is None:
            out_rate[rows] = rate[rows]
            if with_slots:
                out_slots[rows] = sv.rated_batch
            continue
        curve, rated = sv.curve, sv.rated_tps
        out_rate[rows] = rates_at_floor_tps(curve, stream_floor_tps, rated, rate[rows])
        if with_slots:
            out_slots[rows] = over_chunks(lambda r: curve.batch_at_floor(stream_floor_tps, r / rated), rate[rows])
    return out_rate, out_slots


def promise_figures(warm: np.ndarray, rate_at_promise: np.ndarray, slots: np.ndarray, delivered_tps: np.ndarray,
                    demand_tps: np.ndarray, slo: Slo, shape: RequestShape | None, prefill: float) -> PromiseFigures:
    """The promise read hour by hour over a run set (`warm`, (cards, hours) bool) from its cards' rates and slots at
    the promise: goodput, the first-token wait at the percentile and the share of requests within it."""
    warm = np.asarray(warm, dtype=bool)
    return run_set_promise((rate_at_promise * warm).sum(axis=0), (slots * warm).sum(axis=0), delivered_tps,
                           demand_tps, slo, shape, prefill)


def run_set_promise(rate_h: np.ndarray, slots_h: np.ndarray, delivered_tps: np.ndarray, demand_tps: np.ndarray,
                    slo: Slo, shape: RequestShape | None, prefill: float) -> PromiseFigures:
    """The promise read period by period (hours, or the finer clock's steps) from the run set's rate and slots at
    it: what `promise_figures` reads once it has summed the warm cards."""
    rate_h, slots_h = np.asarray(rate_h, dtype=np.float64), np.asarray(slots_h, dtype=np.float64)
    delivered = np.asarray(delivered_tps, dtype=np.float64)
    stream_ok = np.minimum(delivered, rate_h) if slo.stream_tps is not None else delivered
    hours = rate_h.shape[0]
    ttft = np.zeros(hours)
    ok = np.ones(hours)
    good = stream_ok
    if slo.ttft_ms is not None and shape is not None:
        demand = np.asarray(demand_tps, dtype=np.float64)
        ttft[:] = prefill
        live = demand > 0
        dead = live & ((slots_h < 1) | (rate_h <= 0))
        ttft[dead], ok[dead] = np.inf, 0.0
        run = live & ~dead
        if run.any():
            # A slot holds a request for its output at the stream speed the promised batch gives (the run set's
            # rate at the promise over its slots), so the slots' load is the share of that rate the demand asks.
            c = np.floor(slots_h[run])
            service_s = shape.output_tokens * slots_h[run] / rate_h[run]
            arrival = demand[run] / shape.output_tokens
            ttft[run] = wait_at_percentile_many_s(c, arrival, service_s, slo.percentile) + prefill
            ok[run] = admitted_in_time_share_many(c, arrival * service_s, service_s, slo.ttft_ms / 1000.0 - prefill)
        # The requests that started on a promised slot in time are the hour's tokens within the promise (the router
        # sends the rest to a larger batch: delivered, not good); an hour whose first tokens keep the promise at its
        # percentile kept it for all its tokens (the tail the percentile allows is part of the promise).
        good = np.where(ok >= slo.percentile - 1e-12, stream_ok, np.minimum(delivered, demand * ok))
    return PromiseFigures(good, rate_h, slots_h, ttft, ok)


def request_shape(demand) -> RequestShape | None:
    """The scenario's demand as requests, when its `[demand]` gives their sizes."""
    if demand.output_tokens_per_request is None:
        return None
    return RequestShape(float(demand.output_tokens_per_request), float(demand.prompt_tokens_per_request or 0.0))


def _dipped_at_promise(rates, card_class: np.ndarray, servings: list[ClassServing | None],
                      stream_floor_tps: float | None, with_slots: bool = True):
    """`card_rates_at_promise` of a drawn month's rates (`DippedRates`): a card's rate is its ticket or its dipped
    rate, so its rate and slots at the promise take two values a card, worked out once each (the same numbers,
    element for element) and kept beside the dip bits (`DippedLevels`)."""
    both = np.stack([rates.ticket_tps, rates.dipped_tps], axis=1)  # (cards, 2): the two rates a card-hour holds
    rate, slots = card_rates_at_promise(both, card_class, servings, stream_floor_tps, with_slots)
    return (rates.with_levels(rate[:, 0], rate[:, 1]),
            None if slots is None else rates.with_levels(slots[:, 0], slots[:, 1]))


def true_at_promise(s, month) -> tuple[np.ndarray, np.ndarray]:
    """Each card's true rate at the promise and its slots over the month's hours, (cards, hours) each: what the
    ideal and the verdict under the promise both read (a replay works them out once). A drawn month's are kept as
    two levels a card (`DippedLevels`), made into arrays where they are read."""
    view = promise_view(s, month.class_names, month.card_class)
    W = month.warmup_hours
    true = month.true_rate_tps[:, W:W + month.hours]
    if hasattr(true, "with_levels"):
        return _dipped_at_promise(true, month.card_class, list(view.servings), s.slo.stream_tps)
    return card_rates_at_promise(np.asarray(true), month.card_class, list(view.servings), s.slo.stream_tps)


def month_promise(s, month, warm: np.ndarray, delivered_tps: np.ndarray, demand_tps: np.ndarray,
                  at_promise: tuple[np.ndarray, np.ndarray] | None = None,
                  sums: tuple[np.ndarray, np.ndarray] | None = None) -> PromiseFigures:
    """The promise read over a replayed month: each warm card at its true rate (lottery and dips) on its class's
    curve (`true_at_promise`, unless given). The prefill is the slowest rented class's, so a mixed run set is not
    flattered. `sums`: the run sets' summed rate and slots at the promise, when the caller has them (`run_set_sums`'
    numbers, summed beside the bill)."""
    view = promise_view(s, month.class_names, month.card_class)
    # The promise reads a run set through its rate and slots at the promise each hour: summed a block of hours
    # at a time and handed over as one row, the run set's own totals.
    if sums is None:
        rate, slots = true_at_promise(s, month) if at_promise is None else at_promise
        sums = run_set_sums(warm, rate, slots)
    rate_h, slots_h = sums
    whole = np.ones((1, rate_h.size), dtype=bool)
    return promise_figures(whole, rate_h[None, :], slots_h[None, :], delivered_tps, demand_tps, s.slo, view.shape,
                           view.prefill_s)


def promise_month_figures(s, p: PromiseFigures, delivered_tps: np.ndarray, demand_tps: np.ndarray) -> dict:
    """The verdict's figures of the promise: goodput beside delivered, the share within the promise, and the
    first-token wait at the percentile."""
    from fleet.core.goodput import goodput_totals  # the rule the service's billed hours read too
    finite = p.ttft_s[np.isfinite(p.ttft_s)]
    return {
        "slo_stream_tps": s.slo.stream_tps,
        "slo_ttft_ms": s.slo.ttft_ms,
        "slo_percentile": s.slo.percentile,
        **goodput_totals(p.goodput_tps, delivered_tps, demand_tps),
        "rate_at_promise_avg_tps": float(p.rate_at_promise_tps.mean()) if p.rate_at_promise_tps.size else 0.0,
        "ttft_worst_s": float(p.ttft_s.max()) if p.ttft_s.size else 0.0,
        "ttft_median_s": float(np.median(finite)) if finite.size else float("inf"),
        "ttft_missed_hours": int((p.ttft_ok_share < s.slo.percentile - 1e-12).sum()) if s.slo.ttft_ms is not None else 0,
        "slow_hours": int((p.goodput_tps < np.asarray(delivered_tps) * (1 - 1e-9) - 1e-6).sum()),
    }


def check_promise(slo: Slo, rented_classes, demand, needs_requests: bool = True) -> None:
    """A promise the pool can be judged by: every rented class has a curve, one stream of each meets the floor, and
    (`needs_requests`) a first-token promise knows its requests' size. Raises ValueError (the schema's one-line
    error) otherwise."""
    for c in rented_classes:
        if c.serving is None:
            raise ValueError(f"slo: class {c.name!r} gives rated_tps alone; a promise needs its [classes.serving] curve")
        if slo.stream_tps is not None and int(c.serving.curve.batch_at_floor(slo.stream_tps)) < 1:
            one = float(c.serving.curve.stream_tps(1))
            raise ValueError(f"slo.stream_tps {slo.stream_tps:g}: no card of class {c.name!r} meets it even at batch 1 "
                             f"({one:.1f} tok/s a stream)")
    if needs_requests and slo.ttft_ms is not None and demand.output_tokens_per_request is None:
        raise ValueError("slo.ttft_ms: the first-token wait needs demand.output_tokens_per_request (demand as requests)")
    shape = None if slo.ttft_ms is None else request_shape(demand)
    for c in rented_classes if shape is not None else ():
        sv = c.serving
        took_s = 0.0 if sv.params_b is None else prefill_s(sv.params_b, shape.prompt_tokens, sv.effective_tflops)
        if took_s > slo.ttft_ms / 1000.0:  # no wait left for a slot: no run set keeps it, however large
            raise ValueError(f"slo.ttft_ms {slo.ttft_ms:g}: a prompt's prefill alone takes {took_s * 1000:.0f} ms on "
                             f"class {c.name!r} (2 x {sv.params_b:g} B parameters x {shape.prompt_tokens:g} prompt "
                             f"tokens over {sv.effective_tflops:g} TFLOPS)")


def slot_speed_tps(servings: list[ClassServing | None], rented: list[int], stream_floor_tps: float | None) -> float:
    """The stream speed one slot gives at the promise, the slowest rented class's (at its class's own speed): what a
    request's decode takes at the promised batch, for the slots a first-token percentile needs."""
    speeds = []
    for k in rented:
        sv = servings[k]
        if sv is None:
            continue
        b = int(sv.curve.batch_at_floor(stream_floor_tps)) if stream_floor_tps is not None else sv.rated_batch
        speeds.append(float(sv.curve.stream_tps(max(b, 1))))
    return min(speeds) if speeds else 0.0


def target_for_first_token_tps(sizing_tps: np.ndarray, slo: Slo, shape: RequestShape | None, slot_tps: float,
                               prefill: float) -> np.ndarray:
    """What each hour must be sized for so its first tokens keep the promise: enough slots that the wait at the
    percentile plus the prefill fits `ttft_ms` (`slots_for_wait`), as tokens/s at one slot's speed; never less than
    the demand sized for. A promise with no first-token part, or no request size, asks nothing more."""
    sizing = np.asarray(sizing_tps, dtype=np.float64)
    if slo.ttft_ms is None or shape is None or slot_tps <= 0:
        return sizing
    wait_s = slo.ttft_ms / 1000.0 - prefill
    if wait_s < 0:
        return np.full(sizing.shape, np.inf)  # the prefill alone misses the promise: no run set keeps it
    service_s = shape.output_tokens / slot_tps
    live = np.isfinite(sizing) & (sizing > 0)
    out = sizing.copy()
    if live.any():
        slots = slots_for_wait_many(sizing[live] / shape.output_tokens, service_s, wait_s, slo.percentile)
        out[live] = np.maximum(sizing[live], slots * slot_tps)
    return out


@dataclass(frozen=True)
class PromiseView:
    """A pool's promise as sizing reads it: each card's rate at the promise from its score or its true rate, and the
    target each hour's first tokens ask for. Built once a month (`promise_view`); replay, the service and the ideal
    operator read the same one."""

    slo: Slo
    servings: tuple[ClassServing | None, ...]
    card_class: np.ndarray  # (cards,) class index in the market's order
    shape: RequestShape | None
    slot_tps: float
    prefill_s: float

    def rates_tps(self, rate_tps: np.ndarray) -> np.ndarray:
        """Cards' rates (scores or true rates, (cards, hours)) at the promise: what each can carry keeping it."""
        if hasattr(rate_tps, "with_levels"):  # a drawn month's true rates: two levels a card
            level, _ = _dipped_at_promise(rate_tps, self.card_class, list(self.servings), self.slo.stream_tps, False)
            return rate_tps.with_levels(level.ticket_tps.astype(rate_tps.dtype), level.dipped_tps.astype(rate_tps.dtype))
        rate_tps = np.asarray(rate_tps)
        return card_rates_at_promise(rate_tps, self.card_class, list(self.servings), self.slo.stream_tps,
                                     with_slots=False, dtype=rate_tps.dtype)[0]

    def describe(self) -> str:
        """The promise in words, for reasons (`describe_slo`)."""
        return describe_slo(self.slo)

    def target_tps(self, sizing_tps: np.ndarray) -> np.ndarray:
        """Each hour's demand to size for, lifted to the slots its first tokens need."""
        return target_for_first_token_tps(sizing_tps, self.slo, self.shape, self.slot_tps, self.prefill_s)


def promise_view(s, class_names, card_class: np.ndarray) -> PromiseView | None:
    """The scenario's promise as sizing reads it (None without `[slo]`)."""
    if s.slo is None:
        return None
    shape = request_shape(s.demand)
    servings = class_servings(s.classes, shape)
    rented = [list(class_names).index(c) for c in s.policy.run_classes(class_names)]
    prefill = max((servings[k].prefill_s for k in rented if servings[k] is not None), default=0.0)
    return PromiseView(s.slo, tuple(servings), np.asarray(card_class), shape,
                       slot_speed_tps(servings, rented, s.slo.stream_tps), prefill)


def sizing_promise(s, class_names, card_class: np.ndarray) -> PromiseView | None:
    """The promise a policy sizes to: the pool's, unless the policy sizes to throughput alone (`size_to`)."""
    if s.slo is None or s.policy.size_to != "promise":
        return None
    return promise_view(s, class_names, card_class)


def promise_key(s, class_names) -> tuple | None:
    """What a month's ideal under the promise depends on beyond the month (None: no promise): policies with one key
    share one ideal."""
    if s.slo is None:
        return None
    return (s.slo.stream_tps, s.slo.ttft_ms, s.slo.percentile, request_shape(s.demand),
            tuple(s.policy.run_classes(class_names)))


@dataclass(frozen=True)
class CardSteps:
    """Each card's decode step as one `StepCurve` of (cards,) arrays, and the batch each serves at the promise (the
    largest that keeps the floor; with no floor, its class's rated batch): what a run set's stream speed and its
    first token's slots are read from."""

    curve: StepCurve
    batch: np.ndarray  # (cards,) streams at the promise (0: none keeps it, or no curve)


def card_steps(view: PromiseView, rate_tps: np.ndarray, own_alpha_s: np.ndarray | None = None,
               own_beta_s: np.ndarray | None = None) -> CardSteps:
    """Each card's step: its own fitted one where known (`own_alpha_s`, `own_beta_s`, NaN: none), else its class's
    curve slowed to its rate (speed = rate over the class's rated rate, as the promise reads a score). A card with
    neither has no step (its rate and batch at the promise are 0)."""
    rate = np.asarray(rate_tps, dtype=np.float64).reshape(-1)
    n = rate.size
    alpha, beta = np.full(n, np.inf), np.zeros(n)
    max_batch = np.full(n, UNLIMITED_BATCH, dtype=np.int64)
    rated_batch = np.zeros(n, dtype=np.int64)
    for k, sv in enumerate(view.servings):
        if sv is None:
            continue
        rows = np.asarray(view.card_class) == k
        speed = rate[rows] / sv.rated_tps
        with np.errstate(divide="ignore"):
            alpha[rows] = np.where(speed > 0, sv.curve.alpha_s / speed, np.inf)
            beta[rows] = np.where(speed > 0, sv.curve.beta_s / speed, 0.0)
        max_batch[rows], rated_batch[rows] = sv.curve.max_batch, sv.rated_batch
    if own_alpha_s is not None and own_beta_s is not None:
        own = np.isfinite(own_alpha_s) & np.isfinite(own_beta_s) & (np.asarray(own_alpha_s) > 0)
        alpha, beta = np.where(own, own_alpha_s, alpha), np.where(own, own_beta_s, beta)
    curve = StepCurve(alpha, beta, max_batch)
    has = np.isfinite(alpha)
    if view.slo.stream_tps is None:
        batch = np.where(has, rated_batch, 0)
    else:
        with np.errstate(invalid="ignore"):
            batch = np.where(has, curve.batch_at_floor(view.slo.stream_tps), 0)
    return CardSteps(curve, batch.astype(np.int64))


@dataclass(frozen=True)
class PoolAtPromise:
    """What a run set is expected to give its users at an hour's demand."""

    rate_at_promise_tps: float  # the run set's rate at the promise
    stream_tps: float  # the slowest stream: each card at the share of the demand its rate at the promise carries
    ttft_s: float | None  # the wait at the percentile (inf: beyond the slots; None: no such promise or no demand)


def pool_at_promise(view: PromiseView, steps: CardSteps, rate_at_promise_tps: np.ndarray, warm: np.ndarray,
                    demand_tps: float) -> PoolAtPromise:
    """A run set's expected stream speed and first-token wait at `demand_tps`, each warm card carrying the share of
    the demand its rate at the promise is of the run set's (a router keeping every card at one share of its promised
    batch): a card's batch is where its step's aggregate meets its share, its stream one over that step. With the
    demand within the run set's rate at the promise every stream keeps the floor. The first-token wait is the
    promise's queue over the run set's slots (`promise_figures`)."""
    warm = np.asarray(warm, dtype=bool).reshape(-1)
    rate = np.where(warm, np.asarray(rate_at_promise_tps, dtype=np.float64).reshape(-1), 0.0)
    total = float(rate.sum())
    demand = max(float(demand_tps), 0.0)
    if not np.isfinite(demand):  # a cold start sized to the pool: no demand seen to read the figures at
        return PoolAtPromise(total, float("nan"), None)
    carries = warm & (rate > 0)
    if not carries.any():
        stream = float("nan") if demand == 0 else 0.0
    else:
        load = demand * rate[carries] / total
        a, b = steps.curve.alpha_s[carries], steps.curve.beta_s[carries]
        free = 1.0 - b * load  # the step at a load is alpha / (1 - beta x load): aggregate batch / step meets it
        cap = np.broadcast_to(np.asarray(steps.curve.max_batch, dtype=np.float64), warm.shape)[carries]
        with np.errstate(divide="ignore", invalid="ignore"):
            batch = np.where(free > 0, load * a / free, np.inf)
        batch = np.minimum(batch, cap)
        stream = float((1.0 / (a + b * batch)).min())
    ttft = None
    if view.slo.ttft_ms is not None and view.shape is not None:
        slots = np.where(warm, steps.batch, 0).astype(np.float64)
        got = promise_figures(warm[:, None], rate[:, None], slots[:, None], np.array([min(demand, total)]),
                              np.array([demand]), view.slo, view.shape, view.prefill_s)
        ttft = float(got.ttft_s[0])
    return PoolAtPromise(total, stream, ttft)
