"""Demand files from Alibaba's ServeGen traces: generated tokens/s and requests/s at 10-minute resolution.

ServeGen (https://github.com/alibaba/ServeGen, Apache-2.0, (c) Alibaba) publishes, per client of a production
model on Alibaba Cloud Model Studio, its request rate in each 10-minute window (`chunk-N-trace.csv`: timestamp,
requests/s, CV, arrival pattern) and its prompt and output length distributions in each 6-hour window
(`chunk-N-dataset.json`). This script sums the clients into one pool's demand:

- requests/s of a 10-minute window: the sum of the clients' rates;
- generated tokens/s: the sum of each client's rate times its mean output length in the 6-hour window holding the
  10-minute one. Where a client's length distribution is absent (the repository leaves some of its largest dataset
  files out, and a window may be empty), the rate-weighted mean of the clients that have one in that window stands in
  for it, and the script says how much of the traffic that covers;
- the series is tiled to the month (a 14-day trace twice and two days more; a one-day trace 30 times) and scaled so its
  peak is `--peak-tps` (requests/s by the same factor), as a pool sized for that peak would see it.

Rows are keyed by `minute` from the month's start, as `fleet`'s `file` demand reads them (resampled to the month's
step). The derived files in `bench/pools/traces/` were made with:

    python bench/servegen.py --repo PATH_TO_SERVEGEN --model language/m-mid --peak-tps 240000 \
        --out bench/pools/traces/servegen-m-mid.csv
    python bench/servegen.py --repo PATH_TO_SERVEGEN --model reason/deepseek-r1 --peak-tps 240000 \
        --out bench/pools/traces/servegen-deepseek-r1.csv

`PATH_TO_SERVEGEN` is a checkout or a bare git directory of the repository (read with `git show`).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

STEP_S = 600
DATASET_WINDOW_S = 6 * 3600
MONTH_MINUTES = 30 * 24 * 60


class Repo:
    """A ServeGen checkout or bare git directory, read file by file."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.bare = not (self.path / "data").is_dir()

    def names(self, folder: str) -> list[str]:
        if not self.bare:
            return sorted(p.name for p in (self.path / folder).iterdir())
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "--name-only", f"HEAD:{folder}"],
                             check=True, capture_output=True, text=True).stdout
        return sorted(out.split())

    def read(self, name: str) -> str | None:
        if not self.bare:
            p = self.path / name
            return p.read_text() if p.exists() else None
        got = subprocess.run(["git", "--git-dir", str(self.path), "show", f"HEAD:{name}"], capture_output=True, text=True)
        return got.stdout if got.returncode == 0 else None  # a file the copy holds no content of


def mean_of_pdf(text: str) -> float | None:
    """The mean of a ServeGen length distribution (`{tokens: probability}` as a Python literal), None when empty."""
    pdf = ast.literal_eval(text)
    if not pdf:
        return None
    tokens = np.fromiter((float(k) for k in pdf), dtype=np.float64)
    probs = np.fromiter((float(v) for v in pdf.values()), dtype=np.float64)
    return float((tokens * probs).sum() / probs.sum())


def read_clients(repo: Repo, model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(rates (clients, steps) requests/s, output and prompt means (clients, windows), NaN where absent), and the
    number of clients whose dataset file the copy lacks."""
    folder = f"data/{model}"
    names = repo.names(folder)
    ids = sorted(int(n.split("-")[1]) for n in names if n.endswith("-trace.csv"))
    rates, outs, prompts, missing = [], [], [], 0
    for cid in ids:
        rows = [line.split(",") for line in (repo.read(f"{folder}/chunk-{cid}-trace.csv") or "").splitlines() if line]
        ts = np.array([int(r[0]) for r in rows])
        rate = np.zeros(int(ts.max()) // STEP_S + 1)
        rate[ts // STEP_S] = [float(r[1]) if r[3] else 0.0 for r in rows]  # no pattern: no requests that window
        rates.append(rate)
        text = repo.read(f"{folder}/chunk-{cid}-dataset.json")
        windows = int(ts.max()) // DATASET_WINDOW_S + 1
        out, prompt = np.full(windows, np.nan), np.full(windows, np.nan)
        if text is None:
            missing += 1
        else:
            for key, fields in json.loads(text).items():
                w = int(key) // DATASET_WINDOW_S
                if w < windows:
                    out[w] = mean_of_pdf(fields["output_tokens"]) or np.nan
                    prompt[w] = mean_of_pdf(fields["input_tokens"]) or np.nan
        outs.append(out)
        prompts.append(prompt)
    steps = max(r.size for r in rates)
    windows = max(o.size for o in outs)
    pad = lambda rows, n, fill: np.array([np.pad(r, (0, n - r.size), constant_values=fill) for r in rows])  # noqa: E731
    return pad(rates, steps, 0.0), pad(outs, windows, np.nan), pad(prompts, windows, np.nan), missing


def pool_series(rates: np.ndarray, outs: np.ndarray, prompts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Requests/s, generated tokens/s and the mean prompt and output lengths of every 10-minute step, and the share
    of requests whose output length was stood in for."""
    window = np.arange(rates.shape[1]) * STEP_S // DATASET_WINDOW_S
    out_at, prompt_at = outs[:, window], prompts[:, window]
    weight = np.where(np.isfinite(out_at), rates, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        fill_out = np.nansum(out_at * weight, axis=0) / weight.sum(axis=0)
        fill_prompt = np.nansum(np.nan_to_num(prompt_at) * weight, axis=0) / weight.sum(axis=0)
    fill_out = np.where(np.isfinite(fill_out), fill_out, np.nanmean(outs))
    fill_prompt = np.where(np.isfinite(fill_prompt), fill_prompt, np.nanmean(prompts))
    stood_in = ~np.isfinite(out_at)
    out_at = np.where(stood_in, fill_out[None, :], out_at)
    prompt_at = np.where(np.isfinite(prompt_at), prompt_at, fill_prompt[None, :])
    requests = rates.sum(axis=0)
    tokens = (rates * out_at).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out_mean = np.where(requests > 0, tokens / requests, 0.0)
        prompt_mean = np.where(requests > 0, (rates * prompt_at).sum(axis=0) / requests, 0.0)
    covered = float((rates * stood_in).sum() / max(rates.sum(), 1e-300))
    return requests, tokens, prompt_mean, out_mean, covered


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="a ServeGen checkout or bare git directory")
    ap.add_argument("--model", required=True, help="e.g. language/m-mid, reason/deepseek-r1")
    ap.add_argument("--peak-tps", type=float, default=240_000.0, help="the month's peak generated tokens/s after scaling")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    rates, outs, prompts, missing = read_clients(Repo(a.repo), a.model)
    requests, tokens, prompt_mean, out_mean, stood_in = pool_series(rates, outs, prompts)
    steps = MONTH_MINUTES * 60 // STEP_S
    tile = np.resize(np.arange(tokens.size), steps)  # the trace repeated to fill the month
    scale = a.peak_tps / float(tokens[tile].max())
    minutes = np.arange(steps) * STEP_S // 60
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        f.write(f"# ServeGen data/{a.model} (github.com/alibaba/ServeGen, Apache-2.0, (c) Alibaba): "
                f"{rates.shape[0]} clients, {tokens.size} ten-minute windows tiled to 30 days, scaled x{scale:.6g} "
                f"to a {a.peak_tps:,.0f} tok/s peak; made by bench/servegen.py\n")
        f.write("minute,demand_tps,requests_per_s,prompt_tokens_per_request,output_tokens_per_request\n")
        for m, i in zip(minutes.tolist(), tile.tolist()):
            f.write(f"{m},{tokens[i] * scale:.1f},{requests[i] * scale:.4f},{prompt_mean[i]:.1f},{out_mean[i]:.1f}\n")
    jumps = tokens[1:] / np.maximum(tokens[:-1], 1e-9)
    print(f"{a.model}: {rates.shape[0]} clients ({missing} without a length file), {tokens.size} steps; "
          f"{stood_in:.1%} of requests' output length stood in for; "
          f"{int((jumps > 1.5).sum())} steps jump by more than 1.5x; scale x{scale:.6g}; wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
