"""`fleet serve`: the scheduler, the clock and the store around the pure tick.

Five jobs run under APScheduler 3 (a BackgroundScheduler; the CLI's main thread
waits for SIGTERM):

- `ingest`: polls the telemetry source (a drop folder, a Prometheus server, or
  the simulated month) into the store through `fleet.ingest`;
- `score`: for every hour whose telemetry has settled, windowed scores of every
  card from the hourly rollups (the replay's `window_scores` over them);
- `decide`: for every scored hour, `fleet.tick.tick` on the store's state; the
  decisions are journaled with the state they leave, then acted on;
- `billing`: for every decided hour that has ended, its bill, idle cost and
  ideal bill (`fleet.core.billing.bill_hours`);
- `metrics`: refreshes the snapshot `/metrics` serves.

Each job catches up on every hour due when it runs and keeps its progress in the
store, so a missed or failed run loses nothing and a restart resumes where the
store says. Jobs run with `coalesce=True` (a stalled job runs once, not once
per missed interval), `max_instances=1` (a job never overlaps itself) and a
misfire grace of half its interval (a run later than that is skipped and
counted; the next one catches up). Misses, errors and durations are counted
through scheduler listeners.

The clock is injected: `WallClock` for a real pool, `SimClock` for `--simulate`,
which runs a preset's month as telemetry on an accelerated clock.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from fleet.core.scenario import Scenario, budget_cards
from fleet.service.journal import Actuator, Command, DryRun, Journal, Webhook
from fleet.service.config import ServiceConfig
from fleet.core.greedy import tokens_per_dollar
from fleet.core.billing import churn_fee_usd
from fleet.core.scores import windowed_scores
from fleet.core.verdict import month_totals as core_totals, wrong_evictions
from fleet.core.step import PoolState, tick
from fleet.core.billing import bill_hours
from fleet.core.verdict import checks as judge_checks
from storage.repository import ClassSpec, SqlRepository
from storage.service_store import HourFigures, JournalEntry, ServiceStore

HOUR_S = 3600
JOBS = ("ingest", "score", "decide", "billing", "metrics")
log = logging.getLogger("fleet.service.service")


# -- clocks -----------------------------------------------------------------------------


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch on this clock."""

    def wall_seconds(self, clock_seconds: float) -> float:
        """Wall seconds that `clock_seconds` of this clock take."""


class WallClock:
    """The real time."""

    def __init__(self, time_fn: Callable[[], float] = time.time):
        self._time = time_fn

    def now(self) -> float:
        return self._time()

    def wall_seconds(self, clock_seconds: float) -> float:
        return clock_seconds


class SimClock:
    """A clock that starts at `start_ts` and runs `speed` times faster than `monotonic`."""

    def __init__(self, start_ts: float, speed: float, monotonic: Callable[[], float] = time.monotonic):
        if not speed > 0:
            raise ValueError("speed must be above 0")
        self.start_ts = float(start_ts)
        self.speed = float(speed)
        self._monotonic = monotonic
        self._m0 = monotonic()

    def now(self) -> float:
        return self.start_ts + (self._monotonic() - self._m0) * self.speed

    def wall_seconds(self, clock_seconds: float) -> float:
        return clock_seconds / self.speed


# -- the simulated month ------------------------------------------------------------------


@dataclass
class Simulation:
    """A preset's month played as a pool: its telemetry is fed in as the clock passes, its truth bills the hours."""

    scenario: Scenario
    month: object  # fleet.model.Month
    start_ts: int

    @classmethod
    def of(cls, scenario: Scenario, start_ts: int, base_dir: Path | None = None) -> "Simulation":
        from fleet.core.month import draw_month

        return cls(scenario, draw_month(scenario, base_dir), int(start_ts))

    @property
    def end_ts(self) -> int:
        return self.start_ts + self.month.hours * HOUR_S

    @property
    def first_ts(self) -> int:
        return self.start_ts - self.month.warmup_hours * HOUR_S

    def classes(self) -> list[ClassSpec]:
        return [ClassSpec(c.name, c.rated_tps, c.rent_usd_per_month) for c in self.scenario.classes]

    def cards(self) -> dict[str, str]:
        m = self.month
        return {str(k): m.class_names[int(c)] for k, c in zip(m.card_ids, m.card_class)}

    def telemetry_csv(self, from_ts: int, to_ts: int) -> bytes:
        """Telemetry of the hours in [from_ts, to_ts): one sample per card and hour, its measured rate, as CSV."""
        m = self.month
        a = (from_ts - self.first_ts) // HOUR_S
        b = (to_ts - self.first_ts) // HOUR_S
        cols = np.arange(a, b)
        ts = self.first_ts + cols * HOUR_S
        keys = np.asarray(m.card_ids, dtype=object)
        out = io.StringIO()
        out.write("card_id,ts,tokens_per_s\n")
        vals = m.measured_tps[:, a:b].astype(np.float64)
        for j, t in enumerate(ts.tolist()):
            # repr of a float64 round-trips exactly, so the store holds the measured value itself.
            out.write("".join(f"{k},{t},{v!r}\n" for k, v in zip(keys, vals[:, j].tolist())))
        return out.getvalue().encode()

    def index(self) -> dict[str, int]:
        return {str(k): i for i, k in enumerate(self.month.card_ids)}


# -- job statistics -------------------------------------------------------------------------


@dataclass
class JobStats:
    runs: int = 0
    errors: int = 0
    misses: int = 0
    skipped_overlap: int = 0
    duration_s_sum: float = 0.0
    last_success_ts: float | None = None
    last_error: str | None = None


@dataclass
class Snapshot:
    """What `/metrics`, `fleet status` and the tests read: the service's state at one refresh."""

    clock_ts: float
    month_start_ts: int
    month_hours: int
    hours_billed: int
    hours_decided: int
    run_set: list[str]
    pool_cards: int
    eligible_cards: int
    scores: dict[str, dict[str, tuple[float, float]]]  # window name → card → (score_tps, tokens_per_usd)
    demand_tps: float
    scored_capacity_tps: float
    capacity_tps: float
    totals: dict[str, float]
    evictions: int
    wrong_evictions: int
    eviction_budget: int
    budget_left: int
    breaker_open: bool
    ingest: dict[str, int]
    quarantine: dict[str, int]
    decisions: dict[str, tuple[int, int]]
    checks: dict = field(default_factory=dict)


def month_totals(hours: list[HourFigures]) -> dict[str, float]:
    """Month-to-date sums of billed hours (`fleet.core.verdict.month_totals` over the stored hours)."""
    col = lambda name: np.array([getattr(h, name) for h in hours], dtype=np.float64)  # noqa: E731
    return core_totals(col("warm_usd"), col("churn_usd"), col("idle_usd"), col("ideal_usd"), col("demand_tps"),
                       col("delivered_tps"), int(sum(h.evictions for h in hours)), int(sum(h.wrong_evictions for h in hours)))


# -- the service ------------------------------------------------------------------------------


def make_actuator(cfg: ServiceConfig) -> Actuator:
    a = cfg.actuator
    if a.kind == "command":
        return Command(a.command, a.timeout_s)
    if a.kind == "webhook":
        return Webhook(a.url or "", a.timeout_s)
    return DryRun()


class Service:
    """The autoscaler beside a pool: jobs over the store, around the pure tick."""

    def __init__(
        self,
        cfg: ServiceConfig,
        repo: SqlRepository,
        clock: Clock,
        actuator: Actuator | None = None,
        simulation: Simulation | None = None,
    ):
        if cfg.policy is None or cfg.pool is None:
            raise ValueError("the service needs a pool and a policy")
        self.cfg = cfg
        self.policy = cfg.policy
        import policies

        self.parts = policies.resolve(cfg.policy)
        self.repo = repo
        self.store = ServiceStore(repo.engine)
        self.clock = clock
        self.sim = simulation
        self.journal = Journal(self.store, actuator or make_actuator(cfg), clock.now)
        self.stats = {name: JobStats() for name in JOBS}
        self.snapshot: Snapshot | None = None
        self.scheduler = None
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._fed_through_ts: int | None = None
        self._scored_empty_ts: int | None = None
        self.window_names = list(dict.fromkeys([self.policy.window, self.policy.eviction_window]))
        self.windows = {self.policy.window: self.parts.size_window_hours, self.policy.eviction_window: self.parts.evict_window_hours}
        self.hours = cfg.month.hours
        self.start_ts = cfg.month.start_ts
        self._demand_cache: dict[int, np.ndarray] = {}
        self._universe: tuple | None = None
        self._scored: dict | None = None  # the last scores written, by hour and window hours, as `state_at` reads them
        self._hourly: dict | None = None  # the settled hours' mean rates the score job last read (see `hourly_means`)
        self._declare()

    # -- setup ---------------------------------------------------------------------------------
    def _declare(self) -> None:
        pool = self.cfg.pool
        self.repo.declare_classes([ClassSpec(c.name, c.rated_tps, c.rent_usd_per_month) for c in pool.classes])
        cards = {c.card_id: c.card_class for c in pool.cards}
        if self.sim is not None:
            cards.update(self.sim.cards())
        if cards:
            self.repo.declare_cards(cards, int(self.clock.now()))
        if self.sim is not None:
            last = self.store.last_rollup_ts()
            self._fed_through_ts = self.sim.first_ts if last is None else last  # re-send the last hour: duplicates are free

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- time --------------------------------------------------------------------------------
    def month_of(self, ts: int) -> tuple[int, int]:
        """(month start ts, hour within the month) of the hour starting at `ts`."""
        span = self.hours * HOUR_S
        k = max(0, (int(ts) - self.start_ts) // span)
        m0 = self.start_ts + k * span
        return m0, (int(ts) - m0) // HOUR_S

    def current_month_start(self) -> int:
        if self.sim is not None:
            return self.sim.start_ts  # a simulation plays one month
        return self.month_of(int(self.clock.now()))[0]

    def next_hour(self, last: int | None) -> int:
        """The hour after `last`; a service that was away for more than a month starts with the current month."""
        m0 = self.current_month_start()
        if last is None or last < m0 - self.hours * HOUR_S:
            return m0
        return last + HOUR_S

    def last_hour_ts(self) -> float:
        """The last hour the service may work on: the simulated month's last, or no limit."""
        return self.sim.end_ts - HOUR_S if self.sim is not None else math.inf

    def watermark_ts(self) -> int:
        """Telemetry before this time is in: the simulation's feed, or the clock less the settle time."""
        if self.sim is not None:
            return int(self._fed_through_ts or self.sim.first_ts)
        return int(self.clock.now() - self.cfg.schedule.settle_s)

    def demand(self, month_start_ts: int) -> np.ndarray:
        if self.sim is not None:
            return self.sim.month.demand_tps
        if month_start_ts not in self._demand_cache:
            from fleet.core.month import demand_series

            self._demand_cache[month_start_ts] = demand_series(self.cfg.demand, self.hours, np.random.default_rng(month_start_ts))
        return self._demand_cache[month_start_ts]

    # -- the pool as arrays ----------------------------------------------------------------
    def universe(self) -> dict:
        """Cards with a known rent, in registration order, as arrays the core takes (rebuilt when the pool grows)."""
        stamp = (self.store.card_count(), tuple(sorted((c.name, c.rent_usd_per_month) for c in self.repo.classes().values())))
        if self._universe is None or self._universe[0] != stamp:
            self._universe = (stamp, self._build_universe())
        return self._universe[1]

    def _build_universe(self) -> dict:
        classes = self.repo.classes()
        cards = [c for c in self.repo.cards().values() if classes.get(c.class_name) and classes[c.class_name].rent_usd_per_month]
        keys = [c.card_key for c in cards]
        names = sorted({c.class_name for c in cards})
        rent_m = np.array([classes[c.class_name].rent_usd_per_month for c in cards], dtype=np.float64)
        return {
            "keys": keys,
            "pos": {k: i for i, k in enumerate(keys)},
            "class": np.array([c.class_name for c in cards], dtype=object),
            "class_idx": np.array([names.index(c.class_name) for c in cards], dtype=np.int32),
            "rent_month": rent_m,
            "rent_hour": rent_m / self.hours,
        }

    def _mask(self, u: dict, keys) -> np.ndarray:
        m = np.zeros(len(u["keys"]), dtype=bool)
        idx = [u["pos"][k] for k in keys if k in u["pos"]]
        m[idx] = True
        return m

    # -- jobs ----------------------------------------------------------------------------------
    def ingest_job(self) -> int:
        """Feed the telemetry that is due into the store; returns the records read."""
        from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes

        now = int(self.clock.now())
        settings = IngestSettings(now_ts=now, strict=self.sim is not None or self.cfg.ingest.strict,
                                  default_class=self.cfg.ingest.default_class or "unassigned")
        if self.sim is not None:
            lo = int(self._fed_through_ts or self.sim.first_ts)
            hi = min(self.sim.end_ts, (now // HOUR_S) * HOUR_S)
            if hi <= lo:
                return 0
            parsed = parse_bytes(self.sim.telemetry_csv(lo, hi), "csv", f"simulation:{self.sim.scenario.name}:{lo}-{hi}")
            report = ingest_parsed(self.repo, parsed, settings)
            self._fed_through_ts = hi
            return report.read
        read = 0
        if self.cfg.ingest.folder:
            read += self._ingest_folder(Path(self.cfg.ingest.folder), settings)
        if self.cfg.ingest.prometheus_url:
            read += self._ingest_prometheus(settings)
        return read

    def _ingest_folder(self, folder: Path, settings) -> int:
        """Take each finished file in the drop folder once; move it to done/ (or failed/ with a bad file)."""
        from fleet.ingest import BadSource, FORMATS, ingest_file

        read = 0
        if not folder.is_dir():
            raise FileNotFoundError(f"ingest folder {str(folder)!r} does not exist")
        for p in sorted(folder.iterdir()):
            # Writers drop a file by renaming it in: names starting with '.' are still being written.
            if not p.is_file() or p.name.startswith(".") or p.suffix.lower() not in FORMATS:
                continue
            try:
                read += ingest_file(self.repo, p, settings).read
                dest = folder / "done"
            except BadSource as err:
                log.warning("%s", err)
                dest = folder / "failed"
            dest.mkdir(exist_ok=True)
            p.replace(dest / p.name)
        return read

    def _ingest_prometheus(self, settings) -> int:
        import json
        import urllib.parse
        import urllib.request

        from fleet.ingest import ingest_parsed, parse_prometheus

        ing = self.cfg.ingest
        end = int(self.clock.now()) // ing.step_s * ing.step_s
        last = self.store.last_rollup_ts()
        start = max(end - 6 * HOUR_S, last if last is not None else end - HOUR_S)
        query = urllib.parse.urlencode({"query": ing.query, "start": start, "end": end, "step": ing.step_s})
        url = f"{ing.prometheus_url.rstrip('/')}/api/v1/query_range?{query}"
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 (the operator's configured server)
            body = resp.read()
        json.loads(body)  # an unreachable or broken server fails the job here, counted as an error
        return ingest_parsed(self.repo, parse_prometheus(body, url, ing.card_label), settings).read

    def scored_through_ts(self) -> int | None:
        """The last hour scored: the store's, or a later one this process scored with no telemetry in its windows."""
        last = self.store.last_scored_ts(self.windows[self.window_names[-1]], self.start_ts, 2**62)
        if self._scored_empty_ts is not None and (last is None or self._scored_empty_ts > last):
            return self._scored_empty_ts
        return last

    def score_job(self) -> int:
        """Score every hour whose telemetry has settled; returns the hours scored.

        An hour with no telemetry in any card's window has no scores: its sizing
        sees no capacity and keeps every eligible card warm (with no data, the safe
        side is capacity), and its eviction pass judges nobody below the median.
        """
        done = 0
        while not self.stopping:
            nxt = self.next_hour(self.scored_through_ts())
            upto = min(self.watermark_ts(), int(self.clock.now()), self.month_of(nxt)[0] + self.hours * HOUR_S - HOUR_S,
                       self.last_hour_ts())
            if nxt > upto:
                break
            k = min((upto - nxt) // HOUR_S + 1, 168)
            self._score_hours(nxt, k)
            self._scored_empty_ts = nxt + (k - 1) * HOUR_S
            done += k
        return done

    def _score_hours(self, first_ts: int, k: int) -> None:
        u = self.universe()
        maxw = max(self.windows.values())
        mat = self.hourly_means(first_ts - maxw * HOUR_S, first_ts + (k - 1) * HOUR_S, u)
        batch = []
        scored: dict[int, dict[int, np.ndarray]] = {}
        for j in range(k):
            for name, w in self.windows.items():  # the last window last: its presence marks the hour scored
                score = windowed_scores(mat, maxw, k, w)[:, j]
                tpd = tokens_per_dollar(score.astype(np.float64), u["rent_hour"])
                have = np.flatnonzero(np.isfinite(score))
                batch.append((first_ts + j * HOUR_S, w, {u["keys"][i]: (float(score[i]), float(tpd[i])) for i in have}))
                scored.setdefault(first_ts + j * HOUR_S, {})[w] = np.where(np.isfinite(score), score, np.float32(0))
        self.store.record_scores(batch)
        # What `state_at` would read back from the store for these hours (a card with no score reads 0).
        self._scored = {"u": u, "hours": scored}

    def hourly_means(self, since_ts: int, until_ts: int, u: dict) -> np.ndarray:
        """(cards, hours) mean measured rate of every hour in [since_ts, until_ts); NaN where a card has no telemetry.

        The hours are settled (before the watermark), so the matrix is kept between
        ticks: the longest window's hours of the last call, in the universe they were
        read for. A call that follows on reads only the hours after them, usually
        one hour of the pool; a gap, a step back or a grown pool reads all again.
        """
        n = len(u["keys"])
        cols = (until_ts - since_ts) // HOUR_S
        mat = np.full((n, cols), np.nan)
        read_from = since_ts
        c = self._hourly
        if c is not None and c["u"] is u and c["since_ts"] <= since_ts <= c["until_ts"] <= until_ts:
            a = (since_ts - c["since_ts"]) // HOUR_S
            kept = (c["until_ts"] - since_ts) // HOUR_S
            mat[:, :kept] = c["tps"][:, a:a + kept]
            read_from = c["until_ts"]
        if read_from < until_ts:
            if "id_pos" not in u:
                ids = self.store.card_ids(u["keys"])
                u["id_pos"] = {ids[key]: i for i, key in enumerate(u["keys"])}
            card_id, hour_ts, mean_tps = self.store.rollup_means(read_from, until_ts)
            pos = np.fromiter((u["id_pos"].get(int(i), -1) for i in card_id), dtype=np.int64, count=len(card_id))
            ok = pos >= 0
            mat[pos[ok], (hour_ts[ok] - since_ts) // HOUR_S] = mean_tps[ok]
        keep = min(cols, max(self.windows.values()))
        self._hourly = {"u": u, "since_ts": until_ts - keep * HOUR_S, "until_ts": until_ts, "tps": mat[:, cols - keep:].copy()}
        return mat

    def decide_job(self) -> int:
        """Act on anything journaled and not acted, then decide every scored hour; returns the hours decided."""
        out = self.journal.act_pending(lambda: self.stopping)
        if out.failed:
            raise RuntimeError(out.error)
        done = 0
        u = self.universe()
        carry = None  # the run set and evictions the last hour left, so the next hour need not read them back
        while not self.stopping:
            nxt = self.next_hour(self.store.last_decided_ts(self.start_ts, 2**62))
            if nxt > self.clock.now() or nxt > self.last_hour_ts():
                break
            scored = self.scored_through_ts()
            if scored is None or scored < nxt:
                break
            carry = self.decide_hour(nxt, u, carry)
            done += 1
            out = self.journal.act_pending(lambda: self.stopping)
            if out.failed:
                raise RuntimeError(out.error)
        return done

    def state_at(self, hour_ts: int, u: dict, previous: set[str] | None = None,
                 evictions: list[tuple[int, str]] | None = None) -> PoolState:
        """The pool as the store has it at the start of `hour_ts`, in the tick's terms."""
        m0, h = self.month_of(hour_ts)
        n = len(u["keys"])
        in_class = u["class"] == self.policy.card_class
        scores = {}
        kept = self._scored.get("hours", {}).get(hour_ts, {}) if self._scored is not None and self._scored["u"] is u else {}
        for name, w in self.windows.items():
            if w in kept:
                scores[name] = np.where(in_class, kept[w], np.float32(0))
                continue
            got = self.store.scores_at(hour_ts, w)
            arr = np.zeros(n, dtype=np.float32)
            for k, v in got.items():
                if k in u["pos"]:
                    arr[u["pos"][k]] = v
            scores[name] = np.where(in_class, arr, np.float32(0))
        if evictions is None:
            evictions = self.store.eviction_hours(m0, hour_ts)
        # A card leaves the pool for the month when it is evicted (its retirement is journaled with the eviction).
        eligible = in_class & ~self._mask(u, [k for _, k in evictions])
        if previous is None and h > 0:
            previous = self.store.run_set_at(hour_ts - HOUR_S)
        run_set = None if h == 0 else self._mask(u, previous)
        pool_cards = int(in_class.sum())
        budget = budget_cards(self.policy.eviction.share, pool_cards)
        demand = self.demand(m0)
        return PoolState(
            hour=h,
            score_tps=scores[self.policy.window],
            evict_score_tps=scores[self.policy.eviction_window],
            rent_usd_per_hour=u["rent_hour"],
            eligible=eligible,
            run_set=run_set,
            demand_tps=float(demand[h]),
            peak_demand_tps=float(demand.max()),
            pool_cards=pool_cards,
            budget_left=max(0, budget - len(evictions)),
            eviction_hours=tuple((ts - m0) // HOUR_S for ts, _ in evictions),
        )

    def decide_hour(self, hour_ts: int, u: dict | None = None, carry: dict | None = None) -> dict:
        """Decide one hour and journal it with the state it leaves (acting comes after, from the journal).

        Returns the state it leaves (`carry`) for the next hour: the run set and the month's evictions.
        """
        u = u or self.universe()
        m0 = self.month_of(hour_ts)[0]
        if carry is not None and carry["hour_ts"] == hour_ts - HOUR_S and carry["month_start_ts"] == m0:
            open_now, month_evictions, held = carry["run_set"], carry["evictions"], carry["held"]
        else:
            open_now, month_evictions = self.store.run_set_at(hour_ts - HOUR_S), self.store.eviction_hours(m0, hour_ts)
            last = self.store.decisions(kinds=["size"], since_ts=hour_ts - HOUR_S, until_ts=hour_ts, limit=1)
            held = last[0].detail.get("held_out_hours", {}) if last else {}
        state = self.state_at(hour_ts, u, open_now, month_evictions)
        if state.run_set is not None and self.policy.release_after_hours > 1:
            # Hysteresis: warm cards were chosen last hour unless the journal says they are held.
            out = np.where(state.run_set, 0, self.policy.release_after_hours)
            for k, v in held.items():
                if k in u["pos"]:
                    out[u["pos"][k]] = v
            state = dataclasses.replace(state, out_hours=out)
        d = tick(state, self.parts)
        keys = u["keys"]
        new = {keys[i] for i in np.flatnonzero(d.run_set)}
        evicted = [keys[e.card] for e in d.evictions]
        by_card = {keys[c.card]: c for c in d.adds + d.releases}
        entries = [
            JournalEntry(
                f"{hour_ts}:size", hour_ts, "size", d.reason,
                detail={
                    "hour": d.hour, "mode": d.mode, "window": d.window, "target_tps": d.target_tps,
                    "scored_capacity_tps": d.scored_capacity_tps, "demand_tps": state.demand_tps,
                    "run_set_cards": len(new), "budget_left": d.budget_left,
                    "held_out_hours": {keys[i]: int(d.out_hours[i]) for i in np.flatnonzero(d.run_set & (d.out_hours > 0))},
                },
                acted=True,
            )
        ]
        if d.eviction is not None:
            p = d.eviction
            judged = np.flatnonzero(state.run_set) if state.run_set is not None else []
            entries.append(
                JournalEntry(
                    f"{hour_ts}:eviction-pass", hour_ts, "eviction-pass", p.reason,
                    detail={
                        "hour": d.hour, "rule": p.rule, "window": p.window, "fraction": p.fraction, "judged": p.judged,
                        "candidates": [keys[c] for c in p.candidates], "evicted": [keys[c] for c in p.evicted],
                        "median_score_tps": p.median_score_tps, "threshold_tps": p.threshold_tps,
                        "blocked_by_budget": p.blocked_by_budget, "blocked_by_disruption": p.blocked_by_disruption,
                        "breaker_open": p.breaker_open, "draining": p.draining, "allowed_now": p.allowed_now,
                        "budget_left_before": p.budget_left_before, "budget_left_after": p.budget_left_after,
                        "scores": {keys[c]: float(state.evict_score_tps[c]) for c in judged},
                    },
                    acted=True,
                )
            )
        for e in d.evictions:
            entries.append(
                JournalEntry(
                    f"{hour_ts}:evict:{keys[e.card]}", hour_ts, "evict", e.reason, keys[e.card],
                    detail={"hour": d.hour, "score_tps": e.score_tps, "tokens_per_usd": e.tokens_per_usd,
                            "window": self.policy.eviction_window, "threshold_tps": d.eviction.threshold_tps,
                            "median_score_tps": d.eviction.median_score_tps, "budget_left": d.budget_left},
                )
            )
        close = sorted(open_now - new)
        opened = sorted(new - open_now)
        for k in close:
            if k in evicted:
                continue
            c = by_card.get(k)
            why = c.reason if c is not None else "released: not in the run set the month starts with"
            entries.append(JournalEntry(f"{hour_ts}:release:{k}", hour_ts, "release", why, k,
                                        detail={"hour": d.hour, "score_tps": float(state.score_tps[u["pos"][k]]), "window": d.window}))
        for k in opened:
            c = by_card.get(k)
            why = c.reason if c is not None else f"added; {d.reason}"
            i = u["pos"][k]
            entries.append(JournalEntry(f"{hour_ts}:add:{k}", hour_ts, "add", why, k,
                                        detail={"hour": d.hour, "score_tps": float(state.score_tps[i]), "window": d.window,
                                                "tokens_per_usd": float(tokens_per_dollar(state.score_tps[i:i + 1], u["rent_hour"][i:i + 1])[0])}))
        self.journal.write(hour_ts, entries, {k: "warm" for k in opened}, close, evicted)
        return {"hour_ts": hour_ts, "month_start_ts": m0, "run_set": new, "decisions": d,
                "held": {keys[i]: int(d.out_hours[i]) for i in np.flatnonzero(d.run_set & (d.out_hours > 0))},
                "evictions": month_evictions + [(hour_ts, k) for k in evicted]}

    def billing_job(self) -> int:
        """Bill every decided hour that has ended, in stretches of up to a day; returns the hours billed."""
        done = 0
        u = self.universe()
        while not self.stopping:
            nxt = self.next_hour(self.store.last_billed_ts())
            m0, h0 = self.month_of(nxt)
            last_dec = self.store.last_decided_ts(nxt, m0 + self.hours * HOUR_S)
            if last_dec is None:
                break
            upto = min(last_dec, int(self.clock.now()) - HOUR_S, nxt + 23 * HOUR_S)  # an hour is billed once it has ended
            if upto < nxt:
                break
            self.bill(nxt, (upto - nxt) // HOUR_S + 1, u)
            done += (upto - nxt) // HOUR_S + 1
        return done

    def truth(self, first_ts: int, k: int, u: dict) -> tuple[np.ndarray, np.ndarray]:
        """(true rate, (cards, k), and each card's ticket) for k hours: the simulation's truth, or hindsight for a real pool.

        Hindsight, as the replay of a stored month: each card's mean measured rate over the month so far.
        """
        n = len(u["keys"])
        m0, h = self.month_of(first_ts)
        if self.sim is not None:
            if "sim_sel" not in u:
                idx = self.sim.index()
                u["sim_sel"] = np.array([idx[key] for key in u["keys"]])
            sel = u["sim_sel"]
            m = self.sim.month
            W = m.warmup_hours
            return m.true_rate_tps[sel, W + h:W + h + k].astype(np.float64), np.asarray(m.true_tps)[sel].astype(np.float64)
        roll = self.repo.hourly_rollups(m0, first_ts + k * HOUR_S)
        mean = np.zeros(n)
        if len(roll):
            g = roll.groupby("card_key")["mean_tps"].mean()
            for key, v in g.items():
                if key in u["pos"]:
                    mean[u["pos"][key]] = float(v)
        return np.repeat(mean[:, None], k, axis=1), mean

    def bill(self, first_ts: int, k: int, u: dict | None = None) -> list[HourFigures]:
        """Bill k decided hours from `first_ts` (one month): warm rent, churn fees, idle cost, ideal bill, wrong evictions."""
        u = u or self.universe()
        m0, h0 = self.month_of(first_ts)
        n = len(u["keys"])
        # Run sets of hour h0 - 1 .. h0 + k - 1 from the run-set intervals (the first is the one judged at h0).
        warm = np.zeros((n, k + 1), dtype=bool)
        lo, hi = first_ts - HOUR_S, first_ts + k * HOUR_S
        for key, start, end in self.store.intervals(lo, hi):
            if key in u["pos"]:
                a = max(0, (start - lo + HOUR_S - 1) // HOUR_S)
                b = k + 1 if end is None else min(k + 1, (end - lo + HOUR_S - 1) // HOUR_S)
                warm[u["pos"][key], a:b] = True
        evictions = self.store.eviction_hours(first_ts, hi)
        evicted = [[u["pos"][key] for ts, key in evictions if ts == first_ts + j * HOUR_S] for j in range(k)]
        rate, ticket = self.truth(first_ts, k, u)
        demand = np.asarray(self.demand(m0)[h0:h0 + k], dtype=np.float64)
        b = bill_hours(warm[:, 1:], u["rent_hour"], u["rent_month"], rate, demand, evicted)
        sizes = {r.ts: r.detail for r in self.store.decisions(kinds=["size"], since_ts=first_ts, until_ts=hi)}
        figs, lines = [], []
        for j in range(k):
            ts = first_ts + j * HOUR_S
            wrong = 0
            if evicted[j] and h0 + j > 0:
                wrong = int(wrong_evictions(np.array(evicted[j], dtype=np.int64), warm[:, j], ticket).sum())
            figs.append(HourFigures(
                hour_ts=ts, month_start_ts=m0, demand_tps=float(demand[j]), capacity_tps=float(b.capacity_tps[j]),
                delivered_tps=float(b.delivered_tps[j]), scored_capacity_tps=float(sizes.get(ts, {}).get("scored_capacity_tps", 0.0)),
                cards_warm=int(b.cards_warm[j]), warm_usd=float(b.warm_usd[j]), churn_usd=float(b.churn_usd[j]),
                idle_usd=float(b.idle_usd[j]), ideal_usd=float(b.ideal_usd[j]), evictions=len(evicted[j]), wrong_evictions=wrong,
            ))
            lines.append([("rent", float(b.warm_usd[j]), None)]
                         + [("churn", float(churn_fee_usd(u["rent_month"][c])), u["keys"][c]) for c in evicted[j]])
        self.store.record_hours(figs, lines)
        return figs

    def metrics_job(self) -> Snapshot:
        self.snapshot = self.build_snapshot()
        return self.snapshot

    def build_snapshot(self) -> Snapshot:
        u = self.universe()
        now = self.clock.now()
        last_b = self.store.last_billed_ts()
        # The month on view is the one last billed; at a month's end it stays on view until the next one bills.
        m0 = self.month_of(last_b)[0] if last_b is not None else self.current_month_start()
        hours = self.store.hours(m0)
        totals = month_totals(hours)
        last_dec = self.store.last_decided_ts(m0, m0 + self.hours * HOUR_S)
        run_set = sorted(self.store.run_set_at(last_dec)) if last_dec is not None else []
        in_class = u["class"] == self.policy.card_class
        pool_cards = int(in_class.sum())
        retired = {k for k, ts in self.store.retired().items() if ts >= m0}
        budget = budget_cards(self.policy.eviction.share, pool_cards)
        evictions = len(self.store.eviction_hours(m0, m0 + self.hours * HOUR_S))
        scores: dict[str, dict[str, tuple[float, float]]] = {}
        if last_dec is not None:
            for name, w in self.windows.items():
                got = self.store.scores_at(last_dec, w)
                scores[name] = {
                    k: (v, float(tokens_per_dollar(np.array([v]), u["rent_hour"][u["pos"][k]:u["pos"][k] + 1])[0]))
                    for k, v in got.items() if k in u["pos"]
                }
        size = self.store.decisions(kinds=["size"], since_ts=last_dec, until_ts=last_dec + 1, limit=1) if last_dec is not None else []
        passes = self.store.decisions(kinds=["eviction-pass"], since_ts=m0, until_ts=m0 + self.hours * HOUR_S)
        figs = {**totals, "wrong_evictions": int(totals["wrong_evictions"])}
        checks = judge_checks(figs, self.cfg.checks) if hours else {}
        return Snapshot(
            clock_ts=now,
            month_start_ts=m0,
            month_hours=self.hours,
            hours_billed=len(hours),
            hours_decided=0 if last_dec is None else (last_dec - m0) // HOUR_S + 1,
            run_set=run_set,
            pool_cards=pool_cards,
            eligible_cards=int((in_class & ~self._mask(u, retired)).sum()),
            scores=scores,
            demand_tps=float(size[0].detail.get("demand_tps", 0.0)) if size else 0.0,
            scored_capacity_tps=float(size[0].detail.get("scored_capacity_tps", 0.0)) if size else 0.0,
            capacity_tps=hours[-1].capacity_tps if hours else 0.0,
            totals=totals,
            evictions=evictions,
            wrong_evictions=int(totals["wrong_evictions"]),
            eviction_budget=budget,
            budget_left=max(0, budget - evictions),
            breaker_open=bool(passes and passes[-1].detail.get("breaker_open")),
            ingest=self.store.ingest_totals(),
            quarantine=self.store.quarantine_reasons(),
            decisions=self.store.decision_counts(m0, m0 + self.hours * HOUR_S),
            checks=checks,
        )

    def month_done(self) -> bool:
        """The simulated month is billed to its last hour."""
        if self.sim is None:
            return False
        return self.store.last_billed_ts(self.sim.start_ts) == self.sim.end_ts - HOUR_S

    # -- the scheduler ---------------------------------------------------------------------
    def _run(self, name: str, fn: Callable[[], object]) -> object:
        t0 = time.perf_counter()
        try:
            if name == "metrics":
                return fn()
            # Writers take turns in this process: waiting on a lock wakes at once, where SQLite's busy handler sleeps.
            with self._write_lock:
                return fn()
        finally:
            st = self.stats[name]
            st.runs += 1
            st.duration_s_sum += time.perf_counter() - t0

    def intervals(self) -> dict[str, float]:
        """Wall seconds between runs of each job. A simulation runs each once per simulated hour (metrics every
        simulated quarter hour), never more often than every 50 ms (metrics: 500 ms) nor less often than the wall schedule."""
        s = self.cfg.schedule
        wall = {"ingest": s.ingest_every_s, "score": s.tick_every_s, "decide": s.tick_every_s,
                "billing": s.billing_every_s, "metrics": s.metrics_every_s}
        if self.sim is None:
            return wall
        per_clock = {"ingest": HOUR_S, "score": HOUR_S, "decide": HOUR_S, "billing": HOUR_S, "metrics": HOUR_S / 4}
        floor = {"metrics": 0.5}
        return {k: min(wall[k], max(floor.get(k, 0.05), self.clock.wall_seconds(v))) for k, v in per_clock.items()}

    def start(self, scheduler=None) -> None:
        """Start the jobs on a BackgroundScheduler (or the one given)."""
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
        from datetime import timezone

        self.scheduler = scheduler or BackgroundScheduler(timezone=timezone.utc, executors={"default": ThreadPoolExecutor(len(JOBS))})
        self.scheduler.add_listener(self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        fns = {"ingest": self.ingest_job, "score": self.score_job, "decide": self.decide_job,
               "billing": self.billing_job, "metrics": self.metrics_job}
        from datetime import datetime

        first = datetime.now(timezone.utc)
        for name, every in self.intervals().items():
            grace = self.cfg.schedule.misfire_grace_s or every / 2
            self.scheduler.add_job(
                self._run, "interval", args=(name, fns[name]), id=name, name=name, seconds=every,
                coalesce=True, max_instances=1, misfire_grace_time=max(1, int(round(grace))), next_run_time=first,
            )
        self.scheduler.start()

    def shutdown(self) -> None:
        self.stop()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def _on_event(self, event) -> None:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

        st = self.stats.get(event.job_id)
        if st is None:
            return
        if event.code == EVENT_JOB_EXECUTED:
            st.last_success_ts = self.clock.now()
        elif event.code == EVENT_JOB_ERROR:
            st.errors += 1
            st.last_error = repr(event.exception)
            log.error("job %s failed: %r", event.job_id, event.exception)
        elif event.code == EVENT_JOB_MISSED:
            st.misses += 1
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            st.skipped_overlap += 1


def simulation_config(cfg: ServiceConfig, scenario: Scenario) -> ServiceConfig:
    """The config with the preset's pool, policy, demand, checks and month length in place of its own."""
    from fleet.core.scenario import CardClass, Pool
    from fleet.service.config import Month

    return cfg.model_copy(
        update={
            "month": Month(start=cfg.month.start, hours=scenario.hours),
            "pool": Pool(classes=tuple(CardClass(name=c.name, rated_tps=c.rated_tps, rent_usd_per_month=c.rent_usd_per_month)
                                       for c in scenario.classes)),
            "policy": scenario.policy,
            "demand": scenario.demand,
            "checks": scenario.checks,
        }
    )
