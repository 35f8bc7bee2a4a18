"""The service store's bulk rows (`storage.bulk_rows`) give what one row at a time would: scores over many
statements, rollups read a chunk at a time; and the run set is named from the cached cards (on both backends)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import text

import storage.bulk_rows as bulk_rows
from storage import ClassSpec
from storage.busy import busy_rate_tps
from storage.service_store import ServiceStore
from storage.values import ScoreColumn

T0 = 1_735_689_600
H = 3600


def _pool(new_repo, n: int):
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    keys = tuple(f"gpu-{i:02d}" for i in range(n))
    repo.declare_cards(dict.fromkeys(keys, "flagship"), T0)
    ids = np.array([repo.cards()[k].id for k in keys], dtype=np.int64)
    return repo, keys, ids


def test_scores_written_over_many_statements_are_every_row(new_repo, monkeypatch):
    monkeypatch.setattr(bulk_rows, "SCORE_ROWS_PER_STATEMENT", 4)  # 3 windows x 2 hours x 11 cards: 17 statements
    repo, keys, ids = _pool(new_repo, 11)
    store = ServiceStore(repo.engine)
    rng = np.random.default_rng(5)
    want = {}
    batch = []
    for ts in (T0, T0 + H):
        for w in (1, 24, 168):
            score = (rng.random(len(keys)) * 6000).astype(np.float32)
            tpd = rng.random(len(keys)) * 100
            rows = np.flatnonzero(rng.random(len(keys)) > 0.2)
            batch.append((ts, w, ScoreColumn(keys, ids, rows, score, tpd)))
            want[(ts, w)] = {keys[i]: float(score[i]) for i in rows.tolist()}
    store.record_scores(batch)
    for (ts, w), scores in want.items():
        assert store.scores_at(ts, w) == scores
    assert store.scores_by_window(T0 + H) == {w: want[(T0 + H, w)] for w in (1, 24, 168)}
    store.record_scores([(T0, 24, {keys[0]: (1.0, 2.0)})])  # a rerun still replaces its row
    assert store.scores_at(T0, 24) == {**want[(T0, 24)], keys[0]: 1.0}


def test_rollups_read_a_chunk_at_a_time_are_every_rollup(new_repo, monkeypatch):
    repo, keys, ids = _pool(new_repo, 5)
    rows = []
    for j, cid in enumerate(ids.tolist()):
        for h in range(4):
            busy = (j + h) % 3  # hours with busy data, with none, and a card never busy in one
            rows.append({"c": cid, "h": T0 + h * H, "n": 60, "s": 60.0 * (5000 + 7 * j + h), "bn": 60 if busy else 0,
                         "bs": 6.0 * busy if busy else 0.0, "bt": 60.0 * (5000 + 7 * j + h) if busy else 0.0})
    with repo.engine.begin() as conn:
        conn.execute(text("INSERT INTO hourly_rollups (card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, "
                          "busy_fraction_sum, busy_tokens_per_s_sum) VALUES (:c, :h, :n, :s, :bn, :bs, :bt)"), rows)
    store = repo
    whole = store.rollup_means(T0 + H, T0 + 4 * H)
    monkeypatch.setattr(bulk_rows, "ROLLUP_CHUNK_ROWS", 4)  # 15 rows: four chunks, the last short
    chunked = store.rollup_means(T0 + H, T0 + 4 * H)
    got = sorted(zip(*(a.tolist() for a in chunked)))
    assert got == sorted(zip(*(a.tolist() for a in whole)))
    expect = []
    for r in rows:
        if r["h"] >= T0 + H:
            busy = busy_rate_tps(np.array([r["bs"]]), np.array([float(r["bn"])]), np.array([r["bt"]]))[0]
            expect.append((r["c"], r["h"], r["s"] / r["n"] if np.isnan(busy) else float(busy)))
    assert got == sorted(expect)
    assert [a.dtype for a in chunked] == [np.int64, np.int64, np.float64]
    assert [a.size for a in store.rollup_means(T0 + 9 * H, T0 + 10 * H)] == [0, 0, 0]


def test_the_run_set_names_a_card_registered_after_the_cards_were_read(new_repo):
    repo, keys, ids = _pool(new_repo, 3)
    store = ServiceStore(repo.engine)
    assert store.journal_hour(T0, [], {keys[0]: "warm", keys[1]: "warm"}, [], [])
    assert store.run_set_at(T0) == {keys[0], keys[1]}
    repo.declare_cards({"gpu-late": "flagship"}, T0 + H)
    assert store.journal_hour(T0 + H, [], {"gpu-late": "warm"}, [keys[0]], [])
    assert store.run_set_at(T0 + H) == {keys[1], "gpu-late"}


def test_the_databases_measured_rate_is_busy_rate_tps_to_the_bit(new_repo):
    """`MEASURED_TPS_SQL` (worked out by the database as the rollups are read) gives the doubles `busy_rate_tps`,
    else the mean, gives: random sums, busy fractions below, at and above the floor, hours never busy, no samples."""
    n = 60
    repo, keys, ids = _pool(new_repo, n)
    rng = np.random.default_rng(5)
    count = rng.integers(0, 61, n)
    count[:3] = 0  # no samples: no rate
    busy_n = np.minimum(count, rng.integers(0, 61, n))
    floor = 0.05
    busy_sum = rng.random(n) * busy_n * rng.choice([0.01, 0.5, 1.0], n)
    busy_sum[3:6] = floor * busy_n[3:6]  # exactly at the floor
    busy_sum[6:9] = 0.0  # never busy
    tps_sum = rng.random(n) * 6000.0 * count
    busy_tps_sum = rng.random(n) * 6000.0 * busy_n
    rows = [{"c": int(ids[j]), "h": T0, "n": int(count[j]), "s": float(tps_sum[j]), "bn": int(busy_n[j]),
             "bs": float(busy_sum[j]), "bt": float(busy_tps_sum[j])} for j in range(n)]
    with repo.engine.begin() as conn:
        conn.execute(text("INSERT INTO hourly_rollups (card_id, hour_ts, sample_count, tokens_per_s_sum, busy_count, "
                          "busy_fraction_sum, busy_tokens_per_s_sum) VALUES (:c, :h, :n, :s, :bn, :bs, :bt)"), rows)
    card_id, _, got = repo.rollup_means(T0, T0 + H, floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = tps_sum / count.astype(np.float64)
    busy = busy_rate_tps(busy_sum, busy_n.astype(np.float64), busy_tps_sum, floor)
    want = dict(zip(ids.tolist(), np.where(np.isnan(busy), mean, busy).tolist()))
    got = dict(zip(card_id.tolist(), got.tolist()))
    assert got.keys() == want.keys()
    for c in want:
        assert (np.isnan(got[c]) and np.isnan(want[c])) or got[c] == want[c], c
    assert {c for c, v in got.items() if np.isnan(v)} == set(ids[count == 0].tolist())


def test_a_key_given_twice_in_one_write_keeps_its_last_row(new_repo):
    """Rows of one (card, hour, window) given twice in one `record_scores` are written once, the later given winning,
    as a row-by-row upsert would leave them; other keys untouched."""
    repo, keys, ids = _pool(new_repo, 3)
    store = ServiceStore(repo.engine)
    store.record_scores([(T0, 24, {keys[0]: (1.0, 1.5), keys[1]: (2.0, 2.5)}), (T0 + H, 24, {keys[0]: (9.0, 9.5)}),
                         (T0, 1, {keys[0]: (4.0, 4.5)}), (T0, 24, {keys[0]: (3.0, 3.5), keys[2]: (5.0, 5.5)})])
    assert store.scores_at(T0, 24) == {keys[0]: 3.0, keys[1]: 2.0, keys[2]: 5.0}
    assert store.scores_at(T0, 1) == {keys[0]: 4.0} and store.scores_at(T0 + H, 24) == {keys[0]: 9.0}
