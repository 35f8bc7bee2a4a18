"""Measured demand in: the sources a pool's demand comes from, in one registry, and the store they write to.

A pool's demand in an hour is the tokens/s it served (its cards' measured rates, already in the rollups) plus the
part it did not serve; or, where a source sees it whole, the tokens/s offered. A source measures one of two parts:
`unserved` (vLLM's queue: `vllm_queue`) or `offered` (a query of the user's own: `query`; a demand file: `csv`,
`jsonl`, `parquet`). Every source's records are judged and stored alike (`judge`: telemetry's bounds and
quarantine, a ceiling from the pool's rated capacity, conflicts quarantined or replaced on request).
A source is one module and one registration here (as telemetry sources are in `fleet.ingest.sources`); the
service's Prometheus source, the drop folder and `fleet ingest --demand` look sources up by name, never by an
if-chain. A pulled source is named by `[ingest.sources.prometheus] demand_source`; a file source by a demand file's
suffix.
"""

from fleet.core.registry import NoSettings, Plugin, constant
from fleet.ingest.demand.base import (
    DEMAND_FILE_SUFFIX, DEMAND_SOURCES, DemandRequest, DemandSource, demand_source, file_source, pull_demand, source_of_file,
    summed_matrix,
)
from fleet.ingest.demand.files import DEMAND, DemandFile
from fleet.ingest.demand.judge import demand_ceiling_tps, ingest_demand, judge_demand
from fleet.ingest.demand.query import OfferedQuery
from fleet.ingest.demand.vllm_queue import VllmQueue

DEMAND_SOURCES.register(Plugin(VllmQueue.name, NoSettings, constant(VllmQueue())))
DEMAND_SOURCES.register(Plugin(OfferedQuery.name, NoSettings, constant(OfferedQuery())))
for _fmt in ("csv", "jsonl", "parquet"):
    DEMAND_SOURCES.register(Plugin(_fmt, NoSettings, constant(DemandFile(_fmt))))

__all__ = ["DEMAND", "DEMAND_FILE_SUFFIX", "DEMAND_SOURCES", "DemandRequest", "DemandSource", "demand_ceiling_tps",
           "demand_source", "file_source", "ingest_demand", "judge_demand", "pull_demand", "source_of_file", "summed_matrix"]
