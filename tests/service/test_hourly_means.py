"""The score job's hourly means, kept between runs in a ring, are the matrix a fresh read of the store gives: hour on
hour past the ring's wrap, over a pass of several hours, after a gap, a step back, a restart or a changed pool; and
the scores read from them are the same to the bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fleet.core.scores import windowed_scores
from fleet.service.calendar import HOUR_S
from fleet.service.pool import PoolIndex
from fleet.service.frame import Frame
from fleet.service.scoring import ScoreJob
from policies.scores import DipAware, WindowMean

T0 = 1_767_225_600 + 1800  # hours start on the half hour: the ring's rows must not assume the epoch's hours
LONGEST_HOURS = 48


class Rollups:
    """A store's hourly means: most card-hours present, some missing (no telemetry), some of a card not in the
    pool; records the spans read."""

    def __init__(self, card_ids: list[int], hours: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        ids, ts, tps = [], [], []
        for card in card_ids:
            for h in range(-LONGEST_HOURS - 8, hours):
                if rng.random() < 0.9:
                    ids.append(card)
                    ts.append(T0 + h * HOUR_S)
                    tps.append(rng.normal(5000, 700))
        self.ids, self.ts, self.tps = np.array(ids, np.int64), np.array(ts, np.int64), np.array(tps)
        self.reads: list[tuple[int, int]] = []

    def rollup_means(self, since_ts: int, until_ts: int, busy_floor: float):
        self.reads.append((since_ts, until_ts))
        at = (self.ts >= since_ts) & (self.ts < until_ts)
        return self.ids[at], self.ts[at], self.tps[at]


def pool_of(card_ids: list[int]) -> PoolIndex:
    cards = [SimpleNamespace(id=i, card_key=f"gpu-{i}", class_name="flagship") for i in card_ids]
    return PoolIndex.build({"flagship": SimpleNamespace(rent_usd_per_month=2690.0)}, cards, 720)


def job_on(repo: Rollups) -> ScoreJob:
    frame = Frame(parts=None, calendar=None, clock=None, pool=SimpleNamespace(repo=repo), demand=None)
    return ScoreJob(None, frame, {"hour": 1, "day": 24, "two days": LONGEST_HOURS}, lambda now: 0)


class Reference:
    """The means as the score job read them before they were kept in a ring: the longest window's hours of the last
    call copied out, the rest read."""

    def __init__(self, repo: Rollups):
        self.repo, self.kept = repo, None

    def hourly_means(self, since_ts: int, until_ts: int, index: PoolIndex) -> np.ndarray:
        cols = (until_ts - since_ts) // HOUR_S
        mat = np.full((len(index), cols), np.nan)
        read_from = since_ts
        c = self.kept
        if c is not None and c[0] is index and c[1] <= since_ts <= c[2] <= until_ts:
            a, kept = (since_ts - c[1]) // HOUR_S, (c[2] - since_ts) // HOUR_S
            mat[:, :kept] = c[3][:, a:a + kept]
            read_from = c[2]
        if read_from < until_ts:
            card_id, hour_ts, mean_tps = self.repo.rollup_means(read_from, until_ts, 0.0)
            pos = index.positions_of_ids(card_id)
            ok = pos >= 0
            mat[pos[ok], (hour_ts[ok] - since_ts) // HOUR_S] = mean_tps[ok]
        keep = min(cols, LONGEST_HOURS)
        self.kept = (index, until_ts - keep * HOUR_S, until_ts, mat[:, cols - keep:].copy())
        return mat


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def hour(h: int) -> int:
    return T0 + h * HOUR_S


def check_calls(calls, card_ids=(3, 1, 4, 15, 9, 26)):
    """Each call (first hour, hours, pool name) on the ring and on the reference: the same matrix to the bit and the
    same spans read from the store."""
    pools = {"a": pool_of(list(card_ids)), "b": pool_of([*card_ids, 53]), "a again": pool_of(list(card_ids))}
    repo_new, repo_ref = Rollups([*card_ids, 53, 99], 400), Rollups([*card_ids, 53, 99], 400)
    job, ref = job_on(repo_new), Reference(repo_ref)
    for first, hours, pool in calls:
        got = job.hourly_means(hour(first), hour(first + hours), pools[pool])
        want = ref.hourly_means(hour(first), hour(first + hours), pools[pool])
        assert same_bits(got, want), (first, hours, pool)
        assert not got.flags.writeable
        assert repo_new.reads == repo_ref.reads, (first, hours, pool)
        ring = job._means.buf
        assert same_bits(ring[:LONGEST_HOURS], ring[LONGEST_HOURS:])  # each hour's two rows alike
    return job


def test_hour_on_hour_past_the_ring_wrapping_several_times():
    job = check_calls([(h - LONGEST_HOURS, LONGEST_HOURS, "a") for h in range(0, 3 * LONGEST_HOURS + 5)])
    assert job._means.buf.shape == (2 * LONGEST_HOURS, 6)


def test_passes_of_several_hours_the_score_job_and_the_decide_job_reading_in_turn():
    calls = [(-LONGEST_HOURS, LONGEST_HOURS + 4, "a"), (5 - LONGEST_HOURS, LONGEST_HOURS, "a"),  # a pass, then on
             (6 - LONGEST_HOURS, LONGEST_HOURS + 167, "a"),  # a week's catch-up pass
             (173 - LONGEST_HOURS, LONGEST_HOURS, "a"), (173 - LONGEST_HOURS, LONGEST_HOURS, "a"),  # the same again
             (174 - LONGEST_HOURS, LONGEST_HOURS + 1, "a")]
    calls += [(h - LONGEST_HOURS, LONGEST_HOURS, "a") for h in range(176, 176 + LONGEST_HOURS + 3)]  # on past a wrap
    check_calls(calls)


def test_a_gap_a_step_back_and_shorter_reads():
    calls = [(-LONGEST_HOURS, LONGEST_HOURS, "a"), (3 - LONGEST_HOURS, LONGEST_HOURS, "a"),  # a gap within the ring
             (70 - LONGEST_HOURS, LONGEST_HOURS, "a"),  # a gap past it: all read again
             (60 - LONGEST_HOURS, LONGEST_HOURS, "a"), (61 - LONGEST_HOURS, LONGEST_HOURS, "a"),  # a step back
             (50, 5, "a"), (52, 5, "a"), (57, 0, "a"), (57, 3, "a"),  # fewer hours than the ring holds
             (58 - LONGEST_HOURS, LONGEST_HOURS, "a"), (59 - LONGEST_HOURS, LONGEST_HOURS, "a")]
    check_calls(calls)


def test_a_changed_pool_reads_all_again():
    calls = [(-LONGEST_HOURS, LONGEST_HOURS, "a"), (1 - LONGEST_HOURS, LONGEST_HOURS, "b"),  # a card registered
             (2 - LONGEST_HOURS, LONGEST_HOURS, "b"), (3 - LONGEST_HOURS, LONGEST_HOURS + 2, "a again"),
             (6 - LONGEST_HOURS, LONGEST_HOURS, "a again")]
    job = check_calls(calls)
    assert len(job._means.index) == 6


def test_a_restart_after_many_hours_reads_what_the_running_job_holds():
    repo = Rollups([1, 2, 3], 400)
    index = pool_of([1, 2, 3])
    running = job_on(repo)
    for h in range(0, 300):
        running.hourly_means(hour(h - LONGEST_HOURS), hour(h), index)
    for k in (1, 5):  # the restarted job's first pass, of one hour or of several
        restarted = job_on(repo)
        want = Reference(repo).hourly_means(hour(300 - LONGEST_HOURS), hour(300 + k - 1), index)
        assert same_bits(restarted.hourly_means(hour(300 - LONGEST_HOURS), hour(300 + k - 1), index), want)
    assert same_bits(running.hourly_means(hour(300 - LONGEST_HOURS), hour(300), index), want[:, :LONGEST_HOURS])


def test_hours_off_the_kept_hours_boundaries_are_read_again():
    repo = Rollups([1, 2, 3], 100)
    index = pool_of([1, 2, 3])
    job = job_on(repo)
    job.hourly_means(hour(0), hour(LONGEST_HOURS), index)
    off = (hour(1) + 1800, hour(LONGEST_HOURS + 1) + 1800)
    assert same_bits(job.hourly_means(*off, index), job_on(repo).hourly_means(*off, index))
    assert repo.reads[-2:] == [off, off]


@pytest.mark.parametrize("estimator", [WindowMean(), DipAware(level_hours=LONGEST_HOURS)], ids=["mean", "dip-aware"])
def test_scores_read_from_the_ring_are_the_same_to_the_bit(estimator):
    repo_new, repo_ref = Rollups(list(range(1, 40)), 200, seed=3), Rollups(list(range(1, 40)), 200, seed=3)
    index = pool_of(list(range(1, 40)))
    job, ref = job_on(repo_new), Reference(repo_ref)
    for h in range(0, 2 * LONGEST_HOURS + 3):
        got = job.hourly_means(hour(h - LONGEST_HOURS), hour(h), index)
        want = ref.hourly_means(hour(h - LONGEST_HOURS), hour(h), index)
        for w in (1, 24, LONGEST_HOURS):
            assert same_bits(windowed_scores(got, LONGEST_HOURS, 1, w), windowed_scores(want, LONGEST_HOURS, 1, w))
        a = estimator.score(got, LONGEST_HOURS, 1, LONGEST_HOURS, (24,))
        b = estimator.score(want, LONGEST_HOURS, 1, LONGEST_HOURS, (24,))
        assert same_bits(a.score_tps, b.score_tps) and same_bits(a.window_tps[0], b.window_tps[0])
        if a.in_dip is not None:
            assert same_bits(a.in_dip, b.in_dip) and same_bits(a.dip_rate, b.dip_rate)
