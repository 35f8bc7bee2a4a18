"""A card whose telemetry names no class is registered in the one class the policy rents, and in none when the
policy rents several or "any" of several (a list or "any" is not a class name)."""

from __future__ import annotations

import pytest

from fleet.ingest.stored_month import telemetry_rollups
from tests.conftest import make_scenario

TWO = [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 4},
       {"name": "bargain", "rated_tps": 3030, "rent_usd_per_month": 1442, "pool_cards": 4}]


def _file(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("card_id,ts,tokens_per_s\n" + "".join(f"gpu-{c},{1793491200 + 60 * m},5000\n" for c in range(3) for m in range(3)))
    return p


@pytest.mark.parametrize(
    "card_class, classes, expected",
    [
        ("flagship", None, "flagship"),  # the one class rented
        ("any", None, "flagship"),  # "any" of one class is that class
        ("bargain", TWO, "bargain"),
        (["flagship", "bargain"], TWO, None),  # a list names no one class
        ("any", TWO, None),
    ],
)
def test_default_class_of_a_policy(tmp_path, card_class, classes, expected):
    over = {"policy": {"card_class": card_class, "window": "day", "mode": "steady", "headroom": 1.0}}
    if classes:
        over["classes"] = TWO
    scenario = make_scenario(**over)
    assert scenario.default_card_class == expected
    rollups, report = telemetry_rollups(_file(tmp_path), scenario)
    assert report.stored == 9
    assert set(rollups["card_class"]) == {expected or "unassigned"}
