"""A class's throughput–latency curve drawn: per-user tok/s against aggregate tok/s as the batch grows, with the
promise's stream floor across it, so the operating point a promise leaves reads off the picture."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fleet.core.serving import StepCurve  # noqa: E402


def plot_curve(curve: StepCurve, name: str, rated_batch: int, path: Path, stream_floor_tps: float | None = None) -> None:
    """One class's curve to `path` (PNG, SVG or PDF): the batches its memory allows, its rated batch, its knee, and
    where a stream floor cuts it."""
    top = int(min(curve.max_batch, max(4 * rated_batch, 2 * curve.knee_batch(), 64)))
    batch = np.unique(np.round(np.geomspace(1, top, 200)).astype(np.int64))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    ax.plot(curve.aggregate_tps(batch), curve.stream_tps(batch), color="#1f6feb", lw=2, label=f"{name}: batch 1 to {top:,}")
    points = [(rated_batch, "rated batch", "#444444"), (curve.knee_batch(), "knee (alpha = beta x batch)", "#8250df")]
    if stream_floor_tps is not None:
        b = int(curve.batch_at_floor(stream_floor_tps))
        if b > 0:
            points.append((b, f"largest batch at {stream_floor_tps:g} tok/s a user", "#cf222e"))
        ax.axhline(stream_floor_tps, color="#cf222e", ls="--", lw=1, label=f"promise: {stream_floor_tps:g} tok/s a user")
    for b, label, color in points:
        ax.plot(curve.aggregate_tps(b), curve.stream_tps(b), "o", color=color, label=f"{label}: {b:,} ({float(curve.aggregate_tps(b)):,.0f} tok/s)")
    ax.set_xlabel("aggregate tok/s the card emits (the operator's number)")
    ax.set_ylabel("tok/s one user sees (the user's number)")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"{name}: step = {curve.alpha_s * 1000:.1f} ms + {curve.beta_s * 1000:.3f} ms x batch", fontsize=10)
    # The same curve against the batch: the aggregate flattens past the knee while each user's stream keeps falling.
    bx.plot(batch, curve.aggregate_tps(batch), color="#1f6feb", lw=2, label="aggregate tok/s")
    bx.set_xscale("log", base=2)
    bx.set_xlabel("batch (streams decoded together)")
    bx.set_ylabel("aggregate tok/s", color="#1f6feb")
    ux = bx.twinx()
    ux.plot(batch, curve.stream_tps(batch), color="#2da44e", lw=2)
    ux.set_ylabel("tok/s one user sees", color="#2da44e")
    for b, _label, color in points:
        bx.axvline(b, color=color, lw=1, ls=":")
    if stream_floor_tps is not None:
        ux.axhline(stream_floor_tps, color="#cf222e", ls="--", lw=1)
    bx.set_ylim(bottom=0)
    ux.set_ylim(bottom=0)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
