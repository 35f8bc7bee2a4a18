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

import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field, model_validator

from fleet.core.tables import Strict


UNLIMITED_BATCH = 1_000_000


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
        beta_s = np.asarray(self.beta_s, dtype=np.float64)  # one class's, or each card's fitted (`fleet.core.curve_fit`)
        budget_s = speed / float(stream_floor_tps) - self.alpha_s  # the step the floor allows, less the weights
        with np.errstate(divide="ignore", invalid="ignore"):
            fits = np.where(beta_s > 0, np.floor(budget_s / beta_s + 1e-9), np.where(budget_s >= 0, np.inf, -1.0))
        fits = np.where(budget_s >= -1e-15, fits, 0.0)
        return np.clip(fits, 0, self.max_batch).astype(np.int64)

    def rate_at_floor_tps(self, stream_floor_tps: float, speed=1.0) -> np.ndarray:
        """A card's usable rate under the promise: its aggregate at the largest batch that keeps the floor
        (`batch_at_floor`'s batch), 0 where no batch keeps it or the speed is unknown. Worked in place over one
        float64 array: it runs over every card-hour of a month."""
        if np.ndim(self.alpha_s) or np.ndim(self.beta_s):  # each card's fitted curve (`fleet.core.curve_fit`)
            batch = self.batch_at_floor(stream_floor_tps, speed)
            with np.errstate(divide="ignore"):  # a card at no speed: its step is endless, and its rate 0
                return np.where(batch > 0, self.aggregate_tps(np.maximum(batch, 1), speed), 0.0)
        speed = np.asarray(speed, dtype=np.float64)
        shape = speed.shape
        speed = speed.reshape(-1)
        out = np.empty(speed.shape)
        self.rate_at_floor_into(stream_floor_tps, speed, out, np.empty(speed.shape), np.empty(speed.shape, dtype=bool))
        return out.reshape(shape)

    def rate_at_floor_into(self, stream_floor_tps: float, speed: np.ndarray, out: np.ndarray, step: np.ndarray,
                           batched: np.ndarray) -> np.ndarray:
        """`rate_at_floor_tps` of a class's curve (one alpha and beta) into `out`, from 1-d float64 speeds, with
        `step` (float64) and `batched` (bool) of the same length as scratch: a caller working a month chunk by
        chunk keeps one set of buffers, not a few new arrays a chunk.

        Speeds that are all finite and at least 0 (a month's scores) skip what only the others need: the memory's
        cap when the fastest of them is within it (the batch rises with the speed), and the guard on the last
        division (a card with no batch gets 0 / its step, which is 0 at any such speed)."""
        b = out
        top = float(speed.max(initial=0.0)) if speed.size else 0.0
        plain = bool(speed.size) and np.isfinite(top) and float(speed.min()) >= 0.0 and self.beta_s > 0
        np.divide(speed, float(stream_floor_tps), out=b)
        b -= self.alpha_s  # the step the floor allows, less the weights
        if self.beta_s > 0:
            b /= self.beta_s
            b += 1e-9
            np.floor(b, out=b)
            # A budget below zero floors below one, so at zero (as `batch_at_floor`), as does an unknown speed.
            np.fmax(b, 0.0, out=b)
            if not plain or self._batch_at(stream_floor_tps, top) > self.max_batch:
                np.fmin(b, float(self.max_batch), out=b)
        else:
            keeps = b >= -1e-15
            b[:] = np.inf
            b[~keeps] = 0.0
            np.clip(b, 0.0, float(self.max_batch), out=b)
        np.multiply(b, self.beta_s, out=step)
        step += self.alpha_s
        with np.errstate(divide="ignore"):  # a card at no speed: no batch, and no rate
            step /= speed
            if plain:
                np.divide(b, step, out=b)  # aggregate = batch / step, as `aggregate_tps`
            else:
                np.greater(b, 0, out=batched)
                np.divide(b, step, out=b, where=batched)
        return b

    def _batch_at(self, stream_floor_tps: float, speed: float) -> float:
        """The uncapped batch `rate_at_floor_into` works out at one speed, by the same float64 operations."""
        b = (speed / float(stream_floor_tps) - float(self.alpha_s)) / float(self.beta_s) + 1e-9
        return float(math.floor(b)) if math.isfinite(b) else b

    def share_at_floor(self, stream_floor_tps: float, rated_batch: int) -> float:
        """The share of the class's rated rate (its aggregate at `rated_batch`) a card of the class can use under
        the promise."""
        return float(self.rate_at_floor_tps(stream_floor_tps)) / float(self.aggregate_tps(rated_batch))

    def knee_batch(self) -> int:
        """The batch past which doubling it buys less than half again the aggregate: where alpha and the cache
        reads weigh the same (`alpha / beta`), the curve's knee."""
        return int(min(self.max_batch, max(1, round(self.alpha_s / self.beta_s)))) if self.beta_s > 0 else int(self.max_batch)




CHUNK_CELLS = 1 << 15
"""Card-hours worked at once: the curve's arithmetic over a month runs chunk by chunk, in cache."""


def over_chunks(fn, src: np.ndarray, dtype=np.float64) -> np.ndarray:
    """`fn` over `src` a chunk at a time in its memory order (`src`'s shape and layout; `fn` works in float64 and its
    numbers are stored as `dtype`, rounded as `astype` rounds): the same numbers as `fn` over the whole array, without
    its month-sized temporaries."""
    out = np.empty_like(src, dtype=dtype, order="K")
    it = np.nditer([src, out], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["readonly"], ["writeonly"]], op_dtypes=[np.float64, np.float64], buffersize=CHUNK_CELLS,
                   order="K", casting="same_kind")
    with it:
        for chunk, into in it:
            into[...] = fn(chunk)
    return out


def rates_at_floor_tps(curve: StepCurve, stream_floor_tps: float, rated_tps: float, rate_tps: np.ndarray,
                       dtype=np.float64) -> np.ndarray:
    """Cards' rates at the floor from their rates (their speed: rate over the class's `rated_tps`), as `over_chunks`
    works `curve.rate_at_floor_tps` out and stores it as `dtype`; an array laid out whole (a stretch of scores) is
    read straight, a chunk at a time through one set of buffers."""
    src = np.asarray(rate_tps)
    order = "C" if src.flags.c_contiguous else "F" if src.flags.f_contiguous else None
    if np.ndim(curve.alpha_s) or np.ndim(curve.beta_s) or order is None:
        return over_chunks(lambda r: curve.rate_at_floor_tps(stream_floor_tps, r / rated_tps), src, dtype)
    out = np.empty(src.shape, dtype=dtype, order=order)
    flat_src, flat_out = src.ravel(order=order), out.ravel(order=order)
    if src.dtype == np.float32 and out.dtype == np.float32 and _float32_rates_at_floor(
            curve, stream_floor_tps, rated_tps, flat_src, flat_out):
        return out
    step = min(CHUNK_CELLS, max(flat_src.size, 1))
    speed, rate, slow, batched = np.empty(step), np.empty(step), np.empty(step), np.empty(step, dtype=bool)
    for i in range(0, flat_src.size, step):
        j = min(flat_src.size, i + step)
        k = j - i
        np.copyto(speed[:k], flat_src[i:j])  # cast, then divided in float64: cheaper than a casting division
        speed[:k] /= rated_tps
        curve.rate_at_floor_into(stream_floor_tps, speed[:k], rate[:k], slow[:k], batched[:k])
        flat_out[i:j] = rate[:k]
    return out


_SURE_ULPS = 16.0
"""How many float32 roundings of the batch's largest term the float32 reading of a batch must sit clear of a whole
number by (`_float32_rates_at_floor`): four times the four roundings it makes."""

_TURN_ULPS = 64
"""How many float64 steps a rate's product must sit clear of a float32 rounding's turn by (`_float32_rates_at_floor`):
ten times the six by which the product and `rate_at_floor_into`'s three divisions can part."""

_LOW_BITS = (1 << 29) - 1
"""The float64 bits below a float32's: at half of them (2^28) a rounding to float32 turns."""


def _float32_rates_at_floor(curve: StepCurve, stream_floor_tps: float, rated_tps: float, src: np.ndarray,
                            out: np.ndarray) -> bool:
    """`rates_at_floor_tps` of float32 rates into float32 (a month's scores), the same numbers without its five
    float64 divisions a card-hour; False (nothing written) where it does not apply: a curve of each card's own, no
    cost a stream, a rate that is not a finite number from 0 (or too large for the float32 rounding below), or a
    batch past the memory's.

    The batch is a whole number that rises with the rate, and at batch b the rate at the floor is the rate times
    b / ((alpha + beta × b) × rated): one constant a batch. So each rate's batch is read in float32 from its rate
    times one constant less another, and is sure where that reading is farther from a whole number than its
    rounding can move it (`_SURE_ULPS`); the rate is its float64 product with its batch's constant, and is sure where
    its bits below a float32's are farther from the rounding's turn than the float64 steps by which it and the three
    divisions' number can part (`_TURN_ULPS`): then both round to the same float32. (A rate at a batch is at least
    the floor, so the float32 it rounds to is a normal one.) The rare card-hour not sure of either (a few in ten
    thousand) is worked out by `rate_at_floor_into`, as every card-hour was.
    """
    alpha, beta = curve.alpha_s, curve.beta_s
    if np.ndim(alpha) or np.ndim(beta) or not (beta > 0 and rated_tps > 0 and stream_floor_tps >= 1e-30) or src.size == 0:
        return False
    top_bits = int(src.view(np.uint32).max())  # a negative rate's sign bit, or one not finite, reads above the rest
    top = float(np.array(top_bits, dtype=np.uint32).view(np.float32))
    if top_bits > 0x7F7FFFFF or top / (float(rated_tps) * float(beta)) > 1e37:
        return False
    top_batch = curve._batch_at(stream_floor_tps, float(np.float64(top) / rated_tps))
    if top_batch > curve.max_batch:
        return False
    per_rate = 1.0 / (float(rated_tps) * float(stream_floor_tps) * float(beta))  # the batch: rate × this, less shift
    shift = float(alpha) / float(beta) - 1e-9 + 0.5  # a half more: the batch is the nearest whole number
    margin = _SURE_ULPS * 2.0 ** -24 * (top * per_rate + shift + 1.0)
    if margin >= 0.25:
        return False
    batches = np.arange(max(int(top_batch), 0) + 2, dtype=np.float64)
    per_batch = batches / ((batches * beta + alpha) * float(rated_tps))  # its step as `rate_at_floor_into` makes it
    a32, shift32, sure32 = np.float32(per_rate), np.float32(shift), np.float32(0.5 - margin)
    n = min(CHUNK_CELLS, src.size)
    near, whole, rate = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n)
    low, batch = np.empty(n, np.int64), np.empty(n, np.intp)
    unsure, turns = np.empty(n, bool), np.empty(n, bool)
    redo = []
    for i in range(0, src.size, n):
        j = min(src.size, i + n)
        k = j - i
        y, w, r, lo, b, u, t = near[:k], whole[:k], rate[:k], low[:k], batch[:k], unsure[:k], turns[:k]
        np.multiply(src[i:j], a32, out=y)
        y -= shift32
        np.rint(y, out=w)
        np.copyto(b, w, casting="unsafe")  # a batch below zero reads the table's first entry, 0: no batch
        y -= w
        np.abs(y, out=y)
        np.greater(y, sure32, out=u)  # within the margin of a half: near a whole batch
        np.take(per_batch, b, out=r, mode="clip")
        np.multiply(r, src[i:j], out=r)  # float64: the float32 rates cast exactly
        np.copyto(out[i:j], r, casting="same_kind")
        np.subtract(r.view(np.int64), (1 << 28) - _TURN_ULPS, out=lo)
        np.bitwise_and(lo, _LOW_BITS, out=lo)
        np.less_equal(lo, 2 * _TURN_ULPS, out=t)  # within the margin of the turn
        u |= t
        if u.any():
            redo.append(np.flatnonzero(u) + i)
    if redo:
        at = np.concatenate(redo)
        speed = src[at].astype(np.float64)
        speed /= rated_tps
        exact = np.empty(at.size)
        curve.rate_at_floor_into(stream_floor_tps, speed, exact, np.empty(at.size), np.empty(at.size, dtype=bool))
        out[at] = exact
    return True


class Serving(Strict):
    """A card's decode step and the batch it is rated at, for a class that gives `[classes.serving]` instead of
    `rated_tps` (`fleet.core.serving` turns it into the class's throughput–latency curve).

    Decode is bandwidth-bound: every step reads the model's weights from card memory once, whatever the batch, and
    each stream in the batch its own KV cache, then emits one token per stream. So a step takes
    (weight_gb + batch × kv_cache_gb_per_stream) / memory bandwidth: one stream gets bandwidth / weight bytes tokens
    a second, and a batch multiplies the aggregate until its cache reads crowd the step (with no cache given, the
    weights alone: 3.35 TB/s over 70 GB is about 48 tokens/s, and a batch of 16 about 766 tokens/s in aggregate).
    A step measured on the card (`alpha_ms + beta_ms × batch`, as serving stacks fit it) may stand in for the bytes.
    `memory_gb` bounds the batch: the weights and every stream's cache must fit. `params_b` and `effective_tflops`
    give the prefill (2 × parameters × prompt tokens over the FLOPS) a first token waits for.
    """

    memory_bandwidth_tb_s: float | None = Field(default=None, gt=0, le=1000)  # decimal TB (1,000 GB) a second
    weight_gb: float | None = Field(default=None, gt=0)  # the model's weights as stored on the card, decimal GB
    batch: int = Field(default=1, ge=1, le=1_000_000)  # streams decoded together in each step: the rated rate's batch
    kv_cache_gb_per_stream: float = Field(default=0.0, ge=0)  # KV cache each stream's step reads (0: weights alone)
    alpha_ms: float | None = Field(default=None, gt=0, le=60_000)  # a measured step at batch zero
    beta_ms: float | None = Field(default=None, ge=0, le=60_000)  # what each stream adds to a measured step
    memory_gb: float | None = Field(default=None, gt=0)  # the card's memory: weights + batch × cache must fit
    params_b: float | None = Field(default=None, gt=0)  # the model's parameters, billions (for the prefill)
    effective_tflops: float | None = Field(default=None, gt=0)  # the card's effective dense TFLOPS (for the prefill)

    @model_validator(mode="after")
    def _one_form(self) -> "Serving":
        bytes_form = self.memory_bandwidth_tb_s is not None and self.weight_gb is not None
        measured = self.alpha_ms is not None and self.beta_ms is not None
        if bytes_form == measured:
            raise ValueError("give the step as memory_bandwidth_tb_s and weight_gb, or as a measured alpha_ms and "
                             "beta_ms, one of the two")
        if self.memory_gb is not None:
            if self.weight_gb is None:
                raise ValueError("memory_gb bounds the batch by weight_gb + batch × kv_cache_gb_per_stream: give weight_gb")
            if self.weight_gb > self.memory_gb:
                raise ValueError(f"weight_gb {self.weight_gb:g} does not fit in memory_gb {self.memory_gb:g}")
            if self.batch > self.max_batch:
                need = self.weight_gb + self.batch * self.kv_cache_gb_per_stream
                raise ValueError(f"batch {self.batch} needs {need:g} GB of weights and cache; the card's memory_gb "
                                 f"{self.memory_gb:g} holds a batch of {self.max_batch}")
        if (self.params_b is None) != (self.effective_tflops is None):
            raise ValueError("the prefill needs both params_b and effective_tflops")
        return self

    @property
    def max_batch(self) -> int:
        """The streams the card's memory holds beside the weights (no limit without `memory_gb`)."""
        if self.memory_gb is None or self.weight_gb is None or not self.kv_cache_gb_per_stream:
            return UNLIMITED_BATCH
        return int(min(UNLIMITED_BATCH, (self.memory_gb - self.weight_gb) // self.kv_cache_gb_per_stream))

    @property
    def curve(self):
        """The class's throughput–latency curve (`fleet.core.serving.StepCurve`)."""
        return step_curve(self)

    @property
    def step_s(self) -> float:
        """Seconds of one decode step at the rated batch: the bytes it reads over the bandwidth, or as measured."""
        return float(self.curve.step_s(self.batch))

    @property
    def stream_tps(self) -> float:
        """Tokens a second one user sees at the rated batch: one token a step."""
        return 1.0 / self.step_s

    @property
    def aggregate_tps(self) -> float:
        """Tokens a second the card emits: one a step for every stream of the batch (the class's rated rate)."""
        return self.batch / self.step_s


def step_curve(serving: Serving) -> StepCurve:
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
