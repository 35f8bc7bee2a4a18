"""One leader per store: the elector that holds the store's lease, and the thread that keeps renewing it.

As Kubernetes controllers elect a leader through a Lease (client-go's
leaderelection), every `fleet serve` on a store tries to take its lease row every
`renew_every_s`; the one that has it leads and runs the writing jobs, the others
stand by and serve /metrics. A standby takes the lease once it has expired
(`duration_s` after the leader's last renewal). The leader counts itself leader
only until `renew_deadline_s` after its last renewal, shorter than the lease, so
a leader that cannot renew stops acting before anyone else can take over.

`LeaderElector` holds no clock and no thread: the time is passed in, so a test
steps it. `LeaseKeeper` runs it on wall time on its own thread (a simulation's
month runs on a fast clock, but lease times are wall seconds) and logs each
change of who holds the store.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

from storage.db import hide_passwords

if TYPE_CHECKING:
    from storage.interfaces import Leases
    from storage.lease import LeaseRecord

LEASE_NAME = "fleet"
"""The store's one lease: every `fleet serve` on the store contends for it."""

log = logging.getLogger("fleet.service.lease")


def default_holder(configured: str | None = None) -> str:
    """The holder's name (the config's, else host:pid) with a random tag, so two processes given one name, or a
    restarted one, never pass for each other: a holder renews only a lease it took itself."""
    base = configured or f"{socket.gethostname()}:{os.getpid()}"
    return f"{base}#{secrets.token_hex(3)}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


class LeaderElector:
    """Takes or renews the lease at the time given; says whether this holder leads at a time and under which epoch."""

    def __init__(self, leases: Leases, holder: str, duration_s: float, renew_deadline_s: float, name: str = LEASE_NAME):
        if not 0 < renew_deadline_s < duration_s:
            raise ValueError("need 0 < renew_deadline_s < duration_s")
        self.leases = leases
        self.holder = holder
        self.name = name
        self.duration_s = float(duration_s)
        self.renew_deadline_s = float(renew_deadline_s)
        self.epoch: int | None = None  # of the lease this holder has or last had
        self.observed: LeaseRecord | None = None  # the lease as last read, whoever holds it
        self.taken_from: LeaseRecord | None = None  # another holder's lease, as read just before this one took it
        self._renewed_ts: float | None = None  # the time of this holder's last successful renewal

    def try_acquire_or_renew(self, now_ts: float) -> bool:
        """One attempt at `now_ts`; True if this holder has the lease after it. A store error propagates and the
        lease counts as not renewed (`is_leader` runs out at the deadline on its own)."""
        held, rec, before = self.leases.try_acquire(self.name, self.holder, now_ts, self.duration_s)
        self.observed = rec
        if held and before is not None and before.holder != self.holder:
            self.taken_from = before
        if held and rec is not None:
            self._renewed_ts = now_ts  # taken before the write: the deadline counts from no later than the lease's start
            self.epoch = rec.epoch
        else:
            self._renewed_ts = None
        return held

    def is_leader(self, now_ts: float) -> bool:
        """True only while `now_ts` is within the renew deadline of the last renewal."""
        return self._renewed_ts is not None and now_ts < self._renewed_ts + self.renew_deadline_s

    def release(self, now_ts: float) -> bool:
        """Give the lease up (on a clean exit), so a standby takes over at its next attempt."""
        was = self._renewed_ts is not None
        self._renewed_ts = None
        return was and self.leases.release(self.name, self.holder, now_ts)


class LeaseKeeper:
    """Renews the lease every `every_s` wall seconds on its own thread, logs each change of holder, and calls
    `on_lead(epoch)` each time this process becomes leader."""

    def __init__(self, elector: LeaderElector, every_s: float, wall: Callable[[], float] = time.time,
                 on_lead: Callable[[int], None] | None = None):
        self.elector = elector
        self.every_s = float(every_s)
        self.wall = wall
        self.on_lead = on_lead
        self._leading = False
        self._seen: tuple | None = None  # (holder, epoch) last logged
        self._error: str | None = None
        # Why the lease was lost through the store's failure (a full disk, say), not to another holder: a run that
        # was to end once its work is done (`fleet serve --exit-when-done`) ends on it instead of standing by.
        self.lost_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def leading(self) -> bool:
        return self.elector.is_leader(self.wall())

    def tick(self) -> bool:
        """One renewal attempt now; returns whether this process leads after it."""
        e = self.elector
        e.taken_from = None
        now = self.wall()
        try:
            held = e.try_acquire_or_renew(now)
        except Exception as err:  # noqa: BLE001 - any store failure means "not renewed"; the deadline does the rest
            reason = hide_passwords(" ".join(str(err).split()))[:300]
            if reason != self._error:
                log.warning("lease: cannot renew (%s)%s", reason, "; leading until the renew deadline" if self._leading else "")
            self._error = reason
            if self._leading and not e.is_leader(self.wall()):
                self._leading = False
                log.warning("leader: lost the store's lease (epoch %s): not renewed within %.1f s", e.epoch, e.renew_deadline_s)
                self.lost_reason = (f"lost the store's lease (epoch {e.epoch}): not renewed within "
                                    f"{e.renew_deadline_s:g} s ({reason})")
            return self._leading
        self._error = None
        rec = e.observed
        if held:
            self.lost_reason = None
        if held and not self._leading:
            was = e.taken_from
            if was is None:
                took = ""
            elif was.released:
                took = f"; took over from {was.holder} (epoch {was.epoch}), which released it"
            else:
                took = f"; took over from {was.holder} (epoch {was.epoch}) {now - was.expires_ts:.2f} s after its lease expired"
            log.info("leader: %s holds the store's lease (epoch %d) from %s%s", e.holder, e.epoch, _iso(now), took)
            self._leading = True
            if self.on_lead is not None:
                try:
                    self.on_lead(int(e.epoch))
                except Exception as err:  # noqa: BLE001 - the keeper must go on renewing whatever the hook does
                    log.error("leader: preparing the jobs failed: %r", err)
        elif not held:
            if self._leading:
                log.warning("leader: lost the store's lease (epoch %s) to %s", e.epoch, rec.holder if rec else "nobody")
            self._leading = False
            key = (rec.holder, rec.epoch) if rec is not None else None
            if key != self._seen and rec is not None:
                log.info("standby: store held by %s (epoch %d) until %s", rec.holder, rec.epoch, _iso(rec.expires_ts))
        self._seen = (rec.holder, rec.epoch) if rec is not None else None
        return held

    def start(self) -> None:
        """A first attempt at once, then the thread."""
        self.tick()
        self._thread = threading.Thread(target=self._run, name="fleet-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._next_wait_s()):
            self.tick()

    def _next_wait_s(self) -> float:
        """`every_s`, or less for a standby whose leader's lease runs out sooner: it tries the moment it can."""
        rec = self.elector.observed
        if self._leading or rec is None or rec.holder == self.elector.holder:
            return self.every_s
        return max(0.05, min(self.every_s, rec.expires_ts - self.wall() + 0.01))

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with `release`, give the lease up so a standby need not wait for it to expire."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if release and self._leading:
            try:
                if self.elector.release(self.wall()):
                    log.info("leader: released the store's lease (epoch %s)", self.elector.epoch)
            except Exception as err:  # noqa: BLE001 - the lease then expires on its own
                log.warning("lease: cannot release (%s); it expires in %.0f s", hide_passwords(" ".join(str(err).split()))[:300],
                            self.elector.duration_s)
        self._leading = False


def make_keeper(lease_cfg, leases: Leases, wall: Callable[[], float] = time.time,
                on_lead: Callable[[int], None] | None = None) -> LeaseKeeper:
    """The keeper of the store's lease (`Store.leases`) for `[lease]` of the service config."""
    elector = LeaderElector(leases, default_holder(lease_cfg.holder), lease_cfg.duration_s, lease_cfg.renew_deadline_s)
    return LeaseKeeper(elector, lease_cfg.renew_every_s, wall, on_lead)
