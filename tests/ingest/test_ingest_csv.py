"""CSV through pyarrow's reader: RFC 4180 quoting within a line, line numbers that are the file's, and a file
read block by block (a fault deep in a big file is a bad record, not a bad file; memory does not grow with it)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from fleet.ingest import IngestSettings, ingest_file, ingest_parsed, parse_bytes
from storage import ClassSpec, open_repository
from tests.storage.stored import quarantined

NOW = 1_767_225_600
T0 = 1_735_689_600


def settings(**kw) -> IngestSettings:
    return IngestSettings(now_ts=NOW, **kw)


def ingest_text(repo, text: str | bytes, fmt: str = "csv", **kw):
    data = text.encode() if isinstance(text, str) else text
    return ingest_parsed(repo, parse_bytes(data, fmt, f"test.{fmt}"), settings(**kw))


def stored_cards(repo) -> set[str]:
    with repo.engine.connect() as conn:
        return {k for (k,) in conn.exec_driver_sql("SELECT DISTINCT c.card_key FROM telemetry_samples s JOIN cards c ON c.id = s.card_id")}


@pytest.fixture(params=[None, 1, 7, 64], ids=["one-block", "1-byte-blocks", "7-byte-blocks", "64-byte-blocks"])
def block_bytes(request, monkeypatch):
    """Every test here runs with blocks of every size, so block edges fall everywhere: nothing may depend on them."""
    if request.param:
        from fleet.ingest import lines

        monkeypatch.setattr(lines, "BLOCK_BYTES", request.param)
    return request.param


def test_a_quote_inside_a_field_is_part_of_it_wherever_else_the_file_quotes(block_bytes, new_repo):
    alone = new_repo()
    ingest_text(alone, f'card_id,ts,tokens_per_s\ngpu7",{T0},5\n')
    beside = new_repo()
    ingest_text(beside, f'card_id,ts,tokens_per_s\n"gpu8",{T0},5\ngpu7",{T0},6\n')
    assert stored_cards(alone) == {'gpu7"'}
    assert stored_cards(beside) == {'gpu7"', "gpu8"}


def test_quoted_fields_hold_commas_and_doubled_quotes(block_bytes, new_repo):
    r = new_repo()
    out = ingest_text(r, f'card_id,ts,tokens_per_s,card_class\n"a,b",{T0},5,"big, fast"\n"x""y",{T0},6,plain\n')
    assert (out.stored, out.quarantined) == (2, 0)
    assert stored_cards(r) == {"a,b", 'x"y'}
    assert r.cards()["a,b"].class_name == "big, fast"


LINES = [
    "card_id,ts,tokens_per_s",  # 1: the header
    f"gpu-1,{T0},100",  # 2
    "",  # 3: blank: a line, not a record
    f"gpu-1,{T0 + 60},200,9",  # 4: one field too many
    f'"gpu-2,{T0},300',  # 5: a quoted field left open at the line's end...
    f"gpu-2,{T0 + 60},400",  # 6: ...does not swallow the next line
    "   ",  # 7: only spaces: no record
    f'gpu-3,{T0},"5,0"',  # 8: a comma inside quotes is the value's (unparseable as a number)
    f'"gpu-4",{T0},"6',  # 9: open at the end of the line again
    f'x"y,{T0},"7"',  # 10
    f"gpu-5,{T0},{'9' * 70_000}",  # 11: a line over 64 KiB
    f"gpu-6,{T0},800",  # 12: the last line, without a line break
]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_records_are_numbered_by_their_line_in_the_file(block_bytes, newline, new_repo):
    r = new_repo()
    out = ingest_text(r, newline.join(LINES))
    q = quarantined(r.engine).sort_values("record_no")
    assert list(zip(q["record_no"], q["reason"])) == [
        (4, "malformed-line"), (5, "malformed-line"), (8, "unparseable:tokens_per_s"), (9, "malformed-line"), (11, "malformed-line"),
    ]
    raw = dict(zip(q["record_no"], q["raw_text"]))
    assert raw[4] == LINES[3] and raw[5] == LINES[4] and raw[8] == LINES[7] and raw[9] == LINES[8]
    assert raw[11].startswith(LINES[10][:1000]) and len(raw[11]) < 66_000  # a runaway line is kept cut
    assert (out.read, out.stored, out.quarantined) == (9, 4, 5)
    assert stored_cards(r) == {"gpu-1", "gpu-2", 'x"y', "gpu-6"}
    with r.engine.connect() as conn:
        rows = dict(conn.exec_driver_sql("SELECT c.card_key, tokens_per_s FROM telemetry_samples s JOIN cards c ON c.id = s.card_id").all())
    assert rows == {"gpu-1": 100.0, "gpu-2": 400.0, 'x"y': 7.0, "gpu-6": 800.0}


def _big_csv(tmp_path, lines: int, bad_at: int, bad: bytes) -> tuple:
    path = tmp_path / "big.csv"
    with open(path, "wb") as f:
        f.write(b"card_id,ts,tokens_per_s\n")
        for i in range(2, lines + 1):
            f.write(bad if i == bad_at else f"gpu-{i % 50:02d},{T0 + 60 * (i // 50)},{1000 + i % 1000}\n".encode())
    return path


@pytest.mark.parametrize("bad, reason", [(b"gpu-\xff\xfe,%d,5\n", "unparseable:card_id"), (b"gpu-1,%d,5\x00\n", "unparseable:tokens_per_s")],
                         ids=["not-UTF-8", "NUL"])
def test_a_fault_deep_in_a_big_file_is_a_bad_record_not_a_bad_file(tmp_path, bad, reason, new_repo):
    # The first MiB is checked whole before anything is written (a file starting as binary is a bad file); a byte
    # that is not text past it is a fault of its own record.
    n = 60_000  # about 1.6 MB: the bad line is past the first MiB
    path = _big_csv(tmp_path, n, n - 10, bad % T0)
    r = new_repo()
    out = ingest_file(r, path, settings())
    assert (out.read, out.stored, out.quarantined, out.reasons) == (n - 1, n - 2, 1, {reason: 1})
    (row,) = quarantined(r.engine).itertuples()
    assert row.record_no == n - 10 and "\ufffd" in row.raw_text and "\x00" not in row.raw_text


def test_a_jsonl_line_not_utf8_deep_in_the_file_is_invalid_json(tmp_path, new_repo):
    path = tmp_path / "big.jsonl"
    n = 20_000
    with open(path, "wb") as f:
        for i in range(1, n + 1):
            f.write(b'{"card_id": "gpu-\xff", "ts": 1, "tokens_per_s": 1}\n' if i == n - 5 else
                    json.dumps({"card_id": f"gpu-{i % 50}", "ts": T0 + 60 * (i // 50), "tokens_per_s": 100 + i % 1000}).encode() + b"\n")
    r = new_repo()
    out = ingest_file(r, path, settings())
    assert (out.read, out.stored, out.reasons) == (n, n - 1, {"invalid-json": 1})
    assert quarantined(r.engine)["record_no"].tolist() == [n - 5]


def _traced_peak(tmp_path, lines: int) -> int:
    path = _big_csv(tmp_path, lines, -1, b"")
    repo = open_repository(f"sqlite:///{tmp_path / f'm{lines}.db'}")
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    tracemalloc.start()
    try:
        out = ingest_file(repo, path, settings(default_class="flagship", batch_records=2_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.stored == lines - 1
    return peak


def test_memory_does_not_grow_with_the_file(tmp_path, monkeypatch):
    from fleet.ingest import lines

    monkeypatch.setattr(lines, "BLOCK_BYTES", 64 << 10)
    small = _traced_peak(tmp_path, 40_000)  # 1.2 MB, past the reads of a MiB
    large = _traced_peak(tmp_path, 240_000)  # six times the records (read whole, the peak would be six times too)
    assert large < 1.5 * small, (small, large)


def test_a_byte_order_mark_past_the_header_is_data_wherever_the_block_starts(block_bytes, new_repo):
    # (found by the reader properties) pyarrow drops a byte-order mark at the start of what it parses, so a line
    # starting with one read differently at the head of a block
    r = new_repo()
    out = ingest_text(r, f"card_id,ts,tokens_per_s\n\ufeff\n\ufeffgpu-1,{T0},5\n\ufeff\n")
    assert (out.stored, out.reasons) == (1, {"malformed-line": 2})
    assert stored_cards(r) == {"\ufeffgpu-1"}
