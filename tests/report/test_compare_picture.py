"""The comparison's picture: every word of it inside the figure, and the README's copy drawn by today's code.

Before: the subtitle (what the lines and bands are, then every axis held) was one line, and once the held axes grew
(score, forecast, error quantile) it ran past both edges of the figure and was cut there; the README's picture,
drawn before they grew, no longer matched what its own command draws."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image

import fleet.report.plot as plot
from fleet.core.compare import Combo, ComboSummary, FIGURES

ROOT = Path(__file__).resolve().parents[2]
README_PICTURE = ROOT / "docs" / "compare-noise-evictor.png"
README_GRID = ["-p", "noise-evictor", "--window", "hour,day,week", "--share", "0.05,0.1,0.2,0.4"]


def _summary(window: str, share: float) -> ComboSummary:
    band = {"median": 0.9, "p05": 0.85, "p95": 0.95}
    figures = {k: dict(band) for k in FIGURES}
    combo = Combo(window, "day", share, "steady", 1.01, ("flagship", "bargain"), "trimmed-mean", "holt-winters", 0.9)
    return ComboSummary(combo, 200, figures, {"capacity": 1.0, "convergence": 1.0, "eviction": 1.0}, 1.0)


def test_every_word_of_the_picture_is_inside_it(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plot.plt, "close", drawn.append)  # keep the figure to measure it once it is written
    summaries = [_summary(w, s) for w in ("hour", "day", "week") for s in (0.05, 0.1, 0.2, 0.4)]
    plot.plot_compare(summaries, tmp_path / "c.png", title="noise-evictor: 200 months from seed 56",
                      min_convergence=0.9, max_wrong_evictions=0)
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle, *fig.texts]  # the title and subtitle, then each panel's words (its tick labels are
    for ax in fig.axes:                   # placed by the layout, and those past the axis are never drawn)
        legend = ax.get_legend()
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *(legend.get_texts() if legend else [])]
    texts = [t for t in texts if t is not None and t.get_text()]
    assert any("error quantile 0.9" in t.get_text() for t in texts)
    outside = [t.get_text() for t in texts if not fig.bbox.contains(*t.get_window_extent(renderer).p0)
               or not fig.bbox.contains(*t.get_window_extent(renderer).p1)]
    monkeypatch.undo()
    plot.plt.close(fig)
    assert outside == []


def _said(png: Path) -> dict:
    with Image.open(png) as im:
        return {"size": im.size, "title": im.text.get("Title"), "subtitle": im.text.get("Description")}


def test_the_readme_picture_is_what_its_command_draws(tmp_path):
    """The README's command on two months: the same subtitle and size as the committed picture (its 200 months are
    the only difference in the title)."""
    out = tmp_path / "c.png"
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", "compare", *README_GRID, "--months", "2",
                        "--plot", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    now, committed = _said(out), _said(README_PICTURE)
    assert committed["title"] == "noise-evictor: 200 months from seed 56"
    assert now["title"] == "noise-evictor: 2 months from seed 56"
    assert (committed["size"], committed["subtitle"]) == (now["size"], now["subtitle"])
