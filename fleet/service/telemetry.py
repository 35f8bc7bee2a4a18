"""The ingest job: telemetry into the store, from the simulated feed or the sources `[ingest.sources]` turns on.

The sources are the registry's (`fleet.ingest.sources`: a drop folder drained by the same code as `fleet ingest
--watch`, a Prometheus server's rate, busy and demand queries since the last rolled-up hour, ...): the job asks
each source whose table is given for its run's records, and never tests a source by its name. Under `--simulate`
the month's own feed is the one source: it sends the month's hours as the clock passes them and keeps how far it
has sent (`fed_through_ts`), which is a simulation's watermark. Everything lands through `fleet.ingest`, which
drops duplicates, so re-sending an hour is free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from fleet.service.calendar import HOUR_S

if TYPE_CHECKING:
    from fleet.ingest.sources import IngestRun
    from fleet.service.config import ServiceConfig
    from fleet.service.simulation import Clock, Simulation
    from storage.interfaces import JournalStore, TelemetryStore



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
        self.pulls: list[Callable[[IngestRun], int]]
        if sim is not None:
            last = repo.last_rollup_ts()
            self.fed_through_ts = sim.first_ts if last is None else last  # re-send the last hour: duplicates are free
            self.pulls = [self._simulated]
        else:
            self.pulls = [source.pull for source in cfg.ingest.telemetry_sources()]

    def settings(self):
        """How records are judged now, by the service's clock (a drop folder asks per file)."""
        from fleet.ingest import IngestSettings

        return IngestSettings(now_ts=int(self.clock.now()), strict=self.sim is not None or self.cfg.ingest.strict,
                              default_class=self.cfg.ingest.default_class or "unassigned")

    def run(self) -> int:
        """Returns the records read."""
        from fleet.ingest.sources import IngestRun

        run = IngestRun(self.repo, self.settings, self.clock.now, self.repo.last_rollup_ts)
        return sum(pull(run) for pull in self.pulls)

    def _simulated(self, run: IngestRun) -> int:
        """The simulated month's hours from where the feed stopped to the last whole hour of the clock."""
        from fleet.ingest import ingest_parsed, parse_bytes

        settings = run.settings()
        lo = int(self.fed_through_ts or self.sim.first_ts)
        hi = min(self.sim.end_ts, (settings.now_ts // HOUR_S) * HOUR_S)
        if hi <= lo:
            return 0
        parsed = parse_bytes(self.sim.telemetry_csv(lo, hi), "csv", f"simulation:{self.sim.scenario.name}:{lo}-{hi}")
        report = ingest_parsed(run.repo, parsed, settings)
        self.fed_through_ts = hi
        return report.read
