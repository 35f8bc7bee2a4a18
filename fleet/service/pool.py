"""The pool as the core takes it: a frozen index of the cards, rebuilt when the store's pool changes.

The core works on arrays with one entry per card; the store names cards by key.
`PoolIndex` is the one translation between them, fixed for as long as the pool
is: the cards with a known rent in registration order, each card's position,
class, store id and rent. Its arrays are read-only and it is never changed, so
a job may keep anything it derived from an index for as long as `PoolWatch`
hands out that same index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

from fleet.core.carry import frozen, run_class_mask

if TYPE_CHECKING:
    from storage.interfaces import TelemetryStore


@dataclass(frozen=True, eq=False)
class PoolIndex:
    """Cards with a known rent, in registration order. Compared by identity: a rebuilt pool is a new index."""

    keys: tuple[str, ...]
    pos: Mapping[str, int]  # card key -> position
    card_ids: np.ndarray  # (cards,) the store's card id
    class_names: np.ndarray  # (cards,) object: each card's class
    rent_usd_per_month: np.ndarray  # (cards,)
    rent_usd_per_hour: np.ndarray  # (cards,) the monthly rent over the month's hours
    ids_sorted: np.ndarray = field(repr=False)  # the store ids in order, and the position of each,
    ids_order: np.ndarray = field(repr=False)  # for `positions_of_ids`

    @classmethod
    def build(cls, classes: Mapping[str, object], cards: Iterable[object], month_hours: int) -> "PoolIndex":
        """From the store's classes (name -> `ClassSpec`) and cards (`CardInfo`, registration order)."""
        kept = [c for c in cards if classes.get(c.class_name) and classes[c.class_name].rent_usd_per_month]
        keys = tuple(c.card_key for c in kept)
        rent_m = np.array([classes[c.class_name].rent_usd_per_month for c in kept], dtype=np.float64)
        ids = np.array([c.id for c in kept], dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        return cls(
            keys=keys,
            pos=MappingProxyType({k: i for i, k in enumerate(keys)}),
            card_ids=frozen(ids),
            class_names=frozen(np.array([c.class_name for c in kept], dtype=object)),
            rent_usd_per_month=frozen(rent_m),
            rent_usd_per_hour=frozen(rent_m / month_hours),
            ids_sorted=frozen(ids[order]),
            ids_order=frozen(order),
        )

    def __len__(self) -> int:
        return len(self.keys)

    def mask(self, keys: Iterable[str]) -> np.ndarray:
        """A bool mask of the given cards (keys not in the pool are left out)."""
        m = np.zeros(len(self.keys), dtype=bool)
        pos = self.pos
        m[[pos[k] for k in keys if k in pos]] = True
        return m

    def in_class(self, class_name: str) -> np.ndarray:
        return self.class_names == class_name

    def run_class_mask(self, policy) -> np.ndarray:
        """The cards of the classes the policy rents: one class, a list, or any class in the pool."""
        return run_class_mask(self.groups, self.group_names, policy)

    @property
    def groups(self) -> np.ndarray:
        """Each card's class as a number, its index into `group_names` (eviction judges a card within its class)."""
        return self._groups[1]

    @property
    def group_names(self) -> tuple[str, ...]:
        """The pool's classes, in the order `groups` numbers them."""
        return self._groups[0]

    @cached_property
    def _groups(self) -> tuple[tuple[str, ...], np.ndarray]:
        if not len(self.keys):
            return (), frozen(np.zeros(0, np.int64))
        names, groups = np.unique(self.class_names.astype(str), return_inverse=True)
        return tuple(names.tolist()), frozen(groups)

    def positions_of_ids(self, card_ids: np.ndarray) -> np.ndarray:
        """The position of each store card id (-1: not in the pool)."""
        card_ids = np.asarray(card_ids, dtype=np.int64)
        if not len(self.keys):
            return np.full(card_ids.shape, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids_sorted, card_ids), len(self.keys) - 1)
        return np.where(self.ids_sorted[at] == card_ids, self.ids_order[at], -1)


def pool_promise(terms, index: PoolIndex, build):
    """The pool's promise read as a scenario's (`terms`: a `ServiceConfig`, its slo, policy, demand and classes) over
    the index's cards, through `build`: `sizing_promise` (what the policy sizes to) or `promise_view` (what the month
    is judged by, whatever the policy sizes to). None: no promise."""
    if terms is None or getattr(terms, "slo", None) is None:
        return None
    names = [c.name for c in terms.classes]
    at = {n: k for k, n in enumerate(names)}
    card_class = np.array([at.get(str(c), -1) for c in index.class_names.tolist()], dtype=np.int64)
    return build(terms, names, card_class)


class PoolWatch:
    """The store's pool as a `PoolIndex`, rebuilt when a card is registered or a class's rent changes."""

    def __init__(self, repo: TelemetryStore, month_hours: int):
        self.repo = repo
        self.month_hours = month_hours
        self._stamp: tuple | None = None
        self._index: PoolIndex | None = None

    def current(self) -> PoolIndex:
        classes = self.repo.classes()
        stamp = (self.repo.card_count(), tuple(sorted((c.name, c.rent_usd_per_month) for c in classes.values())))
        if self._index is None or self._stamp != stamp:
            self._index = PoolIndex.build(classes, self.repo.cards().values(), self.month_hours)
            self._stamp = stamp
        return self._index
