"""`fleet classes`: each card class on the market with its rated rate, rent and tokens per dollar at that rate."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

MONTH_HOURS = 720  # a pool file names no month: its rent is read over 720 hours, the scenarios' default month


def class_rows(classes, month_hours: int) -> list[dict]:
    """One row a class: rated rate (and how it was found), monthly and hourly rent, tokens per dollar at the rated
    rate, as the greedy ranks cards (`fleet.core.greedy.tokens_per_dollar`)."""
    import numpy as np

    from fleet.core.greedy import tokens_per_dollar

    rows = []
    for c in classes:
        rent_h = c.rent_usd_per_month / month_hours
        row = {
            "class": c.name,
            "rated_tps": c.rated_tps,
            "rent_usd_per_month": c.rent_usd_per_month,
            "rent_usd_per_hour": rent_h,
            "tokens_per_usd": float(tokens_per_dollar(np.array([c.rated_tps]), np.array([rent_h]))[0]),
        }
        if getattr(c, "pool_cards", None) is not None:
            row["pool_cards"] = c.pool_cards
        s = c.serving
        if s is not None:
            row["serving"] = {**s.model_dump(), "stream_tps": s.stream_tps, "aggregate_tps": s.aggregate_tps}
        rows.append(row)
    return rows


def _basis(row: dict) -> str:
    s = row.get("serving")
    if s is None:
        return "rated_tps as given"
    cache = f" + {s['batch']} × {s['kv_cache_gb_per_stream']:g} GB of cache" if s["kv_cache_gb_per_stream"] else ""
    return (f"{s['memory_bandwidth_tb_s']:g} TB/s over {s['weight_gb']:g} GB{cache}: {s['stream_tps']:,.1f} tok/s a stream, "
            f"× batch {s['batch']}")


def classes_cmd(
    preset: Annotated[Optional[str], typer.Option("--preset", "-p", help="Preset name or path to a preset TOML file.")] = None,
    pool: Annotated[Optional[str], typer.Option("--pool", help="A pool file (as `fleet ingest --pool` takes).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the classes as a JSON list.")] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", help="With --curve: draw each class's curve to FILE (.png, .svg or .pdf; one class, or CLASS- prefixed files for several).")] = None,
    stream_tps: Annotated[Optional[float], typer.Option("--stream-tps", help="With --curve: a stream-speed promise to mark on the curve and the plot.")] = None,
    curve: Annotated[bool, typer.Option("--curve", help="Each class's throughput-latency curve: batch, step ms, per-user and aggregate tok/s, and the batch its memory allows (classes with a serving table).")] = False,
) -> None:
    """Each card class on the market with its rated rate, rent, and tokens per dollar at the rated rate. A class may give its rated rate as a number (rated_tps) or from serving arithmetic (a serving table under the class: memory_bandwidth_tb_s, weight_gb, batch)."""
    from fleet.cli.output import UsageError, console
    from fleet.report.export import cents

    if (preset is None) == (pool is None):
        raise UsageError("give one of --preset NAME or --pool FILE")
    if preset is not None:
        from fleet.presets import load_preset

        scenario = load_preset(preset).scenario
        classes, month_hours, where = scenario.classes, scenario.hours, f"preset {scenario.name}"
    else:
        from fleet.ingest.pool import load_pool

        classes, month_hours, where = load_pool(pool).classes, MONTH_HOURS, f"pool file {pool}"
    rows = class_rows(classes, month_hours)
    if (plot is not None or stream_tps is not None) and not curve:
        raise UsageError("--plot and --stream-tps go with --curve")
    if curve:
        _print_curves(classes, where, as_json, stream_tps)
        if plot is not None:
            _plot_curves(classes, plot, stream_tps)
        return
    if as_json:
        typer.echo(json.dumps(cents(rows), indent=2))
        return
    from rich.table import Table
    from rich.text import Text

    market = any("pool_cards" in r for r in rows)
    t = Table("class", "rated tok/s", "rent $/month", "tokens per $", *(("on offer",) if market else ()), "rated rate from", box=None, padding=(0, 1))
    t.columns[-1].overflow = "fold"
    for r in rows:
        t.add_row(Text(r["class"]), f"{r['rated_tps']:,.0f}", f"{r['rent_usd_per_month']:,.0f}", f"{r['tokens_per_usd']:,.0f}",
                  *((str(r.get("pool_cards", "")),) if market else ()), _basis(r))
    console.print(t)
    console.print(f"  {where}: rent per hour is the monthly rent over {month_hours} hours; tokens per $ = rated tok/s × 3600 / rent per hour",
                  highlight=False, markup=False, soft_wrap=True)


def curve_table(classes, stream_tps: float | None = None) -> list[dict]:
    """Each class with a serving table, its curve at a ladder of batches (`fleet.core.serving.curve_rows`)."""
    from fleet.core.serving import UNLIMITED_BATCH, curve_rows

    out = []
    for c in classes:
        if c.serving is None:
            continue
        s = c.serving
        row = {"class": c.name, "rated_batch": s.batch, "max_batch": None if s.max_batch >= UNLIMITED_BATCH else s.max_batch,
               "knee_batch": s.curve.knee_batch(), "curve": curve_rows(s.curve)}
        if stream_tps is not None:
            b = int(s.curve.batch_at_floor(stream_tps))
            row["promise"] = {"stream_tps": stream_tps, "batch": b, "rate_tps": float(s.curve.rate_at_floor_tps(stream_tps)),
                              "share_of_rated": s.curve.share_at_floor(stream_tps, s.batch)}
        out.append(row)
    return out


def _plot_curves(classes, plot: str, stream_tps: float | None) -> None:
    from pathlib import Path

    from fleet.cli.output import UsageError
    from fleet.report.curve_plot import plot_curve
    from fleet.report.plot import PLOT_SUFFIXES

    path = Path(plot)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {plot!r}: the file must end in one of {', '.join(PLOT_SUFFIXES)}")
    if not path.resolve().parent.is_dir():
        raise UsageError(f"--plot {plot!r}: no folder {str(path.parent)!r}")
    served = [c for c in classes if c.serving is not None]
    for c in served:
        to = path if len(served) == 1 else path.with_name(f"{c.name}-{path.name}")
        plot_curve(c.serving.curve, c.name, c.serving.batch, to, stream_tps)


def _print_curves(classes, where: str, as_json: bool, stream_tps: float | None = None) -> None:
    from fleet.cli.output import UsageError, console

    table = curve_table(classes, stream_tps)
    if not table:
        raise UsageError(f"{where}: no class gives a [classes.serving] table, so no class has a curve (a rated_tps is one point)")
    if as_json:
        typer.echo(json.dumps(table, indent=2))
        return
    from rich.table import Table

    for c in table:
        memory = f"its memory allows a batch of {c['max_batch']:,}" if c["max_batch"] is not None else "no memory limit given"
        console.print(f"{c['class']}: rated at batch {c['rated_batch']:,}; {memory}; the knee near batch {c['knee_batch']:,}",
                      highlight=False, markup=False)
        t = Table("batch", "step ms", "per-user tok/s", "aggregate tok/s", box=None, padding=(0, 1))
        for r in c["curve"]:
            t.add_row(f"{r['batch']:,}", f"{r['step_ms']:,.2f}", f"{r['stream_tps']:,.1f}", f"{r['aggregate_tps']:,.0f}")
        console.print(t)
        p = c.get("promise")
        if p is not None:
            line = (f"  at {p['stream_tps']:g} tok/s a user: batch {p['batch']:,}, {p['rate_tps']:,.0f} tok/s, "
                    f"{p['share_of_rated']:.0%} of the rated rate" if p["batch"] else
                    f"  at {p['stream_tps']:g} tok/s a user: not even one stream keeps up")
            console.print(line, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command("classes")(classes_cmd)
