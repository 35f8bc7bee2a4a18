"""The pool index: cards with a rent in registration order, frozen, and rebuilt when the store's pool changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleet.ingest.pool import declare_pool
from fleet.service.pool import PoolIndex, PoolWatch
from storage.repository import CardInfo, ClassSpec, open_repository

CLASSES = {"flagship": ClassSpec("flagship", 6000.0, 2690.0), "budget": ClassSpec("budget", 2000.0, 720.0),
           "unpriced": ClassSpec("unpriced", None, None)}
CARDS = [CardInfo(7, "gpu-b", "flagship", 6000.0), CardInfo(3, "gpu-a", "budget", 2000.0),
         CardInfo(9, "gpu-x", "unpriced", None), CardInfo(12, "gpu-c", "flagship", 6000.0)]


@pytest.fixture
def index() -> PoolIndex:
    return PoolIndex.build(CLASSES, CARDS, month_hours=720)


def test_cards_with_a_rent_in_registration_order(index):
    assert index.keys == ("gpu-b", "gpu-a", "gpu-c") and len(index) == 3  # gpu-x's class has no rent
    assert dict(index.pos) == {"gpu-b": 0, "gpu-a": 1, "gpu-c": 2}
    assert list(index.class_names) == ["flagship", "budget", "flagship"]
    assert list(index.rent_usd_per_month) == [2690.0, 720.0, 2690.0]
    assert np.array_equal(index.rent_usd_per_hour, index.rent_usd_per_month / 720)
    assert list(index.in_class("flagship")) == [True, False, True]


def test_mask_and_store_ids(index):
    assert list(index.mask(["gpu-c", "gpu-x", "nope"])) == [False, False, True]  # keys not in the pool are left out
    assert list(index.mask([])) == [False, False, False]
    assert list(index.positions_of_ids(np.array([12, 3, 9, 7, 100]))) == [2, 1, -1, 0, -1]
    assert list(index.positions_of_ids(np.array([], dtype=np.int64))) == []
    empty = PoolIndex.build(CLASSES, [], 720)
    assert len(empty) == 0 and list(empty.positions_of_ids(np.array([1, 2]))) == [-1, -1]


def test_frozen(index):
    with pytest.raises(dataclasses.FrozenInstanceError):
        index.keys = ()
    with pytest.raises(TypeError):
        index.pos["gpu-z"] = 3
    for a in (index.card_ids, index.class_names, index.rent_usd_per_month, index.rent_usd_per_hour):
        with pytest.raises(ValueError):
            a[0] = a[1]


def test_rebuilt_when_a_card_is_registered_or_a_rent_changes(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 'p.db'}")
    declare_pool(repo, [ClassSpec("flagship", 6000.0, 2690.0)], {"gpu-a": "flagship", "gpu-b": "flagship"}, 0)
    watch = PoolWatch(repo, 720)
    first = watch.current()
    assert first.keys == ("gpu-a", "gpu-b")
    assert watch.current() is first  # unchanged pool, same index: what a job derived from it still holds
    repo.declare_cards({"gpu-c": "flagship"}, 10)
    grown = watch.current()
    assert grown is not first and grown.keys == ("gpu-a", "gpu-b", "gpu-c")
    assert first.keys == ("gpu-a", "gpu-b")  # the old index is left as it was
    assert watch.current() is grown
    repo.declare_classes([ClassSpec("flagship", 6000.0, 3000.0)])
    repriced = watch.current()
    assert repriced is not grown and list(repriced.rent_usd_per_month) == [3000.0] * 3
