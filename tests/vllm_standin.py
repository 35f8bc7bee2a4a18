"""Stand-in vLLM servers for the tests of measured demand: each an HTTP server on 127.0.0.1 exposing vLLM's metrics
for an offered load it is given hour by hour, on a timeline of its own.

Each stand-in serves up to its capacity and queues the rest, as vLLM does: the tokens it generated
(`vllm:generation_tokens_total`), the requests waiting (`vllm:num_requests_waiting`) and running, and the
histogram of tokens generated per request (`vllm:request_generation_tokens`). The timeline is fixed in advance,
one step per scrape with the step's time stamped on every sample, so what a real Prometheus stores does not depend
on when it scraped; after the last step the last one is repeated (a duplicate Prometheus drops).
"""

from __future__ import annotations

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


class StandIn:
    """One stand-in server: the next step of its timeline at each scrape."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.scrapes = 0
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                with stand_in._lock:
                    k = stand_in.scrapes
                    stand_in.scrapes += 1
                reply(self, 200, stand_in.timeline.exposition(k), {"Content-Type": "text/plain; version=0.0.4"})

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
