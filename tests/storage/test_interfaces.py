"""The store's boundary: narrow protocols by role, the classes that are them exactly, one way in (`open_store`)
that gives them all, and nothing of `fleet` imported but the pure core."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import storage
from storage.cards import SqlReconcileStore
from storage.db import SqlMigrations
from storage.identity import SqlIdentity
from storage.interfaces import IdentityRecord, JournalStore, Leases, Migrations, ReconcileStore, Store, TelemetryStore
from storage.lease import LeaseStore
from storage.open import SqlStore, as_store, open_store
from storage.repository import SqlRepository, sqlite_memory_repository
from storage.service_store import ServiceStore

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "storage"


def _fleet_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "fleet" or n.startswith("fleet.")}


def test_storage_imports_only_the_core_of_fleet():
    wrong = {
        f"{path.name}: {name}"
        for path in sorted(STORAGE.glob("*.py"))
        for name in _fleet_imports(path)
        if name != "fleet.core" and not name.startswith("fleet.core.")
    }
    assert wrong == set()
    # ConfigError and the masker, and the seconds parse, from their dependency-free homes (no numpy, no pydantic).
    assert _fleet_imports(STORAGE / "db.py") == {"fleet.core.errors", "fleet.core.units"}
    assert _fleet_imports(ROOT / "fleet" / "core" / "units.py") == {"fleet.core.errors"}
    assert _fleet_imports(ROOT / "fleet" / "core" / "errors.py") == set()


# -- the protocols ----------------------------------------------------------------------

TELEMETRY = (
    "declare_classes", "declare_cards", "classes", "cards",  # the pool
    "begin_run", "write_batch", "finish_run",  # ingest
    "hourly_rollups", "sample_count",  # reading
    "write_demand_batch",  # measured demand
    "prune_raw",  # retention
    "card_count", "card_class", "rollup_means", "last_rollup_ts", "demand_hours", "last_demand_sample_ts", "ingest_totals",
    "quarantine_reasons",
    "quarantined",  # as the service and the operator commands read the telemetry
    "serving_samples",  # what the serving stack measured beside the rates (each card's curve is fitted from it)
)
JOURNAL = (
    "journal_hour", "mark_acted_many", "unacted", "decisions", "reconcile_open", "decision_total", "decision_counts", "last_decided_ts", "eviction_hours",
    "set_aside", "oldest_unacted_ts",  # actions closed without being carried out, and the oldest still waiting
    "run_set_at", "intervals", "retired",
    "set_aside", "oldest_unacted_ts",  # actions closed without being carried out, and the oldest still waiting
    "record_scores", "scores_at", "scores_by_window", "last_scored_ts",
    "record_hours", "hours", "last_billed_ts", "month_start_of", "bill_by_part",
)

LEASES = ("read", "try_acquire", "release")
IDENTITY = ("read", "claim", "refuse_other")
RECONCILE = ("retire_card", "last_heard", "still_serving", "warm_since", "journal_records", "records_of_kinds",
             "last_actions_not_carried_out", "run_set_actions")
MIGRATIONS = ("revision", "head", "upgrade")
STORE = ("close",)
ROLES = {"telemetry": TelemetryStore, "journal": JournalStore, "leases": Leases, "identity": IdentityRecord,
         "reconcile": ReconcileStore, "migrations": Migrations}


def _public_methods(cls) -> set[str]:
    """Public methods of `cls` and of the store's own classes it inherits from (`storage.telemetry_reads`)."""
    return {n for k in cls.__mro__ if k.__module__.startswith("storage") for n, v in vars(k).items()
            if callable(v) and not n.startswith("_")}


def _signature(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default, p.annotation) for p in inspect.signature(fn).parameters.values()] + [
        inspect.signature(fn).return_annotation
    ]


@pytest.mark.parametrize(
    "protocol, implementation, members",
    [(TelemetryStore, SqlRepository, TELEMETRY), (JournalStore, ServiceStore, JOURNAL), (Leases, LeaseStore, LEASES),
     (IdentityRecord, SqlIdentity, IDENTITY), (ReconcileStore, SqlReconcileStore, RECONCILE),
     (Migrations, SqlMigrations, MIGRATIONS), (Store, SqlStore, STORE)],
    ids=["telemetry", "journal", "leases", "identity", "reconcile", "migrations", "store"],
)
def test_each_class_is_its_protocol_exactly(protocol, implementation, members):
    """The protocol has these members, the class has each with the same signature, and no public method beyond them
    (a method only tests call has no place on either)."""
    assert _public_methods(protocol) == set(members)
    assert _public_methods(implementation) == set(members)
    for name in members:
        assert _signature(getattr(implementation, name)) == _signature(getattr(protocol, name)), name


def test_the_stores_satisfy_their_protocols_at_run_time():
    store = open_store("sqlite://", create=True)
    assert isinstance(store, Store)
    for role, protocol in ROLES.items():
        assert isinstance(getattr(store, role), protocol), role
    assert not isinstance(store.telemetry, JournalStore) and not isinstance(store.journal, TelemetryStore)
    store.close()


def test_open_store_gives_every_role_over_one_database():
    """What one role writes, the others read: they share the database `open_store` opened."""
    from storage.identity import StoreIdentity

    store = open_store("sqlite://", create=True)
    assert store.migrations.revision() == store.migrations.head()
    store.telemetry.declare_classes([storage.ClassSpec("flagship", 6000.0, 2690.0)])
    store.telemetry.declare_cards({"gpu-1": "flagship"}, 0)
    assert store.telemetry.card_count() == 1 and store.reconcile.last_heard() == {"gpu-1": None}
    assert store.identity.claim(StoreIdentity.pool()) == store.identity.read() == StoreIdentity.pool()
    held, rec, _ = store.leases.try_acquire("fleet", "a", 10.0, 15.0)
    assert held and store.leases.read("fleet") == rec


def test_a_telemetry_store_alone_is_taken_in_every_role():
    """`as_store` over `open_repository`'s telemetry store: the same object in the telemetry role, the others over
    its database; a `Store` is returned as it is."""
    repo = sqlite_memory_repository()
    store = as_store(repo)
    assert store.telemetry is repo and isinstance(store, Store) and as_store(store) is store
    repo.declare_cards({"gpu-1": "flagship"}, 0)
    assert store.telemetry.card_count() == 1


# Members whose last caller is on its way out; each goes from the class and its protocol when the caller has.
LOSING_THEIR_CALLER: dict[str, str] = {}
AWAITING_THEIR_CALLER: dict[str, str] = {}  # members whose callers are still to switch to open_store
PENDING = {**LOSING_THEIR_CALLER, **AWAITING_THEIR_CALLER}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[n], strict=True)) if n in PENDING else n
     for n in dict.fromkeys(TELEMETRY + JOURNAL + LEASES + IDENTITY + RECONCILE + MIGRATIONS + STORE)],
)
def test_every_member_has_a_caller_outside_the_tests(name):
    """Each member is called from `fleet/` or `bench/`, or handed on there as a bound method (`records=x.name,`):
    when the last caller goes, so should the member."""
    source = "\n".join(p.read_text(encoding="utf-8") for d in ("fleet", "bench") for p in sorted((ROOT / d).rglob("*.py")))
    assert re.search(rf"\.{name}(\(|\s*[,)])", source), f"nothing in fleet/ or bench/ calls {name}(): remove it from the store"


def test_the_old_names_still_import():
    """The concrete classes and their values keep their module paths."""
    from storage.repository import CardInfo, ClassSpec, open_repository  # noqa: F401
    from storage.service_store import HourFigures, JournalEntry, JournalRow  # noqa: F401

    assert ClassSpec is storage.ClassSpec and HourFigures is storage.HourFigures
