"""Real traffic within the hour: steps finer than the hour, a queue that carries over, and the reactive loop.

The plan (`fleet.core.step.step`: forecast, greedy, eviction) decides each hour's run set at the hour. Within the
hour the pool lives at the month's `step_minutes`:

- each step's demand arrives, and the warm cards that have booted serve it at their true rate;
- tokens not served wait, oldest first, and are served before the step's new ones when capacity frees; a token that
  would wait longer than `max_wait_s` is abandoned and lost. With no queue, a step's unserved tokens are lost;
- after each step the reactive loop (`react`) reads what a serving stack measures (the step's demand and the
  backlog) and adds cards when they say the plan is short; a card added serves from the next step after its boot;
- a card the loop added stays warm at least `cooldown_minutes`; after that, the plan's next hour releases it unless
  the plan keeps it. The loop never removes a card.

The step model's waits are whole steps: a token served in the step it arrived in waits no step (the wait within a
step is the latency model's, `fleet.core.queueing`); one served k steps later waited k steps. A queue therefore
carries tokens over only when `max_wait_s` is at least one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.scenario import Reactive

_BLOCK_HOURS = 24
"""Hours of true rates read at once (a day of a 10,000-card month is 2 MB)."""


@dataclass(frozen=True)
class ReactiveAdd:
    """A card the reactive loop added, with the step it was decided at and why."""

    step: int  # the month's step (hour × steps an hour + step within the hour)
    card: int
    score_tps: float
    tokens_per_usd: float
    observed_tps: float  # the step's demand the loop read
    backlog_tps: float  # the backlog it read, over the step's seconds
    headroom: float
    scored_tps: float  # the warm cards' scored capacity before the add
    need_tps: float | None = None  # what the loop asked: under a promise, the demand lifted to its first-token slots

    @property
    def reason(self) -> str:
        """Said when asked (the journal, `explain`): a month adds thousands, most never read."""
        plain = self.observed_tps * self.headroom + self.backlog_tps
        need = plain if self.need_tps is None else self.need_tps
        slots = (f", lifted to {need:.0f} tok/s for the first tokens' slots" if need > plain + 0.5 else "")
        return (f"reactive: step demand {self.observed_tps:.0f} tok/s × {self.headroom:g} headroom"
                + (f" + backlog {self.backlog_tps:.0f} tok/s to clear within a step" if self.backlog_tps > 0 else "")
                + f" = {plain:.0f} tok/s{slots}, above the scored capacity {self.scored_tps:.0f} tok/s")


def reactive_need_tps(observed_tps, backlog_tps: float, settings: Reactive, target=None):
    """What the loop asks the warm cards to cover: the step's demand × its headroom, plus the backlog to clear
    within one step (its tokens over the step's seconds). Given every step's demand at once, every step's need.
    Under a promise (`target`: the plan's own lift, `PromiseView.target_tps`) the demand is lifted to the slots its
    first tokens need, as the plan sizes each hour."""
    need = np.asarray(observed_tps, dtype=np.float64) * settings.headroom
    if target is not None:
        need = np.asarray(target(np.atleast_1d(need)), dtype=np.float64).reshape(need.shape)
    need = need + float(backlog_tps)
    return need if need.ndim else float(need)


def react(observed_tps: float, backlog_tps: float, warm: np.ndarray, spares: np.ndarray, score_tps: np.ndarray,
          tokens_per_usd: np.ndarray, settings: Reactive, adds_left: int, step: int, target=None
          ) -> tuple[ReactiveAdd, ...]:
    """The reactive loop's decision after a step: the spares to add, best tokens per dollar first.

    The need is `reactive_need_tps`; the scored capacity of the warm cards (booting ones included: they were added
    for this) is what covers it. `spares` are the cards the loop may add, best first; at most
    `adds_left` are taken. Scale-up only. Under a promise, `target` lifts the demand (`reactive_need_tps`).
    """
    scored_tps = float(np.asarray(score_tps, dtype=np.float64)[warm].sum())
    picked = reactive_picks(observed_tps, backlog_tps, scored_tps, warm, spares, score_tps, settings, adds_left, target)
    need = float(reactive_need_tps(observed_tps, backlog_tps, settings, target))
    seen = (float(observed_tps), float(backlog_tps), float(settings.headroom), float(scored_tps), need)
    return tuple(ReactiveAdd(int(step), int(c), float(score_tps[c]), float(tokens_per_usd[c]), *seen) for c in picked)


def reactive_picks(observed_tps: float, backlog_tps: float, scored_tps: float, warm: np.ndarray, spares: np.ndarray,
                   score_tps: np.ndarray, settings: Reactive, adds_left: int, target=None) -> np.ndarray:
    """`react`'s cards, as indices: a month's walk keeps these and says the adds when asked."""
    need = reactive_need_tps(observed_tps, backlog_tps, settings, target)
    if adds_left <= 0 or need <= scored_tps + 1e-6:
        return spares[:0]
    free = spares[~warm[spares]]
    return free[:cards_to_cover(free, np.asarray(score_tps, dtype=np.float64), need - scored_tps, adds_left)]


def cards_to_cover(free: np.ndarray, score_tps: np.ndarray, short_tps: float, adds_left: int) -> int:
    """How many of the free spares (best first) the loop adds: the fewest whose scores, summed in that order, cover
    `short_tps` (all of them when none do), at most `adds_left`. The loop adds a few cards at a time: the running sum
    stops at the last one it takes."""
    last = min(free.size, adds_left)
    total = 0.0
    for i, c in enumerate(free[:last].tolist()):
        total += float(score_tps[c])
        if total >= short_tps - 1e-6:
            return i + 1
    return last


@dataclass(frozen=True)
class TrafficInput:
    """A month's plan and truth at the finer clock. Hourly arrays are the month's hours (no warm-up)."""

    plan_warm: np.ndarray  # (cards, hours) bool: the plan's run set of each hour
    true_rate_tps: object  # (cards, warmup + hours): true rates (an array or `DippedRates`), constant within an hour
    warmup_hours: int
    rent_usd_per_hour: np.ndarray  # (cards,)
    step_demand_tps: np.ndarray  # (hours × steps an hour,) the demand of each step
    step_minutes: int
    billing_minutes: int  # the market's billing period: a card warm in any part of one pays all of it
    boot_steps: np.ndarray | None = None  # (cards,) whole steps a card takes to serve once added
    max_wait_s: float | None = None  # None: no queue, a step's unserved tokens are lost
    reactive: Reactive | None = None
    score_tps: np.ndarray | None = None  # (cards, hours) the plan's scores: the loop's view of each card
    eligible: np.ndarray | None = None  # (cards, hours) bool: the cards the loop may add (run classes, not evicted)
    stop_lost_share: float | None = None  # stop walking once more than this share of demand is lost (pass or fail);
    # such a walk is read for its loss alone: the loop's rent (`reactive_usd`) is left at 0
    promise_rate_tps: np.ndarray | None = None  # (cards, hours) under a promise: each card's true rate at it
    promise_slots: np.ndarray | None = None  # (cards, hours) and the streams it decodes at it
    need_target: object = None  # under a promise the plan sizes to: its lift of demand to first-token slots


@dataclass(frozen=True)
class Traffic:
    """A month at the finer clock: tokens served on time, late and lost, the waits, the loop's adds and the bill."""

    demand_tokens: float
    served_tokens: float
    served_late_tokens: float
    lost_tokens: float
    late_by_steps: np.ndarray  # (K + 1,) tokens served k steps after they arrived, k = 0..K
    step_s: float
    drain_steps_max: int  # the longest run of steps ending with a backlog
    add_log: tuple  # (step, cards, observed_tps, backlog_tps, scored_tps, score_tps, tokens_per_usd, need_tps) of each react
    headroom: float  # the loop's headroom (its adds' reasons say it)
    reactive_usd: float  # rent of the loop's cards in billing periods the plan did not pay for
    capacity_step_tps: np.ndarray  # (steps,) true capacity serving each step
    lost_step_tokens: np.ndarray  # (steps,) tokens abandoned or dropped in each step
    stopped: bool = False  # the walk stopped early, past `stop_lost_share`: every figure is partial but the loss
    fresh_step_tokens: np.ndarray | None = None  # (steps,) under a promise: tokens served in the step they arrived in
    reactive_usd_hour: np.ndarray | None = None  # (hours,) `reactive_usd` by the hour it was billed in
    loop_cards_hour: np.ndarray | None = None  # (hours,) the loop's cards warm beyond the plan in each (any part of it)
    backlog_hour_end_tokens: np.ndarray | None = None  # (hours,) tokens still waiting as each hour ends (0 at the last)
    promise_rate_step_tps: np.ndarray | None = None  # (steps,) the serving cards' true rate at the promise
    promise_slots_step: np.ndarray | None = None  # (steps,) and their streams at it

    @property
    def adds(self) -> tuple[ReactiveAdd, ...]:
        """The loop's adds, each with its reason: built when asked (a month adds thousands, most never read)."""
        return tuple(ReactiveAdd(t, int(c), float(score[c]), float(tpd[c]), seen, backlog, self.headroom, scored, need)
                     for t, cards, seen, backlog, scored, score, tpd, need in self.add_log for c in cards)

    @property
    def reactive_adds(self) -> int:
        return sum(len(entry[1]) for entry in self.add_log)

    def wait_s(self, q: float) -> float:
        """The wait at quantile `q` of the tokens served late (0: none was)."""
        late = self.late_by_steps[1:]
        if late.sum() <= 0:
            return 0.0
        cum = np.cumsum(late) / late.sum()
        return float((int(np.searchsorted(cum, q - 1e-12)) + 1) * self.step_s)


def boot_steps_of(boot_hours: np.ndarray | None, n: int, step_minutes: int) -> np.ndarray:
    """Each card's boot in whole steps (a boot of part of a step takes the step)."""
    if boot_hours is None:
        return np.zeros(n, dtype=np.int64)
    return np.ceil(np.asarray(boot_hours, dtype=np.float64) * 60.0 / step_minutes - 1e-9).astype(np.int64)


class _Queue:
    """Tokens waiting, by the step they arrived in, oldest first: served first, abandoned past the patience."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps  # steps a token may wait and still be served
        self.cohorts: list[list[float]] = []  # [arrival step, tokens]
        self.tokens = 0.0  # the cohorts' sum, kept as they change

    @classmethod
    def of(cls, max_wait_s: float | None, step_s: float) -> tuple[_Queue | None, np.ndarray]:
        """The queue for a patience (None: none, or one under a step: nothing carries over) and the tokens served
        by steps waited (0..the patience in steps)."""
        steps = -1 if max_wait_s is None else int(math.floor(max_wait_s / step_s + 1e-9))
        return (cls(steps) if steps >= 1 else None), np.zeros(max(steps, 0) + 1)

    def add(self, step: int, tokens: float) -> None:
        self.cohorts.append([step, tokens])
        self.tokens += tokens

    def abandon(self, step: int) -> float:
        """Drop the cohorts that would wait longer than the patience if served at `step`; their tokens."""
        lost = 0.0
        while self.cohorts and step - self.cohorts[0][0] > self.max_steps:
            lost += self.cohorts.pop(0)[1]
        self.tokens = self.tokens - lost if self.cohorts else 0.0
        return lost

    def serve(self, step: int, capacity_tokens: float, late: np.ndarray) -> float:
        """Serve the oldest first from `capacity_tokens`; count each cohort's tokens in `late` by steps waited."""
        left = capacity_tokens
        while self.cohorts and left > 0:
            a, tokens = self.cohorts[0]
            take = min(tokens, left)
            late[step - int(a)] += take
            left -= take
            if take >= tokens:
                self.cohorts.pop(0)
            else:
                self.cohorts[0][1] = tokens - take
            self.tokens -= take
        if not self.cohorts:
            self.tokens = 0.0
        return left


def _serve(queue: _Queue | None, t: int, arrive_tokens: float, capacity_tokens: float, late: np.ndarray) -> float:
    """One step: the backlog first (past its patience: abandoned), then the step's own; the tokens lost in it."""
    lost = 0.0
    left = capacity_tokens
    if queue is not None:
        lost += queue.abandon(t)
        left = queue.serve(t, left, late)
    served = min(arrive_tokens, left)
    late[0] += served
    unserved = arrive_tokens - served
    if unserved > 0:
        if queue is not None:
            queue.add(t, unserved)
        else:
            lost += unserved
    return lost


def _hour_capacity(rates: np.ndarray, warm: np.ndarray, ready: np.ndarray, first: int, per_hour: int,
                   ready_by: int | None = None) -> tuple[float, list[float]]:
    """The hour's true capacity at its first step, and what each of its steps gains as warm cards finish booting.
    `ready_by`: a step by which every warm card is known to serve (the caller's shortcut past the masks)."""
    if ready_by is not None and ready_by <= first:  # no card can still be booting: all warm cards serve
        return float(np.add.reduce(rates[warm])), [0.0] * per_hour
    serving = warm & (ready <= first)
    cap = float(rates[serving].sum())
    gain = np.zeros(per_hour)
    booting = np.flatnonzero(warm & ~serving & (ready < first + per_hour))
    if booting.size:
        np.add.at(gain, ready[booting] - first, rates[booting])
    return cap, gain.tolist()


def ranked_spares(tokens_per_usd: np.ndarray, eligible: np.ndarray | None) -> np.ndarray:
    """The cards the loop may add this hour, best tokens per dollar first."""
    order, count = ranked_spares_by_hour(np.asarray(tokens_per_usd)[:, None], None if eligible is None else
                                         np.asarray(eligible, dtype=bool)[:, None])
    return order[: count[0], 0]


def ranked_spares_by_hour(tokens_per_usd: np.ndarray, eligible: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """`ranked_spares` of each hour of (cards, hours) at once: each column's cards, the eligible best tokens per
    dollar first (ties to the lower index), and how many of them are eligible."""
    if eligible is None:
        order = np.argsort(-tokens_per_usd, axis=0, kind="stable")
        return order, np.full(tokens_per_usd.shape[1], tokens_per_usd.shape[0])
    return np.lexsort((-tokens_per_usd, ~eligible), axis=0), eligible.sum(axis=0)


class _Cards:
    """Which cards are warm within the hour, from when each serves, and which the loop holds until when."""

    def __init__(self, n: int, boot_steps: np.ndarray | None, cooldown_steps: int):
        self.boot = boot_steps if boot_steps is not None else np.zeros(n, dtype=np.int64)
        self.cooldown_steps = cooldown_steps
        self.held = np.zeros(n, dtype=bool)  # warm because the loop added them
        self.held_until = np.zeros(n, dtype=np.int64)  # the step the plan may release each from
        self.ready = np.zeros(n, dtype=np.int64)  # the step each warm card serves from
        self.warm = np.zeros(n, dtype=bool)
        self.ready_by = 0  # every warm card serves from this step on
        self.holding = False  # whether the loop holds any card
        self.boots = bool(self.boot.any())  # with no boot, every warm card serves from the step it is warm in

    def start_hour(self, plan: np.ndarray, eligible: np.ndarray | None, first: int) -> None:
        """The plan's hour begins: it releases what the loop's cool-down no longer holds; joining cards boot."""
        if self.holding:
            self.held &= (self.held_until > first) | plan  # released: cooled down and not in the plan
            if eligible is not None:
                self.held &= eligible  # an evicted card leaves, whoever added it
            self.holding = bool(self.held.any())
        now = plan | self.held if self.holding else plan.copy()
        if not self.boots:
            self.warm = now
            return
        joined = now > self.warm  # warm now, not before
        if joined.any():
            self.ready[joined] = first + self.boot[joined]
            self.ready_by = max(self.ready_by, first + int(self.boot[joined].max()))
        self.warm = now

    def add(self, c: int, t: int) -> int:
        """The loop adds card `c` after step `t`; the step it serves from."""
        self.warm[c] = self.held[c] = self.holding = True
        self.held_until[c] = t + 1 + self.cooldown_steps
        ready = t + 1 + int(self.boot[c])
        self.ready[c] = ready
        self.ready_by = max(self.ready_by, ready)
        return ready


class _PromiseSums:
    """Under a promise, the serving cards' rate and slots at it step by step (the same cards, boots and adds as the
    true capacity), and the tokens each step served of its own arrivals."""

    def __init__(self, inp: TrafficInput, steps: int):
        self.rate_tps, self.slots = inp.promise_rate_tps, inp.promise_slots
        self.fresh, self.rate_step, self.slots_step = np.zeros(steps), np.zeros(steps), np.zeros(steps)

    @classmethod
    def of(cls, inp: TrafficInput, steps: int) -> "_PromiseSums | _NoPromise":
        return _NoPromise() if inp.promise_rate_tps is None else cls(inp, steps)

    def start_hour(self, h: int, warm: np.ndarray, cards: "_Cards", first: int, per_hour: int) -> None:
        self.first = first
        self.rate_h = np.asarray(self.rate_tps[:, h], dtype=np.float64)
        self.slots_h = np.asarray(self.slots[:, h], dtype=np.float64)
        self.rate, self.rate_gain = _hour_capacity(self.rate_h, warm, cards.ready, first, per_hour, cards.ready_by)
        self.slot, self.slot_gain = _hour_capacity(self.slots_h, warm, cards.ready, first, per_hour, cards.ready_by)

    def serve(self, queue, t: int, arrive_tokens: float, capacity_tokens: float, late: list) -> float:
        """`_serve`, keeping the step's sums at the promise and the tokens it served of its own arrivals."""
        own_before = late[0]
        lost = _serve(queue, t, arrive_tokens, capacity_tokens, late)
        self.rate += self.rate_gain[t - self.first]
        self.slot += self.slot_gain[t - self.first]
        self.fresh[t], self.rate_step[t], self.slots_step[t] = float(late[0] - own_before), self.rate, self.slot
        return lost

    def add(self, card: int, serves_from: int) -> None:
        self.rate_gain[serves_from] += float(self.rate_h[card])
        self.slot_gain[serves_from] += float(self.slots_h[card])

    def figures(self) -> dict:
        return {"fresh_step_tokens": self.fresh, "promise_rate_step_tps": self.rate_step,
                "promise_slots_step": self.slots_step}


class _NoPromise:
    """No promise: the step is served and nothing more is kept."""

    def start_hour(self, *_) -> None:
        pass

    serve = staticmethod(_serve)

    def add(self, *_) -> None:
        pass

    def figures(self) -> dict:
        return {}


class _BlockSpares:
    """A block of hours' scores, and each hour's spares ranked by tokens per dollar once the loop first needs them."""

    def __init__(self, inp: TrafficInput, rent: np.ndarray, h: int, b: int):
        self.scores = np.asarray(inp.score_tps[:, h:b], dtype=np.float64)
        self.eligible = None if inp.eligible is None else np.asarray(inp.eligible[:, h:b], dtype=bool)
        self.rent, self.ranked = rent, None

    def free(self, k: int, warm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The block's hour `k`: its spares not warm, best first, and every card's tokens per dollar."""
        if self.ranked is None:
            self.tpd = tokens_per_dollar(self.scores, self.rent)
            self.ranked = ranked_spares_by_hour(self.tpd, self.eligible)
        spares = self.ranked[0][: self.ranked[1][k], k]
        return spares[~warm[spares]], self.tpd[:, k]


def _loop_rent(rent: np.ndarray, held: np.ndarray, full_periods: int, short_usd: float,
               period_usd: float) -> tuple[float, int]:
    """The loop's rent of an hour and its cards: those warm beyond the plan (`held`) pay every billing period of the
    hour, whole, less the periods this hour's adds were not yet warm in (`short_usd`)."""
    return (float(np.add.reduce(rent[held])) * full_periods - short_usd) * period_usd, int(np.count_nonzero(held))


def _month_end(queue: _Queue | None, stopped: bool, lost: list, backlog_end: np.ndarray) -> np.ndarray:
    """Each step's lost tokens: those still waiting when the month ends were not served within it (lost in its last
    step, and no backlog left at the last hour's end)."""
    lost = np.asarray(lost)
    if queue is not None and not stopped:
        lost[-1] += queue.tokens
        backlog_end[-1] = 0.0
    return lost


def run_traffic(inp: TrafficInput) -> Traffic:
    """Walk the month step by step: serve, queue, abandon, react, and bill the loop's cards."""
    warm_plan = np.asarray(inp.plan_warm, dtype=bool)
    n, hours = warm_plan.shape
    per_hour, step_s = 60 // inp.step_minutes, inp.step_minutes * 60.0
    demand = np.asarray(inp.step_demand_tps, dtype=np.float64)[: hours * per_hour]
    queue, late_steps = _Queue.of(inp.max_wait_s, step_s)
    late = late_steps.tolist()  # plain floats while walking, an array once walked
    rent, settings = np.asarray(inp.rent_usd_per_hour, dtype=np.float64), inp.reactive
    period = inp.billing_minutes // inp.step_minutes  # steps a billing period
    full_periods = (per_hour - 1) // period + 1  # billing periods an hour
    period_usd = period * inp.step_minutes / 60.0  # a period's rent over an hour's
    cards = _Cards(n, inp.boot_steps, 0 if settings is None else -(-settings.cooldown_minutes // inp.step_minutes))
    steps_tps = demand.tolist()  # read one step at a time: plain floats
    if settings is not None:  # with no queue nothing waits: what the loop asks of each step is known before the walk
        need_tps = reactive_need_tps(demand, 0.0, settings, inp.need_target).tolist()
    capacity, lost, adds = [0.0] * (hours * per_hour), [0.0] * (hours * per_hour), []
    loop_usd, loop_cards, backlog_end = np.zeros(hours), np.zeros(hours, np.int64), np.zeros(hours)  # by the hour
    run, drain_max, backlog, reactive_usd = 0, 0, 0.0, 0.0  # with no queue nothing waits
    rates_block, lost_so_far, stopped = None, 0.0, False
    promise = _PromiseSums.of(inp, hours * per_hour)
    bills = inp.stop_lost_share is None  # a walk told to stop reads the loss alone: the loop's rent is not summed
    stop_tokens = math.inf if inp.stop_lost_share is None else (inp.stop_lost_share + 1e-12) * float(demand.sum()) * step_s
    for h in range(hours):
        if h % _BLOCK_HOURS == 0:
            b = min(hours, h + _BLOCK_HOURS)
            rates_block = np.asarray(inp.true_rate_tps[:, inp.warmup_hours + h: inp.warmup_hours + b], dtype=np.float64)
            spares_block = None if settings is None else _BlockSpares(inp, rent, h, b)
        rates, first = rates_block[:, h % _BLOCK_HOURS], h * per_hour
        cards.start_hour(warm_plan[:, h], None if inp.eligible is None else inp.eligible[:, h], first)
        warm = cards.warm
        short_usd = 0.0  # the periods this hour's adds were not yet warm in, not billed
        cap, gain_tps = _hour_capacity(rates, warm, cards.ready, first, per_hour, cards.ready_by)
        promise.start_hour(h, warm, cards, first, per_hour)
        if settings is not None:
            score = spares_block.scores[:, h % _BLOCK_HOURS]
            scored = float(np.add.reduce(score[warm]))
            free = None  # the spares not warm, best first: ranked when the loop first needs them this hour
            adds_left = settings.max_adds_per_hour
        for j in range(per_hour):
            t, cap = first + j, cap + gain_tps[j]
            capacity[t] = cap
            lost[t] = promise.serve(queue, t, steps_tps[t] * step_s, cap * step_s, late)
            if queue is not None:
                backlog = queue.tokens
                run = run + 1 if backlog > 1e-6 else 0
                drain_max = max(drain_max, run)
            if settings is None or adds_left <= 0:
                continue
            need = need_tps[t] if queue is None else reactive_need_tps(steps_tps[t], backlog / step_s, settings, inp.need_target)
            if need <= scored + 1e-6:
                continue
            if free is None:  # the loop's picks (`reactive_picks`), the hour's ranking kept: it adds the best free first
                free, tpd = spares_block.free(h % _BLOCK_HOURS, warm)
            got = free[:cards_to_cover(free, score, need - scored, adds_left)]
            free = free[got.size:]
            if got.size:
                adds.append((t, got, steps_tps[t], backlog / step_s, scored, score, tpd, need))
            for c in got.tolist():
                serves_from = cards.add(c, t) - first
                short_usd += rent[c] * ((j + 1) // period if j + 1 < per_hour else full_periods)
                scored += score[c]
                if serves_from < per_hour:
                    gain_tps[serves_from] += float(rates[c])
                    promise.add(c, serves_from)
            adds_left -= got.size
        lost_so_far += sum(lost[first: first + per_hour])
        backlog_end[h] = backlog
        stopped = lost_so_far > stop_tokens
        if stopped:
            break
        if cards.holding and bills:  # only the loop's cards are warm outside the plan: every period of the hour, whole
            loop_usd[h], loop_cards[h] = _loop_rent(rent, warm > warm_plan[:, h], full_periods, short_usd, period_usd)
            reactive_usd += float(loop_usd[h])
    capacity, lost, late = np.asarray(capacity), _month_end(queue, stopped, lost, backlog_end), np.asarray(late)
    return Traffic(demand_tokens=float(demand.sum() * step_s), served_tokens=float(late.sum()), served_late_tokens=float(late[1:].sum()),
                   lost_tokens=float(lost.sum()), late_by_steps=late, step_s=step_s, drain_steps_max=drain_max, add_log=tuple(adds),
                   headroom=0.0 if settings is None else float(settings.headroom), reactive_usd=reactive_usd,
                   capacity_step_tps=capacity, lost_step_tokens=lost, stopped=stopped, reactive_usd_hour=loop_usd,
                   loop_cards_hour=loop_cards, backlog_hour_end_tokens=backlog_end, **promise.figures())
