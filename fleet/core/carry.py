"""What one step hands the next (`Carry`), and the cards a policy may run at all.

A `Carry` is the state of a month between two steps: the run set, the cards that
may still run, the eviction budget left, the month's eviction hours and the
hysteresis' count. The step (`fleet.core.step.step`) takes one and returns the
next as `Decisions.next`; replay hands it from stretch to stretch, the service
from hour to hour. It is built in three ways only: at a month's start
(`month_start`), from a record of the month so far when nothing carried it (the
service after a start or a lease change: `resumed`), and by the step's own moves
(`evicted`, `sized`). What the pool is known to run at an hour's start, where it
differs from what was decided, is that hour's input to the carry (`synced`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy of `a`: what a carry or an index hands out may be kept, never changed under its keeper."""
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def run_class_mask(card_class: np.ndarray, class_names: Sequence[str], policy) -> np.ndarray:
    """The cards of the classes the policy rents: `card_class` is each card's index into `class_names`."""
    rented = set(policy.run_classes(list(class_names)))
    wanted = [i for i, name in enumerate(class_names) if name in rented]
    return np.isin(np.asarray(card_class), wanted)


@dataclass(frozen=True)
class Carry:
    """What one step hands the next: the run set, the cards that may still run, the month's eviction budget and
    hours, and the hysteresis' count (read-only arrays)."""

    eligible: np.ndarray  # (cards,) bool: the policy's class, not evicted this month
    budget_left: int  # evictions the month's budget still allows
    run_set: np.ndarray | None = None  # (cards,) bool: warm in the previous hour; None at month start
    eviction_hours: tuple[int, ...] = ()  # month hours of this month's evictions so far
    out_hours: np.ndarray | None = None  # (cards,) hours the sizing mode has left each card out; None: warm cards were chosen

    @classmethod
    def month_start(cls, eligible: np.ndarray, budget_left: int) -> Carry:
        return cls(frozen(np.asarray(eligible, dtype=bool)), int(budget_left))

    @classmethod
    def resumed(cls, eligible: np.ndarray, budget_left: int, run_set: np.ndarray | None, evictions: Sequence[tuple[int, int | None]],
                held_out_hours: Mapping[int, int] | None, release_after_hours: int) -> Carry:
        """The carry at an hour's start, from a record of the month so far (the service's journal): the cards that
        may run (`eligible`, before this month's evictions), the budget left, the run set decided for the hour
        before, the month's evictions as (month hour, card; None for a card no longer in the pool), and the
        hysteresis' held-out hours by card. The same rules as `evicted` and `sized` move it, so an hour resumed from
        the record is the hour the record left."""
        eligible = np.array(eligible, dtype=bool)
        gone = [int(c) for _, c in evictions if c is not None]
        if gone:
            eligible[gone] = False
        c = cls(frozen(eligible), int(budget_left), None if run_set is None else frozen(np.asarray(run_set, dtype=bool)),
                tuple(int(h) for h, _ in evictions))
        return c.held_out(held_out_hours, release_after_hours) if release_after_hours > 1 and held_out_hours is not None else c

    def evicted(self, p) -> Carry:
        """After an eviction pass (`fleet.core.step.EvictionPass`): its cards leave the pool for the month and spend
        the budget."""
        if not p.evicted:
            return replace(self, budget_left=p.budget_left_after)
        eligible = np.array(self.eligible, dtype=bool)
        eligible[list(p.evicted)] = False
        return replace(self, eligible=frozen(eligible), budget_left=p.budget_left_after,
                       eviction_hours=self.eviction_hours + (p.hour,) * len(p.evicted))

    def sized(self, run_set: np.ndarray, out_hours: np.ndarray | None) -> Carry:
        """After a sized hour (or the last hour of a stretch): its run set and the hysteresis' count."""
        return replace(self, run_set=frozen(np.asarray(run_set, dtype=bool)),
                       out_hours=None if out_hours is None else frozen(out_hours))

    def synced(self, run_set: np.ndarray | None, budget_left: int, release_after_hours: int) -> Carry:
        """The carry as the pool is known to run it at an hour's start: the run set it is known to run in place of
        the one decided (they part where an action was not carried out, or a card fell silent or was retired), and
        the budget its cards allow now (a card retired by hand leaves the budget's base). The month's evictions and
        the cards still eligible are the carry's own. The hysteresis counts from what runs, as `resumed` reads a
        record of it: a warm card it holds keeps its hours, any other card known to run was chosen the hour before,
        and a card not known to run is out for good."""
        out = self.out_hours
        if run_set is not None:
            run_set = np.asarray(run_set, dtype=bool)
            if out is not None and self.run_set is not None:
                held = np.asarray(self.run_set, dtype=bool) & (np.asarray(out) > 0)
                out = frozen(np.where(held, out, np.where(run_set, 0, release_after_hours)))
            run_set = frozen(run_set)
        return replace(self, run_set=run_set, budget_left=int(budget_left), out_hours=out)

    def reindexed(self, old_position: np.ndarray, in_class: np.ndarray, release_after_hours: int) -> Carry:
        """The carry in a rebuilt pool's order: `old_position` gives each card's position in the carry's order (-1:
        a card new to the pool), `in_class` the cards of the policy's classes in the new order. A card keeps what it
        carried; a new one is not evicted, not warm, and out for good."""
        old = np.asarray(old_position, dtype=np.int64)
        have = old >= 0
        at = np.where(have, old, 0)

        def take(a: np.ndarray, new_value) -> np.ndarray:
            a = np.asarray(a)
            return frozen(np.where(have, a[at], new_value)) if a.size else frozen(np.full(old.shape, new_value, dtype=a.dtype))

        return replace(self, eligible=frozen(np.asarray(in_class, dtype=bool) & take(self.eligible, True)),
                       run_set=None if self.run_set is None else take(self.run_set, False),
                       out_hours=None if self.out_hours is None else take(self.out_hours, release_after_hours))

    def held_out(self, hours_by_card: Mapping[int, int], release_after_hours: int) -> Carry:
        """The hysteresis' count resumed from a record of it: warm cards were chosen unless the record says they are
        held, cards out of the run set are out for good."""
        out = self.out_hours_before(release_after_hours)
        if out is None:
            return self
        out = np.array(out, dtype=np.int64)
        for c, v in hours_by_card.items():
            out[int(c)] = int(v)
        return replace(self, out_hours=frozen(out))

    def out_hours_before(self, release_after_hours: int) -> np.ndarray | None:
        """The hours each card has been left out, as the hysteresis reads them before an hour (None at month start)."""
        if self.run_set is None:
            return None
        if self.out_hours is not None:
            return np.asarray(self.out_hours)
        return np.where(np.asarray(self.run_set, dtype=bool), 0, release_after_hours)
