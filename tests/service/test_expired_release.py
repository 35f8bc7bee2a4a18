"""An action that expired changes what the next hour believes once: the card counts as the pool is known to run it.

A real pool's service fed by files starts hours behind its clock and, as `fleet serve` runs it, decides its catch-up
hours before the act job gets to them: hour 0 adds two cards, the demand falls and hour 2 releases one; then every
one of those actions ends more than `expire_after_s` ago and is journaled as expired. The released card never ran:
its add expired as its release did, so the hours after count it as not running and do not release it again.

Before: the expired release put the card back among the running, so every hour released it again (and each of
those expired in turn), and `fleet explain` called every expired decision "journaled and not yet acted on"."""

from __future__ import annotations

import json
import os

from fleet.service.calendar import HOUR_S
from storage import open_store
from tests.fake_prometheus import StepClock
from tests.service.real_pool import FLAGSHIP_DAY, T0
from tests.service.test_service import run_cli

CONFIG = FLAGSHIP_DAY + """\
[schedule]
settle_s = 300
[actuator]
expire_after_s = 1800
[ingest]
default_class = "flagship"
[ingest.sources.drop-folder]
folder = "{drop}"
"""

RATES = {"gpu-a": 6000.0, "gpu-b": 5000.0, "gpu-c": 3000.0, "gpu-d": 5500.0}


def _drop_hour(drop, h: int) -> None:
    """Hour h's telemetry (three samples a card) and demand: 10,000 tok/s to hour 0, 4,000 from hour 1."""
    demand_tps = 10000 if h <= 0 else 4000
    rows = ["card_id,ts,tokens_per_s"] + [f"{c},{T0 + h * HOUR_S + 60 * m},{r}" for m in range(3) for c, r in RATES.items()]
    (drop / f"hour{h + 10}.csv").write_text("\n".join(rows) + "\n")
    demand = ["ts,demand_tps"] + [f"{T0 + h * HOUR_S + 60 * m},{demand_tps}" for m in range(3)]
    (drop / f"hour{h + 10}.demand.csv").write_text("\n".join(demand) + "\n")
    for p in drop.glob(f"hour{h + 10}*"):
        os.utime(p, (T0 + h * HOUR_S, T0 + h * HOUR_S))


def _service(tmp_path, url: str, clock: StepClock):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service

    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(CONFIG.format(drop=drop))
    svc = Service(load_service_config(tmp_path / "fleet.toml"), open_store(url, create=True), clock)
    svc.journal.wake = lambda: None  # as `fleet serve` runs it: deciding hands acting to the act job
    return svc, drop


def _tick(svc) -> None:
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.act_job):
        job()


def test_an_expired_release_is_not_released_again(tmp_path, store_url, capsys):
    clock = StepClock(T0 + 4 * HOUR_S + 400)
    svc, drop = _service(tmp_path, store_url, clock)
    for h in range(-3, 4):
        _drop_hour(drop, h)
    _tick(svc)  # hours 0-3 decided in one run, then acted: each ended more than 1,800 s ago, so each expires
    store = svc.journal_store
    (released,) = store.decisions(kinds=["release"])
    card = released.card_key
    (add,) = store.decisions(kinds=["add"], card_key=card)
    assert add.ts == T0 and released.ts > add.ts
    expired = {r.record.decision_key for r in store.decisions(kinds=["act-expired"])}
    assert {add.key, released.key} <= expired

    for h in range(4, 8):  # on time from here: each hour decided and acted within the hour
        _drop_hour(drop, h)
        clock.t = T0 + (h + 1) * HOUR_S + 400
        _tick(svc)
    assert [r.key for r in store.decisions(kinds=["release"], card_key=card)] == [released.key]  # released once
    sizes = [r for r in store.decisions(kinds=["size"]) if r.ts > released.ts]
    assert sizes and all(card not in s.record.counted_running for s in sizes)  # never counted as running again
    assert card not in store.run_set_at(T0 + 7 * HOUR_S)

    code, out, err = run_cli(capsys, "explain", card, "--db", store_url)
    assert code == 0, err
    assert "not yet acted on" not in out
    assert f"{card} is not warm; it joined the run set 0 times and left it 0 times" in out
    assert "release (expired): released" in out
    assert "2 of its decisions expired before they were carried out" in out
    code, out, err = run_cli(capsys, "explain", card, "--db", store_url, "--json")
    assert code == 0, err
    got = {c["kind"]: c["outcome"] for c in json.loads(out)["warm_changes"]}
    assert got == {"add": "expired", "release": "expired"}
