"""Test-only encoder of Kafka record batches, message format v2 (``DefaultRecordBatch`` /
``DefaultRecord``), written from the format spec to feed ``record_batch_decoder`` tests.

Batch header (61 bytes, big-endian): baseOffset int64, batchLength int32 (bytes after this
field), partitionLeaderEpoch int32, magic int8, crc uint32 (CRC-32C of everything after it),
attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId
int64, producerEpoch int16, baseSequence int32, recordCount int32; then the records, compressed
together when the codec (attribute bits 0-2) is not 0.

Record: length (zigzag varint, bytes after it), attributes int8, timestampDelta zigzag varlong,
offsetDelta zigzag varint, key length zigzag varint (-1 null) + key, value length + value, header
count, then per header: key length + utf-8 key, value length (-1 null) + value.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field

import cramjam

from txkafka.connector.client.protocol import Writer

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)

ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

CONTROL_ABORT, CONTROL_COMMIT = 0, 1

DEFAULT_BASE_TIMESTAMP = 1_700_000_000_000

XERIAL_MAGIC = b"\x82SNAPPY\x00"

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")   # attributes .. recordCount (40 bytes)
_HEADER_BEFORE_CRC = struct.Struct(">qiib")      # baseOffset, batchLength, leader epoch, magic
HEADER_SIZE = 61


# -- varints -----------------------------------------------------------------------------------

def uvarint(value: int) -> bytes:
    """Unsigned LEB128 varint of a non-negative int (the wire module's request encoder)."""
    if value < 0:
        raise ValueError("uvarint of a negative value")
    return Writer(False).uvarint(value).build()


def zigzag(value: int, bits: int = 64) -> int:
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def varint(value: int) -> bytes:
    """Kafka's zigzag varint (int32)."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"varint out of int32 range: {value}")
    return uvarint(zigzag(value, 32))


def varlong(value: int) -> bytes:
    """Kafka's zigzag varlong (int64)."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varlong out of int64 range: {value}")
    return uvarint(zigzag(value, 64))


# -- CRC-32C (Castagnoli), reflected, poly 0x82F63B78 ------------------------------------------

def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# -- records -----------------------------------------------------------------------------------

@dataclass
class Record:
    """One record to encode. ``offset_delta`` None means its index in the batch."""

    value: bytes | None
    key: bytes | None = None
    timestamp_delta: int = 0
    offset_delta: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


def encode_record(rec: Record, offset_delta: int, *, length_adjust: int = 0) -> bytes:
    """One record, length-prefixed. ``length_adjust`` corrupts the length prefix on purpose."""
    body = bytearray()
    body.append(rec.attributes & 0xFF)
    body += varlong(rec.timestamp_delta)
    body += varint(offset_delta)
    if rec.key is None:
        body += varint(-1)
    else:
        body += varint(len(rec.key)) + rec.key
    if rec.value is None:
        body += varint(-1)
    else:
        body += varint(len(rec.value)) + rec.value
    body += varint(len(rec.headers))
    for hk, hv in rec.headers:
        kb = hk.encode("utf-8")
        body += varint(len(kb)) + kb
        if hv is None:
            body += varint(-1)
        else:
            body += varint(len(hv)) + hv
    return varint(len(body) + length_adjust) + bytes(body)


# -- compression -------------------------------------------------------------------------------

def xerial_snappy(data: bytes, chunk: int = 32 * 1024) -> bytes:
    """snappy-java's stream framing (Kafka's Java producer): 16-byte header, then
    [int32 big-endian length][raw snappy block] per chunk of input."""
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), chunk):
        block = bytes(cramjam.snappy.compress_raw(data[i:i + chunk]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def compress(codec: int, data: bytes, *, xerial: bool = False, xerial_chunk: int = 32 * 1024,
             zstd_streaming: bool = False) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        if xerial:
            return xerial_snappy(data, xerial_chunk)
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        if zstd_streaming:  # a frame without the content size, as zstd-jni's stream writes
            c = cramjam.zstd.Compressor()
            c.compress(data)
            return bytes(c.finish())
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


# -- batches -----------------------------------------------------------------------------------

def batch(base_offset: int, records: list[Record], *, codec: int = NONE, xerial: bool = False,
          xerial_chunk: int = 32 * 1024, zstd_streaming: bool = False,
          log_append_time: bool = False, transactional: bool = False, control: bool = False,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          base_timestamp: int = DEFAULT_BASE_TIMESTAMP, max_timestamp: int | None = None,
          offset_deltas: list[int] | None = None, last_offset_delta: int | None = None,
          record_count: int | None = None, partition_leader_epoch: int = 0, magic: int = 2,
          extra_attributes: int = 0, raw_records: bytes | None = None,
          compute_crc: bool = True) -> bytes:
    """One v2 record batch.

    Offset deltas come from ``offset_deltas`` if given, else each record's ``offset_delta``,
    else its index. ``last_offset_delta`` defaults to the largest delta (0 with no records) and
    ``max_timestamp`` to base + the largest timestamp delta (base with no records): Kafka's rule
    for CreateTime; with LogAppendTime the broker sets it, pass it explicitly. ``raw_records``
    replaces the encoded records section (before compression) for corrupt-input tests;
    ``record_count`` overrides the header's count.
    """
    if offset_deltas is None:
        offset_deltas = [r.offset_delta if r.offset_delta is not None else i
                         for i, r in enumerate(records)]
    if len(offset_deltas) != len(records):
        raise ValueError("one offset delta per record")
    section = raw_records if raw_records is not None else b"".join(
        encode_record(r, d) for r, d in zip(records, offset_deltas))
    section = compress(codec, section, xerial=xerial, xerial_chunk=xerial_chunk,
                       zstd_streaming=zstd_streaming)
    attributes = (codec & 0x07) | extra_attributes
    if log_append_time:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if last_offset_delta is None:
        last_offset_delta = max(offset_deltas) if offset_deltas else 0
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    if record_count is None:
        record_count = len(records)
    after_crc = _HEADER_AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp,
                                       max_timestamp, producer_id, producer_epoch, base_sequence,
                                       record_count) + section
    crc = crc32c(after_crc) if compute_crc else 0
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return (_HEADER_BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, magic)
            + struct.pack(">I", crc) + after_crc)


def control_record(commit: bool, coordinator_epoch: int = 0, version: int = 0) -> Record:
    """An end-transaction marker record: key (version int16, type int16), value (version
    int16, coordinator epoch int32)."""
    return Record(key=struct.pack(">hh", version, CONTROL_COMMIT if commit else CONTROL_ABORT),
                  value=struct.pack(">hi", 0, coordinator_epoch))


def control_batch(offset: int, producer_id: int, commit: bool, *, producer_epoch: int = 0,
                  coordinator_epoch: int = 0, base_timestamp: int = DEFAULT_BASE_TIMESTAMP,
                  compute_crc: bool = True) -> bytes:
    """A COMMIT or ABORT marker batch of one record at ``offset``."""
    return batch(offset, [control_record(commit, coordinator_epoch)], transactional=True,
                 control=True, producer_id=producer_id, producer_epoch=producer_epoch,
                 base_timestamp=base_timestamp, compute_crc=compute_crc)


def records_of(values: list[bytes | None], **kwargs) -> list[Record]:
    """Records with the given values and otherwise the same fields."""
    return [Record(value=v, **kwargs) for v in values]
