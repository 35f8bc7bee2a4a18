"""Pool files: the classes and cards of a real pool, declared before their telemetry arrives.

A pool file is the core's `Pool` model (the service config's `[pool]` table is the
same model), read from TOML and validated by pydantic:

    default_class = "flagship"
    [[classes]]
    name = "flagship"
    rated_tps = 6000
    rent_usd_per_month = 2690
    [[cards]]
    card_id = "gpu-a1"
    card_class = "flagship"
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from pydantic import ValidationError

from fleet.core.errors import ConfigError
from fleet.core.scenario import Pool, format_validation
from fleet.presets import read_toml
from storage.interfaces import TelemetryStore
from storage.values import class_specs


def load_pool(path: str | Path) -> Pool:
    """Read and validate a pool file; any fault is one `ConfigError` naming the file and the key."""
    p = Path(path)
    where = f"pool file {str(p)!r}"
    raw = read_toml(p, where)
    try:
        return Pool.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"{where}: {format_validation(err)}") from None


def declare_pool(repo: TelemetryStore, classes: Iterable, cards: Mapping[str, str], now_ts: int) -> None:
    """Register the declared classes (a pool file's, a preset's or the service config's) in the store, and the cards
    named with their classes, if any."""
    repo.declare_classes(class_specs(classes))
    if cards:
        repo.declare_cards(dict(cards), int(now_ts))
