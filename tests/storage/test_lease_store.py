"""The lease row: one conditional UPDATE decides who holds it, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading

import pytest

from storage import make_engine, upgrade
from storage.identity import StoreIdentity, claim_identity, read_identity
from storage.lease import LeaseStore

T0 = 1_767_225_600.0


@pytest.fixture
def leases(store_url):
    upgrade(store_url)
    engine = make_engine(store_url)
    yield LeaseStore(engine)
    engine.dispose()


def test_the_first_taker_gets_epoch_one_and_renewing_keeps_it(leases):
    held, rec, _ = leases.try_acquire("fleet", "a", T0, 15)
    assert held and (rec.holder, rec.epoch, rec.acquired_ts, rec.expires_ts) == ("a", 1, T0, T0 + 15)
    held, rec, _ = leases.try_acquire("fleet", "a", T0 + 2.5, 15)
    assert held and (rec.epoch, rec.acquired_ts, rec.renewed_ts, rec.expires_ts) == (1, T0, T0 + 2.5, T0 + 17.5)


def test_a_held_lease_is_refused_until_it_expires_then_the_epoch_goes_up(leases):
    leases.try_acquire("fleet", "a", T0, 15)
    held, rec, _ = leases.try_acquire("fleet", "b", T0 + 14.9, 15)
    assert not held and rec.holder == "a" and rec.epoch == 1
    held, rec, before = leases.try_acquire("fleet", "b", T0 + 15, 15)  # expires_ts <= now: expired
    assert held and (rec.holder, rec.epoch, rec.acquired_ts) == ("b", 2, T0 + 15)
    assert (before.holder, before.epoch, before.expires_ts) == ("a", 1, T0 + 15)  # whose lease b took
    # The old holder comes back: the lease is b's now, and a renewal of a's is refused.
    held, rec, _ = leases.try_acquire("fleet", "a", T0 + 16, 15)
    assert not held and rec.holder == "b"
    # A holder that takes the lease back after another had it gets a new epoch, not its old one.
    held, rec, _ = leases.try_acquire("fleet", "a", T0 + 40, 15)
    assert held and rec.epoch == 3


def test_release_lets_a_standby_take_over_at_once(leases):
    leases.try_acquire("fleet", "a", T0, 15)
    assert not leases.release("fleet", "b", T0 + 1)  # only the holder releases
    assert leases.release("fleet", "a", T0 + 1)
    held, rec, _ = leases.try_acquire("fleet", "b", T0 + 1, 15)
    assert held and rec.epoch == 2
    assert not leases.release("fleet", "a", T0 + 2)


def test_leases_are_separate_by_name(leases):
    assert leases.try_acquire("fleet", "a", T0, 15)[0]
    assert leases.try_acquire("other", "b", T0, 15)[0]
    assert leases.read("fleet").holder == "a" and leases.read("other").holder == "b"
    assert leases.read("missing") is None


def test_racing_takers_one_wins_each_time(store_url):
    """Eight threads, each on its own engine, try to take the same expired lease at the same instant, 20 times:
    exactly one holds it after each round, and the epoch goes up by exactly one per round."""
    upgrade(store_url)
    engines = [make_engine(store_url) for _ in range(8)]
    stores = [LeaseStore(e) for e in engines]
    try:
        for rnd in range(20):
            now = T0 + 100 * rnd  # every round's lease has expired by the next
            barrier = threading.Barrier(len(stores))
            won = []

            def take(i: int) -> None:
                barrier.wait()
                held, _, _ = stores[i].try_acquire("fleet", f"h{rnd}-{i}", now, 15)  # new holders every round
                if held:
                    won.append(i)

            threads = [threading.Thread(target=take, args=(i,)) for i in range(len(stores))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rec = stores[0].read("fleet")
            assert len(won) == 1 and rec.holder == f"h{rnd}-{won[0]}", (rnd, won, rec)
            assert rec.epoch == rnd + 1
    finally:
        for e in engines:
            e.dispose()


def test_identity_is_recorded_once(store_url):
    upgrade(store_url)
    engine = make_engine(store_url)
    try:
        assert read_identity(engine) is None
        noise = StoreIdentity.simulation("noise-evictor", 7, 720)
        assert claim_identity(engine, noise) == noise
        # A second claim changes nothing: the first one's stands.
        assert claim_identity(engine, StoreIdentity.pool()) == noise
        assert read_identity(engine) == noise
        assert noise.matches(StoreIdentity.simulation("noise-evictor", 7, 720))
        assert not noise.matches(StoreIdentity.simulation("noise-evictor", 8, 720))
        assert not noise.matches(StoreIdentity.simulation("golden-idler", 7, 720))
        assert not noise.matches(StoreIdentity.pool())
        assert noise.describe() == "a simulation of noise-evictor (seed 7, 720 hours)"
    finally:
        engine.dispose()
