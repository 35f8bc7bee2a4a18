"""Each card's own throughput–latency curve, fitted from its telemetry: the decode step against the batch.

A class's `[classes.serving]` gives one curve for every card of the class, but cards of a class differ (the
lottery, the dips), and a card that serves slowly at a large batch may be slow or merely busy. Telemetry that
carries each sample's mean batch (vLLM's running requests) and its mean time per output token (the step a stream
sees) separates the two: a slow card's step is longer at every batch (larger alpha and beta), a busy card's is
the class's curve read further along. So each card's step is fitted by least squares,

    step_s = alpha_s + beta_s × batch,

over its samples in a window, all cards at once (sums per card with `np.bincount`: one pass over the samples,
no loop over cards). A card whose batch hardly moved in the window cannot tell alpha from beta (any line through
its one point fits): it keeps its class's beta and fits alpha alone, so it still reads slow when its step is
long at the batch it ran. A fit that comes out with a step that shrinks as the batch grows (beta below zero, from
noise) or a negative alpha is no curve either, and falls back the same way.

The fitted curves are a `StepCurve` of per-card arrays: what a promise leaves of each card (`rate_at_floor_tps`)
reads off it as off a class's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet.core.serving import UNLIMITED_BATCH, StepCurve

MIN_SAMPLES = 3
"""The fewest samples a card's own line is drawn through (two points always fit a line exactly)."""

MIN_BATCH_SPREAD = 1.0
"""The least standard deviation of a card's batches, in streams, that separates its alpha from its beta."""

MIN_BATCH_SPREAD_SHARE = 0.05
"""... and the least as a share of its mean batch (a card at a batch of 200 ± 1 has not moved)."""


@dataclass(frozen=True)
class FittedCurves:
    """Every card's fitted step (NaN where a card has no usable sample, or its class no beta to fall back on)."""

    alpha_s: np.ndarray  # (cards,) the step at batch zero
    beta_s: np.ndarray  # (cards,) what each stream adds to the step
    samples: np.ndarray  # (cards,) samples the fit read
    own_beta: np.ndarray  # (cards,) True: both from the card's samples; False: the class's beta kept, alpha fitted

    @property
    def known(self) -> np.ndarray:
        return np.isfinite(self.alpha_s) & np.isfinite(self.beta_s)

    def curve(self, max_batch: int = UNLIMITED_BATCH) -> StepCurve:
        """The cards' curves as one `StepCurve` of arrays."""
        return StepCurve(self.alpha_s, self.beta_s, max_batch)

    def rate_at_floor_tps(self, stream_floor_tps: float, max_batch: int = UNLIMITED_BATCH) -> np.ndarray:
        """Each card's rate at the promise: the largest batch whose streams keep `stream_floor_tps`, times its stream
        speed (NaN where the card has no curve; 0 where even one stream is slower than the floor)."""
        known = self.known
        curve = StepCurve(np.where(known, self.alpha_s, 1.0), np.where(known, self.beta_s, 0.0), max_batch)
        return np.where(known, curve.rate_at_floor_tps(stream_floor_tps), np.nan)


def fit_step_curves(card: np.ndarray, batch: np.ndarray, step_s: np.ndarray, n_cards: int,
                    class_beta_s: np.ndarray | None = None) -> FittedCurves:
    """Least squares of `step_s` on `batch` per card (`card`: each sample's card position, 0..n_cards-1).

    `class_beta_s` (cards,) is each card's class beta, kept where the card's own samples cannot separate alpha from
    beta (NaN or None: no class curve, and no fit for such a card). Samples with a NaN batch or step are skipped."""
    card = np.asarray(card, dtype=np.int64)
    x = np.asarray(batch, dtype=np.float64)
    y = np.asarray(step_s, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (card >= 0) & (card < n_cards)
    card, x, y = card[ok], x[ok], y[ok]
    n = np.bincount(card, minlength=n_cards).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_x = np.bincount(card, x, n_cards) / n
        mean_y = np.bincount(card, y, n_cards) / n
        dx = x - mean_x[card]  # centred per card: the sums below do not cancel at large batches
        sxx = np.bincount(card, dx * dx, n_cards)
        sxy = np.bincount(card, dx * (y - mean_y[card]), n_cards)
        own_beta = sxy / sxx
        own_alpha = mean_y - own_beta * mean_x
        spread = np.sqrt(sxx / n)
    separable = ((n >= MIN_SAMPLES) & (spread >= MIN_BATCH_SPREAD) & (spread >= MIN_BATCH_SPREAD_SHARE * mean_x)
                 & (own_beta >= 0) & (own_alpha > 0))
    prior = np.full(n_cards, np.nan) if class_beta_s is None else np.asarray(class_beta_s, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        kept_alpha = mean_y - prior * mean_x  # the class's beta through the card's mean point
    fallback_ok = (n > 0) & np.isfinite(kept_alpha) & (kept_alpha > 0)
    alpha = np.where(separable, own_alpha, np.where(fallback_ok, kept_alpha, np.nan))
    beta = np.where(separable, own_beta, np.where(fallback_ok, prior, np.nan))
    return FittedCurves(alpha, beta, n.astype(np.int64), separable)
