"""Retention: raw samples of whole hours already rolled up and older than the cutoff go; rollups, scores, the
journal and bills stay; a sample re-sent for a pruned hour is a duplicate, never counted twice."""

from __future__ import annotations

import numpy as np
from sqlalchemy import text

from storage import BatchOrigin, ClassSpec, Rejected, SampleBatch
from storage.service_store import HourFigures, JournalEntry, ServiceStore

T0 = 1_735_689_600  # 2025-01-01T00:00Z, on the hour
H = 3600


def _batch(cards: list[str], ts: np.ndarray, tps: float = 6000.0) -> SampleBatch:
    keys = np.array([c for c in cards for _ in ts], dtype=object)
    all_ts = np.tile(ts, len(cards)).astype(np.int64)
    n = all_ts.size
    return SampleBatch(keys, all_ts, np.full(n, tps), np.full(n, np.nan), np.arange(n, dtype=np.int64))


def _ingest(repo, batch: SampleBatch, digest: str):
    run = repo.begin_run("t.csv", digest, T0)
    out = repo.write_batch(BatchOrigin(run, 0, 0, "t.csv", digest), batch, Rejected(), {k: "flagship" for k in set(batch.card_key)}, T0)
    repo.finish_run(run, T0)
    return out


def _count(repo, table: str) -> int:
    with repo.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def _store(repo):
    """Two cards, a sample a minute over four hours from T0; a score, a journaled hour and a billed hour beside them,
    in the new store `repo`."""
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    _ingest(repo, _batch(["gpu-1", "gpu-2"], T0 + 60 * np.arange(240)), "d1")
    store = ServiceStore(repo.engine)
    store.record_scores([(T0, 24, {"gpu-1": (6000.0, 5000.0)})])
    store.journal_hour(T0, [JournalEntry(f"{T0}:size", T0, "size", "")], {"gpu-1": "sized"}, [], [])
    store.record_hours([HourFigures(T0, T0, 6000.0, 6000.0, 6000.0, 6000.0, 1, 3.74, 0.0, 0.0, 3.74, 0, 0)], [[("rent", 3.74, "gpu-1")]])
    return repo


def test_prune_deletes_raw_samples_of_whole_hours_before_the_cutoff_and_nothing_else(new_repo):
    repo = _store(new_repo())
    rollups_before = repo.hourly_rollups()
    kept = {t: _count(repo, t) for t in ("hourly_rollups", "scores", "decisions", "run_set_intervals", "service_hours", "bills", "cards")}
    # The cutoff is 30 minutes into the third hour: only the first two whole hours go.
    pruned = repo.prune_raw(T0 + 2 * H + 1800)
    assert (pruned.samples, pruned.cards, pruned.before_ts) == (2 * 2 * 60, 2, T0 + 2 * H)
    assert repo.sample_count() == 2 * 240 - 2 * 2 * 60
    with repo.engine.connect() as conn:
        assert conn.execute(text("SELECT MIN(ts) FROM telemetry_samples")).scalar_one() == T0 + 2 * H
    assert {t: _count(repo, t) for t in kept} == kept
    assert repo.hourly_rollups().equals(rollups_before)  # every hour's rollup as it was
    again = repo.prune_raw(T0 + 2 * H + 1800)
    assert (again.samples, again.cards) == (0, 0)


def test_samples_without_a_rollup_are_kept(new_repo):
    repo = _store(new_repo())
    with repo.engine.begin() as conn:  # an hour whose rollup is missing (it never happens through write_batch)
        conn.execute(text("DELETE FROM hourly_rollups WHERE hour_ts = :h"), {"h": T0})
    pruned = repo.prune_raw(T0 + 2 * H)
    assert pruned.samples == 2 * 60  # the second hour only
    assert repo.sample_count() == 2 * 240 - 2 * 60


def test_a_sample_re_sent_for_a_pruned_hour_is_a_duplicate_and_its_rollup_stands(new_repo):
    repo = _store(new_repo())
    before = repo.hourly_rollups()
    repo.prune_raw(T0 + 2 * H)
    # The same four hours again, and a new card in a pruned hour (its hour has no rollup: it is new).
    again = _ingest(repo, _batch(["gpu-1", "gpu-2"], T0 + 60 * np.arange(240)), "d2")
    assert (again.read, again.stored, again.duplicates, again.quarantined) == (480, 0, 480, 0)
    assert repo.hourly_rollups().equals(before)
    new = _ingest(repo, _batch(["gpu-3"], T0 + 60 * np.arange(3)), "d3")
    assert (new.stored, new.duplicates) == (3, 0)
    rolled = repo.hourly_rollups()
    assert rolled[rolled.card_key == "gpu-3"].sample_count.tolist() == [3]
    # A re-send mixing a pruned hour and a kept one: the kept hour's samples are duplicates as ever.
    mixed = _ingest(repo, _batch(["gpu-1"], T0 + H + 60 * np.arange(120)), "d4")
    assert (mixed.stored, mixed.duplicates) == (0, 120)
    assert repo.hourly_rollups()[lambda f: f.card_key != "gpu-3"].reset_index(drop=True).equals(before)
