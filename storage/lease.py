"""The lease row: who leads the store, taken and renewed by one conditional UPDATE (`LeaseStore`).

A lease is held by `holder` until `expires_ts`. Taking or renewing it is one
UPDATE whose WHERE says "the lease is mine, or it has expired"; the database
applies it to the row or not, so of two processes trying at once exactly one
gets it (SQLite takes its write lock for the UPDATE; PostgreSQL re-checks the
WHERE on the row it waited for), and no dialect's locking is needed. A lease that
does not exist yet is inserted with `ON CONFLICT DO NOTHING`, which one of two
racing inserts wins. A new holder bumps the epoch; the holder renewing keeps it.

The time is the caller's (float epoch seconds), so tests pass theirs in and
holders on several hosts must keep their clocks in step (NTP): a lease's
`renew_deadline_s` below its `duration_s` is the margin for their skew.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, text

_COLUMNS = "name, holder, epoch, acquired_ts, renewed_ts, expires_ts"

_TAKE = text(
    # Every right-hand side reads the row as it was, so `holder = :h` in the CASEs is the old holder.
    "UPDATE leases SET "
    "epoch = CASE WHEN holder = :h THEN epoch ELSE epoch + 1 END, "
    "acquired_ts = CASE WHEN holder = :h THEN acquired_ts ELSE :now END, "
    "holder = :h, renewed_ts = :now, expires_ts = :exp "
    "WHERE name = :n AND (holder = :h OR expires_ts <= :now)"
)
_INSERT = text(
    f"INSERT INTO leases ({_COLUMNS}) VALUES (:n, :h, 1, :now, :now, :exp) ON CONFLICT (name) DO NOTHING"
)
_READ = text(f"SELECT {_COLUMNS} FROM leases WHERE name = :n")
# A released lease ends when it was last renewed (expires_ts = renewed_ts), so whoever takes it next can tell a
# clean hand-over from a leader that stopped renewing.
_RELEASE = text("UPDATE leases SET expires_ts = :now, renewed_ts = :now WHERE name = :n AND holder = :h AND expires_ts > :now")


@dataclass(frozen=True)
class LeaseRecord:
    """The lease row as read: its holder, epoch and times (float epoch seconds)."""

    name: str
    holder: str
    epoch: int
    acquired_ts: float
    renewed_ts: float
    expires_ts: float

    def expired(self, now_ts: float) -> bool:
        return self.expires_ts <= now_ts

    @property
    def released(self) -> bool:
        """Given up by its holder (a clean stop), not run out."""
        return self.expires_ts <= self.renewed_ts


class LeaseStore:
    """Leases on SQLAlchemy Core: read, take or renew, release; every value a bound parameter."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def read(self, name: str) -> LeaseRecord | None:
        with self.engine.connect() as conn:
            r = conn.execute(_READ, {"n": name}).first()
        return None if r is None else _record(r)

    def try_acquire(self, name: str, holder: str, now_ts: float,
                    duration_s: float) -> tuple[bool, LeaseRecord | None, LeaseRecord | None]:
        """Take the lease, or renew it if `holder` has it, until `now_ts + duration_s`. Returns (held, the row as it
        stands, the row as read just before: whose lease was taken over). A lease another holder has and that has
        not expired is only read: no write, no write lock."""
        seen = self.read(name)
        if seen is not None and seen.holder != holder and not seen.expired(now_ts):
            return False, seen, seen
        params = {"n": name, "h": holder, "now": float(now_ts), "exp": float(now_ts) + float(duration_s)}
        with self.engine.begin() as conn:
            won = conn.execute(_TAKE, params).rowcount == 1
            if not won and seen is None:
                won = conn.execute(_INSERT, params).rowcount == 1
            r = conn.execute(_READ, {"n": name}).first()
        rec = None if r is None else _record(r)
        return won and rec is not None and rec.holder == holder, rec, seen

    def release(self, name: str, holder: str, now_ts: float) -> bool:
        """End `holder`'s lease now, so a standby need not wait for it to expire; False if it was not held."""
        with self.engine.begin() as conn:
            return conn.execute(_RELEASE, {"n": name, "h": holder, "now": float(now_ts)}).rowcount == 1


def _record(r) -> LeaseRecord:
    return LeaseRecord(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4]), float(r[5]))
