"""Telemetry in: files, drop folders and Prometheus into the store, pool files, and stored months for replay.

- `formats`: the record, the formats, opening a source (a bad file raises `BadSource` before anything is written);
- `lines`, `csv_reader`, `readers`: text read in blocks of whole lines, CSV through pyarrow's parser, JSON Lines
  and Parquet; `pieces`: the records of a block, cut and joined into the ingest's batches; `fields`: field values;
- `store`: judging each batch and storing it in one transaction (`ingest_parsed`, `ingest_file`), one batch in memory;
- `prometheus`: a range query and its busy query as a source, pulled with credentials and no redirects;
- `drop`: the drop folder (`fleet ingest --watch` and the service alike); `pool`: pool files;
- `sources`: the telemetry sources by name (the drop folder, `prometheus_source`), each with its own table
  `[ingest.sources.NAME]`, its run's pull and its `fleet serve --check` line; `source_run`: what a run gives a source;
- `demand`: the pool's measured demand, its sources in one registry (vLLM's queue, a query, demand files);
- `stored_month`: a stored month as the core's `Month`, for replay.
"""

from fleet.ingest.drop import DEFAULT_SETTLE_S, DropResult, drain_drop_folder, drop_candidates, is_half_written
from fleet.ingest.formats import COLUMNS, FORMATS, REASONS, BadSource, Parsed, detect_format, parse_bytes, read_file
from fleet.ingest.pool import declare_pool, load_pool
from fleet.ingest.prometheus import (
    DEFAULT_BUSY_QUERY, DEFAULT_CARD_LABEL, DEFAULT_PROMETHEUS_QUERY, busy_query, card_labels, fetch_prometheus,
    parse_prometheus, pull_prometheus, rate_query,
)
from fleet.ingest.store import IngestReport, IngestSettings, ingest_file, ingest_parsed, judge

__all__ = [
    "COLUMNS", "DEFAULT_BUSY_QUERY", "DEFAULT_CARD_LABEL", "DEFAULT_PROMETHEUS_QUERY", "DEFAULT_SETTLE_S", "FORMATS", "REASONS", "BadSource", "DropResult", "IngestReport",
    "IngestSettings", "Parsed", "busy_query", "card_labels", "declare_pool", "detect_format", "drain_drop_folder", "drop_candidates", "fetch_prometheus", "is_half_written",
    "ingest_file", "ingest_parsed", "judge", "load_pool", "parse_bytes", "parse_prometheus", "pull_prometheus",
    "rate_query", "read_file",
]
