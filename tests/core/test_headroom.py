"""The headroom search finds the least passing step wherever it starts."""

from hypothesis import given
from hypothesis import strategies as st

from fleet.core.headroom import least_passing_step


@given(st.integers(0, 300), st.integers(0, 301), st.integers(0, 300))
def test_least_passing_step_from_any_start(top, threshold, start):
    start = min(start, top)
    tried = []

    def passes(k: int) -> bool:
        assert 0 <= k <= top
        tried.append(k)
        return k >= threshold

    got = least_passing_step(passes, top, start)
    assert got == (threshold if threshold <= top else None)
    assert len(tried) <= 2 * (top.bit_length() + 2)  # a gallop and a bisection, never a walk


def test_a_search_started_at_the_top_says_none_in_one_test_when_the_top_fails():
    tried = []
    assert least_passing_step(lambda k: tried.append(k) or False, 200, 200) is None
    assert tried == [200]
