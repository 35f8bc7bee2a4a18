"""Properties of the TOML loaders on arbitrary files: `fleet.presets.load_preset` and
`fleet.service.config.load_service_config` either load the file or raise `ConfigError` naming it; nothing else
escapes. Inputs are a real preset or the example service config with random edits (values of every TOML type
put anywhere, keys dropped or added), plus arbitrary text and bytes.

Each property runs a few examples in every run and 100,000 under `pytest -m slow` (see tests/ingest/props.py).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import math
import shutil
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import assume, strategies as st

from fleet.core.errors import ConfigError
from fleet.presets import PRESETS_DIR, load_preset
from fleet.service.config import load_service_config
from tests.ingest.props import fast_and_slow

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {p.stem: tomllib.loads(p.read_text()) for p in sorted(PRESETS_DIR.glob("*.toml"))}
SERVICE = tomllib.loads((ROOT / "docs" / "serve-config.example.toml").read_text())
_DIR = Path(tempfile.mkdtemp(prefix="fleet-config-props-"))
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)  # the files the examples wrote go with the run


# -- a small TOML writer (the standard library only reads TOML) -------------------------------------


def _key(k: str) -> str:
    return _string(k)


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v) -> str:  # noqa: ANN001
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dumps(doc: dict) -> str:
    """TOML for a dict: scalars and inline tables in place; tables and arrays of tables as sections."""
    out: list[str] = []

    def emit(table: dict, path: list[str]) -> None:
        subs = []
        for k, v in table.items():
            if isinstance(v, dict) and v:
                subs.append((k, v, False))
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                subs.append((k, v, True))
            else:
                out.append(f"{_key(k)} = {_value(v)}")
        for k, v, many in subs:
            name = ".".join(_key(p) for p in [*path, k])
            for item in (v if many else [v]):
                out.append(f"[[{name}]]" if many else f"[{name}]")
                emit(item, [*path, k])

    emit(doc, [])
    return "\n".join(out) + "\n"


# -- random edits of a real document --------------------------------------------------------


# Random edits write keys at their old places too (`folder` in [ingest], `fraction` beside `rule`): read with a
# warning, which is the old places' test's to check, not an error here.
pytestmark = pytest.mark.filterwarnings("ignore::fleet.core.errors.MovedKey")


SCALARS = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=12),
    st.sampled_from(["", "day", "week", "hour", "steady", "held", "below-median", "flagship", "file", "flat", "diurnal", "3h", "0h",
                     "command", "webhook", "dry-run", "sqlite:///:memory:", -1, 0, 1, 10**9, 0.0, -0.5, 1e308]),
    st.datetimes(timezones=st.sampled_from([dt.timezone.utc, None])), st.dates(),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)
KEYS = st.one_of(st.sampled_from(["name", "hours", "window", "mode", "share", "rule", "shape", "avg_tps", "file", "start", "port",
                                  "url", "kind", "folder", "command", "classes", "cards", "eviction", "fix", "nope",
                                  "sources", "scores", "rules", "drop-folder", "dip_aware", "fraction", "release_after_hours"]),
                 st.text(max_size=6))


def _tables(doc, path=()):  # noqa: ANN001
    """Every table in the document, by path (tables inside arrays of tables by index)."""
    yield path
    for k, v in doc.items():
        if isinstance(v, dict):
            yield from _tables(v, (*path, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, dict):
                    yield from _tables(x, (*path, k, i))


def _at(doc, path):  # noqa: ANN001
    for p in path:
        doc = doc[p]
    return doc


@st.composite
def edited(draw, base: dict) -> dict:
    doc = json.loads(json.dumps(base, default=str))  # a deep copy (datetimes as text: an edit of its own)
    for _ in range(draw(st.integers(0, 6))):
        table = _at(doc, draw(st.sampled_from(list(_tables(doc)))))
        action = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if action == "drop" and table:
            table.pop(draw(st.sampled_from(sorted(table))))
        elif action == "set" and table:
            table[draw(st.sampled_from(sorted(table)))] = draw(VALUES)
        else:
            table[draw(KEYS)] = draw(VALUES)
    return doc


def _known_bug(doc) -> bool:  # noqa: ANN001
    """A `card_class` list holding a list or a table: `Policy._classes` (fleet/core/scenario.py) puts the list in a
    set and raises TypeError instead of ConfigError. Reported, not fixed here (the core is not this change's);
    `test_a_card_class_list_of_lists_is_one_config_error` holds it, and the properties skip it to look further."""
    if isinstance(doc, dict):
        return any((k == "card_class" and isinstance(v, list) and any(isinstance(x, (list, dict)) for x in v)) or _known_bug(v)
                   for k, v in doc.items())
    return isinstance(doc, list) and any(_known_bug(x) for x in doc)


def _document(doc: dict | str | bytes) -> bytes:
    if isinstance(doc, bytes):
        return doc
    return (doc if isinstance(doc, str) else dumps(doc)).encode("utf-8", "surrogatepass")


def _load(loader, name: str, data: bytes, where: str) -> None:  # noqa: ANN001
    path = _DIR / name
    path.write_bytes(data)
    try:
        loader(str(path))
    except ConfigError as err:
        assert str(err).startswith(f"{where} {str(path)!r}"), str(err)  # (a key holding a line break is echoed as is)


TEXT = st.one_of(st.text(max_size=200), st.binary(max_size=200),
                 st.lists(st.sampled_from(["[", "]", "[[", "]]", "=", '"', "a", "policy", ".", "\n", "x = 1", "hours = 720", "#"]),
                          max_size=30).map("".join))


def _preset_body(doc):
    """A preset file, edited or arbitrary: loaded, or one ConfigError naming the file."""
    assume(not _known_bug(doc))
    _load(load_preset, "preset.toml", _document(doc), "preset file")


test_preset_loader, test_preset_loader_100k = fast_and_slow(
    _preset_body, doc=st.one_of(st.sampled_from(sorted(PRESETS)).flatmap(lambda name: edited(PRESETS[name])), TEXT))


def _service_body(doc):
    """A service config file, edited or arbitrary: loaded, or one ConfigError naming the file."""
    assume(not _known_bug(doc))
    _load(load_service_config, "fleet.toml", _document(doc), "config file")


test_service_config_loader, test_service_config_loader_100k = fast_and_slow(_service_body, doc=st.one_of(edited(SERVICE), TEXT))


def test_the_writer_round_trips_the_real_documents():
    for doc in [*PRESETS.values(), SERVICE]:
        assert tomllib.loads(dumps(doc)) == doc


def test_a_card_class_list_of_lists_is_one_config_error():
    doc = json.loads(json.dumps(PRESETS["noise-evictor"]))
    doc["policy"]["card_class"] = [["flagship"]]
    _load(load_preset, "bug.toml", dumps(doc).encode(), "preset file")
