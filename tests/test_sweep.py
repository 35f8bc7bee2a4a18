"""Local workers and a terminal's Ctrl-C: it reaches every process of the command, the waiting workers too."""

from __future__ import annotations

import os
import signal
import time

import pytest

from fleet.sweep import LocalEngine


def _pid(_item) -> int:
    return os.getpid()


@pytest.mark.sigint
def test_a_ctrl_c_is_nothing_to_a_worker_waiting_for_work(capfd):
    """A worker waiting for its next batch neither dies nor prints a traceback on SIGINT: the pool runs on (the
    parent is the one to stop and report). Before, it ended with its own KeyboardInterrupt traceback."""
    engine = LocalEngine(2)
    try:
        workers = {pid for _, pid in engine.run(_pid, list(range(8)))}
        assert workers and os.getpid() not in workers
        for pid in workers:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)  # let the signals land (the assertions hold however long this is)
        again = {pid for _, pid in engine.run(_pid, list(range(8)))}
        assert again and len(workers | again) <= 2  # the pool's own two workers ran them: none was lost and replaced
        assert all(os.kill(pid, 0) is None for pid in workers)  # and each one signalled is still alive
    finally:
        engine.close(cancel=False)
    assert "Traceback" not in capfd.readouterr().err
