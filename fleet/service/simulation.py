"""The service's clocks and the simulated pool `fleet serve --simulate` plays.

The clock is injected so that nothing in the service reads the time itself:
`WallClock` for a real pool, `SimClock` for a preset's month played on an
accelerated clock, and in tests any object with `now()` and `wall_seconds()`.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from fleet.core.scenario import Scenario
from fleet.service.calendar import HOUR_S
from fleet.service.config import ServiceConfig
from storage.values import ClassSpec, class_specs


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


class SetClock:
    """A clock its owner sets (`clock.t = ts`): `fleet plan` holds it at the store's time, and tests and benchmarks
    step it by hand, so the hours a job sees are theirs to choose. `wall_per_clock_s` is the wall seconds a clock
    second waits for (1: as the wall clock)."""

    def __init__(self, t: float, wall_per_clock_s: float = 1.0):
        self.t = float(t)
        self._wall = float(wall_per_clock_s)

    def now(self) -> float:
        return self.t

    def wall_seconds(self, clock_seconds: float) -> float:
        return clock_seconds * self._wall


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

    def advance_to(self, ts: float) -> None:
        """Move the clock on to `ts` if it is behind it (never back): a standby that takes over a simulation
        resumes where the journal ends, as a restart does."""
        behind = float(ts) - self.now()
        if behind > 0:
            self.start_ts += behind


@dataclass
class Simulation:
    """A preset's month played as a pool: its telemetry is fed in as the clock passes, its truth bills the hours."""

    scenario: Scenario
    month: object  # fleet.core.month.Month
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
        return class_specs(self.scenario.classes)

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

    def rows(self, keys) -> np.ndarray:
        """The month's row of each card key."""
        idx = self.index()
        return np.array([idx[key] for key in keys])


def simulation_config(cfg: ServiceConfig, scenario: Scenario) -> ServiceConfig:
    """The config with the preset's pool, policy, demand, checks, promise and month length in place of its own (a
    class keeps its curve: the promise reads it)."""
    from fleet.core.scenario import CardClass, Pool
    from fleet.service.config import MonthSettings

    def card_class(c) -> CardClass:
        if c.serving is not None:
            return CardClass.model_validate({"name": c.name, "rent_usd_per_month": c.rent_usd_per_month,
                                             "serving": c.serving.model_dump(exclude_none=True)})
        return CardClass(name=c.name, rated_tps=c.rated_tps, rent_usd_per_month=c.rent_usd_per_month)

    return cfg.model_copy(
        update={
            "month": MonthSettings(start=cfg.month.start, hours=scenario.hours),
            "pool": Pool(classes=tuple(card_class(c) for c in scenario.classes)),
            "policy": scenario.policy,
            "demand": scenario.demand,
            "checks": scenario.checks,
            "slo": scenario.slo,
        }
    )
