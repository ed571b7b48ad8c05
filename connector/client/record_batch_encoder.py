"""Arrow columns into Kafka record batches (message format v2), vectorised: the write direction of
:mod:`record_batch_decoder`.

Why: through confluent-kafka every record is a Python call (``produce``) plus a copy into
librdkafka's queue. Here every field of every record is computed for all rows at once with numpy
(varint sizes and bytes, offset deltas, lengths), and the records are assembled by one Arrow
``take`` over their pieces (fields, key, value, headers) whose output buffer *is* the records
section of the batches, in partition order. Python runs once per call and once per sealed batch,
never per record.

Placement is Java's: a keyed record goes to ``toPositive(murmur2(key)) % partitions`` (librdkafka's
``murmur2_random``); a record without a key goes to a sticky partition that moves on after each
``batch.size`` bytes (Java's uniform sticky partitioner, librdkafka's sticky null-key placement);
an explicit ``partition`` wins. The layout (61-byte batch header, record fields) is the decoder's.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import KafkaConfigError
from .record_batch_decoder import BATCH_HEADER_SIZE, HEADERS_TYPE

# Attributes: bits 0-2 the codec, bit 4 transactional (the decoder's layout).
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TRANSACTIONAL = 0x10
NO_SEQUENCE = -1
# librdkafka's defaults for batch.size and message.max.bytes (its largest request).
DEFAULT_BATCH_BYTES = 1_000_000
DEFAULT_MAX_MESSAGE_BYTES = 1_000_000

_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count: what the CRC covers first
_BEFORE_CRC = struct.Struct(">qiib")     # base offset, batch length, leader epoch, magic
_CRC = struct.Struct(">I")
_LOG_OVERHEAD = 12                        # base offset + batch length: not in the batch length

# Every record of a batch has offset delta < 2**20 (3 bytes as a zigzag varint) unless a batch
# holds a million records, which no byte limit here allows for real records (each is >= 7 bytes).
_DELTA_BOUND = 3
_SMALLEST_RECORD = 8  # length, attributes, two deltas, null key, empty value, no headers: 7 B
# A call whose records average at least this many bytes is sent from where its values are (views
# per record: see append), never copied.
_BIG_RECORD_BYTES = 16 * 1024
_NO_HEADERS = b"\x00"  # a record's header count, zero


# --------------------------------------------------------------------------- varints

_THRESHOLDS = np.array([1 << (7 * i) for i in range(1, 10)], dtype=np.uint64)


def uvarint_sizes(v: np.ndarray) -> np.ndarray:
    """Bytes of each non-negative value as an unsigned varint (LEB128)."""
    v = v.astype(np.uint64, copy=False)
    sizes = np.ones(len(v), dtype=np.int64)
    if not len(v):
        return sizes
    top = v.max()
    for t in _THRESHOLDS:  # one comparison per byte the largest value needs
        if top < t:
            break
        sizes += v >= t
    return sizes


def zigzag(v: np.ndarray) -> np.ndarray:
    """Kafka's zigzag mapping of signed values (int64) to unsigned (uint64)."""
    v = v.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def put_uvarints(buf: np.ndarray, pos: np.ndarray, values: np.ndarray) -> None:
    """Write each ``values[i]`` as an unsigned varint at ``buf[pos[i]]``: one pass per byte of the
    longest, each over only the varints still going."""
    v = values.astype(np.uint64, copy=False)
    pos = pos.astype(np.int64, copy=False)
    while True:
        more = v > np.uint64(0x7F)
        if not more.any():  # the last byte of every varint still going (often the only one)
            buf[pos] = v
            return
        buf[pos] = (v & np.uint64(0x7F)) | (more.view(np.uint8).astype(np.uint64) << np.uint64(7))
        keep = np.flatnonzero(more)
        v, pos = v[keep] >> np.uint64(7), pos[keep] + 1


def _binary_from_fields(sizes: np.ndarray,
                        fields: list[tuple[np.ndarray | int, np.ndarray | None]]) -> pa.Array:
    """A binary array whose element i is the concatenation of varints ``fields[j][1][i]``.

    ``fields`` is [(field sizes, field values)], laid out one after the other in each element;
    values None is a field of zero bytes (sizes then may be one int). ``sizes`` is their sum.
    """
    n = len(sizes)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    buf = np.zeros(int(offsets[-1]) + 16, dtype=np.uint8)
    at = offsets[:-1].astype(np.int64)
    for fsizes, fvalues in fields:
        if fvalues is not None:
            put_uvarints(buf, at, fvalues)
        at = at + fsizes
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])


# --------------------------------------------------------------------------- placement

_M = np.uint32(0x5BD1E995)
_SEED = np.uint32(0x9747B28C)


def _offsets_and_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets from 0, uint8 data) of the elements of a binary/string array (a slice's)."""
    offsets_buf, data_buf = arr.buffers()[1], arr.buffers()[2]
    odt = np.int64 if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) \
        else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=odt)[arr.offset:arr.offset + len(arr) + 1]
    if data_buf is None or not len(offsets):
        return np.zeros(len(offsets), dtype=np.int64), np.zeros(0, dtype=np.uint8)
    lo = int(offsets[0])
    # Only the slice's bytes (a slice of a big column must not drag the whole buffer along).
    data = np.frombuffer(data_buf, dtype=np.uint8)[lo:int(offsets[-1])]
    return offsets.astype(np.int64) - lo, data


def murmur2(keys: pa.Array) -> np.ndarray:
    """Java's ``Utils.murmur2`` of each (non-null) key, as uint32 bits (Java's int, unsigned)."""
    keys = as_binary(keys)
    offsets, data = _offsets_and_data(keys)
    n = len(keys)
    start = offsets[:-1]
    length = offsets[1:] - start
    if n and int(length.min()) == int(length.max()):
        return _murmur2_same_length(data, n, int(length[0]))
    # Little-endian words starting at any byte: pad so the last word of a key may run past the end.
    padded = np.zeros(len(data) + 8, dtype=np.uint8)
    padded[:len(data)] = data
    words = np.ndarray(shape=(len(padded) - 3,), dtype="<u4", buffer=padded, strides=(1,))
    h = _SEED ^ length.astype(np.uint32)
    nwords = length // 4
    top = int(nwords.max()) if n else 0
    with np.errstate(over="ignore"):
        rows = None  # all rows, while most keys still have words; then only those that do
        for j in range(top):
            if rows is None:
                going = nwords > j
                k = words[np.minimum(start + 4 * j, len(words) - 1)] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                mixed = (h * _M) ^ k
                h = mixed if going.all() else np.where(going, mixed, h)
                if going.mean() < 0.5:
                    rows = np.flatnonzero(nwords > j + 1)
            else:
                rows = rows[nwords[rows] > j]
                k = words[start[rows] + 4 * j] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                h[rows] = (h[rows] * _M) ^ k
        rem = length & 3
        tail = start + (length & ~3)
        for r, shift in ((3, 16), (2, 8), (1, 0)):
            byte = padded[tail + (r - 1)].astype(np.uint32) << np.uint32(shift)
            h ^= np.where(rem >= r, byte, np.uint32(0))
        h = np.where(rem > 0, h * _M, h)
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def _murmur2_same_length(data: np.ndarray, n: int, size: int) -> np.ndarray:
    """murmur2 of ``n`` keys of ``size`` bytes each, back to back in ``data``: the keys as rows
    of a 2-D view, so each 4-byte word is one column (no gathers, no per-row masks)."""
    rows = data[:n * size].reshape(n, size)
    nwords = size // 4
    h = np.full(n, _SEED ^ np.uint32(size), dtype=np.uint32)
    with np.errstate(over="ignore"):
        if nwords:
            words = np.ascontiguousarray(rows[:, :4 * nwords]).view("<u4")
            for j in range(nwords):
                k = words[:, j] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                h *= _M
                h ^= k
        tail = rows[:, 4 * nwords:]
        rem = size & 3
        if rem >= 3:
            h ^= tail[:, 2].astype(np.uint32) << np.uint32(16)
        if rem >= 2:
            h ^= tail[:, 1].astype(np.uint32) << np.uint32(8)
        if rem:
            h ^= tail[:, 0].astype(np.uint32)
            h *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def murmur2_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition Java's default partitioner (and librdkafka's murmur2_random) gives each
    non-null key: ``toPositive(murmur2(key)) % partitions``."""
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).astype(np.int32)


def as_binary(arr: pa.Array) -> pa.Array:
    """A string or binary column as binary (zero-copy for string/large_string)."""
    if pa.types.is_string(arr.type):
        return arr.view(pa.binary())
    if pa.types.is_large_string(arr.type):
        return arr.view(pa.large_binary())
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return arr
    raise KafkaConfigError(f"a key or value column must be string or binary, got {arr.type}")


# --------------------------------------------------------------------------- compression

def codec_from_config(conf: Mapping[str, object]) -> int:
    """The codec of ``compression.type`` (librdkafka's alias ``compression.codec``)."""
    raw = conf.get("compression.type", conf.get("compression.codec", "none"))
    name = str(raw).strip().lower()
    if name in ("", "inherit"):
        name = "none"
    if name not in CODEC_IDS:
        raise KafkaConfigError(f"option 'kafka.compression.type' must be one of "
                               f"{', '.join(CODEC_IDS)}, got {raw!r}")
    return CODEC_IDS[name]


# LZ4 frame (the format Kafka reads since message format v1): magic, FLG 0x60 (version 01,
# independent blocks, no checksums or content size), BD 0x40 (64 KB blocks, Java's default), then
# the descriptor's checksum byte (xxh32 of FLG and BD, >> 8 & 0xFF: 0x82 for these two bytes).
_LZ4_HEADER = bytes.fromhex("04224d18") + bytes([0x60, 0x40, 0x82])
_LZ4_BLOCK = 64 * 1024
_LZ4_END = bytes(4)


def _lz4_frame(data: bytes | memoryview) -> bytes:
    """Independent blocks, as librdkafka and Java's KafkaLZ4BlockOutputStream write them (Java's
    reader refuses linked blocks, which cramjam's frame writer produces)."""
    import cramjam

    parts = [_LZ4_HEADER]
    mv = memoryview(data)
    for at in range(0, len(mv), _LZ4_BLOCK):
        chunk = mv[at:at + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: stored, high bit set
            parts += [struct.pack("<I", len(chunk) | 0x80000000), bytes(chunk)]
        else:
            parts += [struct.pack("<I", len(block)), block]
    parts.append(_LZ4_END)
    return b"".join(parts)


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """A records section compressed as Kafka's clients do (gzip container, raw snappy as
    librdkafka, LZ4 frame with independent blocks, zstd frame)."""
    if codec == 1:
        # (librdkafka's rule for compression.level: gzip's levels above 9 mean 9)
        c = zlib.compressobj(6 if level is None or level < 0 else min(level, 9), zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    import cramjam

    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return _lz4_frame(data)
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None or level < 0
                                           else level))
    raise ValueError(f"codec {codec}")


# --------------------------------------------------------------------------- batches

@dataclass
class OpenBatch:
    """A partition's batch being filled: record sections appended in order."""

    base_ts: int
    max_ts: int = -1
    count: int = 0
    size: int = 0  # bytes of the records section
    parts: list = field(default_factory=list)
    created: float = 0.0  # the ``now`` of the append that opened it (delivery time limits)


@dataclass
class SealedBatch:
    """A full (or flushed) batch's records, ready for a producer id and sequence."""

    topic: str
    partition: int
    count: int
    base_ts: int
    max_ts: int
    # The uncompressed records section in pieces: views into the encoding calls' Arrow buffers
    # (zero-copy; the buffers live as long as the batch).
    parts: list
    size: int
    created: float = 0.0  # when its first record was appended (the caller's clock)

    @property
    def records(self) -> bytes:
        return b"".join(self.parts)


def batch_pieces(sealed: SealedBatch, *, codec: int, producer_id: int, producer_epoch: int,
                 base_sequence: int, transactional: bool, level: int | None = None) -> list:
    """One record batch as buffers to write in order (base offset 0: the broker assigns
    offsets): its header, then the records section's pieces uncopied. The CRC runs over the
    pieces one after the other."""
    import google_crc32c

    section: list = sealed.parts
    size = sealed.size
    if codec:
        packed = compress(codec, b"".join(section) if len(section) != 1 else section[0], level)
        # Incompressible data goes as it is: a batch says its own codec, and readers take both.
        if len(packed) < size:
            section, size = [packed], len(packed)
        else:
            codec = 0
    attrs = codec | (TRANSACTIONAL if transactional else 0)
    after = _AFTER_CRC.pack(attrs, sealed.count - 1, sealed.base_ts, sealed.max_ts, producer_id,
                            producer_epoch, base_sequence, sealed.count)
    crc = google_crc32c.value(after)
    for piece in section:
        crc = google_crc32c.extend(crc, piece)
    length = BATCH_HEADER_SIZE - _LOG_OVERHEAD + size
    return [_BEFORE_CRC.pack(0, length, -1, 2) + _CRC.pack(crc) + after, *section]


def encode_batch(sealed: SealedBatch, *, codec: int, producer_id: int, producer_epoch: int,
                 base_sequence: int, transactional: bool, level: int | None = None) -> bytes:
    """The wire bytes of one record batch, joined (see :func:`batch_pieces`)."""
    return b"".join(batch_pieces(sealed, codec=codec, producer_id=producer_id,
                                 producer_epoch=producer_epoch, base_sequence=base_sequence,
                                 transactional=transactional, level=level))


class RecordTooLargeError(KafkaConfigError):
    """One record does not fit in a batch of the size limit."""


def partition_out_of_range(value: int, topic: str, partitions: int | None) -> KafkaConfigError:
    """The refusal of a row's ``partition`` that its topic does not have, whichever producer
    writes the row (``partitions``: the topic's partition count, None when it could not be
    read)."""
    has = (f"has {partitions} partitions (0-{partitions - 1})" if partitions is not None
           else "has no such partition")
    return KafkaConfigError(f"a row's 'partition' column is {value}, but topic {topic!r} {has}; "
                            "null lets the partitioner choose")


class BatchAccumulator:
    """Records of one topic, encoded into per-partition batches of at most ``batch_bytes``.

    ``append`` encodes a call's rows (all at once), continues each partition's open batch and
    returns the batches that filled up; ``drain`` seals the rest. A record larger than
    ``max_batch_bytes`` (with its batch header) raises RecordTooLargeError naming the limit.
    """

    def __init__(self, topic: str, partitions: int, *, batch_bytes: int = DEFAULT_BATCH_BYTES,
                 max_batch_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 rng: random.Random | None = None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.max_batch_bytes = max_batch_bytes
        # The records section's budget: the batch header counts towards both limits.
        self.cap = max(1, min(batch_bytes, max_batch_bytes) - BATCH_HEADER_SIZE)
        self.open: dict[int, OpenBatch] = {}
        self._rng = rng or random.Random()
        self._sticky = self._rng.randrange(partitions)
        self._sticky_bytes = 0
        self.sealed: deque[SealedBatch] = deque()

    # ---------------------------------------------------------------- placement

    def place(self, keys: pa.Array | None, partitions: pa.Array | None, sizes: np.ndarray
              ) -> np.ndarray:
        """The partition of each row: the explicit one, else murmur2 of the key, else sticky."""
        n = len(sizes)
        out = np.full(n, -1, dtype=np.int32)
        if partitions is not None:
            explicit = partitions.to_numpy(zero_copy_only=False) if partitions.null_count == 0 \
                else pc.fill_null(partitions, -1).to_numpy(zero_copy_only=False)
            explicit = explicit.astype(np.int64)
            bad = (explicit >= self.partitions) | (explicit < -1)
            if bad.any():
                value = int(explicit[np.flatnonzero(bad)[0]])
                raise partition_out_of_range(value, self.topic, self.partitions)
            out[:] = explicit
        todo = out < 0
        if keys is not None and todo.any():
            keyed = todo & ~_nulls(keys)
            if keyed.all():
                out = murmur2_partitions(keys, self.partitions)
            elif keyed.any():
                rows = np.flatnonzero(keyed)
                out[rows] = murmur2_partitions(keys.take(pa.array(rows)), self.partitions)
            todo = out < 0
        if todo.any():
            out[todo] = self._sticky_partitions(sizes[todo])
        return out

    def _sticky_partitions(self, sizes: np.ndarray) -> np.ndarray:
        """Null-key rows: runs of about one batch each on one partition, then the next."""
        ends = self._sticky_bytes + np.cumsum(sizes)
        run = (ends - 1) // self.cap  # run 0 continues the current sticky partition
        out = ((self._sticky + run) % self.partitions).astype(np.int32)
        last_run = int(run[-1])
        self._sticky = (self._sticky + last_run) % self.partitions
        self._sticky_bytes = int(ends[-1] - last_run * self.cap)
        return out

    # ------------------------------------------------------------------ encode

    def append(self, keys: pa.Array | None, values: pa.Array, *, headers: pa.Array | None = None,
               partitions: pa.Array | None = None, timestamp_ms: int | np.ndarray,
               now: float = 0.0) -> int:
        """Encode the rows; full batches go to ``self.sealed``. Returns the rows appended.
        ``now``: the caller's clock, kept as the creation time of each batch opened here."""
        n = len(values)
        if n == 0:
            return 0
        values = as_binary(values)
        if keys is not None:
            keys = as_binary(keys)
        ts = np.broadcast_to(np.asarray(timestamp_ms, dtype=np.int64), (n,))
        hbytes = _header_bytes(headers) if headers is not None else None

        klen = _lengths(keys, n)
        vlen = _lengths(values, n)
        hsize = (np.diff(_offsets_and_data(hbytes)[0]) if hbytes is not None
                 else np.ones(n, dtype=np.int64))
        zk, zv = zigzag(klen), zigzag(vlen)
        sk, sv = uvarint_sizes(zk), uvarint_sizes(zv)
        # Everything but the timestamp and offset deltas and the length prefix.
        fixed = 1 + sk + np.maximum(klen, 0) + sv + np.maximum(vlen, 0) + hsize
        part = self.place(keys, partitions, fixed + 4)
        order = None
        # Large records are never copied: a batch points at each value where Spark's Arrow
        # buffer holds it, between its few bytes of record fields and its headers. Smaller ones
        # are copied once, into partition order (see _records).
        big = int(fixed.sum()) >= n * _BIG_RECORD_BYTES
        if len(part) > 1 and (np.diff(part) < 0).any():
            # Stable: a partition's records keep their order. int16 keys sort by radix.
            order = np.argsort(part.astype(np.int16) if self.partitions <= 32767 else part,
                               kind="stable")
            part, ts, fixed, klen, vlen, zk, zv, sk, sv = (
                x[order] for x in (part, ts, fixed, klen, vlen, zk, zv, sk, sv))
        gather = big and order is not None  # record fields computed in partition order

        # Plan, per partition: which rows continue the open batch, where new batches start.
        bounds = np.flatnonzero(np.diff(part)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [n]))
        delta = np.empty(n, dtype=np.int64)
        base_ts = np.empty(n, dtype=np.int64)
        runs: list[tuple[int, int, int, bool]] = []  # (partition, first row, end row, seal after)
        group_parts = part[starts].tolist()
        opened = [self.open.get(p) for p in group_parts]
        bound = fixed + (_DELTA_BOUND + 10 + 5)
        cum = np.cumsum(bound)
        totals = cum[ends - 1] - np.concatenate(([0], cum[starts[1:] - 1]))
        room = np.array([self.cap - (ob.size if ob else 0) for ob in opened], dtype=np.int64)
        fits = totals <= room
        # Most calls: every partition's rows fit in its open (or a new) batch: one vector step.
        lengths = ends - starts
        first = np.repeat(starts, lengths)
        delta[:] = np.arange(n) - first + np.repeat(
            np.array([ob.count if ob else 0 for ob in opened], dtype=np.int64), lengths)
        base_ts[:] = np.repeat(np.array([ob.base_ts if ob else 0 for ob in opened],
                                        dtype=np.int64), lengths)
        fresh = np.array([ob is None for ob in opened], dtype=bool)
        if fresh.any():
            rows = np.flatnonzero(np.repeat(fresh, lengths))
            base_ts[rows] = ts[first[rows]]
        for g, (p, s, e) in enumerate(zip(group_parts, starts.tolist(), ends.tolist())):
            if fits[g]:
                runs.append((p, s, e, False))
            else:
                self._plan(p, s, e, fixed, ts, delta, base_ts, runs)
        ts_delta = ts - base_ts
        zt, zd = zigzag(ts_delta), zigzag(delta)
        st, sd = uvarint_sizes(zt), uvarint_sizes(zd)
        body = fixed + st + sd
        zb = zigzag(body)
        sb = uvarint_sizes(zb)
        too_big = body + sb + BATCH_HEADER_SIZE > self.max_batch_bytes
        if too_big.any():
            i = int(np.flatnonzero(too_big)[0])
            size = int(body[i] + uvarint_sizes(zigzag(body[i:i + 1]))[0] + BATCH_HEADER_SIZE)
            raise RecordTooLargeError(
                f"a record for topic {self.topic!r} is {size:,} bytes with its batch header "
                f"(key {max(int(klen[i]), 0):,} B, value {max(int(vlen[i]), 0):,} B), more than "
                f"the largest batch the producer may send ({self.max_batch_bytes:,} B, "
                "kafka.message.max.bytes); raise kafka.message.max.bytes and the topic's "
                "max.message.bytes, or write smaller records")
        if gather:  # the record fields back in the call's order, where the columns still are
            zb, zt, zd, zk, zv, sb, st, sd, sk, sv = (_unsort(x, order) for x in (
                zb, zt, zd, zk, zv, sb, st, sd, sk, sv))
        prefix = _binary_from_fields(
            sb + 1 + st + sd + sk,
            [(sb, zb), (1, None), (st, zt), (sd, zd), (sk, zk)])  # (1, None): attributes 0
        mid = _binary_from_fields(sv, [(sv, zv)])
        no_key = pa.scalar(b"", pa.binary())
        run_start = np.array([r[1] for r in runs], dtype=np.int64)
        run_end = np.array([r[2] for r in runs], dtype=np.int64)
        if big:
            heads = pc.binary_join_element_wise(
                *[_narrow(x) for x in (prefix, keys if keys is not None else no_key, mid)],
                no_key, null_handling="replace", null_replacement="")
            pieces_of, row_bytes = _record_pieces(heads, values, hbytes, order, run_start,
                                                  run_end)
        else:
            rec_offsets, data = _records(prefix, keys, mid, values, hbytes, order)
            lo_all, hi_all = rec_offsets[run_start].tolist(), rec_offsets[run_end].tolist()
            pieces_of = [[data[lo:hi]] for lo, hi in zip(lo_all, hi_all)]
            row_bytes = np.diff(rec_offsets)
        cum_bytes = np.concatenate(([0], np.cumsum(row_bytes[order] if gather else row_bytes)))
        run_bytes = (cum_bytes[run_end] - cum_bytes[run_start]).tolist()
        nonempty = run_end > run_start
        ts_max = np.full(len(runs), -1, dtype=np.int64)
        if nonempty.any():
            ts_max[nonempty] = np.maximum.reduceat(ts, run_start[nonempty])
        for (p, s, e, seal_after), pieces, nbytes, tmax in zip(runs, pieces_of, run_bytes,
                                                               ts_max.tolist()):
            ob = self.open.get(p)
            if ob is None:
                if s == e:
                    continue
                ob = self.open[p] = OpenBatch(base_ts=int(base_ts[s]), created=now)
            if e > s:
                ob.parts.extend(pieces)
                ob.count += e - s
                ob.size += nbytes
                if tmax > ob.max_ts:
                    ob.max_ts = tmax
            if seal_after or ob.size + _SMALLEST_RECORD > self.cap:
                self._seal(p)
        return n

    def _plan(self, p: int, s: int, e: int, fixed: np.ndarray, ts: np.ndarray,
              delta: np.ndarray, base_ts: np.ndarray,
              runs: list[tuple[int, int, int, bool]]) -> None:
        """Cut rows [s, e) of partition ``p`` into batches: the open batch's room first, then new
        ones of ``cap`` bytes. Sizes are bounded (3-byte offset deltas, 10-byte timestamp deltas,
        5-byte length prefixes), so a batch never exceeds its limit; one loop step per batch."""
        cum = np.cumsum(fixed[s:e] + (_DELTA_BOUND + 10 + 5))
        ob = self.open.get(p)
        count, size = (ob.count, ob.size) if ob is not None else (0, 0)
        base = ob.base_ts if ob is not None else None
        i, m = 0, e - s
        while i < m:
            if base is None:
                count, size, base = 0, 0, int(ts[s + i])
            used = int(cum[i - 1]) if i else 0
            j = int(np.searchsorted(cum, used + self.cap - size, side="right"))
            if j <= i:
                if count:  # the open batch has no room left: seal it first
                    runs.append((p, s + i, s + i, True))
                    base = None
                    continue
                j = i + 1  # one record over the budget: alone (append checks the hard limit)
            delta[s + i:s + j] = count + np.arange(j - i)
            base_ts[s + i:s + j] = base
            runs.append((p, s + i, s + j, j < m))
            count += j - i
            size += int(cum[j - 1]) - used
            if j < m:
                base = None
            i = j

    def _seal(self, p: int) -> None:
        ob = self.open.pop(p)
        self.sealed.append(SealedBatch(self.topic, p, ob.count, ob.base_ts, ob.max_ts,
                                       ob.parts, ob.size, ob.created))

    def drain(self) -> None:
        """Seal every open batch."""
        for p in list(self.open):
            self._seal(p)


def _unsort(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Values computed in partition order, put back in the call's row order."""
    out = np.empty_like(x)
    out[order] = x
    return out


def _record_pieces(heads: pa.Array, values: pa.Array, hbytes: pa.Array | None,
                   order: np.ndarray | None, run_start: np.ndarray, run_end: np.ndarray
                   ) -> tuple[list[list], np.ndarray]:
    """Per run (rows [s, e) in partition order): each record as views, in the call's buffers:
    its fields up to the value (``heads``), the value, its headers. And each row's record bytes
    (in the call's order)."""
    ho, hd = _offsets_and_data(heads)
    vo, vd = _offsets_and_data(values)
    row_bytes = np.diff(ho) + np.diff(vo)
    if hbytes is not None:
        to, td = _offsets_and_data(hbytes)
        row_bytes += np.diff(to)
        tail_lo, tail_hi = to.tolist(), to[1:].tolist()
    else:
        row_bytes += len(_NO_HEADERS)
    h_lo, h_hi, v_lo, v_hi = ho.tolist(), ho[1:].tolist(), vo.tolist(), vo[1:].tolist()
    rows = (order if order is not None else np.arange(len(row_bytes))).tolist()
    out = []
    for s, e in zip(run_start.tolist(), run_end.tolist()):
        pieces: list = []
        for i in rows[s:e]:
            pieces.append(hd[h_lo[i]:h_hi[i]])
            if v_hi[i] > v_lo[i]:
                pieces.append(vd[v_lo[i]:v_hi[i]])
            pieces.append(td[tail_lo[i]:tail_hi[i]] if hbytes is not None else _NO_HEADERS)
        out.append(pieces)
    return out, row_bytes


# Built from its buffers: pa.array() would import pandas (pyarrow's pandas check) in every process
# that imports this module, the driver's commit processes included, which never encode a record.
_NO_HEADERS_ARRAY = pa.Array.from_buffers(
    pa.binary(), 1, [None, pa.py_buffer(np.array([0, len(_NO_HEADERS)], np.int32)),
                     pa.py_buffer(_NO_HEADERS)])


def _records(prefix: pa.Array, keys: pa.Array | None, mid: pa.Array, values: pa.Array,
             hbytes: pa.Array | None, order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(record offsets from 0, bytes) of every row's record, rows in ``order`` (the call's rows
    in partition order; None: as they are). ``prefix`` (the fields before the key) and ``mid``
    (the value's length) are already in that order; the columns are in the call's.

    One Arrow ``take`` over the pieces side by side (prefix, key, mid, value, headers: row j's
    are elements j*k .. j*k+k-1 of its indices) writes the records, partition order included,
    in one copy: element-wise joining after taking each column into order copies twice, and
    the join costs more per piece than take (measured at 10,000-row calls: 0.49 ms vs 0.82 ms).
    """
    n = len(prefix)
    rows = np.arange(n, dtype=np.int32)
    src = order.astype(np.int32) if order is not None else rows
    pieces = [(prefix, rows), (keys, src), (mid, rows), (values, src),
              (hbytes, src) if hbytes is not None else (_NO_HEADERS_ARRAY, None)]
    pieces = [(_narrow(arr), at) for arr, at in pieces if arr is not None]
    arrays = [arr for arr, _ in pieces]
    idx = np.empty((n, len(pieces)), dtype=np.int32)  # row j's pieces side by side
    base = 0
    for col, (arr, at) in enumerate(pieces):
        if at is None:
            idx[:, col] = base
        else:
            np.add(at, base, out=idx[:, col])
        base += len(arr)
    taken = pa.concat_arrays(arrays).take(pa.array(idx.reshape(-1)))
    offsets, data = _offsets_and_data(taken)
    return offsets[::len(arrays)], data


def _nulls(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), dtype=bool)
    return arr.is_null().to_numpy(zero_copy_only=False)


def _lengths(arr: pa.Array | None, n: int) -> np.ndarray:
    """Each element's byte length, -1 for null (and every row without the column)."""
    if arr is None:
        return np.full(n, -1, dtype=np.int64)
    offsets, _ = _offsets_and_data(arr)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths[_nulls(arr)] = -1
    return lengths


def _narrow(arr: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """Arrow's concat and binary_join_element_wise want one type: large_binary inputs become
    binary (a call's records stay far below 2 GB: Spark hands a task 10,000-row Arrow batches)."""
    if isinstance(arr, pa.Array) and pa.types.is_large_binary(arr.type):
        return arr.cast(pa.binary())
    return arr


def _header_bytes(headers: pa.Array) -> pa.Array:
    """Per row: the header count and every header (key length, key, value length, value), as
    one binary element; headers encoded all at once, joined per row by ``binary_join``."""
    if not isinstance(headers.type, pa.ListType) and not isinstance(headers.type,
                                                                     pa.LargeListType):
        raise KafkaConfigError(f"column 'headers' must be {HEADERS_TYPE}, got {headers.type}")
    names = {f.name.lower(): f.name for f in headers.type.value_type}
    n = len(headers)
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(
        zero_copy_only=False).astype(np.int64)
    every = headers.flatten()
    hkeys = every.field(names["key"])
    hvalues = as_binary(every.field(names["value"]))
    if every.null_count or hkeys.null_count:
        raise KafkaConfigError(
            "a row's 'headers' column holds a header with a null key (or a null header); "
            "every header needs a string key")
    hkeys = as_binary(hkeys)
    m = len(every)
    kl = _lengths(hkeys, m)
    vl = _lengths(hvalues, m)
    kpre = _binary_from_fields(uvarint_sizes(zigzag(kl)), [(uvarint_sizes(zigzag(kl)),
                                                           zigzag(kl))])
    vpre = _binary_from_fields(uvarint_sizes(zigzag(vl)), [(uvarint_sizes(zigzag(vl)),
                                                           zigzag(vl))])
    each = pc.binary_join_element_wise(kpre, _narrow(hkeys), vpre, _narrow(hvalues),
                                       pa.scalar(b"", pa.binary()), null_handling="replace",
                                       null_replacement="")
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    per_row = pc.binary_join(pa.ListArray.from_arrays(pa.array(list_offsets), each),
                             pa.scalar(b"", pa.binary()))
    count_bytes = _binary_from_fields(uvarint_sizes(zigzag(counts)),
                                      [(uvarint_sizes(zigzag(counts)), zigzag(counts))])
    return pc.binary_join_element_wise(count_bytes, per_row, pa.scalar(b"", pa.binary()),
                                       null_handling="replace", null_replacement="")
