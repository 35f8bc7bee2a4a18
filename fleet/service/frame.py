"""What the jobs around the step share: the frame they decide in, and whether they may go on writing.

`fleet serve` and `fleet plan` build the decide pipeline on one `Frame` each
(`fleet.service.pipeline`): the policy resolved, the calendar on its clock, the
store's pool as an index and the pool's demand. `Lead` is the lease's side: the
jobs stop at their next step once it says so, and every action carries its epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from fleet.core.plugins import PolicyParts
    from fleet.service.calendar import Calendar
    from fleet.service.demand import MeasuredDemand, MonthDemand
    from fleet.service.pool import PoolWatch
    from fleet.service.simulation import Clock


@dataclass(frozen=True)
class Frame:
    """The policy resolved, the calendar on its clock, the store's pool and its demand: what a job decides in."""

    parts: PolicyParts
    calendar: Calendar
    clock: Clock
    pool: PoolWatch
    demand: MonthDemand | MeasuredDemand


def _never() -> bool:
    return False


def _no_lease() -> int | None:
    return None


@dataclass(frozen=True)
class Lead:
    """Whether the jobs must stop at their next step (the service stops, or lost the lease), and the epoch of the
    lease they lead under (None without a lease keeper: the caller vouches nothing else writes the store)."""

    stopping: Callable[[], bool] = _never
    epoch: Callable[[], int | None] = _no_lease
