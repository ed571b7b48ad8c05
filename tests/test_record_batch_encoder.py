"""The record batch encoder against the format spec: every batch it writes is read back by the
decoder (and its CRC by the spec's own CRC-32C), keys land where Java's murmur2 puts them, and the
size limits hold."""

from __future__ import annotations

import random
import struct

import cramjam
import numpy as np
import pyarrow as pa
import pytest

from tests.record_batch_encoding import crc32c
from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.client.record_batch_decoder import BATCH_HEADER, HEADERS_TYPE, decode
from txkafka.connector.client.record_batch_encoder import (
    BatchAccumulator,
    RecordTooLargeError,
    codec_from_config,
    compress,
    encode_batch,
    murmur2,
    murmur2_partitions,
    uvarint_sizes,
    zigzag,
)

TS = 1_700_000_000_000

# Kafka's UtilsTest.testMurmur2: Java's murmur2 of these keys (signed ints).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def java_murmur2(data: bytes) -> int:
    """Java's Utils.murmur2, transcribed with explicit 32-bit wrapping (the reference)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = len(data) % 4
    base = len(data) & ~3
    if rest >= 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def signed(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def test_murmur2_matches_javas_published_values():
    got = murmur2(pa.array(list(JAVA_MURMUR2), pa.binary()))
    assert [signed(int(v)) for v in got] == list(JAVA_MURMUR2.values())


def test_murmur2_matches_the_reference_for_every_length_and_slices():
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in list(range(0, 70)) * 3]
    arr = pa.array(keys, pa.binary())
    assert [int(v) for v in murmur2(arr)] == [java_murmur2(k) for k in keys]
    # A slice of a larger column, and string keys (hashed as their UTF-8 bytes).
    assert [int(v) for v in murmur2(arr.slice(5, 50))] == [java_murmur2(k) for k in keys[5:55]]
    words = ["clé", "", "ключ-42", "k"]
    assert [int(v) for v in murmur2(pa.array(words))] == [java_murmur2(w.encode()) for w in words]
    parts = murmur2_partitions(arr, 7)
    assert list(parts) == [(java_murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]


def test_murmur2_of_keys_of_one_length_matches_the_reference():
    """Keys all of one length take the 2-D path: every length 0-13, sliced columns too."""
    rng = random.Random(11)
    for size in range(14):
        keys = [bytes(rng.randrange(256) for _ in range(size)) for _ in range(40)]
        arr = pa.array(keys, pa.binary())
        assert [int(v) for v in murmur2(arr)] == [java_murmur2(k) for k in keys], size
        assert [int(v) for v in murmur2(arr.slice(3, 30))] == \
            [java_murmur2(k) for k in keys[3:33]], size
    assert [int(v) for v in murmur2(pa.array(["ab", "cd"], pa.large_string()))] == \
        [java_murmur2(b"ab"), java_murmur2(b"cd")]


def test_varint_sizes_and_zigzag():
    v = np.array([0, 1, 127, 128, 16383, 16384, 2**21, 2**35, 2**63 - 1], dtype=np.uint64)
    assert list(uvarint_sizes(v)) == [1, 1, 1, 2, 2, 3, 4, 6, 9]
    assert list(zigzag(np.array([0, -1, 1, -2, 2]))) == [0, 1, 2, 3, 4]


def _sealed_all(acc: BatchAccumulator) -> list:
    acc.drain()
    out = list(acc.sealed)
    acc.sealed.clear()
    return out


def _decode_partition(batches: list[bytes], include_headers: bool = False):
    """Give consecutive base offsets (the broker's job) and decode the partition's log."""
    buf = []
    offset = 0
    for b in batches:
        b = bytearray(b)
        struct.pack_into(">q", b, 0, offset)
        offset += struct.unpack_from(">i", b, 57)[0]
        buf.append(bytes(b))
    return decode(b"".join(buf), 0, offset, read_committed=False,
                  include_headers=include_headers), offset


def _round_trip(rows_keys, rows_values, *, partitions=3, codec=0, headers=None, explicit=None,
                batch_bytes=1_000_000, calls=1):
    acc = BatchAccumulator("t", partitions, batch_bytes=batch_bytes)
    n = len(rows_values)
    keys = pa.array(rows_keys, pa.binary()) if rows_keys is not None else None
    values = pa.array(rows_values, pa.binary())
    step = -(-n // calls)
    for i in range(0, n, step):
        sl = slice(i, min(n, i + step))
        acc.append(keys.slice(i, sl.stop - i) if keys is not None else None,
                   values.slice(i, sl.stop - i),
                   headers=headers.slice(i, sl.stop - i) if headers is not None else None,
                   partitions=explicit.slice(i, sl.stop - i) if explicit is not None else None,
                   timestamp_ms=TS + i)
    sealed = _sealed_all(acc)
    by_part: dict[int, list[bytes]] = {}
    for sb in sealed:
        wire = encode_batch(sb, codec=codec, producer_id=77, producer_epoch=3,
                            base_sequence=0, transactional=True)
        by_part.setdefault(sb.partition, []).append(wire)
    return sealed, by_part


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_through_the_decoder(codec):
    n = 3000
    keys = [b"key-%d" % i if i % 11 else None for i in range(n)]
    values = [(b"value-%d-" % i) * (i % 40) if i % 13 else None for i in range(n)]
    _, by_part = _round_trip(keys, values, codec=codec, batch_bytes=20_000, calls=4)
    got = {}
    for p, batches in by_part.items():
        dec, count = _decode_partition(batches)
        assert list(dec.offsets) == list(range(count))  # offset deltas consecutive
        for k, v, ts in zip(dec.keys.to_pylist(), dec.values.to_pylist(), dec.timestamps_ms):
            got.setdefault(p, []).append((k, v, int(ts)))
    expected_part = {i: int(murmur2_partitions(pa.array([k]), 3)[0]) for i, k in
                     enumerate(keys) if k is not None}
    flat = [(p, k, v, ts) for p, rows in got.items() for k, v, ts in rows]
    assert len(flat) == n
    # Keyed rows where murmur2 puts them, in their order within each partition.
    for p, rows in got.items():
        seen = [r for r in rows if r[0] is not None]
        idx = [int(r[0][4:]) for r in seen]
        assert idx == sorted(idx)
        assert all(expected_part[i] == p for i in idx)
    by_key = {k: (v, ts) for _, k, v, ts in flat if k is not None}
    for i, (k, v) in enumerate(zip(keys, values)):
        if k is not None:
            assert by_key[k] == (v, TS + (i // 750) * 750)


def test_header_crc_attributes_and_sequence_fields():
    sealed, by_part = _round_trip([b"a", b"b", b"c"], [b"1", b"2", b"3"], partitions=1)
    wire = by_part[0][0]
    (base, length, epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, seq,
     count) = BATCH_HEADER.unpack_from(wire, 0)
    assert (magic, epoch, length) == (2, -1, len(wire) - 12)
    assert crc == crc32c(wire[21:])
    assert attrs == 0x10 and last_delta == 2 and count == 3
    assert (pid, pepoch, seq) == (77, 3, 0) and base_ts == max_ts == TS


def test_headers_round_trip_with_null_values_and_rows_without():
    n = 200
    headers = pa.array([[{"key": "trace", "value": b"t%d" % i}, {"key": "é", "value": None}]
                        if i % 3 else None for i in range(n)], HEADERS_TYPE)
    acc = BatchAccumulator("t", 1)
    acc.append(None, pa.array([b"v%d" % i for i in range(n)]), headers=headers, timestamp_ms=TS)
    (sb,) = _sealed_all(acc)
    dec, _ = _decode_partition([encode_batch(sb, codec=0, producer_id=1, producer_epoch=0,
                                             base_sequence=0, transactional=False)],
                               include_headers=True)
    assert dec.headers.to_pylist() == [
        [{"key": "trace", "value": b"t%d" % i}, {"key": "é", "value": None}] if i % 3 else None
        for i in range(n)]


def test_batches_respect_batch_size_and_the_request_limit():
    acc = BatchAccumulator("t", 2, batch_bytes=5_000, max_batch_bytes=1_000_000)
    for call in range(5):
        acc.append(pa.array([b"k%d" % i for i in range(700)]),
                   pa.array([b"x" * (i % 90) for i in range(700)]), timestamp_ms=TS + call)
    sealed = _sealed_all(acc)
    for sb in sealed:
        wire = encode_batch(sb, codec=0, producer_id=1, producer_epoch=0, base_sequence=0,
                            transactional=False)
        assert len(wire) <= 5_000
    assert sum(sb.count for sb in sealed) == 3500
    with pytest.raises(RecordTooLargeError, match="kafka.message.max.bytes"):
        BatchAccumulator("t", 1, max_batch_bytes=10_000).append(
            None, pa.array([b"x" * 20_000]), timestamp_ms=TS)


def test_null_keys_go_to_sticky_runs_and_explicit_partitions_win():
    acc = BatchAccumulator("t", 4, batch_bytes=2_000, rng=random.Random(1))
    n = 400
    values = pa.array([b"x" * 50] * n)
    parts = acc.place(None, None, np.full(n, 60))
    runs = np.flatnonzero(np.diff(parts)) + 1
    assert len(runs) >= 5 and set(parts.tolist()) == {0, 1, 2, 3}
    assert min(np.diff(np.concatenate(([0], runs, [n])))) >= 1
    explicit = pa.array([3, None, 0] * 10, pa.int32())
    keys = pa.array([b"a", b"b", None] * 10)
    placed = acc.place(keys, explicit, np.full(30, 10))
    assert list(placed[0::3]) == [3] * 10 and list(placed[2::3]) == [0] * 10
    assert list(placed[1::3]) == [int(murmur2_partitions(pa.array([b"b"]), 4)[0])] * 10
    with pytest.raises(KafkaConfigError, match="has 4 partitions"):
        acc.place(None, pa.array([4]), np.full(1, 10))
    assert len(values) == n


def test_a_header_without_a_key_is_refused():
    headers = pa.array([[{"key": None, "value": b"v"}]], HEADERS_TYPE)
    with pytest.raises(KafkaConfigError, match="null key"):
        BatchAccumulator("t", 1).append(None, pa.array([b"v"]), headers=headers, timestamp_ms=TS)


def test_lz4_frames_have_independent_blocks_and_a_valid_descriptor_checksum():
    from txkafka.connector.client.record_batch_encoder import compress

    data = bytes(range(256)) * 2000 + b"\x00" * 300_000
    frame = compress(3, data)
    assert frame[:4] == bytes.fromhex("04224d18") and frame[4] & 0x20  # independent blocks
    assert bytes(cramjam.lz4.decompress(frame)) == data  # checks the descriptor's checksum


def test_compression_setting():
    assert codec_from_config({}) == 0
    assert codec_from_config({"compression.type": "zstd"}) == 4
    assert codec_from_config({"compression.codec": "LZ4"}) == 3
    with pytest.raises(KafkaConfigError, match="compression.type"):
        codec_from_config({"compression.type": "brotli"})


@pytest.mark.parametrize("level", [-1, 0, 9, 10, 12])
def test_gzip_levels_above_9_mean_9_as_in_librdkafka(level):
    # zlib refuses them; librdkafka caps compression.level at 9 for gzip.
    import gzip

    data = b"kafka " * 1000
    assert gzip.decompress(compress(1, data, level)) == data
    if level > 9:
        assert compress(1, data, level) == compress(1, data, 9)


@pytest.mark.parametrize("codec", [0, 3], ids=["none", "lz4"])
def test_large_records_sent_as_views_give_the_same_batches_as_copied_ones(monkeypatch, codec):
    """Big records are not copied into partition order: a batch holds views of each record's
    fields, value and headers where the input columns hold them. The batches must be byte for
    byte the copying path's."""
    import txkafka.connector.client.record_batch_encoder as enc

    rnd = random.Random(5)
    n = 60
    keys = [b"k%d" % i for i in range(n)]  # (null keys: a random sticky start)
    values = [bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 30_000)))
              if i % 9 else None for i in range(n)]
    headers = pa.array([[{"key": "h", "value": b"x%d" % i}] if i % 4 else None
                        for i in range(n)], HEADERS_TYPE)

    def batches(big_record_bytes, with_headers):
        monkeypatch.setattr(enc, "_BIG_RECORD_BYTES", big_record_bytes)
        return _round_trip(keys, values, partitions=4, codec=codec, batch_bytes=100_000,
                           calls=3, headers=headers if with_headers else None)

    for with_headers in (False, True):
        copied_sealed, copied = batches(10**12, with_headers)
        viewed_sealed, viewed = batches(0, with_headers)
        pieces = [sum(len(sb.parts) for sb in x) for x in (copied_sealed, viewed_sealed)]
        assert pieces[0] < pieces[1], pieces  # each path ran
        assert viewed == copied
        for p, wire in viewed.items():
            for b in wire:
                assert len(b) <= 100_000
            dec, count = _decode_partition(wire, include_headers=True)
            got = list(zip(dec.keys.to_pylist(), dec.values.to_pylist()))
            want = [(k, v) for k, v in zip(keys, values)
                    if int(murmur2_partitions(pa.array([k]), 4)[0]) == p]
            assert got == want
