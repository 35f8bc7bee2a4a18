"""Synthetic telemetry files for the ingest benchmark and tests: per-minute samples with one bad record in every `bad_every`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BASE_TS = 1_735_689_600  # 2025-01-01T00:00:00Z
# Malformed records, one kind after another, each with the reason it must be quarantined for.
BAD_KINDS = (
    ("{card},{ts},not-a-number", "unparseable:tokens_per_s"),
    ("{card},{ts},-5.0", "negative:tokens_per_s"),
    ("{card},{ts},nan", "non-finite:tokens_per_s"),
    ("{card},yesterday,100.0", "unparseable:ts"),
    ("{card},{ts}", "malformed-line"),
    (",{ts},100.0", "missing:card_id"),
    ("{card},{ts},", "missing:tokens_per_s"),
    ("{card},99,100.0", "out-of-range:ts"),
    ("{card},{ts},1e12", "implausible:tokens_per_s"),
    ("{card},{ts},inf", "non-finite:tokens_per_s"),
)
CHUNK = 200_000  # records generated and written at a time, so a file of any size is written in bounded memory


def write_csv(path: Path, samples: int, cards: int = 1000, bad_every: int = 100, seed: int = 0) -> dict[str, int]:
    """Write `samples` records (card × minute, cards cycling fastest); every `bad_every`-th is malformed.

    Returns the expected reason counts of the malformed records."""
    rng = np.random.default_rng(seed)
    expected: dict[str, int] = {}
    with open(path, "w", encoding="utf-8") as f:
        f.write("card_id,ts,tokens_per_s\n")
        for lo in range(0, samples, CHUNK):
            hi = min(lo + CHUNK, samples)
            tps = np.round(rng.normal(6000, 1500, hi - lo).clip(0), 3).tolist()
            out = [f"gpu-{i % cards:05d},{BASE_TS + (i // cards) * 60},{v}" for i, v in zip(range(lo, hi), tps)]
            if bad_every:
                first = lo + (bad_every - 1 - lo) % bad_every
                for b in range(first, hi, bad_every):
                    template, why = BAD_KINDS[(b // bad_every) % len(BAD_KINDS)]
                    out[b - lo] = template.format(card=f"gpu-{b % cards:05d}", ts=BASE_TS + (b // cards) * 60)
                    expected[why] = expected.get(why, 0) + 1
            f.write("\n".join(out))
            f.write("\n")
    return expected
