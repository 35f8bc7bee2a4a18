"""The house rules, checked on the source: each room imports only its own floor and the floors below, the core
imports nothing from the shell and does no I/O, and no import cycles.

Floors, bottom up (see the README's Layout): `fleet` (the package root) <- `fleet.core` (the pure core) <-
`policies` and `storage` (two rooms that do not see each other) <- the shell's shared modules (`fleet.presets`,
`fleet.credentials`, `fleet.report`, `fleet.sweep`, `fleet.memory`, `fleet.dask_runner`) <- `fleet.ingest` <-
`fleet.service` <- `fleet.cli`. An import may only point down, or sideways within its own room; lazy imports inside
functions count the same as imports at the top, and so does a module named in a string (an
`importlib.import_module` registration). Above `storage`, the database is reached only through `storage.open_store`
and the role protocols it returns: no engine, no SQLAlchemy, no store class built by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fleet", "policies", "storage")

SHELL_LIBRARIES = ("sqlalchemy", "alembic", "apscheduler", "prometheus_client", "typer", "click", "rich", "matplotlib",
                   "http", "urllib", "requests", "subprocess", "socket", "psycopg", "dask", "pyarrow", "pandas")
FILE_CALLS = ("open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "iterdir", "unlink", "rename",
              "read_csv", "to_csv", "read_parquet", "glob", "rglob")  # Path.replace is left out: dataclasses.replace shares its name

# Room -> the module prefixes in it. Every module must be in one room.
ROOMS = {
    "root": ("fleet",),
    "core": ("fleet.core",),
    "policies": ("policies",),
    "storage": ("storage",),
    "shared": ("fleet.presets", "fleet.credentials", "fleet.report", "fleet.sweep", "fleet.memory", "fleet.dask_runner"),
    "ingest": ("fleet.ingest",),
    "service": ("fleet.service",),
    "cli": ("fleet.cli",),
}
# Room -> the rooms it may import besides its own.
BELOW = {
    "root": set(),
    "core": {"root"},
    "policies": {"core", "root"},
    "storage": {"core", "root"},
    "shared": {"policies", "core", "root"},
    "ingest": {"shared", "storage", "policies", "core", "root"},
    "service": {"ingest", "shared", "storage", "policies", "core", "root"},
    "cli": {"service", "ingest", "shared", "storage", "policies", "core", "root"},
}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(path: Path) -> set[str]:
    """Every module name an `import` or `from ... import` in the file names, at any depth, and what it registers."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names | registrations_of(path)


def registrations_of(path: Path) -> set[str]:
    """In a file that imports `importlib`: every string that is a dotted name under one of the project's packages,
    the modules it imports by name (`importlib.import_module`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if "importlib" not in {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}:
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and " " not in n.value and "." in n.value and n.value.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name that is a module's attribute counts as its module)."""
    mods = modules()
    out = {}
    for name, path in mods.items():
        deps = set()
        facade = path.name == "__init__.py"
        for imp in imports_of(path):
            if facade and imp.startswith(name + ".") and imp in registrations_of(path):
                continue  # a package's lazy facade naming its own modules: nothing runs at import, no cycle
            if imp in mods:
                deps.add(imp)
            elif imp.rpartition(".")[0] in mods:
                deps.add(imp.rpartition(".")[0])
        deps.discard(name)
        out[name] = deps
    return out


def room(module: str) -> str | None:
    """The room a module is in: the longest prefix that names it."""
    best, found = -1, None
    for name, prefixes in ROOMS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best and (p != "fleet" or module == "fleet"):
                best, found = len(p), name
    return found


def floor_violations(g: dict[str, set[str]]) -> list[str]:
    """Imports that point up or across to a room not below (the module's room and the imported one named)."""
    return [f"{m} ({room(m)}) -> {d} ({room(d)})" for m, deps in sorted(g.items()) for d in sorted(deps)
            if room(d) != room(m) and room(d) not in BELOW.get(room(m) or "", set())]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components: any component of more than one module is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded into rooms' packages (`fleet.cli`, `fleet.dask_runner`, `storage`, ...): a cycle
    between two packages is a cycle between rooms even when no two modules close it."""
    def pkg(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if parts[0] == "fleet" and len(parts) > 1 else parts[0]

    out: dict[str, set[str]] = {}
    for m, deps in g.items():
        out.setdefault(pkg(m), set()).update(pkg(d) for d in deps if pkg(d) != pkg(m))
    return out


def test_every_module_has_a_room():
    assert [m for m in modules() if room(m) is None] == []


def test_floors_point_down():
    assert floor_violations(graph()) == []


@pytest.mark.parametrize("pkg", ["fleet.core", "policies"])
def test_core_and_policies_import_no_shell_library(pkg):
    wrong = []
    for name, path in modules().items():
        if name == pkg or name.startswith(pkg + "."):
            for imp in imports_of(path):
                if imp.split(".")[0] in SHELL_LIBRARIES:
                    wrong.append(f"{name} imports {imp}")
    assert wrong == []


def test_core_does_no_file_io():
    wrong = []
    for name, path in modules().items():
        if not name.startswith("fleet.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                fn = node.func
                called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if called in FILE_CALLS:
                    wrong.append(f"{name}:{node.lineno} calls {called}")
    assert wrong == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_cycles_between_packages():
    assert cycles(package_graph(graph())) == []


def test_the_checks_can_fail(tmp_path):
    """Each check finds a violation planted for it (so the tests above are not vacuous)."""
    a = tmp_path / "a.py"
    a.write_text("import importlib\nimport fleet.cli.app\nfrom storage import repository\nimportlib.import_module('fleet.cli.serve')\n")
    assert {"fleet.cli.app", "storage", "storage.repository", "fleet.cli.serve"} <= imports_of(a)
    # A core module importing the shell, the service importing the command line, storage importing policies.
    planted = {"fleet.core.step": {"fleet.cli.app"}, "fleet.service.decide": {"fleet.cli.plan"}, "storage.db": {"policies.rules"},
               "fleet.ingest.store": {"fleet.service.pool"}, "fleet.cli.plan": {"fleet.service.decide"}}
    wrong = floor_violations(planted)
    assert len(wrong) == 4 and not any(w.startswith("fleet.cli.plan") for w in wrong)
    # A cycle of two modules, one of three, and none in a chain.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}) == [["a", "b"], ["c", "d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    # Two packages whose modules do not close a cycle, but the packages do.
    folded = package_graph({"fleet.cli.app": {"fleet.dask_runner"}, "fleet.dask_runner": {"fleet.cli.memory"}, "fleet.cli.memory": set()})
    assert cycles(folded) == [["fleet.cli", "fleet.dask_runner"]]
    assert room("fleet.cli.app") == "cli" and room("fleet") == "root" and room("fleet.flat") is None


def test_no_module_over_500_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}


FUNCTION_MAX_LINES = 80


def long_functions(source: str, limit: int = FUNCTION_MAX_LINES) -> dict[str, int]:
    """Functions (methods and nested ones too) longer than `limit` lines, with their lengths."""
    return {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit}


def test_no_function_over_80_lines():
    """A function a reader cannot hold whole is split into named steps."""
    long = {f"{name}.{fn}": n for name, path in modules().items()
            for fn, n in long_functions(path.read_text(encoding="utf-8")).items()}
    assert long == {}


def test_the_function_length_check_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_MAX_LINES))
    assert long_functions(f"def f():\n{body}\n") == {"f": FUNCTION_MAX_LINES + 1}
    assert long_functions(f"def g():\n{body[:body.rindex(chr(10))]}\n") == {}


FUNCTION_MAX_PARAMETERS = 10
# A command's options are its function's parameters (typer reads them off the signature): the CLI is exempt, and
# hands the rest of the house parameter objects (`fleet.cli.compare_options`).
PARAMETER_EXEMPT_ROOMS = ("cli",)
# Functions known to take more, by module and name, until they are given parameter objects: none today.
KNOWN_LONG_SIGNATURES: frozenset[str] = frozenset()


def long_signatures(source: str, limit: int = FUNCTION_MAX_PARAMETERS) -> dict[str, int]:
    """Functions (methods and nested ones too) taking more than `limit` parameters, with their counts: every
    positional, keyword-only, `*args` and `**kwargs` one, not a method's own `self` or `cls`."""
    out = {}
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            named = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            count = len(named) + (a.vararg is not None) + (a.kwarg is not None) - (named[:1] in (["self"], ["cls"]))
            if count > limit:
                out[n.name] = count
    return out


def test_no_function_outside_the_cli_over_10_parameters():
    """A longer signature is a set of values that belong together: they travel as a frozen dataclass named for them."""
    long = {f"{name}.{fn}": n for name, path in modules().items() if room(name) not in PARAMETER_EXEMPT_ROOMS
            for fn, n in long_signatures(path.read_text(encoding="utf-8")).items()}
    assert {k: v for k, v in long.items() if k not in KNOWN_LONG_SIGNATURES} == {}


def test_the_parameter_check_can_fail():
    names = ", ".join(f"p{i}" for i in range(FUNCTION_MAX_PARAMETERS))
    assert long_signatures(f"def f({names}, *rest):\n    pass\n") == {"f": FUNCTION_MAX_PARAMETERS + 1}
    assert long_signatures(f"class C:\n    def m(self, {names}):\n        pass\n") == {}
    assert long_signatures(f"def g({names[:names.rindex(',')]}, *, k, **kw):\n    pass\n") == {"g": FUNCTION_MAX_PARAMETERS + 1}


# -- one way into the store --------------------------------------------------------------------------------------

# Modules whose every name is the store's inside: the engine's library, the migrations', the store classes' modules.
STORE_INSIDE_MODULES = ("sqlalchemy", "alembic", "storage.repository", "storage.service_store")
# Names of storage's that build a store class, make or take an engine: `open_store` and its roles replace them.
STORE_INSIDE_NAMES = frozenset({
    "SqlRepository", "ServiceStore", "LeaseStore", "SqlStore", "SqlIdentity", "SqlReconcileStore", "SqlMigrations",
    "open_repository", "sqlite_memory_repository", "open_existing", "make_engine", "ensure_schema",
    "current_revision", "upgrade", "read_identity", "claim_identity", "refuse_other_identity", "retire_card", "last_heard",
    "still_serving", "warm_since", "journal_records", "records_of_kinds", "last_actions_not_carried_out",
    "run_set_actions",
})
# An attribute that is an engine, or one of the names above reached through an object (`storage.ServiceStore`); not
# those that are role members too (`store.reconcile.warm_since(...)`, `store.migrations.upgrade()`).
ROLE_MEMBERS = frozenset({"retire_card", "last_heard", "still_serving", "warm_since", "journal_records", "records_of_kinds",
                          "last_actions_not_carried_out", "run_set_actions", "upgrade"})
ENGINE_ATTRIBUTES = frozenset({"engine"}) | (STORE_INSIDE_NAMES - ROLE_MEMBERS)
# A sweep's engine runs months on processes or a cluster (`fleet.sweep.Engine`): no database in it.
COMPUTE_ENGINES = frozenset({"fleet/sweep.py"})


def store_bypasses(path: Path) -> set[str]:
    """How a file outside `storage/` reaches the database other than through `open_store` and its roles: a module of
    the store's inside imported, a name of it imported or reached through a module, an engine read off an object."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods = [node.module]
            if node.module == "storage" or node.module.startswith("storage."):
                found.update(f"uses {a.name}" for a in node.names if a.name in STORE_INSIDE_NAMES)
        elif isinstance(node, ast.Attribute):
            if node.attr == "engine":
                found.add("reads .engine")
            elif node.attr in ENGINE_ATTRIBUTES or (node.attr in STORE_INSIDE_NAMES and isinstance(node.value, ast.Name)
                                                    and node.value.id == "storage"):
                found.add(f"uses {node.attr}")
            continue
        else:
            continue
        found.update(f"imports {m}" for m in mods if any(m == x or m.startswith(x + ".") for x in STORE_INSIDE_MODULES))
    return found


def test_nothing_outside_storage_reaches_the_database_but_through_open_store():
    wrong = {}
    for name, path in modules().items():
        rel = path.relative_to(ROOT).as_posix()
        if room(name) == "storage":
            continue
        got = store_bypasses(path)
        if rel in COMPUTE_ENGINES:
            got.discard("reads .engine")
        if got:
            wrong[rel] = sorted(got)
    assert wrong == {}


def test_the_store_check_can_fail(tmp_path):
    """Each way round `open_store` is found in a planted file, and a file that keeps to the roles passes."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import storage\n"
        "from sqlalchemy import event\n"
        "from storage.service_store import ServiceStore\n"
        "from storage.cards import records_of_kinds\n"
        "def f(repo):\n"
        "    from storage.db import make_engine\n"
        "    event.listen(repo.engine, 'commit', print)\n"
        "    return storage.SqlRepository(make_engine('sqlite://')), records_of_kinds(repo.engine, ['retire'])\n"
    )
    assert store_bypasses(bad) == {
        "imports sqlalchemy", "imports storage.service_store", "uses ServiceStore", "uses records_of_kinds",
        "uses make_engine", "reads .engine", "uses SqlRepository",
    }
    good = tmp_path / "good.py"
    good.write_text(
        "from storage.open import open_store\n"
        "from storage.identity import StoreIdentity\n"
        "from storage.db import shown_url\n"
        "store = open_store('sqlite:///fleet.db')\n"
        "store.identity.refuse_other(StoreIdentity.pool(), 'a copy')\n"
        "rows = store.reconcile.records_of_kinds(['retire'])\n"
        "store.migrations.upgrade()\n"
    )
    assert store_bypasses(good) == set()
