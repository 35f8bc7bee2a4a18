"""The promise against its speed targets: replay with a promise beside the same replay without one, and a
recommendation under a promise.

    python bench/latency_speed.py                     # both sections
    python bench/latency_speed.py --only replay       # replay or recommend
    python bench/latency_speed.py --months 200        # the recommendation's months (default 200)
    python bench/latency_speed.py --baseline DIR      # beside another checkout's code, in turns (`git worktree add DIR REV`)

replay     The benchmark pool (`bench/run.py`'s flagships, diurnal demand at half the rated rate) with the chat
           class's curve (a 70B model on H100: 20.9 ms + 0.227 ms a stream, rated at 128) at 1,000 and 10,000 cards:
           the replay with no promise and the same month under 30 tok/s a stream and the first token within 2 s at
           p99, sized to it, measured side by side in one process (median of --repeats). Target: within 1.5x at
           10,000 cards.
recommend  `fleet compare --recommend --months N` on a 100-card copy of presets/chat-latency.toml sized to the
           promise, on --jobs worker processes, beside the same pool with no promise. Target: under 60 s for 200
           months on 2 cores.

With --baseline DIR each section runs in child processes on DIR's code and on this tree's, in turns (--rounds of
them), each measured by this file, and prints both trees' medians side by side: load that comes and goes falls on
both alike. Replay prints CPU seconds beside the wall's (on shared cores the fairer figure). The process is set up
as the `fleet` command sets it (BLAS on one thread, freed memory kept for reuse, `fleet.memory`); --no-as-fleet
leaves it as Python starts it, where on busy cores the bill's two BLAS threads slow the replay with no promise more
than the one with a promise, and the ratio reads smaller than `fleet replay` would see.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
CODE = os.environ.get("FLEET_BENCH_CODE")  # another checkout's code to measure (`--baseline`'s children)
if CODE:
    sys.path.insert(0, str(Path(CODE).resolve()))

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


def _median_s(fn, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `repeats` calls (the CPU time is the fairer figure on shared cores)."""
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def section_replay(repeats: int) -> dict:
    from fleet.core.month import draw_month
    from fleet.core.replay import replay
    from policies import resolve

    print(f"replay: no promise beside a promise (30 tok/s a stream, first token within 2 s at p99), one process, "
          f"median of {repeats}")
    got = {}
    for cards in (1_000, 10_000):
        plain, promised = _pool(cards, False), _pool(cards, True)
        month = draw_month(plain)
        parts_p, parts_s = resolve(plain.policy), resolve(promised.policy)
        replay(plain, parts_p, month), replay(promised, parts_s, month)  # first runs: imports, caches
        (p_s, p_cpu), (s_s, s_cpu) = (_median_s(lambda: replay(plain, parts_p, month), repeats),
                                      _median_s(lambda: replay(promised, parts_s, month), repeats))
        f = replay(promised, parts_s, month).figures
        target = f"target within 1.5x: {'met' if s_s <= 1.5 * p_s else 'NOT met'}" if cards == 10_000 else ""
        print(f"  {cards:>6,} cards  no promise {p_s:7.3f} s  promise {s_s:7.3f} s  ratio {s_s / p_s:4.2f}x  "
              f"{target}  (within the promise {f['goodput_share']:.2%}, convergence {f['convergence']:.1%})")
        print(f"  {'':>6}        CPU: no promise {p_cpu:7.3f} s  promise {s_cpu:7.3f} s  ratio {s_cpu / p_cpu:4.2f}x")
        got[f"replay {cards:,} cards"] = {"no promise": p_s, "promise": s_s}
        got[f"replay {cards:,} cards, CPU"] = {"no promise": p_cpu, "promise": s_cpu}
    return got


def section_recommend(months: int, jobs: int) -> dict:
    import contextlib
    import io
    import tomllib

    from fleet.cli.app import main

    raw = tomllib.loads((ROOT / "presets" / "chat-latency.toml").read_text(encoding="utf-8"))
    print(f"recommend: fleet compare --recommend --months {months} --jobs {jobs} on chat-latency with 100 cards, "
          "sized to the promise, beside it with no promise")
    got = {}
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
            got.setdefault(f"recommend {months} months", {})["promise" if promised else "no promise"] = took
            rows = json.loads(out.getvalue())
            best = next((r for r in rows if r.get("recommendation") == "best"), None)
            target = (f"target < 60 s: {'met' if took < 60 else 'NOT met'}" if promised and months >= 200 else "")
            print(f"  {'promise' if promised else 'no promise':<10} {months} months: {took:5.0f} s, exit {status or 0}  "
                  f"{target}")
            if best:
                print(f"    recommends {best['mode']} mode, headroom {best['headroom']:g}, {best['score']} score: bill "
                      f"${best['bill_usd']['median']:,.0f} (median), convergence {best['convergence']['median']:.1%}, "
                      f"{best['all_checks_pass_rate']:.0%} of months pass every check")
    return got


def side_by_side(baseline: Path, rounds: int, child_args: list[str]) -> None:
    """Each round: a child on the baseline's code, then one on this tree's; both trees' medians over the rounds."""
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(rounds):
        for name, code in (("before", baseline), ("after", ROOT)):
            env = {**os.environ, "FLEET_BENCH_CODE": str(code), "PYTHONPATH": str(code)}
            out = subprocess.run([sys.executable, __file__, *child_args, "--child"], env=env, capture_output=True,
                                 text=True, check=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"  round {r + 1} {name}: done", flush=True)
    med = {name: {fig: {k: statistics.median(run[fig][k] for run in got) for k in got[0][fig]} for fig in got[0]}
           for name, got in runs.items()}
    print(f"\nbefore ({baseline}) and after ({ROOT}), median of {rounds} rounds, seconds:")
    for fig in med["after"]:
        b, a = med["before"][fig], med["after"][fig]
        print(f"  {fig:<22} no promise {b['no promise']:7.3f} -> {a['no promise']:7.3f}   promise {b['promise']:7.3f} -> "
              f"{a['promise']:7.3f} ({a['promise'] / b['promise']:.2f}x)   promise / no promise "
              f"{b['promise'] / b['no promise']:.2f}x -> {a['promise'] / a['no promise']:.2f}x")


def _as_fleet() -> None:
    """BLAS on one thread and freed memory kept, as `fleet.cli.app.main` sets the process up (before numpy loads)."""
    try:
        from fleet.memory import keep_freed_memory, one_blas_thread
    except ImportError:  # a tree from before the command set these
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        return
    keep_freed_memory()
    one_blas_thread()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("replay", "recommend"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--months", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another checkout: measure its code beside this tree's, in turns")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--as-fleet", action=argparse.BooleanOptionalAction, default=True,
                    help="the process set up as the fleet command sets it (BLAS on one thread, freed memory kept); "
                         "--no-as-fleet: as Python starts it")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.as_fleet:
        _as_fleet()
    if args.baseline is not None:
        if not (args.baseline / "fleet" / "__init__.py").is_file():
            print(f"--baseline {args.baseline}: not a checkout of fleet (no fleet/__init__.py)", file=sys.stderr)
            return 2
        child = ["--repeats", str(args.repeats), "--months", str(args.months), "--jobs", str(args.jobs)]
        child += ["--as-fleet"] if args.as_fleet else ["--no-as-fleet"]
        side_by_side(args.baseline, args.rounds, child + (["--only", args.only] if args.only else []))
        return 0
    got = {}
    if args.only in (None, "replay"):
        got.update(section_replay(args.repeats))
    if args.only in (None, "recommend"):
        got.update(section_recommend(args.months, args.jobs))
    if args.child:
        print(json.dumps(got))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
