"""Window scores from one running sum equal the cumulative-sum definition, bit for bit."""

import numpy as np
import pytest

from fleet.core.scenario import ConfigError
from fleet.core.scores import window_scores, window_scores_many


def _by_cumsum(measured, warmup_hours, hours, window):
    running = np.zeros((measured.shape[0], measured.shape[1] + 1))
    np.cumsum(measured, axis=1, dtype=np.float64, out=running[:, 1:])
    end = warmup_hours + np.arange(hours)
    return ((running[:, end] - running[:, end - window]) / window).astype(np.float32)


@pytest.mark.parametrize("cards, warmup_hours, hours", [(1, 1, 1), (7, 24, 72), (300, 168, 100), (0, 24, 5)])
def test_scores_match_the_cumulative_sum(cards, warmup_hours, hours):
    rng = np.random.default_rng(cards + hours)
    measured = (6000 * rng.lognormal(0, 0.3, (cards, warmup_hours + hours))).astype(np.float32)
    windows = tuple(w for w in (1, 24, warmup_hours) if w <= warmup_hours)
    for w, got in zip(windows, window_scores_many(measured, warmup_hours, hours, windows)):
        assert got.shape == (cards, hours) and got.dtype == np.float32
        assert np.array_equal(got, _by_cumsum(measured, warmup_hours, hours, w))
        assert np.array_equal(window_scores(measured, warmup_hours, hours, w), got)


def test_a_window_longer_than_the_history_is_refused():
    with pytest.raises(ConfigError, match="longer than the 24 hours"):
        window_scores_many(np.ones((2, 30), np.float32), 24, 6, (1, 48))


def test_windows_at_hours_of_their_own_are_the_same_numbers():
    rng = np.random.default_rng(3)
    measured = (6000 * rng.lognormal(0, 0.3, (40, 24 + 48))).astype(np.float32)
    at = np.array([5, 17, 40])
    every, some = window_scores_many(measured, 24, 48, (24, 1), each_at=(None, at))
    assert np.array_equal(every, window_scores(measured, 24, 48, 24))
    assert np.array_equal(some, window_scores(measured, 24, 48, 1)[:, at])


@pytest.mark.parametrize("block_cells, band_hours, tile_cards", [(1, 1, 1), (50, 7, 3), (1 << 20, 32, 256)])
def test_scores_by_blocks_bands_and_tiles_are_the_same_numbers(monkeypatch, block_cells, band_hours, tile_cards):
    """However the running sum is cut (blocks of cards, bands of hours, tiles of the turn hours-major), the scores
    are the cumulative sum's, every hour and at hours of their own."""
    from fleet.core import scores

    monkeypatch.setattr(scores, "_SCORE_BLOCK_CELLS", block_cells)
    monkeypatch.setattr(scores, "_SCORE_BAND_HOURS", band_hours)
    monkeypatch.setattr(scores, "_SCORE_TILE_CARDS", tile_cards)
    rng = np.random.default_rng(block_cells)
    measured = (6000 * rng.lognormal(0, 0.3, (23, 30 + 41))).astype(np.float32)
    at = np.array([0, 3, 40])
    for w in (1, 2, 24, 30):
        every, some = window_scores_many(measured, 30, 41, (w, w), each_at=(None, at))
        assert np.array_equal(every, _by_cumsum(measured, 30, 41, w))
        assert np.array_equal(some, _by_cumsum(measured, 30, 41, w)[:, at])
