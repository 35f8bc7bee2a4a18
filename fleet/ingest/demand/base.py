"""The demand sources' common parts: the request a source is asked, the registry, and storing what it measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fleet.core.registry import Registry
from fleet.ingest.formats import BadSource
from fleet.ingest.store import IngestReport
from storage.values import DemandBatch

if TYPE_CHECKING:
    from fleet.credentials import Credentials
    from storage.interfaces import TelemetryStore

DEMAND_FILE_SUFFIX = ".demand"
"""A dropped file named `NAME.demand.csv` is demand (ts, demand_tps), not telemetry."""


@dataclass(frozen=True)
class DemandRequest:
    """What a source is asked: a Prometheus server's range (pulled sources), or a file's bytes (file sources)."""

    name: str
    prometheus_url: str | None = None
    start_ts: float = 0.0
    end_ts: float = 0.0
    step_s: float = 60.0
    query: str | None = None  # the source's query (None: its default)
    auth: "Credentials | None" = None
    data: bytes | None = None


class DemandSource(Protocol):
    name: str
    part: str  # "offered": the whole demand; "unserved": the part the pool did not serve
    pulled: bool  # asks a Prometheus server (else reads a file)

    def samples(self, request: DemandRequest) -> DemandBatch:
        """The source's samples for the request; `BadSource` (one line naming the input) if it cannot be read."""


DEMAND_SOURCES: Registry[DemandSource] = Registry("demand source")
"""Each source a `Plugin` with nothing to set (`NoSettings`): a pulled one asks the query its Prometheus source's
settings give, a file source reads the file's bytes."""


def demand_source(name: str) -> DemandSource:
    """The registered source `name`; an unknown name is one `ConfigError` naming the known ones."""
    return DEMAND_SOURCES.build(name, {}, f"demand source {name!r}")


def source_of_file(name: str) -> DemandSource | None:
    """The file source for a dropped file named `NAME.demand.EXT` (its EXT names the source), or None."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem.lower().endswith(DEMAND_FILE_SUFFIX):
        return None
    return file_source(ext.lower(), name)


def file_source(ext: str, name: str) -> DemandSource:
    """The registered file source for the suffix `ext`; `BadSource` naming the file when there is none."""
    if ext in DEMAND_SOURCES and not demand_source(ext).pulled:
        return demand_source(ext)
    known = [n for n in DEMAND_SOURCES.names() if not demand_source(n).pulled]
    raise BadSource(f"demand file {name!r}: no demand reader for .{ext} files (known: {', '.join('.' + k for k in known)})")


def store_demand(repo: TelemetryStore, batch: DemandBatch, source: str) -> IngestReport:
    """Write a batch of measured demand; the report says stored and duplicates (a demand sample is never quarantined:
    a bad file is refused whole, before anything is written)."""
    stored, duplicates = repo.write_demand(batch)
    return IngestReport(source=source, read=len(batch), stored=stored, duplicates=duplicates)


def pull_demand(repo: TelemetryStore, source_name: str, base_url: str, start_ts: float, end_ts: float, step_s: float,
                query: str | None = None, auth: Credentials | None = None) -> IngestReport:
    """Ask a pulled source for its samples over [start_ts, end_ts] and store them."""
    source = demand_source(source_name)
    request = DemandRequest(f"demand {source.name}", base_url, start_ts, end_ts, step_s, query, auth)
    batch = source.samples(request)
    return store_demand(repo, batch, request.name)


def summed_matrix(body: bytes, name: str, part: str) -> DemandBatch:
    """A range query's answer as one series: the values of its series summed at each time (a point that is not a
    finite number, e.g. a division by no requests, is left out)."""
    from fleet.ingest.prometheus import _matrix

    total: dict[int, float] = {}
    for series in _matrix(body, name):
        for point in (series.get("values") if isinstance(series, dict) else None) or []:
            try:
                ts, v = int(float(point[0])), float(point[1])
            except (TypeError, ValueError, IndexError):
                continue
            if np.isfinite(v):
                total[ts] = total.get(ts, 0.0) + v
    ts = np.array(sorted(total), dtype=np.int64)
    return DemandBatch(part, ts, np.array([total[t] for t in ts.tolist()], dtype=np.float64))
