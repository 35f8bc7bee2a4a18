"""A real pool's measured demand in the service: the hour's demand from its parts, read by the decide job only from
the hours before the one it sizes, and written into the bill and the journal once the hour is over."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from fleet.core.errors import ConfigError
from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes
from fleet.service.demand import hour_demand_tps
from storage.demand import DemandHour
from storage.repository import open_repository
from storage.values import DemandBatch
from tests.fake_prometheus import StepClock
from fleet.core.units import HOUR_S
from tests.service.real_pool import DAY_MONTH, FLAGSHIP_CLASS

T0 = 1_767_225_600  # 2026-01-01T00:00Z
RATES = {"gpu-a": 6000.0, "gpu-b": 5000.0, "gpu-c": 3000.0, "gpu-d": 5500.0}


def test_an_hours_demand_is_offered_or_served_plus_unserved():
    assert hour_demand_tps(DemandHour(0, 5000.0, 1500.0, None)) == 6500.0
    assert hour_demand_tps(DemandHour(0, 5000.0, None, None)) == 5000.0  # no queue measured: what was served
    assert hour_demand_tps(DemandHour(0, 5000.0, -6000.0, None)) == 0.0  # a draining queue never makes it negative
    assert hour_demand_tps(DemandHour(0, 5000.0, 1500.0, 9000.0)) == 9000.0  # measured whole: the offered tokens
    assert np.isnan(hour_demand_tps(None)) and np.isnan(hour_demand_tps(DemandHour(0, None, None, None)))


def write_demand(repo, batch: DemandBatch, replace: bool = False):
    """Store a batch of demand samples as an ingest of its own would: its outcome."""
    from storage.values import BatchOrigin, Rejected

    run = repo.begin_run("test", f"test-{batch.part}-{int(batch.ts[0])}-{len(batch)}", T0)
    out = repo.write_demand_batch(BatchOrigin(run, 0, 1, "test", f"digest-{run}"), batch, Rejected(), T0,
                                  lambda nos: [f"record {n}" for n in nos], replace=replace)
    repo.finish_run(run, T0)
    return out


def test_demand_samples_are_stored_once_and_read_by_hour(store_url):
    repo = open_repository(store_url)
    batch = DemandBatch("unserved", np.array([T0, T0 + 60, T0 + HOUR_S]), np.array([100.0, 300.0, -50.0]))
    counts = lambda o: (o.read, o.stored, o.duplicates, o.quarantined, o.reasons)  # noqa: E731
    assert counts(write_demand(repo, batch)) == (3, 3, 0, 0, {})
    assert counts(write_demand(repo, DemandBatch("unserved", np.array([T0]), np.array([100.0])))) == (1, 0, 1, 0, {})
    out = write_demand(repo, DemandBatch("unserved", np.array([T0]), np.array([999.0])))
    assert counts(out) == (1, 0, 0, 1, {"conflicting-duplicate": 1})  # the stored value stands
    write_demand(repo, DemandBatch("offered", np.array([T0 + 2 * HOUR_S]), np.array([7000.0])))
    telemetry = "card_id,ts,tokens_per_s\n" + "".join(f"{c},{T0 + 60 * m},{r}\n" for c, r in RATES.items() for m in range(2))
    ingest_parsed(repo, parse_bytes(telemetry.encode(), "csv", "t.csv"), IngestSettings(now_ts=T0 + 10 * HOUR_S, default_class="flagship"))
    got = repo.demand_hours(T0, T0 + 3 * HOUR_S)
    assert got == {T0: DemandHour(T0, sum(RATES.values()), 200.0, None), T0 + HOUR_S: DemandHour(T0 + HOUR_S, None, -50.0, None),
                   T0 + 2 * HOUR_S: DemandHour(T0 + 2 * HOUR_S, None, None, 7000.0)}
    assert repo.demand_hours(T0 + 3 * HOUR_S, T0 + 4 * HOUR_S) == {}


def _pool(tmp_path, name: str, demand_tps: dict[int, float], forecast: str = "last-hour", url: str | None = None):
    """A real pool with four cards' telemetry for hours -1..5 and the given measured demand by month hour,
    stepped through the hours 0..4 on a hand-moved clock; its store at `url` (a SQLite file of its own if none)."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service

    (tmp_path / f"{name}.toml").write_text(DAY_MONTH + FLAGSHIP_CLASS + textwrap.dedent(f"""\
        [policy]
        card_class = "flagship"
        window = "hour"
        mode = "steady"
        forecast = "{forecast}"
        [schedule]
        settle_s = 300
        [ingest]
        default_class = "flagship"
        """))
    cfg = load_service_config(tmp_path / f"{name}.toml")
    repo = open_repository(url or f"sqlite:///{tmp_path / name}.db")
    rows = "card_id,ts,tokens_per_s\n" + "".join(
        f"{c},{T0 + h * HOUR_S + 60 * m},{r}\n" for h in range(-1, 6) for m in range(3) for c, r in RATES.items())
    ingest_parsed(repo, parse_bytes(rows.encode(), "csv", "t.csv"), IngestSettings(now_ts=T0 + 10 * HOUR_S, default_class="flagship"))
    hours = sorted(demand_tps)
    write_demand(repo, DemandBatch("offered", np.array([T0 + h * HOUR_S for h in hours]), np.array([demand_tps[h] for h in hours])))
    clock = StepClock(T0 + 5 * HOUR_S + 301)
    return Service(cfg, repo, clock), clock


def _sizes(svc) -> dict[int, dict]:
    return {(r.ts - T0) // HOUR_S: r.detail for r in svc.journal_store.decisions(kinds=["size"], since_ts=T0, until_ts=T0 + 24 * HOUR_S)}


def test_the_decision_of_an_hour_cannot_read_its_own_measured_demand(tmp_path):
    """Two pools alike but for hour 2's measured demand: hour 2 is decided the same in both (its forecast, target
    and run set), hour 3 (forecast from hour 2) is not. Were the view to read the hour it sizes, hour 2 would differ."""
    base = {0: 6000.0, 1: 6000.0, 2: 6000.0, 3: 6000.0, 4: 6000.0}
    one, _ = _pool(tmp_path, "one", base)
    other, _ = _pool(tmp_path, "other", {**base, 2: 15000.0})
    for svc in (one, other):
        for job in (svc.score_job, svc.decide_job):
            job()
    a, b = _sizes(one), _sizes(other)
    assert sorted(a) == sorted(b) == [0, 1, 2, 3, 4, 5]
    for key in ("demand_forecast_tps", "target_tps", "run_set_cards"):
        assert a[2][key] == b[2][key], key
    assert one.journal_store.run_set_at(T0 + 2 * HOUR_S) == other.journal_store.run_set_at(T0 + 2 * HOUR_S)
    assert a[3]["demand_forecast_tps"] == pytest.approx(6000) and b[3]["demand_forecast_tps"] == pytest.approx(15000)
    assert b[3]["run_set_cards"] > a[3]["run_set_cards"]


def test_the_bill_and_the_journal_take_the_measured_demand_once_the_hour_is_over(tmp_path):
    svc, clock = _pool(tmp_path, "p", {0: 6000.0, 1: 8000.0, 3: 12000.0})
    for job in (svc.score_job, svc.decide_job, svc.billing_job):
        job()
    hours = {(h.hour_ts - T0) // HOUR_S: h for h in svc.journal_store.hours(T0)}
    assert sorted(hours) == [0, 1, 2, 3, 4]  # hour 5 has not ended (nor settled)
    # Hour 2 has no demand measured beside its telemetry: what its cards served, measured all the same.
    want = {0: 6000.0, 1: 8000.0, 2: sum(RATES.values()), 3: 12000.0, 4: sum(RATES.values())}
    for h, row in hours.items():
        assert row.demand_tps == row.demand_measured_tps == pytest.approx(want[h])
        assert row.delivered_tps == pytest.approx(min(want[h], row.capacity_tps))
    sizes = _sizes(svc)
    assert all(sizes[h]["demand_measured_tps"] == pytest.approx(want[h]) for h in hours)
    assert "demand_measured_tps" not in sizes[5]
    assert sizes[2]["demand_forecast_tps"] == pytest.approx(8000)  # last hour's
    # /metrics: the forecast the last decided hour (5) was sized to, the demand of the last billed one (4), and the
    # mean |forecast - measured| of the billed hours 0..4 (hour 0's forecast is what hour -1's cards served).
    from tests.service.test_metrics import families, sample

    snap = svc.metrics_job()
    fams, _ = families(snap=snap)
    assert sample(fams, "fleet_demand_forecast_tps") == pytest.approx(sum(RATES.values()))
    assert sample(fams, "fleet_demand_measured_tps") == pytest.approx(want[4])
    assert sizes[0]["demand_forecast_tps"] == pytest.approx(sum(RATES.values()))
    errors = [abs(sizes[h]["demand_forecast_tps"] - want[h]) for h in range(5)]
    assert sample(fams, "fleet_demand_forecast_error_tps") == pytest.approx(sum(errors) / 5)


def test_an_hour_with_nothing_measured_is_nan_to_the_forecaster_and_billed_at_zero(tmp_path):
    svc, clock = _pool(tmp_path, "p", {0: 6000.0})
    clock.t += 4 * HOUR_S  # hours 6..8 have no telemetry and no demand
    for job in (svc.score_job, svc.decide_job, svc.billing_job):
        job()
    sizes = _sizes(svc)
    measured = svc.frame.demand.hours_tps(T0 + 4 * HOUR_S, 4)
    assert measured[:2] == pytest.approx([sum(RATES.values())] * 2) and np.isnan(measured[2:]).all()
    # last-hour passes over the unmeasured hour 6: hour 7's forecast is hour 5's served demand
    assert sizes[7]["demand_forecast_tps"] == pytest.approx(sum(RATES.values()))
    row = {(h.hour_ts - T0) // HOUR_S: h for h in svc.journal_store.hours(T0)}[6]
    assert row.demand_tps == 0 and row.demand_measured_tps is None


def test_a_real_pool_cannot_know_its_demand_ahead(tmp_path):
    with pytest.raises(ConfigError, match="measured, not known ahead"):
        _pool(tmp_path, "p", {0: 1.0}, forecast="known")


def test_a_dropped_demand_file_is_taken_once_a_bad_line_quarantined_and_a_bad_file_goes_to_failed(tmp_path):
    import os

    from fleet.ingest import drain_drop_folder
    from storage import sqlite_memory_repository

    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "gw.demand.csv").write_text(f"ts,demand_tps\n{T0},4000\n")
    (drop / "lines.demand.csv").write_text(f"ts,demand_tps\n{T0 + HOUR_S},lots\n{T0 + HOUR_S},3000\n")
    (drop / "bad.demand.csv").write_text("time,tps\n1,2\n")
    (drop / "x.demand.txt").write_text("ts,demand_tps\n")  # not a known suffix: left alone, as any such file is
    for p in drop.iterdir():
        os.utime(p, (1, 1))
    repo = sqlite_memory_repository()
    results = {r.name: r for r in drain_drop_folder(repo, drop, IngestSettings(now_ts=T0 + 2 * HOUR_S), clock=lambda: T0)}
    assert results["gw.demand.csv"].report.stored == 1
    lines = results["lines.demand.csv"].report
    assert (lines.stored, lines.quarantined, lines.reasons) == (1, 1, {"unparseable:demand_tps": 1})
    assert (drop / "done" / "lines.demand.csv").exists()
    assert "missing columns ts, demand_tps" in results["bad.demand.csv"].error
    assert (drop / "failed" / "bad.demand.csv.error.txt").exists() and (drop / "x.demand.txt").exists()
    assert repo.demand_hours(T0, T0 + 2 * HOUR_S) == {T0: DemandHour(T0, None, None, 4000.0),
                                                      T0 + HOUR_S: DemandHour(T0 + HOUR_S, None, None, 3000.0)}
    rows, n = repo.quarantined()
    assert n == 1 and (rows[0]["line"], rows[0]["reason"]) == (2, "unparseable:demand_tps")


def test_a_pulled_demand_source_is_held_to_the_same_bounds(store_url):
    """A Prometheus demand query answering 1e308, +Inf, a time in epoch milliseconds or before 2000: each point
    quarantined with its reason, the sound ones stored (it was 1e308 stored and a forecast of 3.94e110 tok/s)."""
    from fleet.ingest.demand import pull_demand
    from tests.fake_prometheus import fake_prometheus, matrix

    repo = open_repository(store_url)
    points = [[T0, "4000"], [T0 + 60, "1e308"], [T0 + 120, "+Inf"], [T0 * 1000, "4000"], [T0 + 180, "-5"],
              [900_000_000, "4000"], [T0 + 240, "NaN"], [T0 + 300, "4200"]]
    with fake_prometheus() as prom:
        prom.otherwise = matrix({"metric": {}, "values": points})
        report = pull_demand(repo, "query", prom.url, T0, T0 + 600, 60, IngestSettings(now_ts=T0 + HOUR_S), query="q")
    assert (report.read, report.stored, report.quarantined) == (7, 2, 5)  # the NaN point is no sample: nothing measured
    assert report.reasons == {"implausible:demand_tps": 1, "non-finite:demand_tps": 1, "out-of-range:ts": 2,
                              "negative:demand_tps": 1}
    assert repo.demand_hours(T0 - HOUR_S, T0 + HOUR_S) == {T0: DemandHour(T0, None, None, 4100.0)}


def test_a_demand_source_that_is_down_is_said_and_never_read_as_no_demand(tmp_path, store_url, caplog):
    """The demand source answered for hour 0 only; the telemetry came for hours 0..5 (a drop folder, say), then
    nothing for hours 6..8. Hours 1..5 are billed on what the pool served alone and hours 6..8 at demand 0, each said
    in the log and in `fleet status`; idle, ideal, convergence and the checks read hours 0..5 only; the size record
    of an hour after unmeasured ones says how many; `status`, `explain` and `/metrics` say when the source last
    answered. On SQLite and PostgreSQL."""
    import json
    import logging

    from fleet.service.readmodel import MonthView, stored_month_totals
    from tests.cli.test_ingest_statuses import fleet
    from tests.service.test_metrics import SCRAPE_TS, families, sample

    svc, clock = _pool(tmp_path, "p", {0: 6000.0}, url=store_url)
    clock.t += 4 * HOUR_S
    with caplog.at_level(logging.WARNING, logger="fleet.service.billing"):
        for job in (svc.score_job, svc.decide_job, svc.billing_job):
            job()
    hours = svc.journal_store.hours(T0)
    assert [(h.hour_ts - T0) // HOUR_S for h in hours if h.demand_measured_tps is None] == [6, 7, 8]
    said = [r.getMessage() for r in caplog.records]
    assert ("demand: 5 hour(s) billed on what the pool served alone (2026-01-01T01:00Z to 2026-01-01T05:00Z): no "
            "demand source answered; their demand was at least that and may have been more") in said
    assert ("demand: 3 hour(s) billed unmeasured (2026-01-01T06:00Z to 2026-01-01T08:00Z): no demand source answered "
            "and no telemetry came; billed at demand 0, the month's checks skip them") in said
    # The decide job's fallback, journaled: how many hours before each had no demand measured.
    sizes = _sizes(svc)
    assert {h: sizes[h].get("demand_unmeasured_hours", 0) for h in range(5, 10)} == {5: 0, 6: 0, 7: 1, 8: 2, 9: 3}

    p = fleet("status", "--db", store_url, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert ("demand: 3 billed hours unmeasured (2026-01-01T06:00Z to 2026-01-01T08:00Z; last measured "
            "2026-01-01T05:00Z): no demand source answered; their rent is billed, idle, ideal and the checks skip "
            "them") in lines
    assert "demand source: last answered 2026-01-01T00:00Z (its newest sample)" in lines
    assert ("demand: 5 billed hours read from what the pool served alone (2026-01-01T01:00Z to 2026-01-01T05:00Z): "
            "no demand source measured them; their demand was at least that") in lines
    measured, everything = stored_month_totals(hours[:6]), stored_month_totals(hours)
    assert measured["convergence"] != pytest.approx(everything["convergence"])  # the hours skipped matter
    [judged] = [x for x in lines if x.startswith("idle $")]
    assert judged == (f"idle ${measured['idle_usd']:,.2f}; ideal ${measured['ideal_bill_usd']:,.2f}; convergence "
                      f"{measured['convergence']:.1%} (over the 6 hours with demand measured)")
    out = json.loads(fleet("status", "--db", store_url, "--json", cwd=tmp_path).stdout)
    assert (out["hours_unmeasured"], out["hours_served_alone"]) == (3, 5)
    assert out["demand_source_last_answered"] == "2026-01-01T00:00Z"
    assert out["bill_usd"] == pytest.approx(everything["bill_usd"])  # the rent of every billed hour was paid
    assert out["convergence"] == pytest.approx(measured["convergence"])
    assert out["checks"]["convergence"]["value"] == pytest.approx(measured["convergence"])

    p = fleet("explain", "gpu-a", "--db", store_url, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "  demand source: last answered 2026-01-01T00:00Z (its newest sample)" in p.stdout.splitlines()

    fams, text = families(snap=svc.metrics_job())
    assert sample(fams, "fleet_demand_source_last_answer_age_seconds") == pytest.approx(SCRAPE_TS - T0)
    assert "# HELP fleet_demand_source_last_answer_age_seconds" in text
    view = MonthView.on_view(svc.journal_store)  # a simulation's reader: every hour counted, as before
    assert view.unmeasured_hours == [] and view.figures["convergence"] == pytest.approx(everything["convergence"])
