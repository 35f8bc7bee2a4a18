"""`fleet serve`'s service beside stand-in vLLM servers behind a real Prometheus: two cards serve what they can of
the load offered them and queue the rest; the service measures each hour's demand (served plus the queue's
growth), forecasts from it, journals forecast and measured demand, and bills and checks on the measured one.

The service runs in process on a `StepClock`, the stand-ins on a timeline of their own stamped on every sample,
so nothing asserted depends on when Prometheus scraped or the jobs ran."""

from __future__ import annotations

import json
import shutil
import textwrap
import urllib.parse
import urllib.request

import pytest

from fleet.ingest.demand.vllm_queue import unserved_query
from fleet.ingest.prometheus import busy_query, rate_query
from fleet.service.config import load_service_config
from fleet.service.demand import hour_demand_tps
from storage.repository import open_repository
from tests.fake_prometheus import StepClock
from tests.vllm_standin import Timeline, scraped_by_prometheus, stand_ins
from fleet.core.units import HOUR_S

PROMETHEUS = shutil.which("prometheus")
T0 = 1_767_225_600  # 2026-01-01T00:00Z
STEP_S = 60
# Offered tokens/s in each of four hours: card a serves up to 3,000, card b up to 2,000. Hour 1 asks more than
# both can serve (their queues grow), hours 2 and 3 less (the queues drain), so the served tokens alone are wrong
# in three hours of four.
CAPACITY_TPS = {"a": 3000.0, "b": 2000.0}
OFFERED_TPS = {"a": (2000.0, 4000.0, 2500.0, 3000.0), "b": (1500.0, 2500.0, 1000.0, 1000.0)}


def _instant(url: str, expr: str, at: float) -> list:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
            return json.load(resp)["data"]["result"]
    except OSError:
        return []


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_the_service_measures_forecasts_and_bills_the_demand_vllm_was_offered(tmp_path):
    timelines = {card: Timeline(T0, STEP_S, CAPACITY_TPS[card], OFFERED_TPS[card]) for card in CAPACITY_TPS}
    with stand_ins(*timelines.values()) as servers, scraped_by_prometheus(PROMETHEUS, tmp_path, servers) as url:
        names = {s.target: card for card, s in zip(timelines, servers)}
        end = T0 + 4 * HOUR_S + STEP_S
        held = _instant(url, "count_over_time(vllm:generation_tokens_total[5h])", end)
        assert {r["metric"]["instance"] for r in held} == set(names)
        _serve(tmp_path, url, names)


def _serve(tmp_path, url: str, names: dict[str, str]) -> None:
    from fleet.service.service import Service

    window = "90s"  # two of the stand-ins' one-minute steps: each point's rate reads exactly its own minute
    (tmp_path / "fleet.toml").write_text(textwrap.dedent(f"""\
        [month]
        start = 2026-01-01T00:00:00Z
        hours = 24
        [[pool.classes]]
        name = "flagship"
        rated_tps = 3000
        rent_usd_per_month = 2690
        [policy]
        card_class = "flagship"
        window = "hour"
        mode = "steady"
        forecast = "last-hour"
        [schedule]
        settle_s = 300
        [ingest]
        default_class = "flagship"
        [ingest.sources.prometheus]
        prometheus_url = "{url}"
        query = '{rate_query(window=window)}'
        busy_query = '{busy_query(window=window, resolution="60s")}'
        queue_query = '{unserved_query(window=window)}'
        """))
    cfg = load_service_config(tmp_path / "fleet.toml")
    clock = StepClock(T0 + 301)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 'fleet.db'}"), clock)
    while clock.t <= T0 + 4 * HOUR_S + 301 + 600:
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
        clock.t += 600
    hours_ts = [T0 + h * HOUR_S for h in range(4)]
    offered = [sum(OFFERED_TPS[c][h] for c in CAPACITY_TPS) for h in range(4)]
    stored = svc.telemetry.demand_hours(T0, T0 + 4 * HOUR_S)
    measured = [hour_demand_tps(stored.get(ts)) for ts in hours_ts]
    print("offered", offered, "measured", [round(m, 1) for m in measured], "served, unserved",
          [(round(stored[ts].served_tps or 0, 1), round(stored[ts].unserved_tps or 0, 1)) for ts in hours_ts])
    for m, o in zip(measured, offered):
        assert m == pytest.approx(o, rel=0.05)
    # Hour 1 asked 6,500 of cards serving 5,000: the queue's growth is the 1,500 not served.
    assert stored[hours_ts[1]].served_tps == pytest.approx(5000, rel=0.05)
    assert stored[hours_ts[1]].unserved_tps == pytest.approx(1500, rel=0.05)
    sizes = {r.ts: r.detail for r in svc.journal_store.decisions(kinds=["size"], since_ts=T0, until_ts=T0 + 4 * HOUR_S)}
    assert sorted(sizes) == hours_ts
    for h, ts in enumerate(hours_ts):
        assert sizes[ts]["demand_measured_tps"] == pytest.approx(measured[h])
        assert "knew_demand" not in sizes[ts]
    assert "demand_forecast_tps" not in sizes[T0]  # nothing measured before the month's first hour
    for h in range(1, 4):  # the last hour's measured demand is the next hour's forecast
        assert sizes[hours_ts[h]]["demand_forecast_tps"] == pytest.approx(measured[h - 1])
    billed = svc.journal_store.hours(T0)[:4]
    for h, row in enumerate(billed):
        assert row.demand_tps == row.demand_measured_tps == pytest.approx(measured[h])
        assert row.delivered_tps == pytest.approx(min(measured[h], row.capacity_tps))
    # Hour 1 is sized to hour 0's 3,500 tok/s and offered 6,500: the capacity check sees the shortfall.
    assert billed[1].delivered_tps < billed[1].demand_tps
