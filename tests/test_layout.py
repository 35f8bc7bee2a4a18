"""The house rules, checked on the source: the core imports nothing from the shell, and no import cycles.

Layers, bottom up: `fleet.core` (the pure core) <- `policies` and `storage` <- the shell
(`fleet.cli`, `fleet.service`, `fleet.ingest`, `fleet.report`, `fleet.presets`, `fleet.sweep`).
An import may only point down or sideways within its own layer; lazy imports inside
functions count the same as imports at the top.
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
    """Every module name an `import` or `from ... import` in the file names, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name that is a module's attribute counts as its module)."""
    mods = modules()
    out = {}
    for name, path in mods.items():
        deps = set()
        for imp in imports_of(path):
            if imp in mods:
                deps.add(imp)
            elif imp.rpartition(".")[0] in mods:
                deps.add(imp.rpartition(".")[0])
        deps.discard(name)
        out[name] = deps
    return out


def layer(module: str) -> str:
    if module == "fleet" or module.startswith("fleet.core"):
        return "core" if module != "fleet" else "root"
    if module.split(".")[0] in ("policies", "storage"):
        return module.split(".")[0]
    return "shell"


ALLOWED = {"core": {"core", "root"}, "policies": {"core", "root", "policies"}, "storage": {"core", "root", "storage"},
           "shell": {"core", "root", "policies", "storage", "shell"}, "root": set()}


def test_layers_point_down():
    wrong = [f"{m} -> {d}" for m, deps in graph().items() for d in deps if layer(d) not in ALLOWED[layer(m)]]
    assert wrong == []


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
    g = graph()
    # Tarjan's strongly connected components: any component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_checks_can_fail(tmp_path):
    """The graph sees a cycle and a shell import where there is one (so the tests above are not vacuous)."""
    a = tmp_path / "a.py"
    a.write_text("import fleet.cli.app\nfrom storage import repository\n")
    assert {"fleet.cli.app", "storage", "storage.repository"} <= imports_of(a)
    assert layer("fleet.cli.app") == "shell" and "shell" not in ALLOWED["core"]


def test_no_module_over_500_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}
