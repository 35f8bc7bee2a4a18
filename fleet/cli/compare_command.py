"""`fleet compare`'s options, registered without the sweep: the command's work, and what its help names of the core
(the search's steps, the default grid), is imported when the command runs or its help is drawn, so every other command
starts without NumPy and SciPy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

SHORT_HELP = "Replay a grid of policies over many seeded months and compare them side by side."


class _HelpOnDemand(TyperCommand):
    """A command whose help text is `fleet.cli.compare.HELP`, read when help is drawn."""

    @property
    def help(self) -> str:
        from fleet.cli.compare import HELP

        return HELP

    @help.setter
    def help(self, value) -> None:
        pass  # the text is the module's, read on demand


def compare_cmd(
    preset: Annotated[str, typer.Option("--preset", "-p", help="Preset name or path to a preset TOML file.")],
    fix: Annotated[bool, typer.Option("--fix", help="Start from the preset's fix instead.")] = False,
    window: Annotated[Optional[str], typer.Option("--window", help="Eviction windows (what the rule judges cards through), e.g. hour,day,week or 36h.")] = None,
    size_window: Annotated[Optional[str], typer.Option("--size-window", help="Sizing windows (what the greedy scores cards through), e.g. day,week.")] = None,
    share: Annotated[Optional[str], typer.Option("--share", help="Eviction shares, e.g. 0.05,0.1,0.2.")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Sizing modes, e.g. held,steady.")] = None,
    headroom: Annotated[Optional[str], typer.Option("--headroom", help="Headrooms, e.g. 1.0,1.05.")] = None,
    card_class: Annotated[Optional[str], typer.Option("--class", help="Card classes to rent, e.g. flagship,bargain,any ('any': every class on the market).")] = None,
    score: Annotated[Optional[str], typer.Option("--score", help="Score estimators, e.g. mean,dip-aware.")] = None,
    forecast: Annotated[Optional[str], typer.Option("--forecast", help="Demand forecasters, e.g. last-hour,seasonal,holt-winters ('known': each hour's own demand, the seed's clairvoyant view).")] = None,
    quantile: Annotated[Optional[str], typer.Option("--quantile", help="Quantiles of the forecast's own recent errors to size for, e.g. none,0.75,0.9.")] = None,
    size_to: Annotated[Optional[str], typer.Option("--size-to", help="Under a promise ([slo]), what policies size to: promise, throughput, or both (promise,throughput).")] = None,
    stream_tps: Annotated[Optional[str], typer.Option("--stream-tps", help="Promises on every stream's tok/s to compare under (slo.stream_tps), e.g. 20,30.")] = None,
    ttft_ms: Annotated[Optional[str], typer.Option("--ttft-ms", help="Promises on the first token's wait in ms at the pool's percentile (slo.ttft_ms), e.g. 1000,2000.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a parameter of the preset before the grid, KEY=VALUE (repeatable), as fleet replay --set.")] = None,
    months: Annotated[Optional[int], typer.Option("--months", help="Seeded months to replay each combination on (default 50).", min=1, max=100_000)] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="First seed (default: the preset's); months use seed, seed+1, ...", min=0)] = None,
    recommend_grid: Annotated[bool, typer.Option("--recommend", help="Search the default grid on every axis not given (see above).")] = False,
    min_pass: Annotated[Optional[float], typer.Option("--min-pass", help="Share of months in which a recommendation must pass every check (default: the share named above).", min=0.0, max=1.0)] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw convergence and wrong evictions against the window to this PNG (or .svg/.pdf).")] = None,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="Write one row per combination to this CSV file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per combination, instead of the table.")] = False,
    jobs: Annotated[Optional[int], typer.Option("--jobs", help="Worker processes (default: every core).", min=1)] = None,
    exact: Annotated[bool, typer.Option("--exact/--greedy-ideal", help="Convergence against the exact ideal (default) or the greedy one.")] = True,
    db: Annotated[Optional[str], typer.Option("--db", help="Compare on the month stored at this database URL instead of seeded months.")] = None,
    telemetry: Annotated[Optional[Path], typer.Option("--telemetry", help="Compare on the month in this telemetry file (CSV, JSON Lines or Parquet).")] = None,
    dask: Annotated[Optional[str], typer.Option("--dask", help="Run on the Dask scheduler at this address (tcp://HOST:PORT), or 'local' for a cluster of --jobs (default 2) worker processes.")] = None,
) -> None:
    from fleet.cli.compare import run_compare
    from fleet.cli.compare_options import GridText, Judging, MonthsWanted, Outputs, PresetChoice, Workers

    run_compare(
        PresetChoice(preset, fix, tuple(set_ or ())),
        GridText(window, size_window, share, mode, headroom, card_class, score, forecast, quantile, size_to, stream_tps, ttft_ms),
        MonthsWanted(months, seed, db, telemetry),
        Judging(recommend_grid, min_pass, exact),
        Outputs(plot, csv_path, as_json),
        Workers(jobs, dask),
    )


def register(app: typer.Typer) -> None:
    app.command("compare", cls=_HelpOnDemand, short_help=SHORT_HELP)(compare_cmd)
