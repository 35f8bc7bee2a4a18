"""The ingest job: telemetry into the store, from the simulated feed, a drop folder or a Prometheus server.

The simulated feed sends the month's hours as the clock passes them and keeps
how far it has sent (`fed_through_ts`), which is a simulation's watermark. A
drop folder is taken file by file; Prometheus is asked for the last hours of
its query. Everything lands through `fleet.ingest`, which drops duplicates, so
re-sending an hour is free.
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

    def run(self) -> int:
        """Returns the records read."""
        from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes

        now = int(self.clock.now())
        settings = IngestSettings(now_ts=now, strict=self.sim is not None or self.cfg.ingest.strict,
                                  default_class=self.cfg.ingest.default_class or "unassigned")
        if self.sim is not None:
            lo = int(self.fed_through_ts or self.sim.first_ts)
            hi = min(self.sim.end_ts, (now // HOUR_S) * HOUR_S)
            if hi <= lo:
                return 0
            parsed = parse_bytes(self.sim.telemetry_csv(lo, hi), "csv", f"simulation:{self.sim.scenario.name}:{lo}-{hi}")
            report = ingest_parsed(self.repo, parsed, settings)
            self.fed_through_ts = hi
            return report.read
        read = 0
        if self.cfg.ingest.folder:
            read += self._folder(Path(self.cfg.ingest.folder), settings)
        if self.cfg.ingest.prometheus_url:
            read += self._prometheus(settings)
        return read

    def _folder(self, folder: Path, settings) -> int:
        """Take each finished file in the drop folder once; move it to done/ (or failed/ with a bad file)."""
        from fleet.ingest import BadSource, FORMATS, ingest_file

        read = 0
        if not folder.is_dir():
            raise FileNotFoundError(f"ingest folder {str(folder)!r} does not exist")
        for p in sorted(folder.iterdir()):
            # Writers drop a file by renaming it in: names starting with '.' are still being written.
            if not p.is_file() or p.name.startswith(".") or p.suffix.lower() not in FORMATS:
                continue
            try:
                read += ingest_file(self.repo, p, settings).read
                dest = folder / "done"
            except BadSource as err:
                log.warning("%s", err)
                dest = folder / "failed"
            dest.mkdir(exist_ok=True)
            p.replace(dest / p.name)
        return read

    def _prometheus(self, settings) -> int:
        import json
        import urllib.parse
        import urllib.request

        from fleet.ingest import ingest_parsed, parse_prometheus

        ing = self.cfg.ingest
        end = int(self.clock.now()) // ing.step_s * ing.step_s
        last = self.store.last_rollup_ts()
        start = max(end - 6 * HOUR_S, last if last is not None else end - HOUR_S)
        query = urllib.parse.urlencode({"query": ing.query, "start": start, "end": end, "step": ing.step_s})
        url = f"{ing.prometheus_url.rstrip('/')}/api/v1/query_range?{query}"
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 (the operator's configured server)
            body = resp.read()
        json.loads(body)  # an unreachable or broken server fails the job here, counted as an error
        return ingest_parsed(self.repo, parse_prometheus(body, url, ing.card_label), settings).read
