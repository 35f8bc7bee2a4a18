"""A recommendation's search with a screening round: the months screened are not searched again for the
combinations kept, and the search finds what searching every month afresh finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fleet.sweep as sweep_module
from fleet.core.compare import expand_grid
from fleet.presets import load_preset
from fleet.sweep import GridBase, Sweep, _round, search

SMALL = Path(__file__).parent / "compare_small.toml"


def test_the_kept_combinations_are_searched_on_the_months_not_screened_only(monkeypatch):
    monkeypatch.setattr(sweep_module, "SCREEN_MONTHS", 2)
    monkeypatch.setattr(sweep_module, "SCREEN_KEEP", 1)
    grid = GridBase(load_preset(str(SMALL)))
    combos = expand_grid(grid.scenario(), card_class=["flagship", "bargain"], mode=["steady", "held"])
    seeds = [3, 4, 5, 6]
    searched: list[list[int]] = []
    with Sweep(jobs=1) as sweep:
        headrooms = sweep.headrooms
        monkeypatch.setattr(sweep, "headrooms", lambda sc, s, *a: searched.append(list(s)) or headrooms(sc, s, *a))
        found = search(sweep, grid, combos, seeds, 0.5, exact=False)
        assert searched == [[3, 4], [5, 6]]  # the screening's months, then the rest for the one kept
        assert found.screened == len(combos) - 1
        kept = [c for c in combos if c.card_class == found.summaries[0].combo.card_class
                and c.mode == found.summaries[0].combo.mode]
        fresh = _round(sweep, grid, kept, seeds, 0.5, False, None, "search")
    assert [s.combo for s in found.summaries] == [s.combo for s in fresh.summaries]
    for a, b in zip(found.months, fresh.months):
        np.testing.assert_array_equal(a.figures, b.figures)


@pytest.mark.parametrize("known_months", [0, 2, 4])
def test_a_round_given_its_first_months_headrooms_gives_the_same_figures(known_months):
    grid = GridBase(load_preset(str(SMALL)))
    combos = expand_grid(grid.scenario(), card_class=["flagship", "bargain"])
    seeds = [3, 4, 5, 6]
    with Sweep(jobs=1) as sweep:
        fresh = _round(sweep, grid, combos, seeds, 0.5, False, None, "search")
        given = _round(sweep, grid, combos, seeds, 0.5, False, None, "search",
                       fresh.month_headrooms[:known_months] if known_months else None)
    np.testing.assert_array_equal(given.month_headrooms, fresh.month_headrooms)
    assert [s.combo for s in given.summaries] == [s.combo for s in fresh.summaries]


def test_a_batch_started_anywhere_finds_what_each_search_alone_finds():
    from fleet.core.compare import HEADROOM_SEARCH, HeadroomBatch, MonthCache, min_headroom, run_headroom_batch
    from fleet.core.month import draw_month
    from fleet.presets import resolve_policy

    grid = GridBase(load_preset(str(SMALL)))
    scenarios = grid.scenarios(expand_grid(grid.scenario(), card_class=["flagship", "bargain"], mode=["steady", "held"]))
    parts = tuple(resolve_policy(s) for s in scenarios)
    got = run_headroom_batch(HeadroomBatch(tuple(scenarios), parts, (3, 4), HEADROOM_SEARCH))
    guessed = run_headroom_batch(HeadroomBatch(tuple(scenarios), parts, (3, 4), HEADROOM_SEARCH,
                                               guesses=(1.0, 1.5, float("inf"), 1.1)))
    assert [f.tolist() for _, f in guessed] == [f.tolist() for _, f in got]
    for seed, found in got:
        seeded = [s.model_copy(update={"seed": seed}) for s in scenarios]
        cache = MonthCache(draw_month(seeded[0]), exact=False, scenario=seeded[0])
        alone = [min_headroom(cache, s, p, HEADROOM_SEARCH, None) for s, p in zip(seeded, parts)]
        assert found.tolist() == alone
