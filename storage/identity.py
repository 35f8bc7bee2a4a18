"""What a store holds: a simulation of one preset (its seed and hours) or a real pool, recorded at the first serve.

Two months of different simulations, or a simulation and a real pool, in one
store would be read back as one month. So the store records its identity in
`store_meta` once (`claim_identity`: an INSERT that only the first serve's
lands), and every later serve compares its own with it before writing anything.
A store written before the identity was recorded says what it holds through its
ingest runs: the simulated feed names its preset (`simulation:NAME:...`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

from sqlalchemy import Engine, text

IDENTITY_KEY = "identity"
SIMULATION_SOURCE = "simulation:"  # the simulated feed's ingest source: simulation:PRESET:FROM-TO


@dataclass(frozen=True)
class StoreIdentity:
    """A simulation of `preset` drawn with `seed` over `hours` hours, or a real pool (`kind = "pool"`).
    A field left None (a store recorded before its seed was) matches any value."""

    kind: Literal["simulation", "pool"]
    preset: str | None = None
    seed: int | None = None
    hours: int | None = None

    @classmethod
    def simulation(cls, preset: str, seed: int, hours: int) -> "StoreIdentity":
        return cls("simulation", preset, int(seed), int(hours))

    @classmethod
    def pool(cls) -> "StoreIdentity":
        return cls("pool")

    def matches(self, other: "StoreIdentity") -> bool:
        if self.kind != other.kind:
            return False
        return all(a is None or b is None or a == b
                   for a, b in ((self.preset, other.preset), (self.seed, other.seed), (self.hours, other.hours)))

    def describe(self) -> str:
        if self.kind == "pool":
            return "a real pool"
        parts = [f"seed {self.seed}" if self.seed is not None else "", f"{self.hours} hours" if self.hours is not None else ""]
        extra = ", ".join(p for p in parts if p)
        return f"a simulation of {self.preset}" + (f" ({extra})" if extra else "")

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> "StoreIdentity":
        d = json.loads(raw)
        return cls(d.get("kind", "pool"), d.get("preset"), d.get("seed"), d.get("hours"))


def read_identity(engine: Engine) -> StoreIdentity | None:
    """The identity recorded, or what an older store's ingest runs say it holds, or None for a store with neither."""
    with engine.connect() as conn:
        raw = conn.execute(text("SELECT value FROM store_meta WHERE key = :k"), {"k": IDENTITY_KEY}).scalar()
        if raw is not None:
            return StoreIdentity.from_json(raw)
        if conn.execute(text("SELECT 1 FROM ingest_runs LIMIT 1")).first() is None:
            return None
        names = sorted({
            str(s)[len(SIMULATION_SOURCE):].split(":", 1)[0]
            for s in conn.execute(
                text("SELECT DISTINCT source FROM ingest_runs WHERE source LIKE :p"), {"p": SIMULATION_SOURCE + "%"}
            ).scalars()
        })
    # Several names (a store already mixed) is a preset no serve matches.
    return StoreIdentity("simulation", " and ".join(names)) if names else StoreIdentity.pool()


def claim_identity(engine: Engine, identity: StoreIdentity) -> StoreIdentity:
    """Record `identity` unless the store already has one; returns the one recorded (the first claim's)."""
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO store_meta (key, value) VALUES (:k, :v) ON CONFLICT (key) DO NOTHING"),
            {"k": IDENTITY_KEY, "v": identity.to_json()},
        )
        raw = conn.execute(text("SELECT value FROM store_meta WHERE key = :k"), {"k": IDENTITY_KEY}).scalar_one()
    return StoreIdentity.from_json(raw)


def refuse_other_identity(engine: Engine, wanted: StoreIdentity, writing: str) -> StoreIdentity | None:
    """For a writer that does not claim the store (an ingest, a copy, an operator's command): `StoreError`, before
    anything is written, when the store holds another identity than `wanted`; returns what the store holds.
    `writing` says what the writer would write (`"a real pool's telemetry"`)."""
    from storage.db import StoreError

    held = read_identity(engine)
    if held is not None and not held.matches(wanted):
        url = engine.url.render_as_string(hide_password=True)
        raise StoreError(f"database {url!r} holds {held.describe()}; it cannot take {writing} (give another --db)")
    return held


class SqlIdentity:
    """`storage.interfaces.IdentityRecord` on one engine: the functions above, bound to their store."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def read(self) -> StoreIdentity | None:
        return read_identity(self._engine)

    def claim(self, identity: StoreIdentity) -> StoreIdentity:
        return claim_identity(self._engine, identity)

    def refuse_other(self, wanted: StoreIdentity, writing: str) -> StoreIdentity | None:
        return refuse_other_identity(self._engine, wanted, writing)
