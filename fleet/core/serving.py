"""A card's throughput–latency curve: the decode step against the batch, and what a promise on stream speed leaves.

Decode reads the weights once a step whatever the batch, and each stream its own KV cache, so the step grows
linearly with the batch: `step_s = alpha_s + beta_s × batch`. That is the bytes form (alpha = weights over
bandwidth, beta = one stream's cache over bandwidth) and the form serving stacks fit from measurements per model
and accelerator (`alpha_ms + beta_ms × batch`). One user sees one token a step (`1 / step`); the card emits one a
step for every stream (`batch / step`). Batching buys the second with the first: the operator's number rises as the
user's falls, and a promise on the user's (a stream-speed floor, i.e. a TPOT ceiling) caps the batch, and with it
the card's usable rate.

A card's lottery ticket and its dips scale its step: a card at `speed` 0.8 of its class takes `step / 0.8` at every
batch. Everything here is vectorised over cards (`speed` an array).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepCurve:
    """One class's decode step against its batch, and the largest batch its memory holds."""

    alpha_s: float  # the step at batch zero: the weights read once
    beta_s: float  # what each stream adds to the step: its KV cache read
    max_batch: int  # streams the card's memory holds beside the weights (a large number when not limited)

    def step_s(self, batch, speed=1.0) -> np.ndarray:
        """Seconds of one decode step at `batch` streams on a card at `speed` of its class."""
        return (self.alpha_s + self.beta_s * np.asarray(batch, dtype=np.float64)) / np.asarray(speed, dtype=np.float64)

    def stream_tps(self, batch, speed=1.0) -> np.ndarray:
        """Tokens a second one user sees at `batch` (one token a step)."""
        return 1.0 / self.step_s(batch, speed)

    def aggregate_tps(self, batch, speed=1.0) -> np.ndarray:
        """Tokens a second the card emits at `batch` (one a step for every stream)."""
        return np.asarray(batch, dtype=np.float64) / self.step_s(batch, speed)

    def batch_at_floor(self, stream_floor_tps: float, speed=1.0) -> np.ndarray:
        """The largest batch whose streams still get `stream_floor_tps` each on a card at `speed`, within its
        memory (0 where even one stream is slower than the floor)."""
        speed = np.asarray(speed, dtype=np.float64)
        budget_s = speed / float(stream_floor_tps) - self.alpha_s  # the step the floor allows, less the weights
        with np.errstate(divide="ignore", invalid="ignore"):
            fits = np.floor(budget_s / self.beta_s + 1e-9) if self.beta_s > 0 else np.where(budget_s >= 0, np.inf, -1.0)
        fits = np.where(budget_s >= -1e-15, fits, 0.0)
        return np.clip(fits, 0, self.max_batch).astype(np.int64)

    def rate_at_floor_tps(self, stream_floor_tps: float, speed=1.0) -> np.ndarray:
        """A card's usable rate under the promise: its aggregate at the largest batch that keeps the floor."""
        batch = self.batch_at_floor(stream_floor_tps, speed)
        return np.where(batch > 0, self.aggregate_tps(np.maximum(batch, 1), speed), 0.0)

    def share_at_floor(self, stream_floor_tps: float, rated_batch: int) -> float:
        """The share of the class's rated rate (its aggregate at `rated_batch`) a card of the class can use under
        the promise."""
        return float(self.rate_at_floor_tps(stream_floor_tps)) / float(self.aggregate_tps(rated_batch))

    def knee_batch(self) -> int:
        """The batch past which doubling it buys less than half again the aggregate: where alpha and the cache
        reads weigh the same (`alpha / beta`), the curve's knee."""
        return int(min(self.max_batch, max(1, round(self.alpha_s / self.beta_s)))) if self.beta_s > 0 else int(self.max_batch)


UNLIMITED_BATCH = 1_000_000


def step_curve(serving) -> StepCurve:
    """The curve of a class's `[classes.serving]` table (`fleet.core.scenario.Serving`): its measured step, or its
    bytes over its bandwidth, and the batch its memory allows."""
    if serving.alpha_ms is not None:
        alpha_s, beta_s = serving.alpha_ms / 1000.0, serving.beta_ms / 1000.0
    else:
        bytes_per_s = serving.memory_bandwidth_tb_s * 1e12
        alpha_s = serving.weight_gb * 1e9 / bytes_per_s
        beta_s = serving.kv_cache_gb_per_stream * 1e9 / bytes_per_s
    return StepCurve(alpha_s, beta_s, serving.max_batch)


def curve_rows(curve: StepCurve, batches=None) -> list[dict]:
    """The curve at a ladder of batches (powers of two up to the memory's limit, and the limit itself): what
    `fleet classes --curve` prints."""
    if batches is None:
        top = min(curve.max_batch, 1024)
        batches = sorted({1, *[2 ** k for k in range(1, 11) if 2 ** k <= top], top})
    b = np.asarray(batches, dtype=np.int64)
    return [{"batch": int(x), "step_ms": float(s) * 1000.0, "stream_tps": float(u), "aggregate_tps": float(a)}
            for x, s, u, a in zip(b, curve.step_s(b), curve.stream_tps(b), curve.aggregate_tps(b))]


def prefill_s(params_b: float, prompt_tokens: float, effective_tflops: float) -> float:
    """Seconds to prefill a prompt: 2 × parameters × prompt tokens FLOPs over the card's effective FLOPS
    (prefill is the compute-bound half of serving)."""
    return 2.0 * params_b * 1e9 * prompt_tokens / (effective_tflops * 1e12)
