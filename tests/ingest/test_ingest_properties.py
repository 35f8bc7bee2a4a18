"""Properties of the parser and judge: arbitrary input never raises anything but `BadSource`, and counts always add up."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from fleet.ingest import BadSource, IngestSettings, ingest_parsed, parse_bytes
from storage import ClassSpec, sqlite_memory_repository

NOW = 1_767_225_600
T0 = 1_735_689_600
_REPO = None
_MINUTE = 0


def repo():
    """One in-memory store for the module (building the schema per example would dominate the run)."""
    global _REPO
    if _REPO is None:
        _REPO = sqlite_memory_repository()
        _REPO.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
        _REPO.declare_cards({f"gpu-{i}": "flagship" for i in range(4)}, NOW)
    return _REPO


def ingest(data: bytes, fmt: str, strict: bool = False):
    r = repo()
    before = r.sample_count()
    try:
        parsed = parse_bytes(data, fmt, f"prop.{fmt}")
    except BadSource as err:
        assert str(err).startswith("'prop."), "a bad source's error names it"
        return None
    out = ingest_parsed(r, parsed, IngestSettings(now_ts=NOW, strict=strict, batch_records=7))
    assert out.read == out.stored + out.duplicates + out.quarantined <= parsed.n_records
    assert sum(out.reasons.values()) == out.quarantined
    assert r.sample_count() - before == out.stored
    return out


HEADERS = st.sampled_from(
    [b"card_id,ts,tokens_per_s\n", b"card_id,ts,tokens_per_s,busy_fraction\n", b"ts,card_id,tokens_per_s,card_class\n", b""]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=HEADERS, body=st.binary(max_size=400), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_arbitrary_bytes_raise_only_bad_source(head, body, fmt):
    ingest(head + body, fmt)


TEXTY = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.lists(
            st.one_of(TEXTY, st.integers(-(2**70), 2**70).map(str), st.floats().map(repr), st.sampled_from(["gpu-1", str(T0), "0.5", ""])),
            min_size=0,
            max_size=6,
        ),
        max_size=25,
    ),
    fmt=st.sampled_from(["csv", "jsonl"]),
)
def test_arbitrary_text_records_count_up(lines, fmt):
    if fmt == "csv":
        data = "card_id,ts,tokens_per_s,busy_fraction\n" + "\n".join(",".join(f) for f in lines)
    else:
        data = "\n".join(json.dumps(dict(zip(["card_id", "ts", "tokens_per_s", "busy_fraction", "card_class", "x"], f))) for f in lines)
    ingest(data.encode(), fmt)


GOOD = st.fixed_dictionaries(
    {
        "card_id": st.sampled_from([f"gpu-{i}" for i in range(4)]),
        "tokens_per_s": st.floats(0, 30_000, allow_nan=False),
        "busy_fraction": st.one_of(st.none(), st.floats(0, 1)),
    }
)
CORRUPT = st.sampled_from(
    [
        ("tokens_per_s", -1.0), ("tokens_per_s", float("nan")), ("tokens_per_s", float("inf")), ("tokens_per_s", "x"),
        ("tokens_per_s", 1e9), ("ts", "soon"), ("ts", 12), ("busy_fraction", 2.0), ("card_id", ""), ("card_id", "stranger"),
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.tuples(GOOD, st.one_of(st.none(), CORRUPT)), max_size=40), fmt=st.sampled_from(["csv", "jsonl"]))
def test_valid_records_are_stored_and_bad_ones_quarantined(records, fmt):
    global _MINUTE
    rows = []
    for good, corrupt in records:
        _MINUTE += 1  # every example writes minutes no earlier example used
        row = dict(good, ts=T0 + 60 * _MINUTE)
        if corrupt:
            row[corrupt[0]] = corrupt[1]
        rows.append(row)
    if fmt == "csv":
        def cell(v):
            return "" if v is None else repr(v) if isinstance(v, float) else str(v)

        text = "card_id,ts,tokens_per_s,busy_fraction\n" + "\n".join(
            ",".join(cell(r[k]) for k in ("card_id", "ts", "tokens_per_s", "busy_fraction")) for r in rows
        )
    else:
        text = "\n".join(json.dumps(r) for r in rows)
    r = repo()
    before = r.sample_count()
    out = ingest(text.encode(), fmt, strict=True)
    n_bad = sum(1 for _, c in records if c)
    assert out.quarantined == n_bad
    assert out.stored == len(records) - n_bad and out.duplicates == 0
    assert r.sample_count() - before == out.stored
