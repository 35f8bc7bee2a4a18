"""`fleet status` on a real pool's store once an hour is decided and before the first bill: the run set, the
decisions and the demand, and a line saying the bill comes later, exit 0.

Before: `fleet status` exited 2 with "no billed hour yet (has `fleet serve` run on it?)" until the billing job had
billed an hour, though the service had decided hours and the pool ran their run set."""

from __future__ import annotations

import json

import pytest

from fleet.service.calendar import HOUR_S
from tests.fake_prometheus import StepClock
from tests.service.real_pool import T0
from tests.service.test_expired_release import _drop_hour, _service
from tests.service.test_service import run_cli


def _decided_not_billed(tmp_path, url: str):
    """A real pool fed by files, its hours 0 and 1 decided and acted on time, none billed yet."""
    clock = StepClock(T0 + 400)
    svc, drop = _service(tmp_path, url, clock)
    for h in range(-3, 1):
        _drop_hour(drop, h)
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.act_job):
        job()
    _drop_hour(drop, 1)
    clock.t = T0 + HOUR_S + 400
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.act_job):
        job()
    assert svc.journal_store.last_billed_ts() is None and svc.journal_store.last_decided_ts(T0, T0 + 24 * HOUR_S)
    return svc


def test_status_shows_the_decided_hours_before_the_first_bill(tmp_path, store_url, capsys):
    svc = _decided_not_billed(tmp_path, store_url)
    run_set = sorted(svc.journal_store.run_set_at(T0 + HOUR_S))
    assert run_set

    code, out, err = run_cli(capsys, "status", "--db", store_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "month from 2026-01-01T00:00Z: no hour billed yet, decided through 2026-01-01T01:00Z"
    assert lines[1].startswith(f"run set: {len(run_set)} cards for 10,000 tok/s demand (target 10,000")
    assert "demand of 2026-01-01T01:00Z (last decided): forecast 10,000 tok/s, measured not yet" in lines
    assert "decisions so far: 2 adds, 0 releases, 0 evictions; 2 acted (`fleet journal` lists them)" in lines
    assert any(ln.startswith("bill: none yet; the billing job bills each decided hour once it has ended") for ln in lines)
    assert not any(ln.startswith(("bill so far", "check ")) for ln in lines)
    for card in run_set:
        assert any(ln.split()[:1] == [card] and "warm" in ln for ln in lines), card

    code, out, err = run_cli(capsys, "status", "--db", store_url, "--json")
    assert (code, err) == (0, "")
    got = json.loads(out)
    assert (got["hours_billed"], got["hour_decided"], got["run_set"]) == (0, "2026-01-01T01:00Z", run_set)
    assert got["last_billed"] is None and got["bill_by_part_usd"] == {} and got["checks"] == {}
    assert got["decisions"]["adds"] == {"decided": 2, "acted": 2}
    assert got["demand_forecast_tps"] == pytest.approx(10000.0)


def test_status_on_a_store_with_nothing_decided_says_so(tmp_path, store_url, capsys):
    from fleet.ingest.pool import declare_pool
    from storage import open_store
    from storage.repository import ClassSpec

    store = open_store(store_url, create=True)
    declare_pool(store.telemetry, [ClassSpec("flagship", 6000.0, 2690.0)], {"gpu-a": "flagship"}, 0)
    store.close()
    code, out, err = run_cli(capsys, "status", "--db", store_url)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("fleet: error: database ") and line.endswith(": no hour decided yet (has `fleet serve` run on it?)")
