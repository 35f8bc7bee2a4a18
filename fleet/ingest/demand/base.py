"""The demand sources' common parts: the request a pulled source is asked, the registry, and a pulled source's
answer as records the judge reads (`fleet.ingest.demand.judge`)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

import numpy as np
import pyarrow as pa

from fleet.core.registry import Registry
from fleet.ingest.fields import _json_field
from fleet.ingest.formats import FORMATS, BadSource, Parsed

if TYPE_CHECKING:
    from pathlib import Path

    from fleet.credentials import Credentials
    from fleet.ingest.store import IngestReport, IngestSettings
    from storage.interfaces import TelemetryStore

DEMAND_FILE_SUFFIX = ".demand"
"""A dropped file named `NAME.demand.csv` (or `.jsonl`, `.parquet`) is demand (ts, demand_tps), not telemetry."""


@dataclass(frozen=True)
class DemandRequest:
    """What a pulled source is asked: a Prometheus server's range and the query."""

    name: str
    prometheus_url: str | None = None
    start_ts: float = 0.0
    end_ts: float = 0.0
    step_s: float = 60.0
    query: str | None = None  # the source's query (None: its default)
    auth: "Credentials | None" = None


class DemandSource(Protocol):
    name: str
    part: str  # "offered": the whole demand; "unserved": the part the pool did not serve
    pulled: bool  # asks a Prometheus server (`fetch`), else reads a file (`open`)

    def fetch(self, request: DemandRequest) -> Parsed:
        """A pulled source's answer as records (ts, demand_tps); `BadSource` if the server cannot be read."""

    def open(self, path: Path, name: str) -> Parsed:
        """A file source's file, opened and checked as a telemetry file is (`BadSource` naming it if it cannot be
        read as a whole); its records are judged one by one."""


DEMAND_SOURCES: Registry[DemandSource] = Registry("demand source")
"""Each source a `Plugin` with nothing to set (`NoSettings`): a pulled one asks the query its Prometheus source's
settings give, a file source reads its file."""


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
    """The registered file source for the suffix `ext` (`.ndjson` and `.pq` read as `.jsonl` and `.parquet`);
    `BadSource` naming the file when there is none."""
    ext = FORMATS.get("." + ext, ext)
    if ext in DEMAND_SOURCES and not demand_source(ext).pulled:
        return demand_source(ext)
    known = [n for n in DEMAND_SOURCES.names() if not demand_source(n).pulled]
    raise BadSource(f"demand file {name!r}: no demand reader for .{ext} files (known: {', '.join('.' + k for k in known)})")


def pull_demand(repo: TelemetryStore, source_name: str, base_url: str, start_ts: float, end_ts: float, step_s: float,
                settings: IngestSettings, query: str | None = None, auth: Credentials | None = None) -> IngestReport:
    """Ask a pulled source for its samples over [start_ts, end_ts] and judge and store them as a file's are."""
    from fleet.ingest.demand.judge import ingest_demand

    source = demand_source(source_name)
    request = DemandRequest(f"demand {source.name}", base_url, start_ts, end_ts, step_s, query, auth)
    return ingest_demand(repo, source.fetch(request), settings, source.part)


def summed_matrix(body: bytes, name: str) -> Parsed:
    """A range query's answer as one series of records (ts, demand_tps): the values of its series summed at each
    time. A point whose value is NaN (a division by no requests: nothing measured) is no sample; every other point,
    an infinite or absurd sum or a time that is no time included, goes to the judge, which quarantines it with its
    reason (`record_no` counts the summed times from 1; the raw text is the time and the values summed)."""
    from fleet.ingest.prometheus import _matrix

    total: dict[str, list] = {}
    for series in _matrix(body, name):
        for point in (series.get("values") if isinstance(series, dict) else None) or []:
            if not (isinstance(point, list) and len(point) == 2) or _is_nan(point[1]):
                continue
            total.setdefault(_json_field(point[0]), []).append(point[1])
    times = list(total)
    sums = [_sum(v) for v in total.values()]
    raw = [json.dumps({"ts": t, "values": v}, default=str)[:4096] for t, v in total.items()]
    columns = {"ts": pa.array(times, pa.string()), "demand_tps": pa.array(sums, pa.string())}

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [raw[int(r) - 1] for r in record_nos]

    return Parsed.of_columns(name, hashlib.sha256(body).hexdigest(), columns, np.arange(1, len(times) + 1, dtype=np.int64),
                             raw_text=raw_text)


def _is_nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError, OverflowError):
        return False


def _sum(values: list) -> str:
    """The values as one number's text (`inf` past float's range), or the first that is no number (the judge calls
    it unparseable)."""
    total = 0.0
    for v in values:
        try:
            total += float(v) if isinstance(v, str) else float("nan") if isinstance(v, bool) else float(v)
        except (TypeError, ValueError, OverflowError):
            return _json_field(v) or "?"
    return repr(total)
