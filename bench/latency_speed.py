"""The promise against its speed targets: replay with a promise beside the same replay without one, and a
recommendation under a promise.

    python bench/latency_speed.py                     # both sections
    python bench/latency_speed.py --only replay       # replay or recommend
    python bench/latency_speed.py --months 200        # the recommendation's months (default 200)

replay     The benchmark pool (`bench/run.py`'s flagships, diurnal demand at half the rated rate) with the chat
           class's curve (a 70B model on H100: 20.9 ms + 0.227 ms a stream, rated at 128) at 1,000 and 10,000 cards:
           the replay with no promise and the same month under 30 tok/s a stream and the first token within 2 s at
           p99, sized to it, measured side by side in one process (median of --repeats). Target: within 1.5x at
           10,000 cards.
recommend  `fleet compare --recommend --months N` on a 100-card copy of presets/chat-latency.toml sized to the
           promise, on --jobs worker processes, beside the same pool with no promise. Target: under 60 s for 200
           months on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHAT_SERVING = {"alpha_ms": 20.9, "beta_ms": 0.227, "batch": 128, "params_b": 70, "effective_tflops": 400}
PROMISE = {"stream_tps": 30.0, "ttft_ms": 2000.0, "percentile": 0.99}
REQUESTS = {"output_tokens_per_request": 250.0, "prompt_tokens_per_request": 600.0}


def _pool(cards: int, promise: bool):
    from run import bench_scenario

    d = bench_scenario(cards).model_dump()
    rated = 128 / ((20.9 + 0.227 * 128) / 1000.0)
    d["classes"] = [{**{k: v for k, v in c.items() if k != "rated_tps"}, "serving": CHAT_SERVING} for c in d["classes"]]
    d["demand"] = {**d["demand"], **REQUESTS, "avg_tps": rated * cards * 0.3}  # the peak within the rate at 30 tok/s
    if promise:
        d["slo"] = PROMISE
    return type(bench_scenario(cards)).model_validate(d)


def _median_s(fn, repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def section_replay(repeats: int) -> None:
    from fleet.core.month import draw_month
    from fleet.core.replay import replay
    from policies import resolve

    print(f"replay: no promise beside a promise (30 tok/s a stream, first token within 2 s at p99), one process, "
          f"median of {repeats}")
    for cards in (1_000, 10_000):
        plain, promised = _pool(cards, False), _pool(cards, True)
        month = draw_month(plain)
        parts_p, parts_s = resolve(plain.policy), resolve(promised.policy)
        replay(plain, parts_p, month), replay(promised, parts_s, month)  # first runs: imports, caches
        p_s = _median_s(lambda: replay(plain, parts_p, month), repeats)
        s_s = _median_s(lambda: replay(promised, parts_s, month), repeats)
        f = replay(promised, parts_s, month).figures
        target = f"target within 1.5x: {'met' if s_s <= 1.5 * p_s else 'NOT met'}" if cards == 10_000 else ""
        print(f"  {cards:>6,} cards  no promise {p_s:7.3f} s  promise {s_s:7.3f} s  ratio {s_s / p_s:4.2f}x  "
              f"{target}  (within the promise {f['goodput_share']:.2%}, convergence {f['convergence']:.1%})")


def section_recommend(months: int, jobs: int) -> None:
    import contextlib
    import io
    import json
    import tomllib

    from fleet.cli.app import main

    raw = tomllib.loads((ROOT / "presets" / "chat-latency.toml").read_text(encoding="utf-8"))
    print(f"recommend: fleet compare --recommend --months {months} --jobs {jobs} on chat-latency with 100 cards, "
          "sized to the promise, beside it with no promise")
    with tempfile.TemporaryDirectory() as tmp:
        for promised in (False, True):
            path = Path(tmp) / f"chat-100-{'promise' if promised else 'plain'}.toml"
            lines = (ROOT / "presets" / "chat-latency.toml").read_text(encoding="utf-8")
            lines = lines.replace("pool_cards = 64", "pool_cards = 100").replace("avg_tps = 40000", "avg_tps = 62500")
            if not promised:
                lines = lines.replace("[slo]\n", "[unused]\n")
                lines = lines.replace("stream_tps = 30\nttft_ms = 2000\npercentile = 0.99\n", "")
                lines = lines.replace("[unused]\n", "")
            path.write_text(lines, encoding="utf-8")
            assert ("slo" in tomllib.loads(lines)) == promised and raw["policy"]["card_class"] == "h100-70b"
            argv = ["compare", "-p", str(path), "--recommend", "--months", str(months), "--jobs", str(jobs), "--json",
                    "--set", 'policy.size_to="promise"']
            out = io.StringIO()
            t0 = time.perf_counter()
            sys.argv = ["fleet", *argv]
            with contextlib.redirect_stdout(out):
                try:
                    status = main()
                except SystemExit as e:
                    status = e.code
            took = time.perf_counter() - t0
            rows = json.loads(out.getvalue())
            best = next((r for r in rows if r.get("recommendation") == "best"), None)
            target = (f"target < 60 s: {'met' if took < 60 else 'NOT met'}" if promised and months >= 200 else "")
            print(f"  {'promise' if promised else 'no promise':<10} {months} months: {took:5.0f} s, exit {status or 0}  "
                  f"{target}")
            if best:
                print(f"    recommends {best['mode']} mode, headroom {best['headroom']:g}, {best['score']} score: bill "
                      f"${best['bill_usd']['median']:,.0f} (median), convergence {best['convergence']['median']:.1%}, "
                      f"{best['all_checks_pass_rate']:.0%} of months pass every check")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("replay", "recommend"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--months", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.only in (None, "replay"):
        section_replay(args.repeats)
    if args.only in (None, "recommend"):
        section_recommend(args.months, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
