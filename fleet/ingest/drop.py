"""The drop folder: files claimed by rename, settled, ingested once, moved to done/ or failed/ with their error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fleet.core.errors import ConfigError
from fleet.ingest.formats import FORMATS, BadSource, read_file
from fleet.ingest.store import IngestReport, IngestSettings, ingest_parsed
from storage.interfaces import TelemetryStore

PART_SUFFIXES = (".part", ".tmp", ".partial")


@dataclass
class DropResult:
    """One file taken from the drop folder: its report, or the error that sent it to failed/."""

    name: str
    report: IngestReport | None = None
    error: str | None = None


def drop_candidates(folder: Path, now_ts: float, settle_s: float) -> list[Path]:
    """Files ready to take: a known telemetry suffix, not hidden, not `*.part`, and untouched for `settle_s` seconds.

    A writer should write `NAME.csv.part` and rename it to `NAME.csv` when done
    (a rename is atomic); a file written in place is taken only once its size
    and mtime have been still for `settle_s` seconds."""
    out = []
    for p in sorted(folder.iterdir()):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith(PART_SUFFIXES):
            continue
        if p.suffix.lower() not in FORMATS:
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if now_ts - st.st_mtime >= settle_s:
            out.append(p)
    return out


def _move_aside(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(exist_ok=True)
    dest = dest_dir / src.name
    k = 1
    while dest.exists():
        dest = dest_dir / f"{src.stem}.{k}{src.suffix}"
        k += 1
    src.rename(dest)
    return dest


def drain_drop_folder(repo: TelemetryStore, folder: str | Path, settings_at: Callable[[], IngestSettings], settle_s: float = 2.0,
                      clock: Callable[[], float] | None = None) -> list[DropResult]:
    """Take every ready file once: claim it (rename into processing/), ingest it, move it to done/ (or failed/ with
    NAME.error.txt). Files a crash left in processing/ are taken first; the (card_id, ts) key makes that safe."""
    import time

    now = clock or time.time
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"drop folder {str(root)!r}: not a folder")
    processing, done, failed = root / "processing", root / "done", root / "failed"
    processing.mkdir(exist_ok=True)
    results: list[DropResult] = []
    claimed = [p for p in sorted(processing.iterdir()) if p.is_file()]
    for p in drop_candidates(root, now(), settle_s):
        target = processing / p.name
        if target.exists():
            continue
        try:
            before = p.stat()
            p.rename(target)  # the claim: atomic, so a file is taken once even with two watchers
        except FileNotFoundError:
            continue
        after = target.stat()
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            target.rename(p)  # still being written: leave it for a later pass
            continue
        claimed.append(target)
    for path in claimed:
        stat0 = path.stat()
        try:
            parsed = read_file(path, name=str(root / path.name))
            if path.stat().st_mtime_ns != stat0.st_mtime_ns:  # written to after the claim: put it back
                path.rename(root / path.name)
                continue
            report = ingest_parsed(repo, parsed, settings_at())
        except BadSource as err:
            dest = _move_aside(path, failed)
            dest.with_name(dest.name + ".error.txt").write_text(str(err) + "\n", encoding="utf-8")
            results.append(DropResult(path.name, error=str(err)))
            continue
        _move_aside(path, done)
        results.append(DropResult(path.name, report=report))
    return results
