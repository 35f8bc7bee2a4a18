"""`fleet compare`'s options as values: the parameter objects `run_compare` takes, one for each thing the options
choose (the preset, the grid's axes, the months, how they are judged, what is written, where the months run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PresetChoice:
    """The preset the grid starts from: a name or a TOML file's path, its fix or not, and `--set` overrides."""

    name: str
    fix: bool = False
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class GridText:
    """The grid's axes as typed, each a comma-separated list; None: not given (the preset's value, or under
    `--recommend` the default grid's)."""

    window: str | None = None
    size_window: str | None = None
    share: str | None = None
    mode: str | None = None
    headroom: str | None = None
    card_class: str | None = None
    score: str | None = None
    forecast: str | None = None
    quantile: str | None = None
    size_to: str | None = None
    stream_tps: str | None = None
    ttft_ms: str | None = None


@dataclass(frozen=True)
class MonthsWanted:
    """The months every combination replays: seeded ones (`--months` of them from `--seed`), or the one month stored
    at `--db` or in `--telemetry`."""

    count: int | None = None
    first_seed: int | None = None
    db: str | None = None
    telemetry: Path | None = None

    @property
    def stored(self) -> bool:
        return self.db is not None or self.telemetry is not None


@dataclass(frozen=True)
class Judging:
    """How the combinations are judged: `--recommend`'s search of the default grid, the share of months a
    recommendation passes every check in (None: the default), convergence against the exact ideal or the greedy."""

    recommend: bool = False
    min_pass: float | None = None
    exact: bool = True


@dataclass(frozen=True)
class Outputs:
    """Where the comparison goes besides the table: a plot, a CSV file, or JSON printed instead of the table."""

    plot: Path | None = None
    csv: Path | None = None
    json: bool = False


@dataclass(frozen=True)
class Workers:
    """Where the months run: `jobs` local processes, or the Dask cluster at `dask` ('local': one started for the run)."""

    jobs: int | None = None
    dask: str | None = None
