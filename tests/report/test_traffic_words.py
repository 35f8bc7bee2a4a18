"""The finer clock's line in the verdict says what the queue does at that step."""

import pytest

from fleet.report.verdict import traffic_words

BASE = {"step_minutes": 10, "billing_minutes": 10, "reactive": True, "reactive_adds": 3}


@pytest.mark.parametrize("max_wait_s, words", [
    (None, "no queue (a step's unserved tokens are lost)"),
    (60, "a queue of 60 s, under one step: nothing carries over"),
    (600, "a queue of 600 s;"),
    (1200, "a queue of 1200 s;"),
])
def test_a_queue_shorter_than_a_step_is_said_to_carry_nothing(max_wait_s, words):
    assert words in traffic_words({**BASE, "max_wait_s": max_wait_s})
