"""The month's draws: the pool with its lottery and dips, the demand, and the noisy telemetry.

Everything here is a pure function of the scenario and its seed (and, for a
demand given as a file, of the demand the shell read from it). Each card class
draws from its own random stream, and demand from another, so changing the
policy (or which class the run set rents) never changes what the month drew:
a preset and its fix see the same cards, dips, noise and demand.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from fleet.core.errors import ConfigError
from fleet.core.greedy import copy_in_tiles
from fleet.core.scenario import Demand, Scenario


@dataclass(frozen=True)
class Month:
    """A month's cards and series. Hourly arrays span `warmup_hours` of history then `hours` of the month."""

    hours: int
    warmup_hours: int
    class_names: tuple[str, ...]
    card_class: np.ndarray  # class index per card, (cards,)
    card_ids: np.ndarray  # (cards,) str
    rated_tps: np.ndarray  # (cards,)
    true_tps: np.ndarray  # the lottery ticket: rated × quality, (cards,)
    rent_usd_per_month: np.ndarray  # (cards,)
    true_rate_tps: np.ndarray | DippedRates  # true rate with dips, (cards, warmup + hours) float32 (drawn: DippedRates)
    measured_tps: np.ndarray  # telemetry, (cards, warmup + hours) float32
    demand_tps: np.ndarray  # (hours,)
    rent_hours: int | None = None  # the hours a month's rent pays for; None: `hours` (a stored month may be shorter)
    demand_history_tps: np.ndarray | None = None  # the demand of the hours before the month (a forecaster's past); None: none
    boot_hours: np.ndarray | None = None  # (cards,) hours a card takes to serve once added (its class's boot_minutes / 60)
    step_demand_tps: np.ndarray | None = None  # (hours × steps an hour,) demand at the month's finer step; None: hourly

    @property
    def n_cards(self) -> int:
        return int(self.card_class.size)

    @property
    def rent_usd_per_hour(self) -> np.ndarray:
        return self.rent_usd_per_month / (self.rent_hours or self.hours)


def stream(seed: int, label: str) -> np.random.Generator:
    """The month's random stream named `label` (a class, the demand): independent of every other stream."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(label.encode())]))


def dip_active(starts: np.ndarray, dip_hours: int) -> np.ndarray:
    """Per card-hour, whether a dip that started in the last `dip_hours` runs (bool)."""
    # A dip runs at hour t if one started in (t − dip_hours, t]: a running OR over the
    # starts, built by doubling (log2(dip_hours) passes, not dip_hours).
    active = starts.copy()
    span = 1
    while span < dip_hours:
        shift = min(span, dip_hours - span)
        active[:, shift:] |= active[:, :-shift]
        span += shift
    return active


def dip_factor(starts: np.ndarray, dip_hours: int, depth: float) -> np.ndarray:
    """Rate factor per card-hour: 1 − depth while any dip that started in the last `dip_hours` runs."""
    return np.where(dip_active(starts, dip_hours), np.float32(1.0 - depth), np.float32(1.0))


class DippedRates:
    """A drawn month's true rates, (cards, hours) float32, kept as what they are made of: each card's lottery ticket
    and, per card-hour, whether a dip runs, packed one bit a card-hour (a float array would take 32, a bool mask 8).

    The rate of a card-hour is ticket × (1 − depth) in a dip and ticket × 1 outside, the float32 product the draw
    has always made, so every value read from here is the number a float array would hold. The bits are unpacked a
    block of hours at a time where they are read. Indexing with slices gives another `DippedRates` (no rates made);
    any other index, `numpy.asarray` or `astype` gives the float32 array. `hours_major(a, b)` gives hours a..b
    hours-major, as the greedy reads them.
    """

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, ticket_tps: np.ndarray, in_dip: np.ndarray, dip_factor: float):
        in_dip = np.asarray(in_dip, dtype=bool)
        self._set(ticket_tps, np.packbits(in_dip, axis=1), 0, in_dip.shape[1], dip_factor)

    @classmethod
    def of_bits(cls, ticket_tps: np.ndarray, dip_bits: np.ndarray, first_hour: int, hours: int, dip_factor: float) -> DippedRates:
        """Rates whose dips are `dip_bits` (`numpy.packbits` of the (cards, hours) mask along hours), from bit `first_hour`."""
        rates = cls.__new__(cls)
        rates._set(ticket_tps, dip_bits, first_hour, hours, dip_factor)
        return rates

    def _set(self, ticket_tps, dip_bits, first_hour: int, hours: int, dip_factor: float) -> None:
        self.ticket_tps = np.asarray(ticket_tps, dtype=np.float32)
        self._bits = np.asarray(dip_bits, dtype=np.uint8)
        self._first = int(first_hour)
        self._hours = int(hours)
        self.dip_factor = np.float32(dip_factor)

    def _dips(self, bits: np.ndarray, a: int, b: int) -> np.ndarray:
        """The dip mask of hours a..b of these rows' `bits`, unpacked (bool, (..., b − a))."""
        s, e = self._first + a, self._first + max(a, b)
        lo, hi = s // 8, -(-e // 8)
        return np.unpackbits(bits[..., lo:hi], axis=-1)[..., s - 8 * lo : e - 8 * lo].view(bool)

    def rows(self, cards: np.ndarray) -> DippedRates:
        """These rates of the given cards, in that order (their dip bits copied, packed: no rates made)."""
        return DippedRates.of_bits(self.ticket_tps[cards], self._bits[cards], self._first, self._hours, self.dip_factor)

    def same_dips(self, other) -> bool:
        """Whether `other` reads the very dip bits these rates read, over the same hours (levels made from them, or
        from the same slice of a month's rates: a view of the same bits)."""
        if not (isinstance(other, DippedRates) and other._first == self._first and other._hours == self._hours):
            return False
        a, b = self._bits, other._bits
        return a is b or (a.shape == b.shape and a.strides == b.strides and a.ctypes.data == b.ctypes.data)

    def dip_mask(self, a: int, b: int) -> np.ndarray:
        """Whether each card dips in hours a..b, (cards, b − a) bool."""
        return self._dips(self._bits, a, b)

    def _dips_at(self, rows, cols) -> np.ndarray:
        """`in_dip[rows, cols]`, unpacking only the hours from the first column read to the last (a few hours picked
        from a month: not the month's mask)."""
        c = np.asarray(cols)
        if c.dtype.kind in "iu" and c.size and int(c.min()) >= 0 and int(c.max()) < self._hours:
            first = int(c.min())
            return self._dips(self._bits, first, int(c.max()) + 1)[rows, c - first]
        return self.in_dip[rows, cols]

    @property
    def in_dip(self) -> np.ndarray:
        """The whole (cards, hours) dip mask, unpacked (1 byte a card-hour)."""
        return self._dips(self._bits, 0, self._hours)

    @property
    def shape(self) -> tuple[int, int]:
        return (self._bits.shape[0], self._hours)

    @property
    def nbytes(self) -> int:
        return self._bits.shape[0] * self._hours * self.dtype.itemsize

    @property
    def dipped_tps(self) -> np.ndarray:
        """Each card's rate in a dip: the float32 product its dipped card-hours hold."""
        return self.ticket_tps * self.dip_factor

    def with_levels(self, level_tps: np.ndarray, dipped_tps: np.ndarray) -> DippedLevels:
        """A number each card takes at its two rates (`DippedLevels`): `level_tps` outside its dips, `dipped_tps` in
        them, over these rates' hours."""
        return DippedLevels(self, level_tps, dipped_tps)

    def _rates(self, ticket: np.ndarray, in_dip: np.ndarray) -> np.ndarray:
        return ticket * np.where(in_dip, self.dip_factor, np.float32(1.0))

    def __getitem__(self, key):
        rows, cols = (key + (slice(None),) * (2 - len(key))) if isinstance(key, tuple) else (key, slice(None))
        ticket = self.ticket_tps[rows]
        if isinstance(cols, slice) and cols.step in (None, 1):
            a, b, _ = cols.indices(self._hours)
            if isinstance(rows, slice):
                return DippedRates.of_bits(ticket, self._bits[rows], self._first + a, max(0, b - a), self.dip_factor)
            in_dip = self._dips(self._bits[rows], a, b)
        else:
            in_dip = self._dips_at(rows, cols)
        return self._rates(ticket[..., None] if np.ndim(ticket) and in_dip.ndim == np.ndim(ticket) + 1 else ticket, in_dip)

    def __array__(self, dtype=None, copy=None):
        out = self._rates(self.ticket_tps[:, None], self.in_dip)
        return out if dtype is None else out.astype(dtype)

    def astype(self, dtype, copy: bool = True) -> np.ndarray:
        return np.asarray(self, dtype=dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def cards_major(self, a: int, b: int, out: np.ndarray) -> np.ndarray:
        """Hours a..b of every card into `out`, (cards, b − a): the ticket, and in a dip the dipped ticket (the same
        float32 product, made once a card rather than once a card-hour: two thirds of the time at 100,000 cards)."""
        np.copyto(out, self.ticket_tps[:, None])
        np.copyto(out, (self.ticket_tps * self.dip_factor)[:, None], where=self._dips(self._bits, a, b))
        return out

    def hours_major(self, a: int, b: int, out: np.ndarray) -> np.ndarray:
        """Hours a..b of every card into `out`, (b − a, cards): the greedy's layout."""
        in_dip = np.empty(out.shape, dtype=bool)
        copy_in_tiles(in_dip, self._dips(self._bits, a, b).T, axis=1)
        out.fill(1.0)
        np.copyto(out, self.dip_factor, where=in_dip)
        out *= self.ticket_tps[None, :]
        return out


class DippedLevels(DippedRates):
    """A number read off a drawn month's rates card by card (each card's rate at a promise, its slots): one level
    outside its dips and one inside them, kept as the two levels and the month's dip bits (`DippedRates`'). A
    function of the rate alone takes one of two values a card, so it is worked out twice a card, not once a
    card-hour, and read a block of hours at a time as the rates are. Any dtype (the levels'); no dip factor."""

    def __init__(self, rates: DippedRates, level_tps: np.ndarray, dipped_tps: np.ndarray):
        self._set(level_tps, rates._bits, rates._first, rates._hours, np.nan)
        self.ticket_tps = np.asarray(level_tps)  # the level outside a dip, in its own dtype
        self._dipped = np.asarray(dipped_tps, dtype=self.ticket_tps.dtype)
        self.dtype = self.ticket_tps.dtype

    def _like(self, rows, first: int, hours: int, bits: np.ndarray) -> DippedLevels:
        out = DippedLevels.__new__(DippedLevels)
        out._set(self.ticket_tps[rows], bits, first, hours, np.nan)
        out.ticket_tps, out._dipped, out.dtype = self.ticket_tps[rows], self._dipped[rows], self.dtype
        return out

    @property
    def dipped_tps(self) -> np.ndarray:
        return self._dipped

    def rows(self, cards: np.ndarray) -> DippedLevels:
        return self._like(cards, self._first, self._hours, self._bits[cards])

    def __getitem__(self, key):
        rows, cols = (key + (slice(None),) * (2 - len(key))) if isinstance(key, tuple) else (key, slice(None))
        if isinstance(cols, slice) and cols.step in (None, 1):
            a, b, _ = cols.indices(self._hours)
            if isinstance(rows, slice):
                return self._like(rows, self._first + a, max(0, b - a), self._bits[rows])
            in_dip = self._dips(self._bits[rows], a, b)
        else:
            in_dip = self._dips_at(rows, cols)
        level, dipped = self.ticket_tps[rows], self._dipped[rows]
        if np.ndim(level) and in_dip.ndim == np.ndim(level) + 1:
            level, dipped = level[..., None], dipped[..., None]
        return np.where(in_dip, dipped, level)

    def __array__(self, dtype=None, copy=None):
        out = self.cards_major(0, self._hours, np.empty(self.shape, dtype=self.dtype))
        return out if dtype is None else out.astype(dtype)

    def cards_major(self, a: int, b: int, out: np.ndarray) -> np.ndarray:
        np.copyto(out, self.ticket_tps[:, None])
        np.copyto(out, self._dipped[:, None], where=self._dips(self._bits, a, b))
        return out

    def hours_major(self, a: int, b: int, out: np.ndarray) -> np.ndarray:
        in_dip = np.empty(out.shape, dtype=bool)
        copy_in_tiles(in_dip, self._dips(self._bits, a, b).T, axis=1)
        np.copyto(out, self.ticket_tps[None, :])
        np.copyto(out, self._dipped[None, :], where=in_dip)
        return out


def demand_series(demand: Demand, hours: int, rng: np.random.Generator, file_tps: np.ndarray | None = None) -> np.ndarray:
    """Hourly demand of the month in tokens/s with the scenario's average and shape; `file_tps` is a `file` demand as the
    shell read it. The structure on top of the shape (noise, drift, weekends, bursts) is `draw_demand`'s."""
    return draw_demand(demand, hours, 0, rng, None, file_tps)[1]


def draw_demand(demand: Demand, hours: int, history_hours: int, rng: np.random.Generator,
                seed: int | None = None, file_tps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The demand's history (`history_hours` before the month) and the month's hourly demand, in tokens/s.

    `rng` is the demand's own stream: the month's jitter is drawn from it first, exactly as the seed's model did, so a
    demand without structure draws the very numbers it always drew. The history's jitter and the structure come from
    streams of their own (by `seed`), and the whole series is scaled so that the month averages `avg_tps`. A `file`
    demand is a real trace: the month as read, and no history.
    """
    if demand.shape == "file":
        if file_tps is None:
            raise ConfigError(f"demand file {demand.file!r}: not read (the shell reads it and passes the series)")
        if len(file_tps) < hours:
            raise ConfigError(f"demand file {demand.file!r}: {len(file_tps)} rows, the month needs {hours}")
        return np.empty(0), np.asarray(file_tps[:hours], dtype=np.float64)
    shape, past = _shape(demand, hours, history_hours)
    if demand.jitter > 0:
        shape = shape * np.clip(1.0 + demand.jitter * rng.standard_normal(hours), 0.0, None)
    if demand.jitter > 0 and history_hours:
        past = past * np.clip(1.0 + demand.jitter * stream(seed or 0, "demand:history").standard_normal(history_hours), 0.0, None)
    if demand.structured:
        lift = demand_structure(demand, history_hours, hours, stream(seed or 0, "demand:structure"))
        past, shape = past * lift[:history_hours], shape * lift[history_hours:]
    scale = demand.avg_tps / shape.mean()
    return past * scale, demand.avg_tps * shape / shape.mean()


def _shape(demand: Demand, hours: int, history_hours: int) -> tuple[np.ndarray, np.ndarray]:
    """The shape over the month's hours and over its history's (the daily bump fitted to the month, carried back)."""
    if demand.shape != "diurnal":
        return np.ones(hours), np.ones(history_hours)
    h = np.arange(hours, dtype=np.float64)
    month = diurnal_shape(h, demand.peak_to_avg, demand.peak_hour)
    if not history_hours:
        return month, np.ones(0)
    # exp(k (cos − 1)) has its peak 1 at the peak hour; its log at the trough gives k back.
    trough = float(month.min())
    k = -np.log(trough) / 2.0 if trough < 1.0 else 0.0
    hp = np.arange(-history_hours, 0, dtype=np.float64)
    return month, np.exp(k * (np.cos(2 * np.pi * (hp - demand.peak_hour) / 24.0) - 1.0))


def demand_structure(demand: Demand, history_hours: int, hours: int, rng: np.random.Generator) -> np.ndarray:
    """The factor real traffic puts on the shape, per hour from `-history_hours` to `hours`: persistent AR(1) noise in
    log-demand, a daily level that drifts as a random walk (linear between mid-days, so no step at midnight),
    weekends, and bursts. Month hour 0 is a Monday at midnight. Every part draws in a fixed order from `rng`."""
    from scipy.signal import lfilter

    n = history_hours + hours
    t = np.arange(-history_hours, hours, dtype=np.float64)
    log_lift = np.zeros(n)
    eps = rng.standard_normal(n)
    if demand.noise > 0:
        phi = float(np.exp(-1.0 / demand.noise_hours))
        x0 = demand.noise * eps[0]
        rest = lfilter([demand.noise * np.sqrt(1.0 - phi * phi)], [1.0, -phi], eps[1:], zi=[phi * x0])[0]
        log_lift += np.concatenate([[x0], rest]) - demand.noise**2 / 2
    day = np.floor(t / 24.0).astype(np.int64)
    first_day, days = int(day[0]) if n else 0, int(day[-1] - day[0]) + 1 if n else 0
    steps = rng.standard_normal(days + 1)
    if demand.day_to_day > 0 and days:
        level = np.concatenate([[0.0], np.cumsum(demand.day_to_day * steps[:days])])  # per day, and the day after
        mid = (np.arange(days + 1) + first_day) * 24.0 + 12.0
        log_lift += np.interp(t, mid, level)
    if demand.weekend_factor != 1.0:
        log_lift += np.where(np.mod(day, 7) >= 5, np.log(demand.weekend_factor), 0.0)
    starts = rng.random(n) < demand.burst_prob_per_hour
    if starts.any():
        burst = dip_factor(starts[None, :], demand.burst_hours, 1.0 - demand.burst_mult)[0]
        log_lift += np.log(burst.astype(np.float64))
    return np.exp(log_lift)


def diurnal_shape(h: np.ndarray, peak_to_avg: float, peak_hour: float) -> np.ndarray:
    """A daily bump (von Mises in the hour of day) whose peak over its mean is `peak_to_avg`."""
    phase = np.cos(2 * np.pi * (h - peak_hour) / 24.0)
    if peak_to_avg <= 1.0 + 1e-9:
        return np.ones_like(h)

    def ratio(k: float) -> float:
        f = np.exp(k * (phase - 1.0))
        return float(f.max() / f.mean())

    hi = 1.0
    while ratio(hi) < peak_to_avg and hi < 500:
        hi *= 2
    if ratio(hi) < peak_to_avg:
        raise ConfigError(f"demand.peak_to_avg {peak_to_avg} is more than a daily bump can give")
    k = brentq(lambda k: ratio(k) - peak_to_avg, 1e-9, hi, xtol=1e-12)
    return np.exp(k * (phase - 1.0))


_DRAW_BLOCK_CELLS = 1 << 21
"""Card-hours drawn at once: the month is drawn in blocks of cards straight into its arrays."""


def draw_month(scenario: Scenario, demand_file_tps: np.ndarray | None = None) -> Month:
    """Draw the pool, dips, telemetry and demand of one month from the scenario's seed."""
    total = scenario.warmup_hours + scenario.hours
    n_all = sum(cc.pool_cards for cc in scenario.classes)
    dip_bits = np.empty((n_all, -(-total // 8)), dtype=np.uint8)  # one bit a card-hour: a dip runs
    tickets = np.empty(n_all, dtype=np.float32)
    measured = np.empty((n_all, total), dtype=np.float32)
    dip_f32 = np.float32(1.0 - scenario.dips.depth)
    block = max(1, _DRAW_BLOCK_CELLS // max(total, 1))
    cls_idx, ids, rated, true, rent = [], [], [], [], []
    first = 0
    for i, cc in enumerate(scenario.classes):
        rng = stream(scenario.seed, f"class:{cc.name}")
        n = cc.pool_cards
        quality = rng.lognormal(scenario.lottery.mean, scenario.lottery.sigma, n) if scenario.lottery.sigma > 0 else np.full(n, np.exp(scenario.lottery.mean))
        ticket = cc.rated_tps * quality
        ticket_f32 = ticket.astype(np.float32)[:, None]
        # The class's stream gives every dip start of the class, then every noise draw:
        # drawing them block by block in that order gives the same numbers as one draw.
        uniform = np.empty((min(block, n), total), dtype=np.float32)
        for a in range(0, n, block):
            b = min(n, a + block)
            u = uniform[: b - a]
            rng.random(dtype=np.float32, out=u)
            starts = u < scenario.dips.start_prob_per_hour
            dip_bits[first + a : first + b] = np.packbits(dip_active(starts, scenario.dips.hours), axis=1)
        del uniform
        tickets[first : first + n] = ticket_f32[:, 0]
        for a in range(0, n, block):
            b = min(n, a + block)
            noise = measured[first + a : first + b]
            rng.standard_normal(dtype=np.float32, out=noise)
            noise *= np.float32(scenario.telemetry.hour_noise)
            noise += np.float32(1.0)
            np.maximum(noise, 0.0, out=noise)
            in_dip = np.unpackbits(dip_bits[first + a : first + b], axis=1, count=total).view(bool)
            noise *= ticket_f32[a:b] * np.where(in_dip, dip_f32, np.float32(1.0))
        cls_idx.append(np.full(n, i, dtype=np.int32))
        ids.append(np.array([f"{cc.name}-{j:05d}" for j in range(n)], dtype=object))
        rated.append(np.full(n, cc.rated_tps))
        true.append(ticket)
        rent.append(np.full(n, cc.rent_usd_per_month))
        first += n
    per_hour = 60 // scenario.step_minutes
    steps_tps = None
    if demand_file_tps is not None and per_hour > 1:
        # The file read at the month's step: each hour's demand is the mean of its steps.
        steps_tps = np.asarray(demand_file_tps, dtype=np.float64)[: scenario.hours * per_hour]
        demand_file_tps = steps_tps.reshape(-1, per_hour).mean(axis=1) if steps_tps.size == scenario.hours * per_hour else steps_tps
    history, demand = draw_demand(scenario.demand, scenario.hours, scenario.warmup_hours, stream(scenario.seed, "demand"),
                                  scenario.seed, demand_file_tps)
    if scenario.fine and steps_tps is None:
        steps_tps = np.repeat(demand, per_hour)  # a drawn demand has no structure within the hour
    boot = np.concatenate([np.full(cc.pool_cards, cc.boot_minutes / 60.0) for cc in scenario.classes])
    return Month(
        hours=scenario.hours,
        warmup_hours=scenario.warmup_hours,
        class_names=tuple(c.name for c in scenario.classes),
        card_class=np.concatenate(cls_idx),
        card_ids=np.concatenate(ids),
        rated_tps=np.concatenate(rated),
        true_tps=np.concatenate(true),
        rent_usd_per_month=np.concatenate(rent),
        true_rate_tps=DippedRates.of_bits(tickets, dip_bits, 0, total, dip_f32),
        measured_tps=measured,
        demand_tps=demand,
        demand_history_tps=history,
        boot_hours=boot if boot.any() else None,
        step_demand_tps=steps_tps if scenario.fine else None,
    )
