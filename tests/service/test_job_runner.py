"""The scheduler's plain parts: job intervals on a fast clock, and the counters the listener keeps (no APScheduler)."""

from __future__ import annotations

import pytest

from fleet.service.config import Schedule
from fleet.service.scheduler import JOBS, JobRunner, intervals
from fleet.service.simulation import SimClock


def test_a_real_pool_runs_on_the_wall_schedule():
    s = Schedule()
    assert intervals(s, SimClock(0, 1.0), simulated=False) == {"ingest": 60, "score": 60, "decide": 60, "act": 60, "billing": 300, "metrics": 15,
                                                                  "reactive": 60}


@pytest.mark.parametrize(
    "speed, expected",
    [
        (3600, {"ingest": 1.0, "score": 1.0, "decide": 1.0, "act": 1.0, "billing": 1.0, "metrics": 0.5,
                "reactive": 0.05}),  # an hour a second
        (1e7, {"ingest": 0.05, "score": 0.05, "decide": 0.05, "act": 0.05, "billing": 0.05, "metrics": 0.5,
                "reactive": 0.05}),  # the floors
        (1.0, {"ingest": 60, "score": 60, "decide": 60, "act": 60, "billing": 300, "metrics": 15,
                "reactive": 60}),  # never slower than the wall schedule
    ],
)
def test_a_simulation_runs_each_job_once_a_simulated_hour(speed, expected):
    assert intervals(Schedule(), SimClock(0, speed, monotonic=lambda: 0.0), simulated=True) == pytest.approx(expected)


def test_runs_and_outcomes_are_counted():
    runner = JobRunner(lambda: 123.0)
    assert set(runner.stats) == set(JOBS)
    assert runner.run("decide", lambda: 7) == 7
    with pytest.raises(RuntimeError):
        runner.run("billing", lambda: (_ for _ in ()).throw(RuntimeError("no")))
    assert runner.stats["decide"].runs == 1 and runner.stats["billing"].runs == 1
    runner.record("decide", "ok")
    runner.record("billing", "error", RuntimeError("no"))
    runner.record("score", "missed")
    runner.record("score", "skipped-overlap")
    runner.record("not-a-job", "ok")  # another job on the same scheduler: not ours, ignored
    st = runner.stats
    assert st["decide"].last_success_ts == 123.0 and st["decide"].errors == 0
    assert st["billing"].errors == 1 and st["billing"].last_error == "RuntimeError('no')"
    assert (st["score"].misses, st["score"].skipped_overlap, st["score"].runs) == (1, 1, 0)
