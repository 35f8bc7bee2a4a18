"""Demand files: CSV, JSON Lines or Parquet records `ts,demand_tps` (ts in UTC epoch seconds or ISO 8601,
demand_tps the whole demand in tokens/s), read by the telemetry readers with demand's columns: the same lines,
quoting, encodings and line ends, the same checks of a file's start (`BadSource` before anything is written), and
each record judged on its own (`fleet.ingest.demand.judge`): a bad line is quarantined with its number and reason,
the good lines around it are stored."""

from __future__ import annotations

from pathlib import Path

from fleet.ingest.formats import Parsed, RecordSchema, read_file

DEMAND = RecordSchema("demand", ("ts", "demand_tps"))


class DemandFile:
    """One file format as a demand source (registered under the suffix it reads)."""

    part = "offered"
    pulled = False

    def __init__(self, fmt: str):
        self.name = fmt

    def open(self, path: Path, name: str) -> Parsed:
        return read_file(path, self.name, name=name, schema=DEMAND)
