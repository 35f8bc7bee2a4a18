"""The ingest job: telemetry into the store, from the simulated feed, a drop folder or a Prometheus server.

The simulated feed sends the month's hours as the clock passes them and keeps
how far it has sent (`fed_through_ts`), which is a simulation's watermark. A
drop folder is drained by `fleet.ingest.drop`, the same code as `fleet ingest
--watch`; Prometheus is asked for the last hours of its rate and busy queries
through `fleet.ingest.prometheus`, with the configured credentials, and the
pool's demand source (`fleet.ingest.demand`) for the same range. Everything
lands through `fleet.ingest`, which drops duplicates, so re-sending an hour is
free.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.service.calendar import HOUR_S

if TYPE_CHECKING:
    from fleet.service.config import ServiceConfig
    from fleet.service.simulation import Clock, Simulation
    from storage.interfaces import JournalStore, TelemetryStore

log = logging.getLogger("fleet.service.telemetry")


class IngestJob:
    """Feed the telemetry that is due into the store."""

    def __init__(self, cfg: ServiceConfig, repo: TelemetryStore, store: JournalStore, clock: Clock,
                 sim: Simulation | None = None):
        self.cfg = cfg
        self.repo = repo
        self.store = store
        self.clock = clock
        self.sim = sim
        self.fed_through_ts: int | None = None
        if sim is not None:
            last = store.last_rollup_ts()
            self.fed_through_ts = sim.first_ts if last is None else last  # re-send the last hour: duplicates are free

    def settings(self):
        """How records are judged now, by the service's clock (a drop folder asks per file)."""
        from fleet.ingest import IngestSettings

        return IngestSettings(now_ts=int(self.clock.now()), strict=self.sim is not None or self.cfg.ingest.strict,
                              default_class=self.cfg.ingest.default_class or "unassigned")

    def run(self) -> int:
        """Returns the records read."""
        from fleet.ingest import ingest_parsed, parse_bytes

        settings = self.settings()
        if self.sim is not None:
            lo = int(self.fed_through_ts or self.sim.first_ts)
            hi = min(self.sim.end_ts, (settings.now_ts // HOUR_S) * HOUR_S)
            if hi <= lo:
                return 0
            parsed = parse_bytes(self.sim.telemetry_csv(lo, hi), "csv", f"simulation:{self.sim.scenario.name}:{lo}-{hi}")
            report = ingest_parsed(self.repo, parsed, settings)
            self.fed_through_ts = hi
            return report.read
        read = 0
        if self.cfg.ingest.folder:
            read += self._folder(Path(self.cfg.ingest.folder))
        if self.cfg.ingest.prometheus_url:
            read += self._prometheus(settings)
        return read

    def _folder(self, folder: Path) -> int:
        """Drain the drop folder as `fleet ingest --watch` does (one implementation: claim, settle, done/, failed/).

        A file is settled once its mtime is `settle_s` behind the service's clock (the wall clock of a real pool;
        a drop folder is not read under `--simulate`). A bad file goes to failed/ with NAME.error.txt and the others are taken all the same; a store failure
        raises and leaves its file in processing/, taken first next time."""
        from fleet.ingest import drain_drop_folder

        settle_s = self.cfg.ingest.settle_s
        read = 0
        for result in drain_drop_folder(self.repo, folder, self.settings, settle_s=settle_s, clock=self.clock.now):
            if result.report is not None:
                read += result.report.read
            else:
                log.warning("%s (moved to %s)", result.error, result.moved_to)
        return read

    def _prometheus(self, settings) -> int:
        """Pull the rate and busy queries since the last rolled-up hour (at most 6 hours back, an hour at first)."""
        from fleet.ingest import ingest_prometheus
        from fleet.ingest.demand import pull_demand

        ing = self.cfg.ingest
        end = int(self.clock.now()) // ing.step_s * ing.step_s
        last = self.store.last_rollup_ts()
        start = min(max(end - 6 * HOUR_S, last if last is not None else end - HOUR_S), end - ing.step_s)
        report = ingest_prometheus(self.repo, ing.prometheus_url, ing.query, start, end, ing.step_s, settings, ing.card_label,
                                   busy_query=ing.busy_query, auth=ing.auth)
        demand = pull_demand(self.repo, ing.demand_source_name, ing.prometheus_url, start, end, ing.step_s,
                             ing.demand_source_query, ing.auth)
        return report.read + demand.read
