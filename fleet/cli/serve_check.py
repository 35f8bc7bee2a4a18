"""`fleet serve --check`: the config validated, and what the service would use reached, each within a bounded time
(the store, read only; each telemetry source; the actuator). One line a check, nothing served or written."""

from __future__ import annotations

import sys
import threading
from typing import Callable

import typer

from fleet.cli.words import shown_url, times

CHECK_TIMEOUT_S = 5.0


def _bounded(fn: Callable[[], str], timeout_s: float) -> tuple[bool, str]:
    """(passed, what it found) of `fn` run for at most `timeout_s`: a store or server that does not answer fails."""
    got: list = []

    def run() -> None:
        try:
            got.append((True, fn()))
        except Exception as err:  # noqa: BLE001 - every failure of a check is its line
            got.append((False, " ".join(str(err).split()) or type(err).__name__))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    return got[0] if got else (False, f"no answer within {timeout_s:g} s")


def _store_check(url: str, wanted) -> str:
    from pathlib import Path

    from storage import open_store
    from storage.db import StoreError, head_revision
    from storage.existing import existing_revision, sqlite_file

    try:
        revision = existing_revision(url)
    except StoreError:
        path = sqlite_file(url)
        if path and not Path(path).exists() and Path(path).resolve().parent.is_dir():
            return f"{shown_url(url)}: no store yet; `fleet serve` creates it at schema {head_revision()}"
        raise
    if revision != head_revision():
        raise StoreError(f"{shown_url(url)} is at schema revision {revision}, this fleet needs {head_revision()}: "
                         f"run `fleet db upgrade --db {shown_url(url)}`")
    store = open_store(url)
    try:
        held = store.identity.read()
    finally:
        store.close()
    if held is not None and not held.matches(wanted):
        raise StoreError(f"{shown_url(url)} holds {held.describe()}; it cannot serve {wanted.describe()}")
    return f"{shown_url(url)}: a fleet store at schema {revision}, holding {held.describe() if held else 'nothing yet'} (read only)"


def check_service(cfg, config: str | None, simulate: str | None, seed: int | None) -> int:
    """`fleet serve --check`: one line a check; returns the exit status (0 every check passed, 1 one failed).
    A bad config is a `ConfigError` (status 2) before any check runs. Nothing is served or written."""
    from storage.identity import StoreIdentity

    source = f"config file {config!r}" if config else "the service config (defaults)"
    wanted = StoreIdentity.pool()
    if simulate is not None:
        from fleet.presets import load_preset

        scenario = load_preset(simulate).resolve(seed=seed)
        wanted = StoreIdentity.simulation(scenario.name, scenario.seed, scenario.hours)
        what = f"{source} with the simulated pool of {scenario.name}"
    else:
        cfg.require_pool(source)
        what = f"{source}: {times(len(cfg.pool.classes), 'card class', 'card classes')}, policy {cfg.policy.mode} mode"
    checks: list[tuple[str, bool, str]] = [("config", True, what)]
    checks.append(("store", *_bounded(lambda: _store_check(cfg.storage.url, wanted), CHECK_TIMEOUT_S)))
    if simulate is None:  # a simulation's telemetry is its own feed
        from fleet.ingest.sources import source_checks

        checks += source_checks(cfg.ingest.telemetry_sources(), CHECK_TIMEOUT_S)
    from fleet.service.actuators import make_actuator

    checks.append(("actuator", *make_actuator(cfg.actuator.kind, cfg.actuator.own).check()))
    for name, ok, line in checks:
        typer.echo(f"{'ok  ' if ok else 'FAIL'} {name}: {line}")
    failed = sum(not ok for _, ok, _ in checks)
    print(f"fleet serve --check: {times(len(checks), 'check')}, {failed} failed; nothing served or written", file=sys.stderr)
    return 1 if failed else 0
