"""Stand-in vLLM servers for the tests of measured demand: each an HTTP server on 127.0.0.1 exposing vLLM's metrics
for an offered load it is given hour by hour, on a timeline of its own.

Each stand-in serves up to its capacity and queues the rest, as vLLM does: the tokens it generated
(`vllm:generation_tokens_total`), the requests waiting (`vllm:num_requests_waiting`) and running, and the
histogram of tokens generated per request (`vllm:request_generation_tokens`). The timeline is fixed in advance,
one step per scrape with the step's time stamped on every sample, so what a real Prometheus stores does not depend
on when it scraped; after the last step the last one is repeated (a duplicate Prometheus drops).

A `CurveTimeline` stand-in serves on a curve of its own (`alpha_s + beta_s × running`) and exposes what vLLM measures
of it: the running requests, and the histograms of the time per output token and to the first token.
"""

from __future__ import annotations

import json
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from tests.fake_prometheus import reply
from fleet.core.units import HOUR_S



@dataclass
class Timeline:
    """The stand-in's state at each step k (time t0 + k × step_s): cumulative tokens served and requests done, and
    the queue in tokens, for `offered_tps[h]` offered in hour h and at most `capacity_tps` served. `bursts` (step →
    tokens) arrive all at once in their step, on top: a queue that jumps, or a card busy one minute of two."""

    t0: int
    step_s: int
    capacity_tps: float
    offered_tps: tuple[float, ...]
    tokens_per_request: float = 250.0
    bursts: dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        steps = len(self.offered_tps) * HOUR_S // self.step_s + 2
        served = np.zeros(steps)
        queue = np.zeros(steps)
        q = total = 0.0
        for k in range(1, steps):
            hour = min(((k - 1) * self.step_s) // HOUR_S, len(self.offered_tps) - 1)
            arrived = self.offered_tps[hour] * self.step_s + self.bursts.get(k, 0.0)
            done = min(self.capacity_tps * self.step_s, q + arrived)
            q += arrived - done
            total += done
            served[k], queue[k] = total, q
        self.served_tokens, self.queue_tokens = served, queue

    @property
    def steps(self) -> int:
        return self.served_tokens.size

    def exposition(self, k: int) -> bytes:
        k = min(k, self.steps - 1)
        ms = (self.t0 + k * self.step_s) * 1000
        g = self.tokens_per_request
        served, waiting = float(self.served_tokens[k]), float(self.queue_tokens[k] / g)
        running = 0 if k == 0 or served == self.served_tokens[k - 1] else 4
        label = '{model_name="m"}'
        return "".join([
            "# TYPE vllm:generation_tokens_total counter\n", f"vllm:generation_tokens_total{label} {served!r} {ms}\n",
            "# TYPE vllm:num_requests_waiting gauge\n", f"vllm:num_requests_waiting{label} {waiting!r} {ms}\n",
            "# TYPE vllm:num_requests_running gauge\n", f"vllm:num_requests_running{label} {running} {ms}\n",
            "# TYPE vllm:request_generation_tokens histogram\n",
            f'vllm:request_generation_tokens_bucket{{model_name="m",le="+Inf"}} {served / g!r} {ms}\n',
            f"vllm:request_generation_tokens_sum{label} {served!r} {ms}\n",
            f"vllm:request_generation_tokens_count{label} {served / g!r} {ms}\n",
        ]).encode()


TTFT_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # a few of vLLM's time-to-first-token bounds


@dataclass
class CurveTimeline:
    """A stand-in whose decode step follows its own curve, `alpha_s + beta_s × running`, on a timeline of steps.

    Requests arrive at `offered_rps[h]` a second in hour h and wait in a queue; up to `max_batch` run, each one token a
    step; a request is done after `tokens_per_request` tokens (a fluid, second by second). In step k (the `step_s`
    before t0 + k × step_s) the card runs `running[k]` streams on average, each decode step the curve's times a
    seeded jitter of `jitter` for the step, and each token it emits took a stream one decode step: the histogram
    `vllm:time_per_output_token_seconds` grows by that many at that step each. A request's first token waits for the
    queue ahead of it (Little's law: the requests waiting over the rate they are done) and one step;
    `vllm:time_to_first_token_seconds` counts the requests done in the step at that wait, in its buckets."""

    t0: int
    step_s: int
    alpha_s: float
    beta_s: float
    offered_rps: tuple[float, ...]
    tokens_per_request: float = 250.0
    max_batch: int = 256
    jitter: float = 0.03
    seed: int = 0

    def __post_init__(self):
        steps = len(self.offered_rps) * HOUR_S // self.step_s + 2
        rng = np.random.default_rng(self.seed)
        self.running = np.zeros(steps)  # the mean running requests over each step (a gauge read densely)
        self.waiting = np.zeros(steps)
        self.step_s_at = np.full(steps, self.alpha_s)  # each step's mean decode step, per token
        self.tokens = np.zeros(steps)  # cumulative, as the counters are
        self.first_wait_s = np.zeros(steps)
        self.done = np.zeros(steps)  # requests done (and first tokens given) in each step
        in_system = total = 0.0
        for k in range(1, steps):
            hour = min(((k - 1) * self.step_s) // HOUR_S, len(self.offered_rps) - 1)
            jitter = 1.0 + self.jitter * rng.standard_normal()  # the step's own noise around the curve
            b_sum = made_sum = weighted = done_sum = 0.0
            for _ in range(self.step_s):  # one-second slices: a request lasts a few seconds, a step a minute
                in_system += self.offered_rps[hour]
                b = min(in_system, self.max_batch)
                step = (self.alpha_s + self.beta_s * b) * jitter
                made = b / step
                done = min(made / self.tokens_per_request, in_system)
                in_system -= done
                b_sum, made_sum, weighted, done_sum = b_sum + b, made_sum + made, weighted + made * step, done_sum + done
            total += made_sum
            self.running[k] = b_sum / self.step_s
            self.step_s_at[k] = weighted / made_sum if made_sum else self.alpha_s * jitter
            self.tokens[k], self.done[k] = total, done_sum
            self.waiting[k] = max(in_system - self.max_batch, 0.0)
            self.first_wait_s[k] = self.waiting[k] / (done_sum / self.step_s) + self.step_s_at[k] if done_sum > 0 else 0.0
        # The histograms' cumulative sums and buckets at each step, worked out once: a scrape only formats them.
        self.tpot_sum = np.concatenate(([0.0], np.cumsum(np.diff(self.tokens) * self.step_s_at[1:])))
        self.ttft_count = np.cumsum(self.done)
        self.ttft_sum = np.cumsum(self.done * self.first_wait_s)
        self.ttft_buckets = {le: np.cumsum(np.where(self.first_wait_s <= le, self.done, 0.0)) for le in TTFT_BUCKETS_S}

    @property
    def steps(self) -> int:
        return self.tokens.size

    def ttft_ok_share(self, k: int, within_s: float) -> float:
        """The share of step k's first tokens within `within_s` as the buckets hold it (all of them are at one wait)."""
        return 1.0 if self.first_wait_s[k] <= within_s else 0.0

    def exposition(self, k: int) -> bytes:
        k = min(k, self.steps - 1)
        ms = (self.t0 + k * self.step_s) * 1000
        label = '{model_name="m"}'
        tokens = float(self.tokens[k])
        tpot_sum = float(self.tpot_sum[k])
        lines = [
            "# TYPE vllm:generation_tokens_total counter\n", f"vllm:generation_tokens_total{label} {tokens!r} {ms}\n",
            "# TYPE vllm:num_requests_waiting gauge\n", f"vllm:num_requests_waiting{label} {float(self.waiting[k])!r} {ms}\n",
            "# TYPE vllm:num_requests_running gauge\n", f"vllm:num_requests_running{label} {float(self.running[k])!r} {ms}\n",
            "# TYPE vllm:time_per_output_token_seconds histogram\n",
            f'vllm:time_per_output_token_seconds_bucket{{model_name="m",le="+Inf"}} {tokens!r} {ms}\n',
            f"vllm:time_per_output_token_seconds_sum{label} {tpot_sum!r} {ms}\n",
            f"vllm:time_per_output_token_seconds_count{label} {tokens!r} {ms}\n",
            "# TYPE vllm:time_to_first_token_seconds histogram\n",
        ]
        for le in TTFT_BUCKETS_S:
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} {float(self.ttft_buckets[le][k])!r} {ms}\n')
        count = float(self.ttft_count[k])
        lines += [
            f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} {count!r} {ms}\n',
            f"vllm:time_to_first_token_seconds_sum{label} {float(self.ttft_sum[k])!r} {ms}\n",
            f"vllm:time_to_first_token_seconds_count{label} {count!r} {ms}\n",
        ]
        return "".join(lines).encode()


@dataclass
class GatewayTimeline:
    """A stand-in gateway in front of the pool: the tokens offered to it (`gateway_offered_tokens_total`, a counter
    at `offered_tps`), what a demand source of the user's own (`demand_query`) reads as the pool's whole demand."""

    t0: int
    step_s: int
    offered_tps: float
    hours: int

    @property
    def steps(self) -> int:
        return self.hours * HOUR_S // self.step_s + 2

    def exposition(self, k: int) -> bytes:
        k = min(k, self.steps - 1)
        ms = (self.t0 + k * self.step_s) * 1000
        return ("# TYPE gateway_offered_tokens_total counter\n"
                f"gateway_offered_tokens_total {self.offered_tps * self.step_s * k!r} {ms}\n").encode()


class StandIn:
    """One stand-in server: the next step of its timeline at each scrape."""

    def __init__(self, timeline: Timeline | CurveTimeline):
        self.timeline = timeline
        self.scrapes = 0
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                with stand_in._lock:
                    k = stand_in.scrapes
                    stand_in.scrapes += 1
                try:
                    reply(self, 200, stand_in.timeline.exposition(k), {"Content-Type": "text/plain; version=0.0.4"})
                except (BrokenPipeError, ConnectionResetError):  # the scrape gave up (timed out): serve this step again
                    with stand_in._lock:
                        if stand_in.scrapes == k + 1:
                            stand_in.scrapes = k

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def done(self) -> bool:
        """Every step has been scraped, and the last a few times over."""
        return self.scrapes >= self.timeline.steps + 3


@contextmanager
def stand_ins(*timelines: Timeline):
    servers = [StandIn(t) for t in timelines]
    for s in servers:
        threading.Thread(target=s.server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for s in servers:
            s.server.shutdown()
            s.server.server_close()


PROMETHEUS_PANIC = "expected newly cut file to have sequence:offset"
"""Prometheus 2.42 now and then panics when it writes an out-of-order chunk to disk (the stand-ins' samples are
months in the past, so every one is out of order)."""


@contextmanager
def prometheus_scraping(prometheus: str, work, servers: list[StandIn], instances: dict[str, str] | None = None,
                        timeout_s: float = 240):
    """A real Prometheus scraping the stand-ins every 100 ms: yields its URL once it holds their every step, or None
    when it panicked first (`PROMETHEUS_PANIC`; any other end fails). `instances` (target → name) relabels each
    target's `instance` label."""
    import json
    import subprocess

    from tests.service.serving import wait_for
    from tests.service.test_prometheus import free_port

    port = free_port()
    targets = sorted(s.target for s in servers)
    # The samples are stamped in the past of the server's own `up` series: accepted as out-of-order ones.
    config = ("global:\n  scrape_interval: 100ms\n"
              "storage:\n  tsdb:\n    out_of_order_time_window: 400d\n"
              "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
              f"      - targets: {json.dumps(targets)}\n")
    if instances:
        config += "    relabel_configs:\n" + "".join(
            f"      - source_labels: [__address__]\n        regex: '{t}'\n        target_label: instance\n"
            f"        replacement: '{name}'\n" for t, name in instances.items())
    (work / "prometheus.yml").write_text(config)
    log = work / "prometheus.log"
    with open(log, "wb") as err:
        prom = subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(lambda: prom.poll() is not None or all(s.done for s in servers), timeout_s,
                 "Prometheus to scrape every step of the stand-ins", every_s=0.5)
        if prom.poll() is not None:
            said = log.read_text(errors="replace")
            assert PROMETHEUS_PANIC in said, said[-2000:]
            yield None
        else:
            yield f"http://127.0.0.1:{port}"
    finally:
        prom.terminate()
        prom.wait(20)


def beside_prometheus(prometheus: str, tmp_path, timelines: dict, body, relabel: bool = False, tries: int = 3) -> None:
    """`body(work, url, names)` beside stand-ins of `timelines` (card → `Timeline`) once a real Prometheus holds
    their every step; `names` is target → card, and `relabel` names each target's `instance` by its card. A try
    Prometheus panicked in (`PROMETHEUS_PANIC`) is run again on fresh stand-ins."""
    import pytest

    for attempt in range(tries):
        work = tmp_path / f"try-{attempt}"
        work.mkdir()
        with stand_ins(*timelines.values()) as servers:
            names = {s.target: card for card, s in zip(timelines, servers)}
            with prometheus_scraping(prometheus, work, servers, names if relabel else None) as url:
                if url is not None:
                    body(work, url, names)
                    return
    pytest.fail(f"Prometheus panicked on every try ({PROMETHEUS_PANIC!r})")


STANDIN_WINDOW = "90s"
"""Two of the stand-ins' one-minute steps: each point's rate reads exactly its own minute."""


def standin_pool_toml(url: str, policy: str = "", schedule: str = "", tables: str = "") -> str:
    """`fleet serve`'s config of a real pool of stand-ins behind the Prometheus at `url`: one class, the policy
    planning each hour on the last one's demand, the queries reading the stand-ins' minutes. `policy`, `schedule`
    and `tables` are TOML lines added to `[policy]`, to `[schedule]` and at the end."""
    from fleet.ingest.demand.vllm_queue import unserved_query
    from fleet.ingest.prometheus import busy_query, rate_query

    w = STANDIN_WINDOW
    busy = busy_query(window=w, resolution="60s")
    return "\n".join([
        "[month]", "start = 2026-01-01T00:00:00Z", "hours = 24",
        "[[pool.classes]]", 'name = "flagship"', "rated_tps = 3000", "rent_usd_per_month = 2690",
        "[policy]", 'card_class = "flagship"', 'window = "hour"', 'mode = "steady"', 'forecast = "last-hour"', policy,
        "[schedule]", "settle_s = 300", schedule,
        "[ingest]", 'default_class = "flagship"',
        "[ingest.sources.prometheus]", f'prometheus_url = "{url}"', f"query = '{rate_query(window=w)}'",
        f"busy_query = '{busy}'", f"queue_query = '{unserved_query(window=w)}'",
        tables, "",
    ])
