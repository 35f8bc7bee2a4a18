"""The service's configuration: one TOML file, validated at start.

Tables: `[month]` (when the billing month starts, how many hours it has),
`[pool]` (card classes with their rated rate and rent, and optionally the cards),
`[policy]` and `[demand]` and `[checks]` (the same tables as a preset),
`[schedule]`, `[storage]`, `[lease]`, `[metrics]`, `[actuator]` (with each actuator's
own table, `[actuator.NAME]`: `fleet.service.actuators`) and `[ingest]` (with each
telemetry source's own table, `[ingest.sources.NAME]`: `fleet.ingest.sources`).
Unknown keys are refused, so a typo is an error. A bad file is one `ConfigError`
naming the file, the key and what is wrong (the CLI prints it and exits 2). The
classes are named for the tables they hold (`MonthSettings`, not the month itself).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from fleet.core.errors import ConfigError
from fleet.core.units import HOUR_S
from fleet.core.latency import Slo, check_promise
from fleet.core.scenario import Checks, Demand, Policy, Pool, Strict, format_validation
from fleet.credentials import Credentials
from fleet.ingest.demand.vllm_queue import DEFAULT_BACKLOG_QUERY, DEFAULT_GENERATED_QUERY
from fleet.ingest.sources import built_sources, moved_to_sources, source_settings
from storage.busy import BUSY_FRACTION_FLOOR
from fleet.presets import read_toml
from fleet.core.old_keys import tell

DEFAULT_METRICS_PORT = 9108


class MonthSettings(Strict):
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
    reactive_interval_s: float = Field(default=60, gt=0)  # the reactive job's (with [policy.reactive])
    misfire_grace_s: float | None = Field(default=None, gt=0)


class Storage(Strict):
    """The store, and how long raw samples are kept once their hours are rolled up (0 keeps them forever)."""

    url: str = "sqlite:///fleet.db"
    prune_raw_after_days: float = Field(default=7, ge=0)


class LeaseSettings(Strict):
    """One leader per store, as Kubernetes components hold a Lease (their defaults: 15 s lease, renewed every 2 s,
    given up by the leader 10 s after its last renewal). A standby takes over once the lease has expired."""

    duration_s: float = Field(default=15, gt=0)
    renew_every_s: float = Field(default=2, gt=0)
    renew_deadline_s: float = Field(default=10, gt=0)
    holder: str | None = None  # the default: host name and process id

    @model_validator(mode="after")
    def _order(self) -> "LeaseSettings":
        if not self.renew_every_s < self.renew_deadline_s < self.duration_s:
            raise ValueError("need renew_every_s < renew_deadline_s < duration_s")
        return self


class Metrics(Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    per_card: bool = True  # one series per card; switch off for large pools


class ActuatorSettings(Strict):
    """How decisions are carried out: the actuator `kind` names (`fleet.service.actuators`: dry-run, command, webhook),
    each actuator's own table `[actuator.NAME]` (validated by the actuator when the config is read), and how long a
    failing decision is retried before it is set aside.

    `max_retry_s` bounds a transient failure's retries from its first try; `expire_after_s` is how late, after its
    hour ended, a decision may still be carried out (0: never expires). An actuator's keys written flat in
    `[actuator]`, the old way, are moved to its table with one line saying so."""

    kind: str = "dry-run"
    max_retry_s: float = Field(default=900, ge=0)
    expire_after_s: float = Field(default=6 * HOUR_S, ge=0)
    _settings: dict[str, BaseModel] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _actuators_own_their_tables(cls, data: Any, handler) -> "ActuatorSettings":
        from fleet.service.actuators import ACTUATORS

        data, tables = actuator_tables(data, set(cls.model_fields))
        table = handler(data)
        if table.kind not in ACTUATORS:
            raise ValueError(f"kind {table.kind!r}: not an actuator (one of {', '.join(ACTUATORS.names())})")
        errors: list[InitErrorDetails] = []
        for name in sorted({table.kind, *tables}):
            if name not in ACTUATORS:
                errors.append(InitErrorDetails(type="extra_forbidden", loc=(name,), input=tables[name]))
                continue
            try:
                table._settings[name] = ACTUATORS.get(name).settings.model_validate(tables.get(name, {}))
            except ValidationError as err:
                errors += [InitErrorDetails(type=e["type"], loc=(name, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
                           for e in err.errors()]
        if errors:
            raise ValidationError.from_exception_data("actuator", errors)
        return table

    @property
    def own(self) -> BaseModel:
        """The chosen actuator's settings, from its table."""
        return self._settings[self.kind]

    def settings_of(self) -> dict[str, BaseModel]:
        """The settings of each actuator whose table is given (the chosen one's always), by its name."""
        return dict(self._settings)


def actuator_tables(data: Any, fields: set[str]) -> tuple[Any, dict[str, Any]]:
    """A raw `[actuator]` table split into its own keys and each actuator's table `[actuator.NAME]`, by NAME. Keys
    written flat, the old way, go to the chosen actuator's table (told once); a flat key only another actuator reads
    is left out, as it always was (told); a key no actuator reads stays for the table to refuse."""
    from fleet.service.actuators import ACTUATORS

    if not isinstance(data, dict):
        return data, {}
    kind = data.get("kind", "dry-run")
    own = ACTUATORS.get(kind).settings.model_fields if isinstance(kind, str) and kind in ACTUATORS else {}
    out, tables, flat = {}, {}, {}
    for key, value in data.items():
        if key in fields or not _actuator_key(key) and not isinstance(value, dict):
            out[key] = value  # the table's own, or refused by it as unknown
        elif isinstance(value, dict) and (key in ACTUATORS or not _actuator_key(key)):
            tables[key] = value  # an actuator's table (an unknown name is refused with it)
        else:
            flat[key] = value
    moved = sorted(k for k in flat if k in own)
    if moved:
        tables[kind] = {**tables.get(kind, {}), **{k: flat[k] for k in moved}}
        tell("actuator", moved, f"[actuator.{kind}]")
    left = sorted(k for k in flat if k not in own)
    if left:
        tell("actuator", left, f"the table of the actuator that reads {'it' if len(left) == 1 else 'them'} "
             f"([actuator.NAME]; {kind!r} does not)")
    return out, tables


def _actuator_key(key: str) -> bool:
    """Whether some registered actuator's settings hold `key`."""
    from fleet.service.actuators import ACTUATORS

    return any(key in plugin.settings.model_fields for plugin in ACTUATORS)


class Ingest(Strict):
    """Telemetry in: how records are judged and scored whatever their source, and the telemetry sources, each in its
    own table `[ingest.sources.NAME]` (`fleet.ingest.sources`: `drop-folder`, `prometheus`, ...) and on when its
    table is given. Each source validates its table when the config is read; a source's keys written flat in
    `[ingest]`, the old way, are moved to its table with one line saying so."""

    busy_floor: float = Field(default=BUSY_FRACTION_FLOOR, ge=0, le=1)  # least busy fraction a card's tokens are divided by
    strict: bool = False
    default_class: str | None = None
    sources: dict[str, dict[str, Any]] = Field(default_factory=dict)
    _settings: dict[str, BaseModel] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _sources_own_their_tables(cls, data: Any, handler) -> "Ingest":
        data = moved_to_sources(data, set(cls.model_fields))
        errors = []
        try:
            table = handler(data)
        except ValidationError as err:
            errors += err.errors()
        try:
            given = data.get("sources") if isinstance(data, dict) else None
            settings = source_settings(given) if isinstance(given, dict) else {}
        except ValidationError as err:
            errors += err.errors()
        if errors:
            raise ValidationError.from_exception_data("ingest", [
                InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})) for e in errors])
        table._settings = settings
        return table

    @property
    def source_settings(self) -> dict[str, BaseModel]:
        """Each source's validated settings, by its name (only the sources whose tables are given)."""
        return dict(self._settings)

    def telemetry_sources(self):
        """The sources the config turns on, each built from its settings (`fleet.ingest.sources`)."""
        return built_sources(self._settings)

    def credentials(self) -> list[Credentials]:
        """The credentials the sources' settings hold (a source's `auth`)."""
        return [v for own in self._settings.values() for v in vars(own).values() if isinstance(v, Credentials)]


class Reconcile(Strict):
    """The journal against the pool's telemetry: a warm card silent this long is taken as not serving
    (`fleet.service.reconcile`)."""

    silent_after_s: float = Field(default=2 * HOUR_S, gt=0)


class ReactiveSettings(Strict):
    """`[reactive]`: where the reactive job (`fleet.service.reactive`, on with `[policy.reactive]`) reads the pool's
    queue and demand: a Prometheus server (default: `[ingest.sources.prometheus]`'s, with its credentials), the
    backlog in tokens and the tokens generated per second over the last minutes."""

    prometheus_url: str | None = Field(default=None, min_length=1)
    backlog_query: str = DEFAULT_BACKLOG_QUERY
    demand_query: str = DEFAULT_GENERATED_QUERY


class ServiceConfig(Strict):
    month: MonthSettings = MonthSettings()
    pool: Pool | None = None
    policy: Policy | None = None
    demand: Demand = Demand()
    checks: Checks = Checks()
    schedule: Schedule = Schedule()
    storage: Storage = Storage()
    lease: LeaseSettings = LeaseSettings()
    metrics: Metrics = Metrics()
    actuator: ActuatorSettings = ActuatorSettings()
    ingest: Ingest = Ingest()
    reconcile: Reconcile = Reconcile()
    reactive: ReactiveSettings = ReactiveSettings()
    slo: Slo | None = None  # the promise: with stream_tps, each card's rate at it from its fitted curve (`curves`)

    @model_validator(mode="after")
    def _no_secret_passed(self) -> "ServiceConfig":
        """A program an actuator runs must not get a credential of the service's: a variable an `auth` table names is
        refused in an actuator's `pass_env`."""
        actuators = self.actuator.settings_of()
        auths = [v for own in actuators.values() for v in vars(own).values() if isinstance(v, Credentials)]
        secrets = {getattr(a, k) for a in (*auths, *self.ingest.credentials())
                   for k in ("bearer_token_env", "password_env") if getattr(a, k)}
        for name, own in sorted(actuators.items()):
            passed = sorted(secrets & set(getattr(own, "pass_env", ())))
            if passed:
                raise ValueError(f"actuator.{name}.pass_env: {passed[0]!r} holds a credential of the service's "
                                 "(an auth table names it)")
        return self

    @model_validator(mode="after")
    def _policy_names(self) -> "ServiceConfig":
        if self.policy is not None:
            import policies

            policies.resolve(self.policy)  # every name the policy gives is a known plug-in
            hourly_only(self.policy, self.demand)
            if self.policy.reactive is not None and self.reactive_source() is None:
                raise ValueError("[policy.reactive]: the reactive job reads the pool's queue from Prometheus: give "
                                 "[ingest.sources.prometheus] or [reactive] prometheus_url")
            if self.pool is not None and self.policy.unknown_classes([c.name for c in self.pool.classes]):
                raise ValueError(f"policy.card_class {self.policy.card_class!r} is not a class of the pool (or 'any')")
        return self

    @model_validator(mode="after")
    def _promise_judged(self) -> "ServiceConfig":
        """A promise the decide job can size to: every rented class has its curve (`check_promise`, as a preset's).
        A first-token promise without the requests' size (`demand.output_tokens_per_request`) is measured (the
        share of first tokens within it) and sized for by the stream's floor alone."""
        if self.slo is not None and self.pool is not None and self.policy is not None:
            names = [c.name for c in self.pool.classes]
            rented = set(self.policy.run_classes(names))
            check_promise(self.slo, [c for c in self.pool.classes if c.name in rented], self.demand, needs_requests=False)
        return self

    @property
    def classes(self) -> tuple:
        """The pool's classes, in the config's order: what a promise reads as a scenario's (`fleet.core.latency.
        sizing_promise`), so the service sizes to it as replay does."""
        return () if self.pool is None else self.pool.classes

    def reactive_source(self) -> tuple[str, Credentials | None] | None:
        """(the Prometheus URL the reactive job reads, its credentials), or None when none is given."""
        prom = self.ingest.source_settings.get("prometheus")
        if self.reactive.prometheus_url is not None:
            same = prom is not None and prom.prometheus_url == self.reactive.prometheus_url
            return self.reactive.prometheus_url, prom.auth if same else None
        return (prom.prometheus_url, prom.auth) if prom is not None else None

    def require_pool(self, source: str) -> None:
        """A real pool needs `[pool]` and `[policy]`; a simulation takes them from its preset."""
        missing = [t for t in ("pool", "policy") if getattr(self, t) is None]
        if missing:
            raise ConfigError(f"{source}: [{missing[0]}] is missing (needed unless --simulate gives a preset)")


def hourly_only(policy: Policy, demand: Demand | None, step_minutes: int = 60, simulated: bool = False) -> None:
    """The service plans by the hour: a finer clock and a queue that carries over are replay's and compare's. Its
    reactive job reads a real pool's queue, which a simulated pool has not. Refused in words rather than served as
    an hourly plan the operator did not ask for."""
    if step_minutes != 60:
        raise ValueError(f"step_minutes = {step_minutes}: the service decides by the hour (a finer clock runs in "
                         "fleet replay and fleet compare)")
    if simulated and policy.reactive is not None:
        raise ValueError("[policy.reactive]: the reactive job reads a real pool's queue from Prometheus; a simulated "
                         "pool has none (the loop runs in fleet replay and fleet compare)")
    if demand is not None and demand.max_wait_s is not None:
        raise ValueError("demand.max_wait_s: the service bills the hourly fluid, with no queue (the queue runs in "
                         "fleet replay and fleet compare)")


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
