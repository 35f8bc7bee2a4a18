"""One hindsight truth for a real pool: the billing job (over the month so far, a stretch at a time) and the replay
of the stored month (over the whole month) read the same truth from the same telemetry, gaps and all."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleet.core.month import draw_month
from fleet.core.units import HOUR_S
from fleet.ingest import IngestSettings, ingest_file
from fleet.ingest.pool import declare_pool
from fleet.ingest.stored_month import month_from_store
from fleet.presets import load_preset
from fleet.service.billing import STRETCH_HOURS, Hindsight
from fleet.service.calendar import Calendar
from fleet.service.pool import PoolWatch
from storage import open_store

T0 = 1_735_689_600  # 2025-01-01T00:00:00Z


def test_the_billing_job_and_the_stored_month_read_one_truth(tmp_path, store_url):
    scenario = load_preset("noise-evictor").resolve(overrides=["hours=72", "warmup_hours=24", "policy.window=12",
                                                               "policy.eviction.window=12"])
    drawn = draw_month(scenario)
    cards, hours = drawn.measured_tps.shape
    c, h = np.repeat(np.arange(cards), hours), np.tile(np.arange(hours), cards)
    keep = np.random.default_rng(3).random(c.size) > 0.25  # a quarter of the card-hours never measured
    keep &= ~((c == 0) & (h >= scenario.warmup_hours))  # card 0: measured in the warm-up only
    keep &= ~((c == 1) & (h >= scenario.warmup_hours + 40))  # card 1: silent from hour 40 of the month on
    src = tmp_path / "telemetry.csv"
    pd.DataFrame({"card_id": drawn.card_ids[c[keep]], "ts": T0 + h[keep] * HOUR_S + 60,
                  "tokens_per_s": drawn.measured_tps[c[keep], h[keep]].astype(np.float64)}).to_csv(src, index=False)
    repo = open_store(store_url, create=True).telemetry
    declare_pool(repo, scenario.classes, {str(k): scenario.classes[0].name for k in drawn.card_ids}, 0)
    assert ingest_file(repo, src, IngestSettings(now_ts=T0 + hours * HOUR_S)).quarantined == 0

    stored = month_from_store(store_url, scenario)
    month_start_ts = T0 + scenario.warmup_hours * HOUR_S
    truth = Hindsight(repo, Calendar(month_start_ts, scenario.hours))
    index = PoolWatch(repo, scenario.hours).current()
    for first in range(0, scenario.hours, STRETCH_HOURS):  # as the billing job bills: a stretch at a time
        rates, ticket = truth.rates(month_start_ts + first * HOUR_S, STRETCH_HOURS, index)
    billed = dict(zip(index.keys, ticket))
    assert (rates == ticket[:, None]).all()  # every hour of the stretch reads the same truth
    replayed = dict(zip(stored.card_ids, stored.true_tps))
    assert set(replayed) == set(billed) == {str(k) for k in drawn.card_ids}
    np.testing.assert_allclose([billed[k] for k in replayed], list(replayed.values()), rtol=1e-12)
    # The rule itself, from the telemetry sent: each card's mean over the month's hours it was measured in.
    sent = np.where(keep.reshape(cards, hours), drawn.measured_tps.astype(np.float64), np.nan)[:, scenario.warmup_hours:]
    seen = np.isfinite(sent)
    want = np.where(seen, sent, 0.0).sum(axis=1) / np.maximum(seen.sum(axis=1), 1)
    np.testing.assert_allclose([replayed[str(k)] for k in drawn.card_ids], want, rtol=1e-9)
    assert replayed[str(drawn.card_ids[0])] == 0.0  # nothing measured in the month: nothing served
