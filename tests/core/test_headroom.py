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


def test_with_the_reactive_loop_the_plans_headroom_is_searched_under_one():
    """The loop covers within the hour what the plan leaves: on ServeGen's m-mid at 5-minute steps, a month passes
    capacity with the plan sized under its forecast, and the search finds it."""
    from pathlib import Path

    from fleet.core.compare import MonthCache, min_headroom
    from fleet.core.headroom import HEADROOM_SEARCH, REACTIVE_HEADROOM_SEARCH, headroom_search
    from fleet.core.month import draw_month
    from fleet.presets import demand_file_tps, load_preset, resolve_scenario
    from policies import resolve

    pool = Path(__file__).resolve().parents[2] / "bench" / "pools" / "servegen-m-mid.toml"
    hourly = resolve_scenario(load_preset(str(pool)))
    s = resolve_scenario(load_preset(str(pool)), overrides=[
        "step_minutes=5", "demand.max_wait_s=60", "policy.reactive.headroom=1.3", "checks.max_unmet_share=0.01"])
    assert headroom_search(hourly) == HEADROOM_SEARCH and headroom_search(s) == REACTIVE_HEADROOM_SEARCH
    cache = MonthCache(draw_month(s, demand_file_tps(s, pool.parent)), exact=False)
    found = min_headroom(cache, s, resolve(s.policy), headroom_search(s))
    assert REACTIVE_HEADROOM_SEARCH[0] <= found < 1.0
    for h, passes in ((found, True), (found - REACTIVE_HEADROOM_SEARCH[2], False)):
        if h >= REACTIVE_HEADROOM_SEARCH[0]:
            policy = s.policy.model_copy(update={"headroom": h})
            got = cache.replay(s.model_copy(update={"policy": policy}), resolve(policy))
            assert got.figures["checks"]["capacity"]["pass"] is passes
