"""Telemetry in: files, drop folders and Prometheus into the store, pool files, and stored months for replay.

- `formats`: the record, the formats, opening a source (a bad file raises `BadSource` before anything is written);
- `lines`, `csv_reader`, `readers`: text read in blocks of whole lines, CSV through pyarrow's parser, JSON Lines
  and Parquet; `pieces`: the records of a block, cut and joined into the ingest's batches; `fields`: field values;
- `store`: judging each batch and storing it in one transaction (`ingest_parsed`, `ingest_file`), one batch in memory;
- `prometheus`: a range query as a source; `drop`: the drop folder; `pool`: pool files;
- `stored_month`: a stored month as the core's `Month`, for replay.
"""

from fleet.ingest.drop import DropResult, drain_drop_folder, drop_candidates, is_half_written
from fleet.ingest.formats import COLUMNS, FORMATS, REASONS, BadSource, Parsed, detect_format, parse_bytes, read_file
from fleet.ingest.pool import declare_pool, load_pool
from fleet.ingest.prometheus import DEFAULT_CARD_LABEL, DEFAULT_PROMETHEUS_QUERY, fetch_prometheus, ingest_prometheus, parse_prometheus
from fleet.ingest.store import IngestReport, IngestSettings, ingest_file, ingest_parsed, judge

__all__ = [
    "COLUMNS", "DEFAULT_CARD_LABEL", "DEFAULT_PROMETHEUS_QUERY", "FORMATS", "REASONS", "BadSource", "DropResult", "IngestReport",
    "IngestSettings", "Parsed", "declare_pool", "detect_format", "drain_drop_folder", "drop_candidates", "fetch_prometheus", "is_half_written",
    "ingest_file", "ingest_parsed", "ingest_prometheus", "judge", "load_pool", "parse_bytes", "parse_prometheus", "read_file",
]
