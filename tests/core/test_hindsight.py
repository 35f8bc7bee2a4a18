"""The hindsight truth, the rule both the billing job and the replay of a stored month read: each card's mean over
the hours it was measured in, 0 for a card measured in none."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.hindsight import hindsight_of_hours, hindsight_tps, measured_sums

nan = np.nan


@pytest.mark.parametrize(
    "why, hours, truth",
    [
        ("every hour measured: the plain mean", [[4000.0, 6000.0, 5000.0]], [5000.0]),
        ("an hour without telemetry is left out, not carried over", [[4000.0, nan, nan, 6000.0]], [5000.0]),
        ("a card measured in no hour served nothing the month saw", [[nan, nan, nan]], [0.0]),
        ("cards are judged each on its own hours", [[1000.0, nan], [nan, 3000.0]], [1000.0, 3000.0]),
    ],
)
def test_each_card_is_the_mean_of_its_measured_hours(why, hours, truth):
    np.testing.assert_array_equal(hindsight_of_hours(np.array(hours)), truth, err_msg=why)


def test_sums_kept_stretch_by_stretch_give_the_whole_months_truth():
    """The billing job keeps sums as it bills a stretch at a time; added up they read what the whole month reads."""
    rng = np.random.default_rng(7)
    month = rng.uniform(2000, 7000, size=(5, 96))
    month[rng.random(month.shape) < 0.3] = nan
    month[4] = nan
    total, count = np.zeros(5), np.zeros(5)
    for a in range(0, 96, 24):
        s, n = measured_sums(month[:, a:a + 24])
        total, count = total + s, count + n
    np.testing.assert_allclose(hindsight_tps(total, count), hindsight_of_hours(month), rtol=1e-12)
    assert hindsight_of_hours(month)[4] == 0.0
