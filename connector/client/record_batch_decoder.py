"""Kafka record batches (message format v2) straight into Arrow columns, vectorised.

Why: through confluent-kafka most of a record's Python-process CPU is the ``Message`` object made
for it, then its fetch thread and building Arrow from the messages. Read from a Fetch response,
records are found by their length prefixes, a run of equal-size records at a time (numpy checks
the run; a record is chased in Python only where sizes keep changing); every field is then
decoded for all records at once with numpy. Keys and values of one size are copied as the rows
of a strided view; others become Arrow binary arrays through ``binary_view`` views into the
response buffer, one C++ cast copying the bytes. As Kafka's consumer, a key, value or header
that runs past the end of its record is a corrupt response (else it would hand out the next
record's bytes, or read past the buffer).

Layout facts (Kafka's ``DefaultRecordBatch``/``DefaultRecord``): a batch is a 61-byte header
(base offset, length, leader epoch, magic 2, CRC, attributes, last offset delta, base and max
timestamp, producer id/epoch, base sequence, record count) and records; a record is a zigzag
varint length, then attributes, timestamp delta, offset delta, key length, key, value length,
value, header count, headers (key length, key, value length, value). Attributes: bits 0-2 codec
(gzip, snappy, lz4, zstd), bit 3 LogAppendTime, bit 4 transactional, bit 5 control batch.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from ..errors import KafkaProtocolError

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = 61  # == BATCH_HEADER.size
_LOG_OVERHEAD = 12      # base offset + batch length precede what the length counts
_PAD = bytes(16)        # vectorised reads (a varint, 12 inline bytes) may run past the end

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"

# Spark's ``headers`` column: array<struct<key: string, value: binary>>.
HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
_INLINE = 12            # binary_view: values of at most 12 bytes live in the view itself
# Equal-size values up to this size are copied as rows. Their int32 offsets cannot overflow:
# each value lies inside its own record (checked), so a column is smaller than the response.
_FIXED_MAX = 1 << 20
# A view's offset into the joined buffer is an int32: the response and what it decompresses to
# stop short of this (the rest is left for the next fetch).
_VIEW_LIMIT = 2**31 - 1


@dataclass
class DecodedRecords:
    """The data records of one Fetch response inside the requested window, in offset order."""

    offsets: np.ndarray          # int64
    timestamps_ms: np.ndarray    # int64
    timestamp_types: np.ndarray  # int32: 0 CreateTime, 1 LogAppendTime (Java's ids, as Spark's)
    keys: pa.Array               # binary
    values: pa.Array             # binary
    headers: pa.Array | None     # HEADERS_TYPE, null for a record without headers; if asked
    next_offset: int             # fetch position after this response (markers included)

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass
class _Batch:
    base_offset: int
    last_offset: int
    attributes: int
    base_ts: int
    max_ts: int
    count: int


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records section of a compressed batch (they are compressed together, after the
    header). cramjam does the codecs: pyarrow's need the decompressed size, which Kafka does not
    record."""
    if codec not in _CODECS:
        raise KafkaProtocolError(f"a record batch uses compression codec {codec}, which Kafka does "
                                 "not define (0-4)")
    if codec == 1:
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)  # zlib.error: caught by decode()
    import cramjam  # imported on first use: uncompressed topics never load it

    try:
        if codec == 3:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(bytes(data)))
        raw = bytes(data)
        if not raw.startswith(_XERIAL_MAGIC):
            return bytes(cramjam.snappy.decompress_raw(raw))
        # The Java client's snappy-java stream: 16-byte header, then [int32 length, block]...
        out = []
        pos = 16
        while pos < len(raw):
            (n,) = struct.unpack_from(">i", raw, pos)
            out.append(bytes(cramjam.snappy.decompress_raw(raw[pos + 4:pos + 4 + n])))
            pos += 4 + n
        return b"".join(out)
    except cramjam.DecompressionError as e:
        raise KafkaProtocolError(f"a {_CODECS[codec]} record batch does not decompress ({e}): "
                                 "the fetch response is corrupt") from None


def _uvarints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned varints starting at ``pos`` (``buf`` readable 3 bytes past the last one):
    (values int64, sizes). One-byte varints take one gather; longer ones are read from the
    4-byte word at each position, branch-free; only varints of 5 bytes or more (values from
    2**28 on) go byte by byte."""
    b = buf[pos]
    value = (b & 0x7F).astype(np.int64)
    if not len(pos) or b.max() < 0x80:
        return value, np.ones(len(pos), dtype=np.int64)
    w = _words(buf)[pos]
    stops = ~w & _STOP_BITS            # the high bit of each byte that ends the varint
    mask = stops & (~stops + _U32_ONE)  # ... the first of them, alone
    mask <<= _U32_ONE
    mask -= _U32_ONE                    # the varint's bytes (all four when none ends it)
    x = w & mask
    v = x & _SEVEN_BITS[0]
    for i in (1, 2, 3):
        v |= (x >> np.uint32(i)) & _SEVEN_BITS[i]
    value = v.astype(np.int64)
    size = 1 + (mask > 0xFF).astype(np.int64) + (mask > 0xFFFF) + (mask > 0xFFFFFF)
    longer = np.flatnonzero(stops == 0)
    if len(longer):
        value[longer], size[longer] = _long_uvarints(buf, pos[longer])
    return value, size


_STOP_BITS = np.uint32(0x80808080)
_U32_ONE = np.uint32(1)
_SEVEN_BITS = [np.uint32(0x7F), np.uint32(0x7F << 7), np.uint32(0x7F << 14), np.uint32(0x7F << 21)]


def _long_uvarints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of any length, byte by byte: one pass per byte of the longest, each over only
    the varints still going."""
    b = buf[pos]
    value = (b & 0x7F).astype(np.int64)
    size = np.ones(len(pos), dtype=np.int64)
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise KafkaProtocolError("a record holds a varint longer than 10 bytes: the fetch "
                                     "response is corrupt")
        bb = buf[pos[more] + size[more]]
        value[more] |= (bb & 0x7F).astype(np.int64) << shift
        size[more] += 1
        more = more[(bb & 0x80) != 0]
        shift += 7
    return value, size


def _zigzag(v: np.ndarray) -> np.ndarray:
    return (v >> 1) ^ -(v & 1)


_WORD_MASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)


def _words(buf: np.ndarray) -> np.ndarray:
    """Every 4-byte little-endian word of ``buf``, one starting at each byte (an overlapping,
    unaligned view): a value's prefix or inline bytes are then 1-3 gathers, not 4-12."""
    return np.ndarray(shape=(len(buf) - 3,), dtype="<u4", buffer=buf, strides=(1,))


def _views(words: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``binary_view`` views (16 bytes each) of the slices [start, start + length) of the data
    buffer (buffer 0); length -1 is null (the caller's validity bitmap) and gets length 0."""
    n = len(start)
    views = np.zeros((n, 4), dtype=np.uint32)
    size = np.maximum(length, 0)
    views[:, 0] = size
    if not n:
        return views
    if size.min() > _INLINE:  # all out of line: length, 4-byte prefix, buffer 0, offset
        views[:, 1] = words[start]
        views[:, 3] = start
        return views
    # Inline bytes, zero-padded (the format's rule): 3 words, each masked to the bytes it holds.
    for w in range(3):
        views[:, 1 + w] = words[start + 4 * w] & _WORD_MASK[np.clip(size - 4 * w, 0, 4)]
    long_ = np.flatnonzero(size > _INLINE)
    if len(long_):
        views[long_, 2] = 0
        views[long_, 3] = start[long_]
    return views


def _binary(words: np.ndarray, data: pa.Buffer, start: np.ndarray,
            length: np.ndarray) -> pa.Array:
    n = len(start)
    if n and 0 < length[0] <= _FIXED_MAX and length.min() == length.max() == length[0]:
        return _fixed_binary(np.frombuffer(data, dtype=np.uint8), start, int(length[0]))
    nulls = length < 0
    validity = None
    null_count = int(nulls.sum())
    if null_count:
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    view = pa.Array.from_buffers(pa.binary_view(), n,
                                 [validity, pa.py_buffer(_views(words, start, length)), data],
                                 null_count=null_count)
    return view.cast(pa.binary())


def numbers_array(values: np.ndarray, arrow_type: pa.DataType, dtype: type) -> pa.Array:
    """An Arrow array over a numpy array's buffer (copied only to make it contiguous ``dtype``):
    ``pa.array`` would import pandas in a worker's first task, 0.3 s of CPU per new worker."""
    a = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(arrow_type, len(a), [None, pa.py_buffer(a)])


def _fixed_binary(buf: np.ndarray, start: np.ndarray, size: int) -> pa.Array:
    """Values that all have ``size`` bytes (fixed-size keys, payloads): gathered as rows of an
    (n, size) view in one numpy copy, without views to build and cast."""
    rows = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - size + 1, size), strides=(1, 1),
                                           writeable=False)
    offsets = np.arange(0, (len(start) + 1) * size, size, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), len(start),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(rows[start])])


def _record_starts(buf: bytes | memoryview, pos: int, end: int, count: int,
                   starts: list[int], ends: list[int]) -> int:
    """Append where each of ``count`` records' bodies start (after its length) and end; returns
    the position after them. Lengths under 64 and 8,192 bytes take one and two varint bytes."""
    app, app_end = starts.append, ends.append
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            pos += 1
            app(pos)
            pos += b >> 1
            app_end(pos)
            continue
        b2 = buf[pos + 1]
        if b2 < 0x80:
            pos += 2
            app(pos)
            pos += ((b & 0x7F) | (b2 << 7)) >> 1
            app_end(pos)
            continue
        value, shift, p = 0, 0, pos
        while True:
            c = buf[p]
            value |= (c & 0x7F) << shift
            p += 1
            if c < 0x80:
                break
            shift += 7
            if shift > 28:
                raise KafkaProtocolError("a record length varint runs past 5 bytes: the fetch "
                                         "response is corrupt")
        app(p)
        pos = p + ((value >> 1) ^ -(value & 1))
        app_end(pos)
    if pos > end:
        raise KafkaProtocolError("records run past the end of their batch: the fetch response "
                                 "is corrupt")
    return pos


_RUN_MIN = 16      # a run of equal-size records shorter than this is chased in Python ...
_CHASE_STEP = 64   # ... for this many records, before looking for a run again
_RUN_WINDOW = 256  # the first look at a run checks this many records, doubling while they match


def _batch_starts(data: bytes | memoryview, buf: np.ndarray, pos: int, end: int,
                  count: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each of a batch's ``count`` records' bodies start (after the length varint) and end.

    Records are found by their lengths, one after the other. But consecutive records mostly have
    the same size (sizes change when a varint delta grows a byte, or with the payload), and a run
    of them is found without a per-record step: if record k sits at ``pos + k * stride`` and
    starts with the same length bytes, it has the same size, so record k + 1 sits one stride on.
    numpy checks a window of candidates at once; the first mismatch is where the next run starts.
    Where runs stay short (varying payloads), the records are chased one by one.
    """
    parts: list[np.ndarray] = []
    end_parts: list[np.ndarray] = []
    done = 0
    window = _RUN_WINDOW
    while done < count:
        value, shift, p = 0, 0, pos
        while True:
            c = buf[p]
            value |= (int(c) & 0x7F) << shift
            p += 1
            if c < 0x80 or shift > 28:
                break
            shift += 7
        lead = p - pos
        stride = lead + ((value >> 1) ^ -(value & 1))
        fits = min(count - done, (end - pos) // stride) if stride > lead else 0
        run = 0
        while fits >= _RUN_MIN:
            m = min(fits, window)
            span = m * stride
            # Strided slices, not gathers: byte k of each candidate.
            same = buf[pos:pos + span:stride] == buf[pos]
            for k in range(1, lead):
                same &= buf[pos + k:pos + k + span:stride] == buf[pos + k]
            got = m if same.all() else int(np.argmin(same))
            at = np.arange(pos + lead, pos + lead + got * stride, stride, dtype=np.int64)
            parts.append(at)
            end_parts.append(at + (stride - lead))
            run += got
            done += got
            pos += got * stride
            fits -= got
            if got < m:
                break
            window *= 2
        if run >= _RUN_MIN or done >= count:
            continue
        window = _RUN_WINDOW
        chased: list[int] = []
        chased_ends: list[int] = []
        pos = _record_starts(data, pos, end, min(_CHASE_STEP, count - done), chased, chased_ends)
        done += len(chased)
        parts.append(np.array(chased, dtype=np.int64))
        end_parts.append(np.array(chased_ends, dtype=np.int64))
    if pos != end:
        raise KafkaProtocolError(
            f"the records of a batch {'run past' if pos > end else 'stop short of'} its end: "
            "the fetch response is corrupt")
    if len(parts) == 1:
        return parts[0], end_parts[0]
    return np.concatenate(parts), np.concatenate(end_parts)


def decode(records: bytes | memoryview | None, start: int, end: int, *,
           aborted: Sequence[tuple[int, int]] | None = None, read_committed: bool = True,
           include_headers: bool = False) -> DecodedRecords:
    """The data records with offsets in [start, end) of one partition's Fetch record set;
    a corrupt record set raises KafkaProtocolError (see :func:`_decode`)."""
    try:
        return _decode(records, start, end, aborted, read_committed, include_headers)
    except (IndexError, ValueError, struct.error, zlib.error) as e:
        # A length or count that points outside its batch: read past the buffer.
        raise KafkaProtocolError(f"a record batch does not parse ({type(e).__name__}: {e}): "
                                 "the fetch response is corrupt") from None


def _decode(records: bytes | memoryview | None, start: int, end: int,
            aborted: Sequence[tuple[int, int]] | None, read_committed: bool,
            include_headers: bool) -> DecodedRecords:
    """Under read_committed, ``aborted`` is the response's (producer id, first offset) list: a
    transactional batch of a producer whose aborted transaction began at or before the batch is
    dropped until that producer's abort marker (Kafka's consumer rule). Control batches are never
    data. A truncated batch at the end (the broker cuts at the size limit) is left for the next
    fetch: ``next_offset`` is one past the last whole batch (markers included), at most ``end``.
    """
    mv = memoryview(records) if records is not None else memoryview(b"")
    total = len(mv)
    pending_aborts = sorted(aborted or (), key=lambda a: a[1])
    aborted_pids: set[int] = set()
    ai = 0
    extra: list[bytes] = []   # decompressed record sections, placed after the response
    extra_at = total + len(_PAD)
    starts: list[np.ndarray] = []  # per batch, where its records' bodies start in the joined buffer
    ends: list[np.ndarray] = []    # ... and where they end
    view: np.ndarray | None = None
    batches: list[_Batch] = []
    next_offset = start
    pos = 0
    while pos + BATCH_HEADER_SIZE <= total:
        (base_offset, length, _epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, pid,
         _pepoch, _seq, count) = BATCH_HEADER.unpack_from(mv, pos)
        batch_end = pos + _LOG_OVERHEAD + length
        if length < BATCH_HEADER_SIZE - _LOG_OVERHEAD:
            # Else pos would not move forward (Kafka's consumer: CorruptRecordException).
            raise KafkaProtocolError(
                f"a record batch at offset {base_offset} gives length {length}, less than a "
                f"batch header: the fetch response is corrupt")
        if magic != 2:
            raise KafkaProtocolError(
                f"a record batch at offset {base_offset} has message format v{magic}; txkafka "
                "reads v2 (Kafka 0.11+; brokers 4.0+ write nothing else)")
        if batch_end > total:
            break  # truncated by the response size limit: the next fetch starts with it
        last_offset = base_offset + last_delta
        body_at = pos + BATCH_HEADER_SIZE
        pos = batch_end
        if last_offset < next_offset:
            continue  # wholly before the fetch position (a compacted or older batch)
        if base_offset >= end:
            break
        batch_at = next_offset
        next_offset = last_offset + 1
        if read_committed:
            while ai < len(pending_aborts) and pending_aborts[ai][1] <= last_offset:
                aborted_pids.add(pending_aborts[ai][0])
                ai += 1
        if attrs & _CONTROL:
            # Marker: an ABORT (type 0) of an aborted producer ends its skipping. (Apache Kafka
            # never compresses markers; another broker might, so its body is read decompressed.)
            if read_committed and pid in aborted_pids and count:
                body = mv[body_at:batch_end]
                if attrs & _CODEC_MASK:
                    body = memoryview(_decompress(attrs & _CODEC_MASK, body))
                if _control_type(body) == 0:
                    aborted_pids.discard(pid)
            continue
        if (read_committed and attrs & _TRANSACTIONAL and pid in aborted_pids) or not count:
            continue
        codec = attrs & _CODEC_MASK
        data, at, shift = (mv, body_at, 0) if codec == 0 else (
            _decompress(codec, mv[body_at:batch_end]), 0, extra_at)
        if codec and extra_at + len(data) + len(_PAD) > _VIEW_LIMIT:
            if not batches:
                raise KafkaProtocolError(
                    f"the record batch at offset {base_offset} decompresses to {len(data)} bytes, "
                    f"more than one Arrow buffer addresses")
            next_offset = batch_at  # the next fetch starts with this batch
            break
        stop = at + (batch_end - body_at) if codec == 0 else len(data)
        if codec == 0 and view is None:
            view = np.frombuffer(mv, dtype=np.uint8)
        found, found_ends = _batch_starts(
            data, view if codec == 0 else np.frombuffer(data, dtype=np.uint8), at, stop, count)
        starts.append(found + shift if shift else found)
        ends.append(found_ends + shift if shift else found_ends)
        if codec:
            extra.append(data)
            extra_at += len(data)
        batches.append(_Batch(base_offset, last_offset, attrs, base_ts, max_ts, count))
    joined = b"".join([mv, _PAD, *extra, _PAD]) if starts else b""
    return _columns(joined, starts, ends, batches, start, end,
                    min(next_offset, max(end, start)), include_headers)


def _control_type(body: memoryview) -> int:
    """The type of a control record (0 abort, 1 commit): its key is (version int16, type int16)."""
    starts: list[int] = []
    _record_starts(body, 0, len(body), 1, starts, [])
    buf = np.frombuffer(bytes(body[:starts[0] + 32]) + _PAD, dtype=np.uint8)
    p = np.array([starts[0] + 1], dtype=np.int64)
    for _ in range(2):  # timestamp delta, offset delta
        _, size = _uvarints(buf, p)
        p = p + size
    klen, size = _uvarints(buf, p)
    k = int(p[0] + size[0])
    if _zigzag(klen)[0] < 4:
        return -1
    return struct.unpack_from(">h", buf, k + 2)[0]


def _columns(joined: bytes, starts: list[np.ndarray], ends: list[np.ndarray],
             batches: list[_Batch], start: int, end: int, next_offset: int,
             include_headers: bool) -> DecodedRecords:
    if not starts:
        empty = pa.nulls(0, pa.binary())  # not pa.array: see numbers_array
        return DecodedRecords(np.zeros(0, np.int64), np.zeros(0, np.int64),
                              np.zeros(0, np.int32), empty, empty,
                              pa.nulls(0, HEADERS_TYPE) if include_headers else None,
                              next_offset)
    buf = np.frombuffer(joined, dtype=np.uint8)
    data = pa.py_buffer(joined)
    body = starts[0] if len(starts) == 1 else np.concatenate(starts)
    counts = np.fromiter((b.count for b in batches), dtype=np.int64, count=len(batches))

    ts_delta, size = _uvarints(buf, body + 1)  # after the attributes byte
    p = body + 1 + size
    off_delta, size = _uvarints(buf, p)
    p += size
    klen, size = _uvarints(buf, p)
    p += size
    klen = _zigzag(klen)
    kstart = p
    p = p + np.maximum(klen, 0)
    vlen, size = _uvarints(buf, p)
    p += size
    vlen = _zigzag(vlen)
    vstart = p
    # Every field inside its record (Kafka's DefaultRecord rule): a length that lies would
    # otherwise hand out the next record's bytes, or read past the buffer.
    rec_end = ends[0] if len(ends) == 1 else np.concatenate(ends)
    vend = vstart + np.maximum(vlen, 0)
    if (vend >= rec_end).any():
        i = int(np.argmax(vend >= rec_end))
        raise KafkaProtocolError(
            f"a record of the batch at offset {_batch_of(batches, counts, i).base_offset} has a "
            "key or value length past the end of the record: the fetch response is corrupt")

    def per_batch(values: list[int], dtype: type) -> np.ndarray:
        return np.repeat(np.array(values, dtype=dtype), counts)

    offsets = per_batch([b.base_offset for b in batches], np.int64) + _zigzag(off_delta)
    log_append = [bool(b.attributes & _LOG_APPEND_TIME) for b in batches]
    if any(log_append):
        timestamps = np.where(per_batch(log_append, np.bool_),
                              per_batch([b.max_ts for b in batches], np.int64),
                              per_batch([b.base_ts for b in batches], np.int64)
                              + _zigzag(ts_delta))
        ts_types = per_batch(log_append, np.int32)
    else:
        timestamps = per_batch([b.base_ts for b in batches], np.int64) + _zigzag(ts_delta)
        ts_types = np.zeros(len(body), dtype=np.int32)

    # The window: records before the fetch position (a batch is returned whole) or at/after end.
    keep = None
    if offsets[0] < start or offsets[-1] >= end:
        keep = np.flatnonzero((offsets >= start) & (offsets < end))
        offsets, timestamps, ts_types = offsets[keep], timestamps[keep], ts_types[keep]
        kstart, klen, vstart, vlen = kstart[keep], klen[keep], vstart[keep], vlen[keep]
        vend, rec_end = vend[keep], rec_end[keep]
        if len(offsets) and offsets[-1] + 1 >= end:
            next_offset = end
    words = _words(buf)
    headers = None
    if include_headers:
        headers = _headers(buf, words, data, vend, rec_end)
    return DecodedRecords(offsets, timestamps, ts_types, _binary(words, data, kstart, klen),
                          _binary(words, data, vstart, vlen), headers, next_offset)


def _batch_of(batches: list[_Batch], counts: np.ndarray, i: int) -> _Batch:
    """The batch of the i-th record of a response."""
    return batches[int(np.searchsorted(np.cumsum(counts), i, side="right"))]


def _headers(buf: np.ndarray, words: np.ndarray, data: pa.Buffer,
             hstart: np.ndarray, rec_end: np.ndarray) -> pa.Array:
    """The ``headers`` column: null for a record without headers (as librdkafka and Spark).

    Decoded header by header: pass j reads the j-th header (key length, key, value length,
    value) of every record that has more than j, so the Python loop runs once per header of the
    record with the most, not once per header.
    """
    n = len(hstart)
    count, size = _uvarints(buf, hstart)
    count = _zigzag(count)
    if n and count.min() < 0:
        raise KafkaProtocolError("a record has a negative header count: the fetch response is "
                                 "corrupt")
    # Each header takes 2 bytes at least: a count beyond that would only allocate.
    if n and (2 * count > rec_end - hstart - size).any():
        raise KafkaProtocolError("a record's header count is more than the record holds: the "
                                 "fetch response is corrupt")
    final = hstart + size  # where each record's headers end
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(count, out=offsets[1:])
    total = int(offsets[-1])
    k_start = np.zeros(total, dtype=np.int64)
    k_len = np.zeros(total, dtype=np.int64)
    v_start = np.zeros(total, dtype=np.int64)
    v_len = np.zeros(total, dtype=np.int64)
    active = np.flatnonzero(count > 0)
    pos = (hstart + size)[active]
    j = 0
    while len(active):
        at = offsets[active] + j
        klen, size = _uvarints(buf, pos)
        klen = _zigzag(klen)
        k_start[at], k_len[at] = pos + size, klen
        pos = pos + size + np.maximum(klen, 0)
        vlen, size = _uvarints(buf, pos)
        vlen = _zigzag(vlen)
        v_start[at], v_len[at] = pos + size, vlen
        pos = pos + size + np.maximum(vlen, 0)
        j += 1
        more = count[active] > j
        final[active[~more]] = pos[~more]
        active, pos = active[more], pos[more]
    if (final != rec_end).any():
        raise KafkaProtocolError("a record's headers do not end where the record does: the fetch "
                                 "response is corrupt")
    keys = _binary(words, data, k_start, k_len).cast(pa.string())  # checks UTF-8
    values = _binary(words, data, v_start, v_len)
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT))
    # From buffers: pa.array would import pandas (see numbers_array).
    no_headers = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(
        np.packbits(count == 0, bitorder="little"))])
    return pa.ListArray.from_arrays(numbers_array(offsets, pa.int32(), np.int32), structs,
                                    type=HEADERS_TYPE, mask=no_headers)
