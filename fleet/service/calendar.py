"""The service's calendar: the month an hour belongs to, the hour to work on next, how far telemetry is in.

Billing months follow one another from the config's start, each `month_hours`
long. A simulation plays one month, and its telemetry is in as far as its feed
has sent it; a real pool's is in up to the clock less the settle time. No clock
is read here: the time is always an argument, so every rule is a plain function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fleet.core.units import HOUR_S



@dataclass(frozen=True)
class Calendar:
    """Month boundaries and the watermark, for a real pool or for one simulated month."""

    start_ts: int  # the first month's start; the months after it follow without a gap
    month_hours: int
    settle_s: float = 0.0  # a real pool's hour is scored once this long has passed after it
    played_start_ts: int | None = None  # a simulation: the start of the one month it plays
    played_end_ts: int | None = None  # a simulation: the end of that month
    feed_first_ts: int | None = None  # a simulation: its first hour of telemetry (the warm-up's first)

    @property
    def simulated(self) -> bool:
        return self.played_start_ts is not None

    @property
    def month_s(self) -> int:
        return self.month_hours * HOUR_S

    def month_of(self, ts: int) -> tuple[int, int]:
        """(month start ts, hour within the month) of the hour starting at `ts`."""
        k = max(0, (int(ts) - self.start_ts) // self.month_s)
        m0 = self.start_ts + k * self.month_s
        return m0, (int(ts) - m0) // HOUR_S

    def month_end_ts(self, month_start_ts: int) -> int:
        return int(month_start_ts) + self.month_s

    def current_month_start(self, now_ts: float) -> int:
        """The month the clock is in; a simulation plays its one month whatever the clock says."""
        if self.played_start_ts is not None:
            return self.played_start_ts
        return self.month_of(int(now_ts))[0]

    def next_hour(self, last_ts: int | None, now_ts: float) -> int:
        """The hour after `last_ts`; a service away for more than a month starts with the current month."""
        m0 = self.current_month_start(now_ts)
        if last_ts is None or last_ts < m0 - self.month_s:
            return m0
        return last_ts + HOUR_S

    @property
    def last_hour_ts(self) -> float:
        """The last hour the service may work on: the simulated month's last, or no limit."""
        return self.played_end_ts - HOUR_S if self.played_end_ts is not None else math.inf

    def watermark_ts(self, now_ts: float, fed_through_ts: int | None = None) -> int:
        """Telemetry before this time is in: the simulation's feed, or the clock less the settle time."""
        if self.simulated:
            return int(fed_through_ts or self.feed_first_ts)
        return int(now_ts - self.settle_s)

    def catch_up(self, last_ts: int | None, now_ts: float, expire_after_s: float) -> tuple[int, int]:
        """(hours ended and not yet decided, how many of them ended more than `expire_after_s` ago): a service back
        after a stop decides those hours in turn, and the late ones' actions are expired, never carried out late
        (`fleet.core.retry.expired`), which an operator should hear at start-up rather than find in the journal."""
        first = self.next_hour(last_ts, now_ts)
        current = int(now_ts) - int(now_ts) % HOUR_S
        behind = max(0, (current - first) // HOUR_S)
        if expire_after_s <= 0 or behind == 0:
            return behind, 0
        late_before = now_ts - HOUR_S - expire_after_s  # an hour starting before this ended too long ago
        return behind, min(behind, max(0, math.ceil((late_before - first) / HOUR_S)))
