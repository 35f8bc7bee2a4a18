"""Measured demand in: the sources a pool's demand comes from, in one registry, and the store they write to.

A pool's demand in an hour is the tokens/s it served (its cards' measured rates, already in the rollups) plus the
part it did not serve; or, where a source sees it whole, the tokens/s offered. A source measures one of two parts:
`unserved` (vLLM's queue: `vllm_queue`) or `offered` (a query of the user's own: `query`; a demand file: `csv`).
A source is one module and one `DEMAND_SOURCES.register`; the service's Prometheus pull, the drop folder and
`fleet ingest --demand` look sources up by name, never by an if-chain.
"""

from fleet.ingest.demand.base import (
    DEMAND_FILE_SUFFIX, DEMAND_SOURCES, DemandRequest, DemandSource, file_source, pull_demand, source_of_file, store_demand,
    summed_matrix,
)
from fleet.ingest.demand import csv_file, query, vllm_queue  # noqa: E402,F401  each registers itself

__all__ = ["DEMAND_FILE_SUFFIX", "DEMAND_SOURCES", "DemandRequest", "DemandSource", "file_source", "pull_demand",
           "source_of_file", "store_demand", "summed_matrix"]
