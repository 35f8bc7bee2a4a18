"""One builder for the store the operator commands' tests read: the tiny preset's month served in process on a
simulated clock (the service's jobs stepped by hand, no process, no port). Written once, so a change in how the
service or the store is started is made in one place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleet.presets import load_preset
from tests.service.serving import TINY_PRESET


@dataclass(frozen=True)
class ServedMonth:
    url: str  # the store's URL (SQLite, in the folder given)
    preset: Path  # the tiny preset's file, beside it
    service: object  # the fleet.service.service.Service that served it, its store still open


def serve_tiny_month(folder: Path) -> ServedMonth:
    """The tiny preset's whole month served into `folder`/served.db: its journal, its billed hours, its evictions."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config
    from storage.repository import open_repository

    preset = folder / "tiny.toml"
    preset.write_text(TINY_PRESET)
    scenario = load_preset(str(preset)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    url = f"sqlite:///{folder / 'served.db'}"
    svc = Service(cfg, open_repository(url), SimClock(cfg.month.start_ts, 1e9), simulation=Simulation.of(scenario, cfg.month.start_ts))
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    return ServedMonth(url, preset, svc)
