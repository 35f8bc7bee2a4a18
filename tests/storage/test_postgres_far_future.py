"""A store with timestamps in 2100 works on both backends (PostgreSQL's 32-bit `integer` ended in 2038)."""

from __future__ import annotations

import numpy as np

from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes
from storage import ClassSpec
from storage.service_store import HourFigures, JournalEntry, ServiceStore
from tests.storage.stored import ingest_runs

FAR_TS = 4_102_444_800  # 2100-01-01T00:00Z
H = 3600


def test_a_store_in_2100(new_repo):
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({"gpu-1": "flagship"}, FAR_TS)
    rows = "".join(f"gpu-{1 + i % 2},{FAR_TS + 60 * i},{5000 + i},0.5\n" for i in range(120))
    out = ingest_parsed(repo, parse_bytes(("card_id,ts,tokens_per_s,busy_fraction\n" + rows).encode(), "csv", "far.csv"),
                        IngestSettings(now_ts=FAR_TS + 2 * H, default_class="flagship"))
    assert (out.stored, out.quarantined) == (120, 0)
    [run] = ingest_runs(repo.engine)
    assert run.finished_ts == FAR_TS + 2 * H
    assert repo.cards()["gpu-1"].id and set(repo.cards()) == {"gpu-1", "gpu-2"}
    roll = repo.hourly_rollups(FAR_TS, FAR_TS + 2 * H)
    assert roll["hour_ts"].tolist() == [FAR_TS, FAR_TS + H, FAR_TS, FAR_TS + H]
    assert roll["sample_count"].tolist() == [30, 30, 30, 30]
    np.testing.assert_allclose(roll["busy_tps"], 2 * roll["mean_tps"])

    store = ServiceStore(repo.engine)
    store.record_scores([(FAR_TS + H, 24, {"gpu-1": (5050.0, 4900.0)})])
    assert store.scores_at(FAR_TS + H, 24) == {"gpu-1": 5050.0}
    evict = JournalEntry(f"{FAR_TS + H}:evict:gpu-2", FAR_TS + H, "evict", "below 0.8 x median", "gpu-2", {})
    assert store.journal_hour(FAR_TS + H, [evict], {"gpu-1": "sized"}, [], ["gpu-2"])
    assert store.run_set_at(FAR_TS + H) == {"gpu-1"} and store.retired() == {"gpu-2": FAR_TS + H}
    hour = HourFigures(FAR_TS + H, FAR_TS, 5000.0, 5050.0, 5000.0, 5050.0, 1, 3.74, 0.0, 0.0, 3.74, 1, 0)
    assert store.record_hours([hour], [[("rent", 3.74, "gpu-1")]])
    assert store.hours(FAR_TS) == [hour]
    assert store.bill_by_part(FAR_TS, FAR_TS + 2 * H) == {"rent": 3.74}

    pruned = repo.prune_raw(FAR_TS + H)
    assert (pruned.samples, pruned.before_ts) == (60, FAR_TS + H)
    assert repo.hourly_rollups(FAR_TS, FAR_TS + 2 * H)["sample_count"].tolist() == [30, 30, 30, 30]
