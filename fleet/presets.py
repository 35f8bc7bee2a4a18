"""Presets and scenario files, read from disk: the shell's side of the core's scenario types.

The core sees parsed tables and arrays only; reading TOML files, a `file` demand's
CSV and resolving a policy's plug-ins by name happen here, once, before the core runs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from fleet.core.errors import ConfigError
from fleet.core.month import Month, draw_month
from fleet.core.replay import MonthResult, replay
from fleet.core.scenario import Preset, Scenario

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def read_toml(path: Path, where: str) -> dict:
    """A TOML file as a dict; any reason it cannot be read is one `ConfigError` naming `where`."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a folder") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{where}: not valid TOML ({err})") from None
    except OSError as err:
        raise ConfigError(f"{where}: {err.strerror}") from None


def load_preset(name_or_path: str) -> Preset:
    """Load a preset by name (from `presets/`) or by path to a TOML file; its policy's names are checked here."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" or path.exists() or "/" in name_or_path):
        path = PRESETS_DIR / f"{name_or_path}.toml"
        if not path.exists():
            known = ", ".join(preset_names()) or "none"
            raise ConfigError(f"unknown preset {name_or_path!r} (known: {known})")
    if not path.is_file():
        raise ConfigError(f"preset file {str(path)!r}: not found")
    where = f"preset file {str(path)!r}"
    preset = Preset(read_toml(path, where), where, path)
    try:
        resolve_policy(preset.scenario)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return preset


def resolve_policy(scenario: Scenario):
    """The scenario's policy resolved into its plug-ins (`policies.resolve`)."""
    import policies

    return policies.resolve(scenario.policy)


def read_demand_file(path: str, hours: int, base_dir: Path | None) -> np.ndarray:
    """Demand from a CSV with a `demand_tps` column, one row an hour."""
    import pandas as pd

    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    try:
        frame = pd.read_csv(p)
    except (OSError, ValueError) as err:
        raise ConfigError(f"demand file {str(p)!r}: {err}") from None
    if "demand_tps" not in frame.columns:
        raise ConfigError(f"demand file {str(p)!r}: no demand_tps column")
    values = pd.to_numeric(frame["demand_tps"], errors="coerce").to_numpy(dtype=np.float64)
    if len(values) < hours:
        raise ConfigError(f"demand file {str(p)!r}: {len(values)} rows, the month needs {hours}")
    values = values[:hours]
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ConfigError(f"demand file {str(p)!r}: demand_tps must be finite and non-negative")
    return values


def demand_file_tps(scenario: Scenario, base_dir: Path | None = None) -> np.ndarray | None:
    """The scenario's `file` demand as read from disk, or None for a drawn demand."""
    if scenario.demand.shape != "file":
        return None
    return read_demand_file(scenario.demand.file or "", scenario.hours, base_dir)


def draw(scenario: Scenario, base_dir: Path | None = None) -> Month:
    """The scenario's month, its demand file (if any) read from `base_dir`."""
    return draw_month(scenario, demand_file_tps(scenario, base_dir))


def replay_scenario(scenario: Scenario, month: Month | None = None, base_dir: Path | None = None, ideal_usd=None) -> MonthResult:
    """Resolve the scenario's policy, draw its month unless given, and replay it."""
    parts = resolve_policy(scenario)
    return replay(scenario, parts, month if month is not None else draw(scenario, base_dir), ideal_usd=ideal_usd)
