"""What a telemetry source is given at each run of the service's ingest job (`fleet.ingest.sources`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from fleet.ingest.store import IngestSettings
    from storage.interfaces import TelemetryStore


@dataclass(frozen=True)
class IngestRun:
    """The store, how records are judged now (asked per file by a drop folder, so a long pass reads the clock
    afresh), the service's clock, and the last rolled-up hour (read when a source asks)."""

    repo: TelemetryStore
    settings: Callable[[], IngestSettings]
    now: Callable[[], float]
    last_rollup_ts: Callable[[], int | None]
