"""The comparison drawn: convergence and wrong evictions against an axis the grid varies (the window first), one
line per value of a second (the eviction share first).

The 90% interval over the months is a band around each median line, the
pass marks are drawn across, and the preset's and the fix's own policies are
marked where they sit on the grid, so the story reads without a number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

from fleet.core.compare import AXES, Combo, ComboSummary  # noqa: E402
from policies import window_hours  # noqa: E402

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def window_label(window: str) -> str:
    h = window_hours(window)
    return f"{window}\n({h} h)" if str(window) not in (str(h), f"{h}h") else f"{h} h"


def anchor_label(held: dict) -> str:
    """The axes held fixed, in words; with eviction off (share 0) its window is left out (it changes nothing)."""
    names = {
        "window": "{} eviction window",
        "size_window": "{} sizing window",
        "share": "eviction share {:.0%}",
        "mode": "{} mode",
        "headroom": "headroom {:g}",
        "card_class": "{} cards",
        "score": "{} score",
        "forecast": "{} forecast",
        "forecast_quantile": "error quantile {}",
        "size_to": "sized to {}",
        "stream_tps": "{} tok/s a stream",
        "ttft_ms": "first token within {} ms",
    }
    held = {k: v for k, v in held.items() if k not in ("stream_tps", "ttft_ms", "size_to") or held.get("stream_tps")
            is not None or held.get("ttft_ms") is not None}  # with no promise, nothing to say of one
    if held.get("share") == 0:
        held = {k: v for k, v in held.items() if k not in ("window", "share")} | {"eviction": "off"}
        names["eviction"] = "eviction {}"
    shown = lambda k, v: "none" if v is None else (v if k != "card_class" or isinstance(v, str) else "+".join(v))  # noqa: E731
    return ", ".join(names[k].format(shown(k, v)) for k, v in held.items())


# The axes the plot can run along, in the order it prefers them; the windows sort by their hours.
X_AXES = ("window", "size_window", "headroom", "mode", "card_class", "score", "forecast", "forecast_quantile", "share",
          "size_to", "stream_tps", "ttft_ms")
AXIS_TITLES = {
    "window": "eviction window (scores the rule judges)",
    "size_window": "sizing window (scores the greedy sizes on)",
    "share": "eviction share",
    "mode": "sizing mode",
    "headroom": "headroom",
    "card_class": "card class",
    "score": "score estimator",
    "forecast": "demand forecaster",
    "forecast_quantile": "forecast-error quantile sized for",
    "size_to": "what the policy sizes to under the promise",
    "stream_tps": "promised tok/s a stream",
    "ttft_ms": "promised first token, ms",
}
AXIS_OPTIONS = {"window": "--window", "size_window": "--size-window", "share": "--share", "mode": "--mode",
                "headroom": "--headroom", "card_class": "--class", "score": "--score", "forecast": "--forecast",
                "forecast_quantile": "--quantile", "size_to": "--size-to", "stream_tps": "--stream-tps", "ttft_ms": "--ttft-ms"}


def _varying(combos: Sequence[Combo]) -> list[str]:
    return [a for a in X_AXES if len({getattr(c, a) for c in combos}) > 1]


def plot_axes(combos: Sequence[Combo]) -> tuple[str, str | None]:
    """The axis along x (the first the grid varies, in X_AXES order) and the one drawn as lines: the eviction share
    when it varies too, else None (one line); other axes are held at the anchor's. Raises ValueError when nothing
    varies."""
    varying = _varying(combos)
    if not varying:
        raise ValueError("the grid has one combination, nothing to draw; give two or more values to one of "
                         + ", ".join(AXIS_OPTIONS[a] for a in X_AXES))
    x_axis = varying[0]
    return x_axis, "share" if "share" in varying[1:] else None


def _order(axis: str, values) -> list:
    if axis in ("window", "size_window"):
        return sorted(values, key=window_hours)
    if axis in ("share", "headroom"):
        return sorted(values)
    return sorted(values, key=str)


def _value_label(axis: str, v) -> str:
    if axis in ("window", "size_window"):
        return window_label(v)
    if axis == "share":
        return f"{v:.0%}"
    if axis == "card_class":
        return v if isinstance(v, str) else "+".join(v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def plot_slice(summaries: Sequence[ComboSummary], anchor: Combo | None) -> tuple[list[ComboSummary], str, dict]:
    """The summaries drawn: every value of the x axis and of the line axis, with the other axes held at
    the anchor's (the recommended combination's, or the first's). Returns them, the x axis and the held values."""
    x_axis, line_axis = plot_axes([s.combo for s in summaries])
    anchor = anchor or summaries[0].combo
    held = {a: getattr(anchor, a) for a in AXES if a not in (x_axis, line_axis or "share")}
    chosen = [s for s in summaries if all(getattr(s.combo, k) == v for k, v in held.items())]
    return chosen, x_axis, held


def plot_compare(
    summaries: Sequence[ComboSummary],
    path: Path,
    title: str,
    min_convergence: float,
    max_wrong_evictions: int,
    anchor: Combo | None = None,
    marked: dict[str, Combo] | None = None,
) -> Path:
    """Write the two-panel figure to `path` (PNG, SVG or PDF by its suffix)."""
    chosen, x_axis, held = plot_slice(summaries, anchor)
    _, line_axis = plot_axes([s.combo for s in summaries])

    def xw(s: ComboSummary):
        return getattr(s.combo, x_axis)

    def lw(s: ComboSummary):
        return getattr(s.combo, line_axis) if line_axis else None

    windows = _order(x_axis, {xw(s) for s in chosen})
    shares = _order(line_axis, {lw(s) for s in chosen}) if line_axis else [None]
    x_of = {w: i for i, w in enumerate(windows)}
    fig, (ax_c, ax_w) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110, constrained_layout=True)
    colors = plt.get_cmap("viridis")([0.15 + 0.7 * i / max(1, len(shares) - 1) for i in range(len(shares))])
    short: list[ComboSummary] = []
    for color, share in zip(colors, shares):
        line = sorted((s for s in chosen if lw(s) == share), key=lambda s: x_of[xw(s)])
        xs = [x_of[xw(s)] for s in line]
        for ax, key in ((ax_c, "convergence"), (ax_w, "wrong_evictions")):
            med = [s.figures[key]["median"] for s in line]
            lo = [s.figures[key]["p05"] for s in line]
            hi = [s.figures[key]["p95"] for s in line]
            ax.fill_between(xs, lo, hi, color=color, alpha=0.18, linewidth=0)
            ax.plot(xs, med, "o-", color=color, linewidth=2.2, markersize=6, label=_value_label(line_axis, share) if line_axis else None)
        short += [s for s in line if s.pass_rate["capacity"] < 0.5]
    if short:
        # A month short of demand bills less than the ideal can: ring such points so a high
        # convergence bought with a shortage is not read as a good choice.
        ax_c.plot(
            [x_of[xw(s)] for s in short],
            [s.figures["convergence"]["median"] for s in short],
            "o", markersize=15, markerfacecolor="none", markeredgecolor="firebrick", markeredgewidth=2,
            label="short of demand\nin most months",
        )
    ax_c.axhline(min_convergence, color="firebrick", linestyle="--", linewidth=1)
    ax_c.text(0.01, min_convergence, f"pass mark {min_convergence:.0%}", color="firebrick", va="bottom", ha="left", transform=ax_c.get_yaxis_transform())
    ax_w.axhline(max_wrong_evictions, color="firebrick", linestyle="--", linewidth=1)
    ax_w.text(0.01, max_wrong_evictions, f"pass mark: at most {max_wrong_evictions}", color="firebrick", va="bottom", ha="left", transform=ax_w.get_yaxis_transform())
    for name, combo in (marked or {}).items():
        hit = [s for s in chosen if s.combo == combo]
        if not hit:
            continue
        s = hit[0]
        x = x_of[getattr(combo, x_axis)]
        for ax, key in ((ax_c, "convergence"), (ax_w, "wrong_evictions")):
            y = s.figures[key]["median"]
            ax.plot([x], [y], marker="*", markersize=17, color="black", zorder=5)
            ax.annotate(name, (x, y), xytext=(10, 8), textcoords="offset points", fontsize=10, fontweight="bold")
    ax_c.set_title("convergence (ideal bill / real bill)")
    ax_c.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax_w.set_title("wrong evictions per month")
    # Whole evictions only, and room for one even when no month evicts a healthy card.
    ax_w.set_ylim(min(-0.3, ax_w.get_ylim()[0]), max(1.0, ax_w.get_ylim()[1]))
    ax_w.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax_c, ax_w):
        ax.set_xticks(range(len(windows)), [_value_label(x_axis, w) for w in windows])
        ax.set_xlabel(AXIS_TITLES[x_axis])
        ax.set_xlim(-0.3, len(windows) - 0.7)
        ax.grid(True, alpha=0.3)
    if line_axis or short:
        ax_c.legend(title=AXIS_TITLES[line_axis] if line_axis else None, loc="best", fontsize=9)
    # The share held too when it is not drawn, so a grid with eviction off says "eviction off", not its window.
    anchor_share = {"share": chosen[0].combo.share} if chosen and "share" not in (x_axis, line_axis) else {}
    held_text = anchor_label(held | anchor_share)
    return _titled_and_saved(fig, Path(path), title, held_text)


def _titled_and_saved(fig, path: Path, title: str, held_text: str) -> Path:
    """Title the figure, its subtitle fitted to its width, and write it; a PNG holds the title and subtitle as
    written, so the README's picture can be checked against the code that draws it."""
    lines = fitted_lines(fig, ["lines: median", "bands: 90% of months", *held_text.split(", ")], fontsize=11)
    fig.suptitle("\n".join([title, *lines]), fontsize=11)
    fmt = path.suffix.lstrip(".").lower()
    said = {"Title": title, "Description": "\n".join(lines)}
    fig.savefig(path, format=fmt, metadata=said if fmt == "png" else {"Title": title})
    plt.close(fig)
    return path


def fitted_lines(fig, parts: Sequence[str], fontsize: float, share: float = 0.96) -> list[str]:
    """`parts` joined into as few lines as fit `share` of the figure's width at `fontsize`, measured as drawn (a
    subtitle as long as the axes held grew past both edges of the figure, and was cut there); a line breaks only
    between parts, `; ` after the first two (what the lines and bands are) and `, ` between the axes held."""
    renderer = fig.canvas.get_renderer()
    room = fig.bbox.width * share

    def width(text: str) -> float:
        t = fig.text(0, 0, text, fontsize=fontsize)
        w = t.get_window_extent(renderer).width
        t.remove()
        return w

    lines: list[str] = []
    for i, part in enumerate(parts):
        sep = "; " if i <= 2 else ", "
        if lines and width(lines[-1] + sep + part) <= room:
            lines[-1] += sep + part
        else:
            if lines:
                lines[-1] += sep.rstrip()
            lines.append(part)
    return lines
