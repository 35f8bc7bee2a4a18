"""The service's configuration: one TOML file, validated at start.

Tables: `[month]` (when the billing month starts, how many hours it has),
`[pool]` (card classes with their rated rate and rent, and optionally the cards),
`[policy]` and `[demand]` and `[checks]` (the same tables as a preset),
`[schedule]`, `[storage]`, `[lease]`, `[metrics]`, `[actuator]` and `[ingest]` (most of its
keys the telemetry sources' own, `fleet.ingest.sources`). Unknown keys are refused, so a typo is an error. A bad file is one `ConfigError` naming
the file, the key and what is wrong (the CLI prints it and exits 2).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from fleet.core.errors import ConfigError
from fleet.core.units import HOUR_S
from fleet.core.scenario import Checks, Demand, Policy, Pool, Strict, format_validation
from fleet.credentials import Credentials
from fleet.ingest.sources import source_settings
from storage.busy import BUSY_FRACTION_FLOOR
from fleet.presets import read_toml
from fleet.service.journal import DEFAULT_PASS_ENV

DEFAULT_METRICS_PORT = 9108


class Month(Strict):
    """The billing month: it starts at `start` (UTC) and lasts `hours`; the next one follows it."""

    start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    hours: int = Field(default=720, ge=1, le=24 * 366)

    @field_validator("start")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("give a time zone (e.g. 2026-01-01T00:00:00Z)")
        if v.minute or v.second or v.microsecond:
            raise ValueError("a month starts on the hour")
        return v.astimezone(timezone.utc)

    @property
    def start_ts(self) -> int:
        return int(self.start.timestamp())


class Schedule(Strict):
    """How often each job runs (seconds of the service's clock) and how long an hour settles before it is scored.

    Every job catches up on all the hours due when it runs, so a missed run loses
    nothing: the misfire grace only decides whether a late run still happens or
    waits for the next one. Half an interval is the default, so a stall never
    queues a burst of runs (coalesce merges them anyway).
    """

    ingest_every_s: float = Field(default=60, gt=0)
    tick_every_s: float = Field(default=60, gt=0)
    billing_every_s: float = Field(default=300, gt=0)
    metrics_every_s: float = Field(default=15, gt=0)
    settle_s: float = Field(default=300, ge=0)
    misfire_grace_s: float | None = Field(default=None, gt=0)


class Storage(Strict):
    """The store, and how long raw samples are kept once their hours are rolled up (0 keeps them forever)."""

    url: str = "sqlite:///fleet.db"
    prune_raw_after_days: float = Field(default=7, ge=0)


class Lease(Strict):
    """One leader per store, as Kubernetes components hold a Lease (their defaults: 15 s lease, renewed every 2 s,
    given up by the leader 10 s after its last renewal). A standby takes over once the lease has expired."""

    duration_s: float = Field(default=15, gt=0)
    renew_every_s: float = Field(default=2, gt=0)
    renew_deadline_s: float = Field(default=10, gt=0)
    holder: str | None = None  # the default: host name and process id

    @model_validator(mode="after")
    def _order(self) -> "Lease":
        if not self.renew_every_s < self.renew_deadline_s < self.duration_s:
            raise ValueError("need renew_every_s < renew_deadline_s < duration_s")
        return self


class Metrics(Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    per_card: bool = True  # one series per card; switch off for large pools


class Actuator(Strict):
    """How decisions are carried out, and how long a failing one is retried before it is set aside.

    `max_retry_s` bounds a transient failure's retries from its first try; `retries` are the further tries of a
    command's permanent failure; `expire_after_s` is how late, after its hour ended, a decision may still be
    carried out (0: never expires). A command's program gets only `pass_env` (names copied from the service's
    environment) and `env` (fixed values), then the decision's FLEET_* variables."""

    kind: str = "dry-run"  # a registered actuator (fleet.service.actuators): dry-run, command, webhook
    command: tuple[str, ...] = ()
    url: str | None = None
    timeout_s: float = Field(default=60, gt=0)
    auth: Credentials | None = None  # for the webhook
    max_retry_s: float = Field(default=900, ge=0)
    retries: int = Field(default=2, ge=0)
    expire_after_s: float = Field(default=6 * HOUR_S, ge=0)
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    env: dict[str, str] = {}

    @model_validator(mode="after")
    def _needs(self) -> "Actuator":
        from fleet.service.actuators import ACTUATORS

        if self.kind not in ACTUATORS:
            raise ValueError(f"kind {self.kind!r}: not an actuator (one of {', '.join(ACTUATORS.names())})")
        why = ACTUATORS.get(self.kind).needs(self)
        if why:
            raise ValueError(why)
        for name in (*self.pass_env, *self.env):
            if name == "FLEET_DB" or name.startswith(("FLEET_DECISION", "FLEET_LEASE", "FLEET_CARD")):
                raise ValueError(f"pass_env/env: {name!r} is the service's own (the database URL, or set per decision)")
        return self


class Ingest(Strict):
    """Telemetry in: how records are judged and scored whatever their source, beside the keys each telemetry source
    owns (`fleet.ingest.sources`: a drop folder's `folder`, a Prometheus server's `prometheus_url`, ...). Each
    source validates its own keys when the config is read, and a key no source owns is unknown; a source's key
    reads as the table's (`cfg.ingest.prometheus_url`)."""

    busy_floor: float = Field(default=BUSY_FRACTION_FLOOR, ge=0, le=1)  # least busy fraction a card's tokens are divided by
    strict: bool = False
    default_class: str | None = None
    _sources: dict[str, BaseModel] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _sources_own_their_keys(cls, data: Any, handler) -> "Ingest":
        if not isinstance(data, dict):
            return handler(data)
        errors = []
        try:
            table = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as err:
            errors += err.errors()
        try:
            sources = source_settings({k: v for k, v in data.items() if k not in cls.model_fields})
        except ValidationError as err:
            errors += err.errors()
        if errors:
            raise ValidationError.from_exception_data("ingest", [
                InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})) for e in errors])
        table._sources = sources
        return table

    @property
    def sources(self) -> dict[str, BaseModel]:
        """Each registered source's own settings, by its name."""
        return dict(self._sources)

    def credentials(self) -> list[Credentials]:
        """The credentials the sources' settings hold (a source's `auth`)."""
        return [v for own in self._sources.values() for v in vars(own).values() if isinstance(v, Credentials)]

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):
                raise
        for own in self._sources.values():
            if name in type(own).model_fields:
                return getattr(own, name)
        raise AttributeError(f"[ingest] has no key {name!r}")


class Reconcile(Strict):
    """The journal against the pool's telemetry: a warm card silent this long is taken as not serving
    (`fleet.service.reconcile`)."""

    silent_after_s: float = Field(default=2 * HOUR_S, gt=0)


class ServiceConfig(Strict):
    month: Month = Month()
    pool: Pool | None = None
    policy: Policy | None = None
    demand: Demand = Demand()
    checks: Checks = Checks()
    schedule: Schedule = Schedule()
    storage: Storage = Storage()
    lease: Lease = Lease()
    metrics: Metrics = Metrics()
    actuator: Actuator = Actuator()
    ingest: Ingest = Ingest()
    reconcile: Reconcile = Reconcile()

    @model_validator(mode="after")
    def _no_secret_passed(self) -> "ServiceConfig":
        """A command's program must not get a credential of the service's: a variable an `auth` table names is
        refused in `[actuator] pass_env`."""
        secrets = {getattr(a, k) for a in (self.actuator.auth, *self.ingest.credentials()) if a is not None
                   for k in ("bearer_token_env", "password_env") if getattr(a, k)}
        passed = sorted(secrets & set(self.actuator.pass_env))
        if passed:
            raise ValueError(f"actuator.pass_env: {passed[0]!r} holds a credential of the service's (an auth table names it)")
        return self

    @model_validator(mode="after")
    def _policy_names(self) -> "ServiceConfig":
        if self.policy is not None:
            import policies

            policies.resolve(self.policy)  # every name the policy gives is a known plug-in
            if self.pool is not None and self.policy.unknown_classes([c.name for c in self.pool.classes]):
                raise ValueError(f"policy.card_class {self.policy.card_class!r} is not a class of the pool (or 'any')")
        return self

    def require_pool(self, source: str) -> None:
        """A real pool needs `[pool]` and `[policy]`; a simulation takes them from its preset."""
        missing = [t for t in ("pool", "policy") if getattr(self, t) is None]
        if missing:
            raise ConfigError(f"{source}: [{missing[0]}] is missing (needed unless --simulate gives a preset)")


def load_service_config(path: str | Path | None, overrides: dict | None = None) -> ServiceConfig:
    """Read and validate the config file (or the defaults, with no file), with `overrides` (table → key → value) on top."""
    raw: dict = {}
    source = "service config (defaults)"
    if path is not None:
        p = Path(path)
        source = f"config file {str(p)!r}"
        raw = read_toml(p, source)
    for table, values in (overrides or {}).items():
        if values:
            if not isinstance(raw.get(table, {}), dict):
                raise ConfigError(f"{source}: {table} must be a table")
            raw[table] = {**raw.get(table, {}), **values}
    try:
        return ServiceConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"{source}: {format_validation(err)}") from None
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
