"""The retention soak at a tiny scale: after two simulated days pruned at an age of one day, only the last day's
raw samples are left, and every hour of every card still has its rollup."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.soak_retention import DAY_S, HOUR_S, MONTH_START_TS, main

CARDS = 3
SAMPLES_PER_HOUR = 60


def test_the_soak_prunes_raw_samples_past_the_age_and_keeps_every_rollup(tmp_path, capsys):
    db = tmp_path / "soak.db"
    args = ["--cards", str(CARDS), "--days", "2", "--samples-per-hour", str(SAMPLES_PER_HOUR), "--prune-after-days", "1",
            "--week-days", "1", "--db", str(db)]
    assert main(args) == 0
    out = capsys.readouterr().out
    days = [ln.split()[0] for ln in out.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert days == ["1", "2"]  # a line of figures at each printed day

    # The last prune ran at the end of day 2 (plus the settle time): whole hours older than a day went.
    cut_ts = MONTH_START_TS + DAY_S
    con = sqlite3.connect(db)
    try:
        raw, oldest_ts = con.execute("SELECT COUNT(*), MIN(ts) FROM telemetry_samples").fetchone()
        rollups = con.execute("SELECT card_id, hour_ts, sample_count FROM hourly_rollups ORDER BY card_id, hour_ts").fetchall()
    finally:
        con.close()
    assert oldest_ts >= cut_ts
    assert raw == CARDS * 24 * SAMPLES_PER_HOUR  # day 2's samples, all of them
    hours = [MONTH_START_TS + h * HOUR_S for h in range(48)]
    cards = sorted({r[0] for r in rollups})
    assert len(cards) == CARDS
    assert rollups == [(c, h, SAMPLES_PER_HOUR) for c in cards for h in hours]  # both days, every hour, every sample counted
