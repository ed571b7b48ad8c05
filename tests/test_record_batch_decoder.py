"""Unit tests of connector/client/record_batch_decoder.py: Kafka v2 record batches into numpy/Arrow.

No broker, no Spark. Inputs come from tests/record_batch_encoding.py (an encoder written from the
format spec); a plain per-record reference decoder below is the oracle on randomised inputs.
"""

from __future__ import annotations

import gzip
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

import cramjam

from txkafka.connector.client import record_batch_decoder as rbd
from txkafka.connector.errors import KafkaProtocolError
from txkafka.connector.client.record_batch_decoder import decode

from tests.record_batch_encoding import (
    CODECS, DEFAULT_BASE_TIMESTAMP, GZIP, HEADER_SIZE, LZ4, NONE, SNAPPY, XERIAL_MAGIC, ZSTD,
    Record, batch, control_batch, control_record, crc32c, encode_record, records_of, uvarint, varint,
    varlong,
)

TS = DEFAULT_BASE_TIMESTAMP


def py_headers(column):
    """The decoder's Arrow ``headers`` column as the oracle writes it: per record None or
    [(key, value)]; the column must have Spark's type."""
    if column is None:
        return None
    assert column.type == rbd.HEADERS_TYPE
    return [None if h is None else [(e["key"], e["value"]) for e in h] for h in column.to_pylist()]
BIG = 2**62  # an "end" past everything


# ---------------------------------------------------------------------------------------------
# Reference decoder: the simplest per-record Python, the oracle.
# ---------------------------------------------------------------------------------------------

def _ref_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _ref_decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        if not data.startswith(XERIAL_MAGIC):
            return bytes(cramjam.snappy.decompress_raw(data))
        chunks, rest = [], memoryview(data)[16:]  # after magic, version, compatible version
        while rest:
            size = int.from_bytes(rest[:4], "big")
            chunks.append(bytes(cramjam.snappy.decompress_raw(bytes(rest[4:4 + size]))))
            rest = rest[4 + size:]
        return b"".join(chunks)
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise AssertionError(codec)


def _ref_records(section: bytes, count: int) -> list[dict]:
    out = []
    pos = 0
    for _ in range(count):
        length, pos = _ref_varint(section, pos)
        rec_end = pos + length
        pos += 1  # attributes
        ts_delta, pos = _ref_varint(section, pos)
        off_delta, pos = _ref_varint(section, pos)
        klen, pos = _ref_varint(section, pos)
        key = None if klen < 0 else section[pos:pos + klen]
        pos += max(klen, 0)
        vlen, pos = _ref_varint(section, pos)
        value = None if vlen < 0 else section[pos:pos + vlen]
        pos += max(vlen, 0)
        nh, pos = _ref_varint(section, pos)
        headers = []
        for _ in range(nh):
            hkl, pos = _ref_varint(section, pos)
            hk = section[pos:pos + hkl].decode("utf-8")
            pos += hkl
            hvl, pos = _ref_varint(section, pos)
            hv = None if hvl < 0 else section[pos:pos + hvl]
            pos += max(hvl, 0)
            headers.append((hk, hv))
        assert pos == rec_end, "reference decoder: record length mismatch"
        out.append(dict(ts_delta=ts_delta, off_delta=off_delta, key=key, value=value,
                        headers=headers or None))
    assert pos == len(section), "reference decoder: bytes left after the records"
    return out


def reference_decode(records, start, end, *, aborted=None, read_committed=True,
                     include_headers=False) -> dict:
    data = bytes(records) if records is not None else b""
    aborts = sorted(aborted or (), key=lambda a: a[1])
    aborted_pids: set[int] = set()
    rows = []
    nxt = start
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        (base, length, _ep, magic, _crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
         count) = struct.unpack_from(">qiibIhiqqqhii", data, pos)
        assert magic == 2
        batch_end = pos + 12 + length
        if batch_end > len(data):
            break
        body = data[pos + HEADER_SIZE:batch_end]
        pos = batch_end
        last = base + last_delta
        if last < nxt:
            continue
        if base >= end:
            break
        nxt = last + 1
        if read_committed:
            while aborts and aborts[0][1] <= last:
                aborted_pids.add(aborts.pop(0)[0])
        if attrs & 0x20:
            if read_committed and pid in aborted_pids and count:
                key = _ref_records(body, count)[0]["key"]
                if struct.unpack(">hh", key)[1] == 0:
                    aborted_pids.discard(pid)
            continue
        if read_committed and attrs & 0x10 and pid in aborted_pids:
            continue
        log_append = bool(attrs & 0x08)
        for r in _ref_records(_ref_decompress(attrs & 7, body), count):
            off = base + r["off_delta"]
            if not start <= off < end:
                continue
            rows.append(dict(offset=off, ts=max_ts if log_append else base_ts + r["ts_delta"],
                             ts_type=1 if log_append else 0, key=r["key"], value=r["value"],
                             headers=r["headers"]))
    return dict(
        offsets=[r["offset"] for r in rows],
        timestamps=[r["ts"] for r in rows],
        ts_types=[r["ts_type"] for r in rows],
        keys=[r["key"] for r in rows],
        values=[r["value"] for r in rows],
        headers=[r["headers"] for r in rows] if include_headers else None,
        next_offset=min(nxt, max(end, start)),
    )


def assert_same(got, ref: dict) -> None:
    assert got.offsets.dtype == np.int64
    assert got.timestamps_ms.dtype == np.int64
    assert got.timestamp_types.dtype == np.int32
    assert got.keys.type == pa.binary()
    assert got.values.type == pa.binary()
    n = len(ref["offsets"])
    assert len(got) == n
    assert len(got.keys) == n and len(got.values) == n
    assert got.offsets.tolist() == ref["offsets"]
    assert got.timestamps_ms.tolist() == ref["timestamps"]
    assert got.timestamp_types.tolist() == ref["ts_types"]
    got_keys = got.keys.to_pylist()
    got_values = got.values.to_pylist()
    if got_keys != ref["keys"]:
        bad = next(i for i, (a, b) in enumerate(zip(got_keys, ref["keys"])) if a != b)
        raise AssertionError(f"key {bad} (offset {ref['offsets'][bad]}): "
                             f"{got_keys[bad]!r:.80} != {ref['keys'][bad]!r:.80}")
    if got_values != ref["values"]:
        bad = next(i for i, (a, b) in enumerate(zip(got_values, ref["values"])) if a != b)
        raise AssertionError(f"value {bad} (offset {ref['offsets'][bad]}): "
                             f"{got_values[bad]!r:.80} != {ref['values'][bad]!r:.80}")
    got.keys.validate(full=True)
    got.values.validate(full=True)
    if got.headers is not None:
        got.headers.validate(full=True)
    assert py_headers(got.headers) == ref["headers"]
    assert got.next_offset == ref["next_offset"]


def check(records, start=0, end=BIG, **kw):
    """decode() against the reference decoder; returns the decoded result."""
    got = decode(records, start, end, **kw)
    assert_same(got, reference_decode(records, start, end, **kw))
    return got


# ---------------------------------------------------------------------------------------------
# The encoder itself (the tests are only as good as their inputs).
# ---------------------------------------------------------------------------------------------

def test_encoder_varints_and_crc():
    assert varint(0) == b"\x00" and varint(-1) == b"\x01" and varint(1) == b"\x02"
    assert varint(63) == b"\x7e" and varint(64) == b"\x80\x01"
    assert varint(-64) == b"\x7f" and varint(-65) == b"\x81\x01"
    assert len(varint(8191)) == 2 and len(varint(8192)) == 3
    assert varlong(-(2**63)) == uvarint(2**64 - 1) and len(varlong(2**61)) == 9
    assert len(varlong(2**62)) == 10
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value


def test_encoder_batch_layout():
    b = batch(100, records_of([b"ab", None]), producer_id=7, transactional=True)
    (base, length, _ep, magic, crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", b)
    assert (base, magic, attrs, last_delta, pid, count) == (100, 2, 0x10, 1, 7, 2)
    assert length == len(b) - 12
    assert crc == crc32c(b[21:])
    assert base_ts == max_ts == TS
    assert rbd.BATCH_HEADER.size == rbd.BATCH_HEADER_SIZE == HEADER_SIZE


# ---------------------------------------------------------------------------------------------
# Basics
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("records", [None, b"", bytearray(), memoryview(b"")])
@pytest.mark.parametrize("include_headers", [False, True])
def test_empty_record_set(records, include_headers):
    got = decode(records, 42, 100, include_headers=include_headers)
    assert len(got) == 0
    assert got.next_offset == 42
    assert got.offsets.dtype == np.int64 and got.timestamps_ms.dtype == np.int64
    assert got.timestamp_types.dtype == np.int32
    assert got.keys.type == pa.binary() and got.values.type == pa.binary()
    assert len(got.keys) == 0 and len(got.values) == 0
    assert py_headers(got.headers) == ([] if include_headers else None)


def test_fewer_bytes_than_a_header_is_empty():
    b = batch(0, records_of([b"x"]))
    got = decode(b[:HEADER_SIZE - 1], 0, 10)
    assert len(got) == 0 and got.next_offset == 0


def test_single_batch_explicit_values():
    recs = [
        Record(key=b"k0", value=b"v0", timestamp_delta=0),
        Record(key=None, value=b"", timestamp_delta=5),
        Record(key=b"", value=None, timestamp_delta=-3),
        Record(key=b"key-longer-than-twelve", value=b"value-longer-than-twelve",
               timestamp_delta=1000),
    ]
    got = check(batch(10, recs), 0, 100)
    assert got.offsets.tolist() == [10, 11, 12, 13]
    assert got.timestamps_ms.tolist() == [TS, TS + 5, TS - 3, TS + 1000]
    assert got.timestamp_types.tolist() == [0, 0, 0, 0]
    assert got.keys.to_pylist() == [b"k0", None, b"", b"key-longer-than-twelve"]
    assert got.values.to_pylist() == [b"v0", b"", None, b"value-longer-than-twelve"]
    assert got.keys.null_count == 1 and got.values.null_count == 1
    assert got.headers is None
    assert got.next_offset == 14


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "memoryview-slice"])
def test_input_buffer_types(kind):
    data = batch(0, records_of([b"a" * 20, b"b", None])) + batch(3, records_of([b"c" * 5]),
                                                                   codec=GZIP)
    if kind == "bytearray":
        arg = bytearray(data)
    elif kind == "memoryview":
        arg = memoryview(data)
    elif kind == "memoryview-slice":
        arg = memoryview(b"\xff" * 7 + data + b"\xee" * 5)[7:7 + len(data)]
    else:
        arg = data
    got = decode(arg, 0, 100)
    assert got.values.to_pylist() == [b"a" * 20, b"b", None, b"c" * 5]
    assert got.offsets.tolist() == [0, 1, 2, 3]
    assert got.next_offset == 4


def test_crc_is_not_checked():
    good = batch(0, records_of([b"x", b"y"]))
    bad = batch(0, records_of([b"x", b"y"]), compute_crc=False)
    assert decode(good, 0, 10).values.to_pylist() == decode(bad, 0, 10).values.to_pylist()


@pytest.mark.parametrize("size", [0, 1, 4, 5, 8, 11, 12, 13, 16, 17, 100])
def test_binary_view_inline_boundaries(size):
    """Values of exactly 0..12 bytes are inline in binary_view, 13+ out of line."""
    rng = random.Random(size)
    vals = [rng.randbytes(size) for _ in range(40)]
    keys = [rng.randbytes(size) if i % 3 else None for i in range(40)]
    recs = [Record(key=k, value=v) for k, v in zip(keys, vals)]
    got = check(batch(0, recs) + batch(40, recs, codec=LZ4))
    assert got.values.to_pylist() == vals + vals
    assert got.keys.to_pylist() == keys + keys


@pytest.mark.parametrize("size", [1, 4, 12, 13, 100, 5000])
def test_equal_size_keys_and_values_are_copied_as_rows(size, monkeypatch):
    """Equal-size keys and values take the row-copy path; it gives what the view path gives."""
    rng = random.Random(size)
    recs = [Record(key=rng.randbytes(size), value=rng.randbytes(size)) for _ in range(70)]
    data = batch(0, recs) + batch(70, recs, codec=ZSTD)
    calls = []
    real = rbd._fixed_binary
    monkeypatch.setattr(rbd, "_fixed_binary", lambda *a: calls.append(a[2]) or real(*a))
    got = check(data)
    assert calls == [size, size]
    assert got.keys.to_pylist() == [r.key for r in recs] * 2
    assert got.values.to_pylist() == [r.value for r in recs] * 2
    assert got.values.type == pa.binary() and got.values.null_count == 0


@pytest.mark.parametrize("layout", ["all-long", "all-short", "mixed", "all-null", "all-empty"])
def test_binary_view_layouts(layout):
    rng = random.Random(layout)
    if layout == "all-long":
        vals = [rng.randbytes(rng.randint(13, 40)) for _ in range(50)]
    elif layout == "all-short":
        vals = [rng.randbytes(rng.randint(0, 12)) for _ in range(50)]
    elif layout == "mixed":
        vals = [rng.randbytes(rng.choice([0, 3, 12, 13, 30])) for _ in range(50)]
    elif layout == "all-null":
        vals = [None] * 50
    else:
        vals = [b""] * 50
    recs = [Record(key=v, value=v) for v in vals]
    got = check(batch(5, recs))
    assert got.values.to_pylist() == vals
    assert got.keys.to_pylist() == vals


def test_out_of_line_values_with_bytes_that_look_like_varints():
    """Payload bytes with the high bit set must not confuse anything."""
    vals = [bytes([0x80 | (i & 0x7F)] * (i % 30)) for i in range(200)]
    check(batch(0, records_of(vals, key=b"\xff\xff\xff")))


# ---------------------------------------------------------------------------------------------
# Codecs and timestamps
# ---------------------------------------------------------------------------------------------

CODEC_CASES = [
    pytest.param(dict(codec=NONE), id="none"),
    pytest.param(dict(codec=GZIP), id="gzip"),
    pytest.param(dict(codec=SNAPPY), id="snappy-raw"),
    pytest.param(dict(codec=SNAPPY, xerial=True), id="snappy-xerial"),
    pytest.param(dict(codec=SNAPPY, xerial=True, xerial_chunk=1000), id="snappy-xerial-chunks"),
    pytest.param(dict(codec=LZ4), id="lz4"),
    pytest.param(dict(codec=ZSTD), id="zstd"),
    pytest.param(dict(codec=ZSTD, zstd_streaming=True), id="zstd-no-content-size"),
]


def _varied_records(rng: random.Random, n: int) -> list[Record]:
    out = []
    for i in range(n):
        out.append(Record(
            key=None if i % 7 == 0 else rng.randbytes(rng.choice([0, 1, 5, 12, 13, 40])),
            value=None if i % 11 == 0 else rng.randbytes(rng.choice([0, 2, 12, 13, 200, 3000])),
            timestamp_delta=rng.randint(-100, 100_000),
            headers=[("h", b"1")] if i % 5 == 0 else []))
    return out


@pytest.mark.parametrize("opts", CODEC_CASES)
def test_every_codec(opts):
    rng = random.Random(1)
    recs = _varied_records(rng, 300)
    data = batch(1000, recs, **opts)
    got = check(data, 0, BIG, include_headers=True)
    assert got.values.to_pylist() == [r.value for r in recs]
    assert got.keys.to_pylist() == [r.key for r in recs]
    assert got.offsets.tolist() == list(range(1000, 1300))
    assert got.next_offset == 1300


@pytest.mark.parametrize("opts", CODEC_CASES)
def test_every_codec_big_values(opts):
    """10 KB and 100 KB values: three-byte length varints, and several xerial chunks."""
    rng = random.Random(2)
    vals = [rng.randbytes(10_000), rng.randbytes(100_000), b"tiny", rng.randbytes(100_000),
            None, rng.randbytes(10_000)]
    got = check(batch(0, records_of(vals, key=b"k"), **opts))
    assert got.values.to_pylist() == vals


def test_xerial_stream_of_many_chunks_is_joined():
    vals = [bytes([i]) * 5000 for i in range(40)]
    data = batch(0, records_of(vals), codec=SNAPPY, xerial=True, xerial_chunk=777)
    assert data[HEADER_SIZE:HEADER_SIZE + 8] == XERIAL_MAGIC
    assert decode(data, 0, BIG).values.to_pylist() == vals


def test_mixed_codecs_in_one_response():
    rng = random.Random(3)
    data = b""
    base = 0
    for i, codec in enumerate([NONE, GZIP, NONE, SNAPPY, LZ4, NONE, ZSTD, SNAPPY, NONE]):
        recs = _varied_records(rng, 30 + i)
        data += batch(base, recs, codec=codec, xerial=(i == 7))
        base += len(recs)
    got = check(data, 0, BIG, include_headers=True)
    assert got.offsets.tolist() == list(range(base))


def test_unknown_codec_is_a_protocol_error():
    data = batch(0, [], raw_records=b"junk", record_count=1, extra_attributes=5)
    with pytest.raises(KafkaProtocolError, match="codec 5"):
        decode(data, 0, 10)


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_uses_batch_max_timestamp(codec):
    recs = [Record(value=b"a", timestamp_delta=5), Record(value=b"b", timestamp_delta=-7),
            Record(value=b"c", timestamp_delta=0)]
    data = (batch(0, recs, codec=codec, log_append_time=True, max_timestamp=TS + 99_999)
            + batch(3, recs, codec=codec)
            + batch(6, recs, codec=codec, log_append_time=True, base_timestamp=TS - 50,
                    max_timestamp=TS + 1))
    got = check(data)
    assert got.timestamps_ms.tolist() == [TS + 99_999] * 3 + [TS + 5, TS - 7, TS] + [TS + 1] * 3
    assert got.timestamp_types.tolist() == [1, 1, 1, 0, 0, 0, 1, 1, 1]


def test_timestamp_deltas_across_varint_sizes():
    deltas = [0, 1, -1, 31, 32, 63, 64, -64, -65, 8191, 8192, -8192, 2**20, 2**27, 2**28,
              2**35, -(2**35), 2**49, 10**15]
    recs = [Record(value=b"v", timestamp_delta=d) for d in deltas]
    for codec in (NONE, ZSTD):
        got = check(batch(0, recs, codec=codec))
        assert got.timestamps_ms.tolist() == [TS + d for d in deltas]


def test_offset_deltas_across_varint_sizes_equal_payload():
    """9,000 equal records: the offset delta grows to 2 bytes at 64 and 3 at 8,192, so record
    size changes at exactly those points of an otherwise equal-size run."""
    n = 9000
    recs = records_of([b"0123456789abcdef"] * n, key=b"k")
    for codec in (NONE, LZ4):
        got = check(batch(50, recs, codec=codec))
        assert got.offsets.tolist() == list(range(50, 50 + n))
        assert got.next_offset == 50 + n


def test_timestamp_deltas_growing_with_index():
    """ts delta = 3 * i crosses 64 and 8,192 mid-run, so does the offset delta at other points."""
    n = 4000
    recs = [Record(value=b"x" * 20, timestamp_delta=3 * i) for i in range(n)]
    got = check(batch(0, recs))
    assert got.timestamps_ms.tolist() == [TS + 3 * i for i in range(n)]


def test_compaction_gaps_in_offset_deltas():
    deltas = [0, 3, 4, 63, 64, 65, 100, 8191, 8192, 8200, 20_000, 1_000_000]
    recs = records_of([b"v%d" % d for d in deltas])
    data = batch(1000, recs, offset_deltas=deltas, last_offset_delta=1_000_050)
    got = check(data)
    assert got.offsets.tolist() == [1000 + d for d in deltas]
    assert got.next_offset == 1000 + 1_000_050 + 1
    # windows inside the gaps
    got = check(data, 1065, 1101)
    assert got.offsets.tolist() == [1065, 1100]
    assert got.next_offset == 1101
    got = check(data, 1101, 1000 + 8191)
    assert len(got) == 0 and got.next_offset == 1000 + 8191
    got = check(data, 1000 + 8191, 1000 + 8201)
    assert got.offsets.tolist() == [1000 + 8191, 1000 + 8192, 1000 + 8200]


# ---------------------------------------------------------------------------------------------
# The [start, end) window and next_offset
# ---------------------------------------------------------------------------------------------

def _three_batches(codec=NONE) -> bytes:
    # offsets 0-9, 10-19, 20-29
    return b"".join(batch(b, records_of([b"v%d" % (b + i) for i in range(10)]), codec=codec)
                    for b in (0, 10, 20))


@pytest.mark.parametrize("codec", CODECS)
def test_window_start_inside_first_batch(codec):
    got = check(_three_batches(codec), 7, 100)
    assert got.offsets.tolist() == list(range(7, 30))
    assert got.values.to_pylist()[0] == b"v7"
    assert got.next_offset == 30


@pytest.mark.parametrize("codec", CODECS)
def test_window_end_inside_a_batch(codec):
    got = check(_three_batches(codec), 0, 15)
    assert got.offsets.tolist() == list(range(15))
    assert got.next_offset == 15


def test_window_both_ends_inside_one_batch():
    got = check(_three_batches(), 12, 17, include_headers=True)
    assert got.offsets.tolist() == [12, 13, 14, 15, 16]
    assert got.values.to_pylist() == [b"v12", b"v13", b"v14", b"v15", b"v16"]
    assert py_headers(got.headers) == [None] * 5
    assert got.next_offset == 17


def test_window_end_on_batch_boundary():
    got = check(_three_batches(), 0, 20)
    assert got.offsets.tolist() == list(range(20))
    assert got.next_offset == 20


def test_batches_wholly_before_start_are_skipped():
    got = check(_three_batches(), 20, 100)
    assert got.offsets.tolist() == list(range(20, 30))
    assert got.next_offset == 30


def test_batches_wholly_after_end_do_not_move_next_offset():
    data = _three_batches()
    got = check(data, 0, 10)
    assert got.offsets.tolist() == list(range(10))
    assert got.next_offset == 10


def test_next_offset_stops_at_the_last_whole_batch_below_end():
    got = check(_three_batches(), 0, 1000)
    assert got.next_offset == 30


def test_start_past_everything():
    got = check(_three_batches(), 40, 100)
    assert len(got) == 0 and got.next_offset == 40


def test_start_equals_end():
    got = check(_three_batches(), 5, 5)
    assert len(got) == 0 and got.next_offset == 5


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("cut", [1, 12, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 3, -1])
def test_truncated_final_batch_is_ignored(codec, cut):
    first = batch(0, records_of([b"v%d" % i for i in range(10)])) + batch(
        10, records_of([b"v%d" % i for i in range(10, 20)]))
    last = batch(20, records_of([b"v%d" % i for i in range(20, 30)]), codec=codec)
    cut_at = cut if cut > 0 else len(last) + cut
    data = first + last[:cut_at]
    got = check(data, 0, 100)
    assert got.offsets.tolist() == list(range(20))
    assert got.next_offset == 20
    got = check(data, 25, 100)  # the truncated batch is where the window begins
    assert len(got) == 0 and got.next_offset == 25


def test_truncated_only_batch_gives_nothing():
    data = batch(3, records_of([b"a", b"b"]))
    got = check(data[:-2], 3, 10)
    assert len(got) == 0 and got.next_offset == 3


def test_lastoffsetdelta_beyond_the_records_moves_next_offset():
    """A compacted batch keeps its last offset delta: next_offset is past it, not past the last
    surviving record."""
    data = batch(0, records_of([b"a", b"b"]), offset_deltas=[0, 1], last_offset_delta=9)
    data += batch(10, records_of([b"c"]))
    got = check(data, 0, 100)
    assert got.offsets.tolist() == [0, 1, 10]
    assert got.next_offset == 11
    got = check(data, 0, 5)
    assert got.offsets.tolist() == [0, 1]
    assert got.next_offset == 5  # clamped to end
    got = check(data, 3, 100)  # the first batch's records are all before start
    assert got.offsets.tolist() == [10]
    assert got.next_offset == 11


def test_empty_batches_advance_next_offset():
    data = batch(0, [], last_offset_delta=4) + batch(5, records_of([b"x"])) + batch(
        6, [], last_offset_delta=3)
    got = check(data, 0, 100)
    assert got.offsets.tolist() == [5]
    assert got.next_offset == 10
    got = check(data[:len(batch(0, [], last_offset_delta=4))], 0, 100)
    assert len(got) == 0 and got.next_offset == 5


# ---------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------

P1, P2, P3 = 1001, 1002, 1003


def _txn_log() -> tuple[bytes, list[tuple[int, int]]]:
    """offsets:
      0-2   P1 txn A (aborted)       3-4  P2 txn (committed)   5-6 non-transactional
      7     P1 ABORT marker          8    P2 COMMIT marker
      9-10  P1 txn B (committed)     11   P1 COMMIT marker
    """
    data = (batch(0, records_of([b"a0", b"a1", b"a2"]), transactional=True, producer_id=P1)
            + batch(3, records_of([b"p2-3", b"p2-4"]), transactional=True, producer_id=P2)
            + batch(5, records_of([b"n5", b"n6"]), producer_id=P1)  # idempotent, not txn
            + control_batch(7, P1, commit=False)
            + control_batch(8, P2, commit=True)
            + batch(9, records_of([b"b9", b"b10"]), transactional=True, producer_id=P1,
                    codec=GZIP)
            + control_batch(11, P1, commit=True))
    return data, [(P1, 0)]


def test_read_committed_drops_aborted_transaction():
    data, aborted = _txn_log()
    got = check(data, 0, 100, aborted=aborted)
    assert got.offsets.tolist() == [3, 4, 5, 6, 9, 10]
    assert got.values.to_pylist() == [b"p2-3", b"p2-4", b"n5", b"n6", b"b9", b"b10"]
    assert got.next_offset == 12  # past the markers


def test_read_uncommitted_returns_aborted_data_but_no_markers():
    data, aborted = _txn_log()
    for kw in (dict(read_committed=False, aborted=aborted), dict(read_committed=False)):
        got = check(data, 0, 100, **kw)
        assert got.offsets.tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10]
        assert got.next_offset == 12


def test_read_committed_without_aborted_list_keeps_all_data():
    data, _ = _txn_log()
    got = check(data, 0, 100, aborted=None)
    assert got.offsets.tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10]
    got = check(data, 0, 100, aborted=[])
    assert got.offsets.tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10]


def test_control_batches_are_never_returned():
    data = control_batch(0, P1, commit=True) + control_batch(1, P2, commit=False)
    for rc in (True, False):
        got = check(data, 0, 100, read_committed=rc, aborted=[(P2, 1)])
        assert len(got) == 0 and got.next_offset == 2


def test_marker_at_the_end_of_the_window():
    data, aborted = _txn_log()
    # P1's aborted transaction ended (marker at 7) before offset 9: the broker does not list it
    got = check(data, 9, 12, aborted=[])
    assert got.offsets.tolist() == [9, 10]
    assert got.next_offset == 12
    got = check(data, 0, 8, aborted=aborted)  # ends right after P1's ABORT marker
    assert got.offsets.tolist() == [3, 4, 5, 6]
    assert got.next_offset == 8


def test_abort_marker_ends_skipping_and_later_transactions_are_kept():
    # P1: txn at 0-1 committed (marker 2), txn at 3-4 aborted (marker 5), txn at 6-7 kept
    data = (batch(0, records_of([b"c0", b"c1"]), transactional=True, producer_id=P1)
            + control_batch(2, P1, commit=True)
            + batch(3, records_of([b"x3", b"x4"]), transactional=True, producer_id=P1)
            + control_batch(5, P1, commit=False)
            + batch(6, records_of([b"k6", b"k7"]), transactional=True, producer_id=P1)
            + control_batch(8, P1, commit=True))
    got = check(data, 0, 100, aborted=[(P1, 3)])
    assert got.offsets.tolist() == [0, 1, 6, 7]


def test_two_aborted_transactions_of_one_producer_interleaved():
    data = (batch(0, records_of([b"x0"]), transactional=True, producer_id=P1)
            + batch(1, records_of([b"y1"]), transactional=True, producer_id=P2)
            + batch(2, records_of([b"x2"]), transactional=True, producer_id=P1)
            + control_batch(3, P1, commit=False)
            + batch(4, records_of([b"z4"]), transactional=True, producer_id=P3)
            + control_batch(5, P2, commit=False)
            + batch(6, records_of([b"x6"]), transactional=True, producer_id=P1)
            + batch(7, records_of([b"z7"]), transactional=True, producer_id=P3)
            + control_batch(8, P1, commit=False)
            + control_batch(9, P3, commit=True)
            + batch(10, records_of([b"n10"])))
    # unsorted on purpose: the decoder sorts by first offset
    aborted = [(P1, 6), (P2, 1), (P1, 0)]
    got = check(data, 0, 100, aborted=aborted)
    assert got.values.to_pylist() == [b"z4", b"z7", b"n10"]
    assert got.next_offset == 11


def test_window_starting_inside_an_aborted_transaction():
    data = (batch(0, records_of([b"x0", b"x1"]), transactional=True, producer_id=P1)
            + batch(2, records_of([b"x2", b"x3"]), transactional=True, producer_id=P1)
            + batch(4, records_of([b"n4"]))
            + control_batch(5, P1, commit=False)
            + batch(6, records_of([b"x6"]), transactional=True, producer_id=P1)
            + control_batch(7, P1, commit=True))
    got = check(data, 3, 100, aborted=[(P1, 0)])
    assert got.offsets.tolist() == [4, 6]
    assert got.next_offset == 8


def test_commit_marker_of_other_producer_does_not_end_skipping():
    data = (batch(0, records_of([b"x0"]), transactional=True, producer_id=P1)
            + control_batch(1, P2, commit=False)
            + batch(2, records_of([b"x2"]), transactional=True, producer_id=P1)
            + control_batch(3, P1, commit=False))
    got = check(data, 0, 100, aborted=[(P1, 0), (P2, 1)])
    assert len(got) == 0 and got.next_offset == 4


# ---------------------------------------------------------------------------------------------
# Headers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_headers(codec):
    recs = [
        Record(value=b"no headers"),
        Record(value=b"one", headers=[("trace", b"abc")]),
        Record(value=None, key=b"k", headers=[("a", None), ("b", b""), ("ü-ключ", b"\x00\xff"),
                                              ("a", b"dup")]),
        Record(value=b"x" * 100, headers=[("big", b"y" * 10_000)]),
        Record(value=b"none again"),
    ]
    data = batch(0, recs, codec=codec)
    got = check(data, 0, 100, include_headers=True)
    assert py_headers(got.headers) == [
        None,
        [("trace", b"abc")],
        [("a", None), ("b", b""), ("ü-ключ", b"\x00\xff"), ("a", b"dup")],
        [("big", b"y" * 10_000)],
        None,
    ]
    for key, value in py_headers(got.headers)[2]:
        assert isinstance(key, str) and (value is None or type(value) is bytes)
    assert decode(data, 0, 100).headers is None
    got = check(data, 1, 3, include_headers=True)  # headers follow the window
    assert py_headers(got.headers) == [
        [("trace", b"abc")], [("a", None), ("b", b""), ("ü-ключ", b"\x00\xff"), ("a", b"dup")]]


def test_headers_across_batches_and_codecs():
    rng = random.Random(4)
    data = b""
    base = 0
    for codec in (NONE, SNAPPY, NONE, ZSTD):
        recs = _varied_records(rng, 50)
        data += batch(base, recs, codec=codec)
        base += 50
    got = check(data, 17, 180, include_headers=True)
    assert sum(h is not None for h in py_headers(got.headers)) > 0


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [0, 1, 3])
def test_wrong_magic_is_a_clear_protocol_error(magic):
    data = batch(77, records_of([b"a"]), magic=magic)
    with pytest.raises(KafkaProtocolError, match=rf"offset 77 has message format v{magic}"):
        decode(data, 0, 100)


def test_wrong_magic_in_a_later_batch():
    data = batch(0, records_of([b"a"])) + batch(1, records_of([b"b"]), magic=1)
    with pytest.raises(KafkaProtocolError, match="v1"):
        decode(data, 0, 100)


def _lying_section(n: int, liar: int, adjust: int, size: int = 10) -> bytes:
    return b"".join(encode_record(Record(value=b"v" * size), i,
                                  length_adjust=adjust if i == liar else 0) for i in range(n))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("adjust", [1, 50, 10_000])
def test_last_record_length_past_the_batch(codec, adjust):
    data = batch(0, records_of([b"v" * 10] * 3), raw_records=_lying_section(3, 2, adjust),
                 codec=codec)
    with pytest.raises(KafkaProtocolError, match="past the end of their batch"):
        decode(data, 0, 100)
    # the same when another batch follows in the response
    with pytest.raises(KafkaProtocolError, match="past the end of their batch"):
        decode(data + batch(3, records_of([b"next"])), 0, 100)


@pytest.mark.parametrize("n", [3, 40])   # chased records / a run of equal-size records
@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_middle_record_length_past_the_whole_response(codec, n):
    """A record in the middle of the (only) batch claims more bytes than the response holds:
    a corrupt response, which must be a KafkaProtocolError, not an IndexError."""
    data = batch(0, records_of([b"v" * 10] * n), raw_records=_lying_section(n, n // 2, 100_000),
                 codec=codec)
    with pytest.raises(KafkaProtocolError):
        decode(data, 0, 100)


def _record_with_fields(offset_delta: int, *, key: bytes | None, value: bytes,
                        key_len: int | None = None, value_len: int | None = None,
                        headers: bytes = varint(0)) -> bytes:
    """A record whose key/value length fields may lie about the bytes that follow (its own
    length prefix is true, so the records of the batch still tile it)."""
    body = (b"\x00" + varint(0) + varint(offset_delta)
            + varint(-1 if key is None else (len(key) if key_len is None else key_len))
            + (key or b"")
            + varint(len(value) if value_len is None else value_len) + value + headers)
    return varint(len(body)) + body


@pytest.mark.parametrize("n", [3, 40])   # chased records / a run of equal-size records
@pytest.mark.parametrize("liar", ["value", "key"])
@pytest.mark.parametrize("claim", [11, 12, 50, 10_000, 10**9])
@pytest.mark.parametrize("include_headers", [False, True])
def test_a_key_or_value_length_past_its_record_is_a_protocol_error(n, liar, claim,
                                                                   include_headers):
    """A length that runs past its record, into the next record or past the whole response:
    a KafkaProtocolError (Kafka's DefaultRecord rule), never the next record's bytes handed out
    as this one's value, nor a read past the buffer (which crashed the process)."""
    def rec(i: int) -> bytes:
        lie = i == n // 2
        return _record_with_fields(
            i, key=b"k" * 10, value=b"v" * 10,
            value_len=claim if lie and liar == "value" else None,
            key_len=claim if lie and liar == "key" else None)
    data = batch(0, [], raw_records=b"".join(rec(i) for i in range(n)), record_count=n,
                 last_offset_delta=n - 1)
    with pytest.raises(KafkaProtocolError, match="corrupt"):
        decode(data, 0, 100, include_headers=include_headers)


def test_a_key_or_value_length_past_its_record_outside_the_window_still_fails():
    """The window does not hide a corrupt record of a batch returned whole (as Kafka's consumer
    parses every record of the batch)."""
    raw = b"".join(_record_with_fields(i, key=None, value=b"v" * 10,
                                       value_len=30 if i == 0 else None) for i in range(5))
    with pytest.raises(KafkaProtocolError, match="past the end of the record"):
        decode(batch(0, [], raw_records=raw, record_count=5, last_offset_delta=4), 3, 100)


@pytest.mark.parametrize("headers", [
    varint(1000),                                     # more headers than the record could hold
    varint(1) + varint(1) + b"a" + varint(40) + b"x",  # a header value past the record
    varint(1) + varint(1) + b"a" + varint(1) + b"x" + b"trailing",  # bytes after the headers
])
def test_headers_that_do_not_end_with_their_record_are_a_protocol_error(headers):
    raw = b"".join(_record_with_fields(i, key=b"k", value=b"v" * 5,
                                       headers=headers if i == 1 else varint(0))
                   for i in range(3))
    data = batch(0, [], raw_records=raw, record_count=3, last_offset_delta=2)
    with pytest.raises(KafkaProtocolError, match="corrupt"):
        decode(data, 0, 100, include_headers=True)


def test_trailing_bytes_after_headers_are_ignored_without_headers():
    """Without the headers column the header section is not parsed: only the key and value must
    lie inside the record."""
    raw = b"".join(_record_with_fields(i, key=b"k", value=b"v" * 5,
                                       headers=varint(1) + varint(1) + b"a" + varint(1) + b"x")
                   for i in range(3))
    got = decode(batch(0, [], raw_records=raw, record_count=3, last_offset_delta=2), 0, 100)
    assert got.values.to_pylist() == [b"v" * 5] * 3


@pytest.mark.parametrize("n", [3, 40])   # chased records / a run of equal-size records
@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_record_count_larger_than_the_records(codec, n):
    """The header counts more records than the batch holds: a corrupt response, which must be a
    KafkaProtocolError (not an IndexError escaping to the caller)."""
    data = batch(0, records_of([b"v" * 10] * n), record_count=n + 1, codec=codec)
    with pytest.raises(KafkaProtocolError):
        decode(data, 0, 100)


def test_record_count_larger_than_the_records_with_a_following_batch():
    data = batch(0, records_of([b"v" * 10] * 3), record_count=4) + batch(3, records_of([b"x"]))
    with pytest.raises(KafkaProtocolError):
        decode(data, 0, 100)


def test_record_length_varint_too_long():
    data = batch(0, [], raw_records=b"\xff" * 8 + b"\x01" + b"\x00" * 20, record_count=1)
    with pytest.raises(KafkaProtocolError):
        decode(data, 0, 100)


# ---------------------------------------------------------------------------------------------
# The vectorised "run of equal-size records" path really runs (and agrees with the chase).
# ---------------------------------------------------------------------------------------------

def test_equal_size_run_is_found_without_chasing(monkeypatch):
    chased = []
    real = rbd._record_starts

    def spy(buf, pos, end, count, starts):
        out = real(buf, pos, end, count, starts)
        chased.append(count)
        return out

    monkeypatch.setattr(rbd, "_record_starts", spy)
    recs = records_of([b"0123456789abcdef"] * 3000, key=b"key")
    got = check(batch(0, recs))
    assert got.offsets.tolist() == list(range(3000))
    # the offset delta's varint grows at 64: the records after it form a second run; only the
    # short stretches between runs (if any) are chased one by one
    assert sum(chased) < 200, chased


def test_runs_broken_by_one_odd_record():
    """A run of equal records, one different-size record, then the run again (at several places
    relative to the first window of 256)."""
    for odd_at in (1, 15, 16, 17, 255, 256, 257, 600, 1999):
        vals = [b"same-size-value!"] * 2000
        vals[odd_at] = b"a-different-size-value"
        check(batch(0, records_of(vals)), 0, BIG)
        check(batch(0, records_of(vals), codec=SNAPPY), 0, BIG)


@pytest.mark.parametrize("odd_at", [1, 16, 20, 39])
def test_run_check_compares_every_byte_of_a_two_byte_length(odd_at):
    """Record lengths L and L + 128 have two-byte varints differing only in the second byte: a
    run check that compared the first byte only would misplace every later record."""
    vals = [b"v" * 100] * 40
    vals[odd_at] = b"w" * 228
    assert varint(len(encode_record(Record(value=vals[0]), 0)) - 2)[0] == \
        varint(len(encode_record(Record(value=vals[odd_at]), 0)) - 2)[0]
    got = check(batch(0, records_of(vals)))
    assert got.values.to_pylist() == vals


def test_alternating_sizes_never_form_runs():
    vals = [b"a" * (i % 2) for i in range(1000)]
    check(batch(0, records_of(vals)))


# ---------------------------------------------------------------------------------------------
# Randomised comparison with the reference decoder (fixed seeds)
# ---------------------------------------------------------------------------------------------

_SIZE_POOLS = {
    "empty": [0],
    "inline": list(range(1, 13)),
    "long": [13, 14, 20, 64, 100, 500],
    "any": [0, 1, 2, 7, 12, 13, 16, 63, 64, 200, 1000],
}


def _payload(rng: random.Random, pool: str, null_p: float) -> bytes | None:
    if rng.random() < null_p:
        return None
    return rng.randbytes(rng.choice(_SIZE_POOLS[pool]))


def _random_batch_records(rng: random.Random, mode: str) -> tuple[list[Record], list[int]]:
    """Records and their offset deltas for one batch in one of several shapes."""
    headers_p = rng.choice([0.0, 0.0, 0.1, 0.5])

    def headers():
        if rng.random() >= headers_p:
            return []
        return [(rng.choice(["a", "trace-id", "ключ", ""]),
                 None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 30])))
                for _ in range(rng.randint(1, 3))]

    if mode == "equal":
        n = rng.choice([1, 15, 16, 17, 63, 64, 65, 200, 256, 300, 700, 2000])
        ksize = rng.choice([None, 0, 1, 8, 12, 13, 30])
        vsize = rng.choice([0, 1, 5, 12, 13, 40, 300])
        ts = rng.choice([0, 1, 63, 64, 5000])
        recs = [Record(key=None if ksize is None else rng.randbytes(ksize),
                       value=rng.randbytes(vsize), timestamp_delta=ts) for _ in range(n)]
        return recs, list(range(n))
    if mode == "varying":
        n = rng.randint(1, 150)
        pool = rng.choice(list(_SIZE_POOLS))
        recs = [Record(key=_payload(rng, rng.choice(list(_SIZE_POOLS)), 0.2),
                       value=_payload(rng, pool, 0.1),
                       timestamp_delta=rng.randint(-10_000, 10_000), headers=headers())
                for _ in range(n)]
        return recs, list(range(n))
    if mode == "mixed":
        recs = []
        for _ in range(rng.randint(2, 6)):
            if rng.random() < 0.5:  # a run of equal-size records
                size = rng.choice([0, 3, 12, 13, 50])
                k = rng.choice([None, b"", b"key", b"a-long-key-of-20-byte"])
                ts = rng.choice([0, 7])
                recs += [Record(key=k, value=rng.randbytes(size), timestamp_delta=ts)
                         for _ in range(rng.randint(10, 400))]
            else:
                recs += [Record(key=_payload(rng, "any", 0.3), value=_payload(rng, "any", 0.1),
                                timestamp_delta=rng.randint(0, 100_000), headers=headers())
                         for _ in range(rng.randint(1, 80))]
        return recs, list(range(len(recs)))
    if mode == "big":
        n = rng.randint(1, 6)
        recs = [Record(key=_payload(rng, "any", 0.3),
                       value=rng.choice([None, b"", rng.randbytes(10_000),
                                         rng.randbytes(100_000), rng.randbytes(12)]),
                       timestamp_delta=rng.randint(0, 10), headers=headers())
                for _ in range(n)]
        return recs, list(range(n))
    if mode == "gaps":
        n = rng.randint(1, 300)
        deltas, d = [], 0
        for _ in range(n):
            deltas.append(d)
            d += rng.choice([1, 1, 1, 2, 5, 60, 64, 130, 8000, 9000])
        vsize = rng.choice([None, 4, 20])
        recs = [Record(key=b"k", value=rng.randbytes(vsize if vsize is not None
                                                     else rng.randint(0, 30)),
                       timestamp_delta=rng.choice([0, rng.randint(-9000, 9000)]))
                for _ in range(n)]
        return recs, deltas
    if mode == "ts-cross":
        n = rng.randint(100, 3000)
        step = rng.choice([1, 3, 10, 100])
        recs = [Record(value=b"payload!", timestamp_delta=i * step) for i in range(n)]
        return recs, list(range(n))
    raise AssertionError(mode)


MODES = ["equal", "varying", "mixed", "big", "gaps", "ts-cross"]


def _random_log(rng: random.Random, n_batches: int, modes: list[str]) -> tuple[bytes, list[int]]:
    """A response of random batches; returns it and every data record's offset."""
    out = []
    offsets = []
    base = rng.randint(0, 10**9)
    for _ in range(n_batches):
        recs, deltas = _random_batch_records(rng, rng.choice(modes))
        codec = rng.choice([NONE, NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD])
        log_append = rng.random() < 0.2
        last_delta = deltas[-1] + rng.choice([0, 0, 0, 1, 50]) if deltas else 0
        out.append(batch(base, recs, offset_deltas=deltas, last_offset_delta=last_delta,
                         codec=codec, xerial=codec == SNAPPY and rng.random() < 0.5,
                         xerial_chunk=rng.choice([32 * 1024, 4096]),
                         log_append_time=log_append,
                         max_timestamp=TS + 10**6 if log_append else None,
                         base_timestamp=TS + rng.randint(-10**6, 10**6), compute_crc=False))
        offsets += [base + d for d in deltas]
        base += last_delta + 1 + rng.choice([0, 0, 0, 1, 1000])
    return b"".join(out), offsets


@pytest.mark.parametrize("mode", MODES + ["all"])
@pytest.mark.parametrize("seed", range(4))
def test_random_against_reference(mode, seed):
    rng = random.Random(f"{mode}-{seed}")
    modes = MODES if mode == "all" else [mode]
    data, offsets = _random_log(rng, rng.randint(1, 12 if mode != "big" else 4), modes)
    include_headers = rng.random() < 0.5
    got = check(data, 0, BIG, include_headers=include_headers)
    assert got.offsets.tolist() == offsets
    lo, hi = offsets[0], offsets[-1]
    for _ in range(4):  # random windows
        a = rng.randint(lo - 3, hi + 3)
        b = rng.randint(a, hi + 5)
        check(data, a, b, include_headers=rng.random() < 0.5)
    # a truncated response: cut somewhere in the last batch (or a later byte of it)
    cut = rng.randint(max(0, len(data) - 2000), len(data) - 1)
    check(data[:cut], 0, BIG)
    check(data[:cut], rng.randint(lo, hi + 1), BIG)


@pytest.mark.parametrize("seed", range(6))
def test_random_transactions_against_reference(seed):
    """Random interleaved producers' transactions; the kept records are exactly the committed
    and the non-transactional ones (a semantic check besides the reference decoder)."""
    rng = random.Random(seed)
    pids = [11, 22, 33]
    open_txn: dict[int, list[int]] = {}   # pid -> offsets of its open transaction
    first_of: dict[int, int] = {}
    aborted_txns = []                      # (pid, first offset, marker offset)
    committed_data: set[int] = set()
    all_data: set[int] = set()
    parts = []
    off = rng.randint(0, 1000)
    for _ in range(rng.randint(20, 60)):
        pid = rng.choice(pids)
        r = rng.random()
        if pid in open_txn and r < 0.35:
            commit = rng.random() < 0.5
            parts.append(control_batch(off, pid, commit, compute_crc=False))
            if commit:
                committed_data.update(open_txn[pid])
            else:
                aborted_txns.append((pid, first_of[pid], off))
            del open_txn[pid]
            off += 1
            continue
        n = rng.randint(1, 20)
        recs = records_of([rng.randbytes(rng.choice([0, 5, 20])) for _ in range(n)])
        codec = rng.choice([NONE, NONE, GZIP, ZSTD])
        if r < 0.85:
            if pid not in open_txn:
                open_txn[pid] = []
                first_of[pid] = off
            parts.append(batch(off, recs, transactional=True, producer_id=pid, codec=codec,
                               compute_crc=False))
            open_txn[pid] += list(range(off, off + n))
        else:
            parts.append(batch(off, recs, producer_id=pid, codec=codec, compute_crc=False))
            committed_data.update(range(off, off + n))
        all_data.update(range(off, off + n))
        off += n
    for pid in list(open_txn):  # close what is open
        parts.append(control_batch(off, pid, commit=False, compute_crc=False))
        aborted_txns.append((pid, first_of[pid], off))
        off += 1
    data = b"".join(parts)
    lo = min(all_data | {off})
    windows = [(lo, off)] + [tuple(sorted((rng.randint(lo, off), rng.randint(lo, off))))
                             for _ in range(5)]
    for start, end in windows:
        # the broker lists the aborted transactions that end at or after the fetch offset
        aborted = [(p, f) for p, f, marker in aborted_txns if marker >= start]
        rng.shuffle(aborted)
        got = check(data, start, end, aborted=aborted)
        assert got.offsets.tolist() == sorted(o for o in committed_data if start <= o < end)
        got = check(data, start, end, aborted=aborted, read_committed=False)
        assert got.offsets.tolist() == sorted(o for o in all_data if start <= o < end)


def test_a_header_key_that_is_not_utf8_is_a_protocol_error():
    """Kafka's header keys are Java strings (UTF-8); Spark's column is a string."""
    data = bytearray(batch(0, [Record(value=b"v", headers=[("ab", b"1")])]))
    at = bytes(data).index(b"ab")
    data[at] = 0xFF
    with pytest.raises(KafkaProtocolError, match="does not parse"):
        decode(bytes(data), 0, 10, include_headers=True)
    assert decode(bytes(data), 0, 10).values.to_pylist() == [b"v"]  # headers not asked: read


def _with_length(data: bytes, length: int) -> bytes:
    return data[:8] + struct.pack(">i", length) + data[12:]


@pytest.mark.timeout(20)  # the defect this guards against was an endless loop
@pytest.mark.parametrize("length", [-12, -1, 0, HEADER_SIZE - 13])
@pytest.mark.parametrize("where", ["before the window", "a marker", "data"])
def test_a_batch_length_below_a_header_is_a_protocol_error_not_a_loop(length, where):
    first = {"before the window": batch(0, records_of([b"a"])),
             "a marker": control_batch(5, P1, commit=True),
             "data": batch(5, records_of([b"a"]))}[where]
    data = _with_length(first, length) + batch(6, records_of([b"b"]))
    with pytest.raises(KafkaProtocolError, match=rf"gives length {length}, less than a batch"):
        decode(data, 5, 10, aborted=[(P1, 0)])


@pytest.mark.parametrize("codec", [c for c in CODECS if c != NONE])
def test_a_compressed_abort_marker_still_ends_the_aborted_range(codec):
    # Apache Kafka never compresses markers; a broker that did must not hide later records.
    data = (batch(0, records_of([b"x0"]), transactional=True, producer_id=P1)
            + batch(1, [control_record(commit=False)], transactional=True, control=True,
                    producer_id=P1, codec=codec)
            + batch(2, records_of([b"k2"]), transactional=True, producer_id=P1)
            + control_batch(3, P1, commit=True))
    assert decode(data, 0, 10, aborted=[(P1, 0)]).offsets.tolist() == [2]


def test_what_one_arrow_buffer_cannot_address_is_left_for_the_next_fetch(monkeypatch):
    # A view's offset is an int32: decompressed batches past 2 GiB would wrap (here: a lower
    # limit). The batches that fit are returned; the next fetch starts with the first that
    # does not; one batch alone too big goes to the librdkafka reader (KafkaProtocolError).
    one, two = records_of([b"v" * 1000] * 20), records_of([b"w" * 1000] * 20)
    data = batch(0, one, codec=GZIP) + batch(20, two, codec=GZIP)
    monkeypatch.setattr(rbd, "_VIEW_LIMIT", len(data) + 16 + 20_000 + 16 + 10_000)
    got = decode(data, 3, 100)
    assert got.offsets.tolist() == list(range(3, 20)) and got.next_offset == 20
    assert decode(data, 20, 100).offsets.tolist() == list(range(20, 40))
    monkeypatch.setattr(rbd, "_VIEW_LIMIT", 10_000)
    with pytest.raises(KafkaProtocolError, match="decompresses to"):
        decode(data, 0, 100)
