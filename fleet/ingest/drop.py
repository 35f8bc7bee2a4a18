"""The drop folder: files claimed by rename, settled, ingested once, moved to done/ or failed/ with their error.

The one implementation of it: `fleet ingest --watch` calls `drain_drop_folder` in a
loop, and a service calls it once per tick with its own clock.

- **Half-written files are never taken**: names ending `.part`, `.tmp` or
  `.partial` (any case) and hidden names (a leading `.`) are left alone
  (`is_half_written`). A writer writes `NAME.csv.part` and renames it to `NAME.csv`
  when done (a rename is atomic).
- **Settling**: a file written in place is taken once its mtime is `settle_s`
  seconds behind the injected clock (`DEFAULT_SETTLE_S`, 2 s, unless told).
- **Claim**: a ready file is renamed into `processing/` (atomic, so two watchers
  never take one file twice). If its size or mtime changed across the claim, or
  while it was read, it is put back for a later pass (samples it already stored
  are duplicates then).
- **After**: `done/` (never overwriting a file there: `NAME.1.csv`, `NAME.2.csv`, ...),
  or, for a bad file (or one that cannot be read), `failed/` with `NAME.error.txt`
  saying why; the other files are taken all the same. Files a crash left
  in `processing/` are taken first; the (card_id, ts) key makes that safe. A store
  failure (locked, disk full) raises and leaves the file in `processing/`.
- **Names**: errors and the ingest's records name a file as it was dropped
  (`FOLDER/NAME`), never by its `processing/` path.
- **Demand**: a file named `NAME.demand.csv` (`.jsonl`, `.parquet`) is the pool's measured demand
  (`fleet.ingest.demand`), read by the same readers and judged record by record (a bad line quarantined, the
  others stored); everything else about it (claim, settle, done/, failed/) is the same.
- **A file that cannot be read** (its start is not of its format, or a reader or the judge fails on it in a way
  nobody foresaw) goes to failed/ with its error: it never stays in processing/ to fail the next pass again.

As a telemetry source (`fleet.ingest.sources`), it is set in `[ingest.sources.drop-folder]`: `folder` and `settle_s`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pydantic import Field

from fleet.core.errors import ConfigError
from fleet.core.scenario import Strict
from fleet.ingest.formats import FORMATS, BadSource, Parsed, read_file
from fleet.ingest.store import IngestReport, IngestSettings, ingest_parsed
from storage.interfaces import TelemetryStore

if TYPE_CHECKING:
    from fleet.ingest.source_run import IngestRun

log = logging.getLogger("fleet.ingest.drop")
PART_SUFFIXES = (".part", ".tmp", ".partial")
DEFAULT_SETTLE_S = 2.0
"""Seconds a file written in place must be untouched before it is taken: longer than a writer's pause between
chunks, far shorter than the hour's settle before scoring, so a file is in before its hour is scored."""


@dataclass
class DropResult:
    """One file taken from the drop folder: its report, or the error that sent it to failed/.

    `source` is the file as it was dropped (`FOLDER/NAME`), `moved_to` where it went; `put_back` is set when it
    changed while being read and went back to the folder for a later pass (its report is the part it read)."""

    name: str
    report: IngestReport | None = None
    error: str | None = None
    source: str = ""
    moved_to: Path | None = None
    put_back: bool = False


class DropFolderSettings(Strict):
    """The drop folder's table, `[ingest.sources.drop-folder]`: the folder, and how long a file written in place must
    be untouched before it is taken."""

    folder: str = Field(min_length=1)
    settle_s: float = Field(default=DEFAULT_SETTLE_S, ge=0)


class DropFolder:
    """The drop folder as a telemetry source (`fleet.ingest.sources`): drained once a run of the service, or by
    `fleet ingest --watch` at each scan."""

    check_name = "drop folder"

    def __init__(self, settings: DropFolderSettings):
        self.settings = settings

    def drain(self, repo: TelemetryStore, settings_at: Callable[[], IngestSettings],
              clock: Callable[[], float] | None = None) -> list[DropResult]:
        """Every ready file taken once (`drain_drop_folder`), settled by `clock`."""
        return drain_drop_folder(repo, Path(self.settings.folder), settings_at, settle_s=self.settings.settle_s, clock=clock)

    def pull(self, run: IngestRun) -> int:
        """One run of the service: the folder drained as `fleet ingest --watch` drains it, settled by the service's
        clock; the records read. A bad file goes to failed/ (logged) and the others are taken all the same; a store
        failure raises and leaves its file in processing/, taken first next time."""
        read = 0
        for result in self.drain(run.repo, run.settings, clock=run.now):
            if result.report is not None:
                read += result.report.read
            else:
                log.warning("%s (moved to %s)", result.error, result.moved_to)
        return read

    def check(self, timeout_s: float) -> tuple[bool, str]:
        """`fleet serve --check`: the folder is there."""
        folder = Path(self.settings.folder)
        return folder.is_dir(), f"{folder}: {'a folder' if folder.is_dir() else 'no such folder'}"


def is_half_written(name: str) -> bool:
    """The one rule for a file still being written: hidden, or named `*.part`, `*.tmp`, `*.partial` (any case)."""
    return name.startswith(".") or name.lower().endswith(PART_SUFFIXES)


def drop_candidates(folder: Path, now_ts: float, settle_s: float) -> list[Path]:
    """Files ready to take: a known telemetry suffix, not half-written, and untouched for `settle_s` seconds."""
    out = []
    for p in sorted(folder.iterdir()):
        if is_half_written(p.name) or p.suffix.lower() not in FORMATS:
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if p.is_file() and now_ts - st.st_mtime >= settle_s:
            out.append(p)
    return out


def drain_drop_folder(repo: TelemetryStore, folder: str | Path, settings_at: Callable[[], IngestSettings] | IngestSettings,
                      settle_s: float = DEFAULT_SETTLE_S, clock: Callable[[], float] | None = None) -> list[DropResult]:
    """Take every ready file once and return what became of each, in order.

    `settings_at` gives the settings each file is judged with (called per file, so a long pass reads the clock
    afresh), or is the settings; `clock` gives the time the settle check compares mtimes with (default: the
    wall clock). Raises `ConfigError` if `folder` is not a folder."""
    import time

    now = clock or time.time
    settings = settings_at if callable(settings_at) else (lambda: settings_at)
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"drop folder {str(root)!r}: not a folder")
    processing, done, failed = root / "processing", root / "done", root / "failed"
    processing.mkdir(exist_ok=True)
    claimed = [p for p in sorted(processing.iterdir()) if p.is_file() and not is_half_written(p.name)]
    for p in drop_candidates(root, now(), settle_s):
        target = processing / p.name
        if target.exists():
            continue  # a file of that name is still in processing/: this one waits for the next pass
        try:
            before = p.stat()
            p.rename(target)  # the claim: atomic, so a file is taken once even with two watchers
        except FileNotFoundError:
            continue
        if _signature(target.stat()) != _signature(before):
            target.rename(p)  # still being written: leave it for a later pass
            continue
        claimed.append(target)
    results: list[DropResult] = []
    for path in claimed:
        results.extend(_take(repo, root, path, settings, done, failed))
    return results


def _take(repo: TelemetryStore, root: Path, path: Path, settings: Callable[[], IngestSettings], done: Path, failed: Path) -> list[DropResult]:
    from fleet.ingest.demand import ingest_demand, source_of_file
    from storage.db import failure_reason

    source = str(root / path.name)
    stat0 = _signature(path.stat())

    try:
        demand = source_of_file(path.name)
        parsed = _guarded(demand.open(path, source) if demand is not None else read_file(path, name=source))
        if _signature(path.stat()) != stat0:  # written to after the claim: put it back
            path.rename(root / path.name)
            return []
        if demand is not None:
            report = ingest_demand(repo, parsed, settings(), demand.part)
        else:
            report = ingest_parsed(repo, parsed, settings())
    except BadSource as err:
        return [_fail(path, source, str(err), failed)]
    except OSError as err:  # the file could not be read past its start (the store's own failures are not OSError)
        if not path.exists():
            return []
        return [_fail(path, source, f"{source!r}: cannot read ({err.strerror or err})", failed)]
    except Exception as err:  # a reader's or judge's bug is this file's failure; the store's own raise on
        if failure_reason(err) is not None:
            raise
        return [_fail(path, source, f"{source!r}: cannot be read ({type(err).__name__}: {' '.join(str(err).split())})", failed)]
    if _signature(path.stat()) != stat0:  # changed while it was being stored: read it again later
        back = root / path.name
        if not back.exists():
            path.rename(back)
            return [DropResult(path.name, report=report, source=source, moved_to=back, put_back=True)]
    return [DropResult(path.name, report=report, source=source, moved_to=_move_aside(path, done))]


def _guarded(parsed: Parsed) -> Parsed:
    """The same source, with a reader's unexpected failure turned into `BadSource`: the file goes to failed/
    naming it, and the files after it are taken. The store's own failures come from the writes, not from here."""
    source = parsed.name

    def pieces():
        it = parsed.pieces()
        while True:
            try:
                piece = next(it)
            except StopIteration:
                return
            except (BadSource, OSError):
                raise
            except Exception as err:  # a reader's bug must not keep the file in processing/ for ever
                raise BadSource(f"{source!r}: cannot be read ({type(err).__name__}: {err})") from None
            yield piece

    return Parsed(parsed.name, parsed.digest, parsed.n_records, pieces)


def _fail(path: Path, source: str, error: str, failed: Path) -> DropResult:
    dest = _move_aside(path, failed)
    dest.with_name(dest.name + ".error.txt").write_text(error + "\n", encoding="utf-8")
    return DropResult(path.name, error=error, source=source, moved_to=dest)


def _signature(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def _move_aside(src: Path, dest_dir: Path) -> Path:
    """Move `src` into `dest_dir` under its name, or `NAME.1.ext`, `NAME.2.ext`, ...: never over a file there."""
    dest_dir.mkdir(exist_ok=True)
    k = 0
    while True:
        dest = dest_dir / (src.name if k == 0 else f"{src.stem}.{k}{src.suffix}")
        k += 1
        if dest.exists() or dest.with_name(dest.name + ".error.txt").exists():
            continue
        try:
            os.link(src, dest)  # fails if dest exists, so a name taken meanwhile is never overwritten
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links: a rename after the check
            src.rename(dest)
            return dest
        src.unlink()
        return dest
