"""Executor side: read one offset range [start, end) of one partition into Arrow RecordBatches.

Why this shape:
- A range is finished by position, never by a poll timeout. Under read_committed, commit/abort
  markers and aborted records occupy offsets that are never delivered, so a range may end on a marker
  and no record at ``end - 1`` ever arrives. The range is done when a record at or past ``end``
  arrives, or when librdkafka reports partition EOF at an offset >= ``end`` (its EOF offset is the LSO
  under read_committed, verified against Kafka 4.3). ``kafkaConsumer.pollTimeoutMs`` only bounds a
  real stall, which is then diagnosed (data loss vs. an unreachable broker).
- RecordBatches are built per chunk of messages with one list comprehension per column and
  numpy/pyarrow conversions, matching Spark's schema exactly (binary, int32, int64,
  timestamp[us, tz=UTC], nullable fields): Spark rejects a first batch whose schema differs.
- Consumers are pooled per worker process, keyed by their config. A consumer returned after reading
  [s, e) is unassigned but keeps the records it consumed past e, so the next batch's range [e, ...)
  of the same partition starts from them, like Spark's cached KafkaConsumer.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..client.librdkafka_errors import RedactingLog, translate_kafka_error
from ..errors import (KafkaConfigError, KafkaProtocolError, MalformedRecordError,
                      RecordFetchTimeoutError)
from ..client.config import describe_config
from .range_planner import report_data_loss
from ..client.record_batch_decoder import HEADER_STRUCT, HEADERS_TYPE, numbers_array
from ..secrets_redaction import redact_text
from .options import TopicPartitionKey

if TYPE_CHECKING:
    from ..client.record_batch_decoder import DecodedRecords
    from ..serde.batches import DecodePlan

log = logging.getLogger("txkafka.reader")
_LIBRDKAFKA_LOG = logging.getLogger("txkafka.librdkafka")

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# Spark's TimestampType is microseconds in a long: a record timestamp (ms) beyond this overflows.
_MAX_TIMESTAMP_MS = np.iinfo(np.int64).max // 1000
# Unbound accessors: list(map(_VALUE, msgs)) runs the loop in C, ~20-40 % faster than a
# comprehension calling m.value() per message.
_KEY, _VALUE, _OFFSET, _TIMESTAMP, _ERROR, _HEADERS = (
    Message.key, Message.value, Message.offset, Message.timestamp, Message.error, Message.headers)

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema(_BASE_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema(_BASE_FIELDS + [pa.field("headers", HEADERS_TYPE)])

CONSUME_BATCH = 10_000      # messages per Consumer.consume() call
BATCH_ROWS = 10_000         # rows per RecordBatch handed to Spark
BATCH_BYTES = 64 << 20      # ... or fewer, once their keys and values reach about this size
_POLL_SLICE_S = 0.5         # one consume() wait; the stall budget is pollTimeoutMs overall
_WATERMARK_TIMEOUT_S = 10.0
_MAX_RESETS = 5

_GONE = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for the source schema (with or without headers)."""
    return SCHEMA_WITH_HEADERS if include_headers else SCHEMA


@dataclass(frozen=True)
class FetchTask:
    """Everything an executor needs to read one range; pickled into the InputPartition."""

    topic: str
    partition: int
    start: int
    end: int
    consumer_config: tuple[tuple[str, str], ...]
    poll_timeout_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    fetcher: str = "librdkafka"  # or "wire": txkafka's own Fetch (client/fetcher), see SourceOptions
    # ``start`` is a batch read's startingOffsets "earliest" (range_planner.plan_ranges): the task
    # reads from the log start it finds, so records retention or delete-records removed after
    # planning are not data loss (Spark binds "earliest" in the task too).
    earliest_start: bool = False
    # keyFormat/valueFormat: the reader schemas resolved on the driver; None reads binary.
    decode: Optional["DecodePlan"] = None

    def __repr__(self) -> str:
        return (f"FetchTask({self.topic}-{self.partition} [{self.start}, {self.end}), "
                f"client={describe_config(dict(self.consumer_config))})")


_NO_OFFSETS = np.zeros(0, dtype=np.int64)


def message_offsets(messages: list[Message]) -> np.ndarray:
    """The offsets of data messages of one partition (delivered in increasing order).

    When the last offset is the first plus ``n - 1``, increasing offsets can only be consecutive:
    ``arange`` then skips a call per message (~45 ns of ~1.9 us of CPU a record costs in Spark).
    Transaction markers and compaction leave gaps, and then every offset is read.
    """
    n = len(messages)
    if n:
        first = messages[0].offset()
        if messages[-1].offset() - first == n - 1:
            return np.arange(first, first + n, dtype=np.int64)
    return np.fromiter(map(_OFFSET, messages), dtype=np.int64, count=n)


# ---- building Arrow --------------------------------------------------------------------------


def _constant_string(value: str, n: int) -> pa.Array:
    data = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def _headers_array(headers: list) -> pa.Array:
    """``array<struct<key:string,value:binary>>``; null for a record without headers (as Spark)."""
    lengths = np.fromiter((0 if h is None else len(h) for h in headers), dtype=np.int32,
                          count=len(headers))
    offsets = np.zeros(len(headers) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = [kv for h in headers if h for kv in h]
    keys = pa.array([k for k, _ in flat], type=pa.string())
    values = pa.array([v for _, v in flat], type=pa.binary())
    if isinstance(values, pa.ChunkedArray):
        raise _TooLarge()
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT))
    mask = pa.array(np.fromiter((h is None for h in headers), dtype=np.bool_, count=len(headers)))
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=HEADERS_TYPE, mask=mask)


def build_record_batch(messages: list[Message], topic: str, partition: int,
                       include_headers: bool, offsets: np.ndarray | None = None
                       ) -> pa.RecordBatch:
    """One RecordBatch from data messages of one partition, column by column.

    The per-message accessors are confluent-kafka's and cannot be avoided; everything else runs in
    C: ``map`` over the unbound accessors, timestamps as (type, ms) tuples flattened straight into
    one int64 buffer by ``np.fromiter`` (building pairs through pyarrow cost twice as much), and
    topic/partition columns made from buffers, which beats list comprehensions by far.
    """
    n = len(messages)
    keys = pa.array(list(map(_KEY, messages)), type=pa.binary())
    values = pa.array(list(map(_VALUE, messages)), type=pa.binary())
    if offsets is None:
        offsets = message_offsets(messages)
    # [type0, ms0, type1, ms1, ...]; librdkafka types: 0 none, 1 CreateTime, 2 LogAppendTime;
    # Spark's (Java's) ids are -1, 0, 1.
    ts = np.fromiter(itertools.chain.from_iterable(map(_TIMESTAMP, messages)), dtype=np.int64,
                     count=2 * n)
    headers = _headers_array(list(map(_HEADERS, messages))) if include_headers else None
    if any(isinstance(a, pa.ChunkedArray) for a in (keys, values, headers)):
        raise _TooLarge()
    return _record_batch(keys, values, topic, partition, offsets, ts[1::2],
                         (ts[0::2] - 1).astype(np.int32), headers)


def _record_batch(keys: pa.Array, values: pa.Array, topic: str, partition: int,
                  offsets: np.ndarray, timestamps_ms: np.ndarray, timestamp_types: np.ndarray,
                  headers: pa.Array | None) -> pa.RecordBatch:
    """Spark's source schema from the per-record columns (headers None: without them)."""
    n = len(offsets)
    _check_timestamps(timestamps_ms, offsets, topic, partition)
    arrays = [
        keys,
        values,
        _constant_string(topic, n),
        numbers_array(np.full(n, partition, dtype=np.int32), pa.int32(), np.int32),
        numbers_array(offsets, pa.int64(), np.int64),
        numbers_array(timestamps_ms * 1000, TIMESTAMP_TYPE, np.int64),
        numbers_array(timestamp_types, pa.int32(), np.int32),
    ]
    if headers is not None:
        arrays.append(headers)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(headers is not None))


def _check_timestamps(timestamps_ms: np.ndarray, offsets: np.ndarray, topic: str,
                      partition: int) -> None:
    """Refuse, as Spark does, a timestamp whose microseconds overflow a long (numpy would wrap
    it silently into another date): milliseconds are Kafka's unit, so it is a producer's bug."""
    if not len(timestamps_ms) or (timestamps_ms.max() <= _MAX_TIMESTAMP_MS
                                  and timestamps_ms.min() >= -_MAX_TIMESTAMP_MS):
        return
    i = int(np.flatnonzero((timestamps_ms > _MAX_TIMESTAMP_MS)
                           | (timestamps_ms < -_MAX_TIMESTAMP_MS))[0])
    raise MalformedRecordError(
        f"the record of topic {topic!r} partition {partition} at offset {int(offsets[i])} has "
        f"timestamp {int(timestamps_ms[i])}, beyond Spark's timestamp range (its microseconds "
        "overflow a long): Kafka's record timestamps are milliseconds since the epoch, so its "
        "producer probably wrote micro- or nanoseconds. Fix the producer; to read past such "
        "records, start after their offsets (startingOffsets)")


def decoded_batches(d: "DecodedRecords", topic: str, partition: int, include_headers: bool,
                    batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """RecordBatches of at most ``batch_rows`` rows from one decoded Fetch response (zero-copy
    slices: the decoder keeps one response's bytes, decompressed ones included, within what one
    Arrow buffer addresses)."""
    n = len(d)
    if not n:
        return
    whole = _record_batch(d.keys, d.values, topic, partition, d.offsets, d.timestamps_ms,
                          d.timestamp_types, d.headers if include_headers else None)
    if n <= batch_rows:
        yield whole
        return
    for i in range(0, n, batch_rows):
        yield whole.slice(i, batch_rows)


class _TooLarge(Exception):
    """A binary column passed Arrow's 2 GiB limit (pyarrow then answers a ChunkedArray)."""


def build_record_batches(messages: list[Message], topic: str, partition: int,
                         include_headers: bool, offsets: np.ndarray) -> Iterator[pa.RecordBatch]:
    """``build_record_batch``, halving the rows while a binary column (keys, values, header
    values) would exceed 2 GiB: 10,000 values of ~215 KB already do."""
    try:
        yield build_record_batch(messages, topic, partition, include_headers, offsets)
        return
    except _TooLarge:
        if len(messages) < 2:
            raise KafkaProtocolError(
                f"a record of topic {topic!r} partition {partition} at offset {int(offsets[0])} "
                "exceeds Arrow's 2 GiB binary limit") from None
    mid = len(messages) // 2
    yield from build_record_batches(messages[:mid], topic, partition, include_headers,
                                    offsets[:mid])
    yield from build_record_batches(messages[mid:], topic, partition, include_headers,
                                    offsets[mid:])


# ---- the consumer pool -----------------------------------------------------------------------


@dataclass
class PooledConsumer:
    """A consumer plus where it stands: the partition it is assigned and the next offset it holds.

    ``key`` is the whole consumer config (sasl.password included), ``pending`` holds records: both
    stay out of the repr, which lands in logs and tracebacks.
    """

    key: tuple[tuple[str, str], ...] = field(repr=False)
    consumer: Consumer = field(repr=False)
    tp: Optional[TopicPartitionKey] = None
    next_offset: Optional[int] = None
    # already consumed, offsets >= next_offset
    pending: list = field(default_factory=list, repr=False)
    last_used: float = field(default_factory=time.monotonic)


class ConsumerPool:
    """Idle consumers of one Python worker, reused across tasks and batches.

    Safe because a worker runs one task at a time and a consumer is handed out exclusively; a
    consumer whose task failed or stopped early is closed, never pooled.

    An idle consumer is unassigned, never paused: librdkafka's pause, assign and resume race on the
    partition's op version (librdkafka issues #2190, #5591) and a pooled consumer paused, then
    assigned elsewhere and resumed, sometimes never fetched again (a range stalled for the whole
    pollTimeoutMs although the broker had its records; found by the chaos suite). Every hand-out
    is one plain assign().
    """

    def __init__(self, max_idle: int = 16, idle_timeout_s: float = 300.0,
                 factory: Callable[[dict], Consumer] = Consumer) -> None:
        self.max_idle = max_idle
        self._factory = factory
        self.idle_timeout_s = idle_timeout_s
        self._idle: list[PooledConsumer] = []
        self._lock = threading.Lock()
        self.created = 0  # for tests and metrics

    def acquire(self, task: FetchTask) -> PooledConsumer:
        key = task.consumer_config
        tp = (task.topic, task.partition)
        now = time.monotonic()
        stale: list[PooledConsumer] = []
        chosen: PooledConsumer | None = None
        with self._lock:
            keep = []
            for pc in self._idle:
                if now - pc.last_used > self.idle_timeout_s:
                    stale.append(pc)
                else:
                    keep.append(pc)
            self._idle = keep
            same = [pc for pc in self._idle if pc.key == key]
            exact = [pc for pc in same if pc.tp == tp and pc.next_offset == task.start]
            if exact:
                chosen = exact[-1]
            elif same:
                chosen = same[-1]
            if chosen is not None:
                self._idle.remove(chosen)
        for pc in stale:
            _close_quietly(pc.consumer)
        if chosen is not None and chosen.tp == tp and chosen.next_offset == task.start:
            # The records it kept (at and after this range's start) come first; fetching goes on
            # right after the last of them.
            kept = [m.offset() for m in chosen.pending if m.error() is None]
            at = max(kept) + 1 if kept else task.start
            chosen.consumer.assign([TopicPartition(task.topic, task.partition, at)])
            return chosen
        if chosen is None:
            conf: dict = dict(key)
            conf["logger"] = RedactingLog(_LIBRDKAFKA_LOG, conf)
            try:
                chosen = PooledConsumer(key, self._factory(conf))
            except KafkaException as e:
                raise KafkaConfigError(
                    "librdkafka rejected the consumer settings from the kafka.* options: "
                    f"{redact_text(str(e), dict(key))}") from None
            self.created += 1
        chosen.consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
        chosen.tp, chosen.next_offset, chosen.pending = tp, task.start, []
        return chosen

    def release(self, pc: PooledConsumer, reusable: bool) -> None:
        if not reusable:
            _close_quietly(pc.consumer)
            return
        pc.last_used = time.monotonic()
        try:
            # An idle consumer stops fetching (no broker load); what it already handed over past
            # the range stays in ``pending`` for the next range of the same partition.
            pc.consumer.unassign()
        except Exception:  # noqa: BLE001 - a consumer that cannot unassign is not reused
            _close_quietly(pc.consumer)
            return
        evicted: list[PooledConsumer] = []
        with self._lock:
            self._idle.append(pc)
            while len(self._idle) > self.max_idle:
                evicted.append(self._idle.pop(0))
        for old in evicted:
            _close_quietly(old.consumer)

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for pc in idle:
            _close_quietly(pc.consumer)

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)


def _close_quietly(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing is best effort; the process may be exiting
        pass


POOL = ConsumerPool()
atexit.register(POOL.close_all)


# ---- reading a range -------------------------------------------------------------------------


def fetch_range(task: FetchTask, pool: ConsumerPool = POOL, batch_rows: int = BATCH_ROWS,
                batch_bytes: int = BATCH_BYTES) -> Iterator[pa.RecordBatch]:
    """Yield the committed records of [task.start, task.end) as RecordBatches, in offset order;
    with keyFormat/valueFormat, each batch's key and value decoded here, in the read task."""
    batches = _fetch_framed(task, pool, batch_rows, batch_bytes)
    if task.decode is None:
        yield from batches
        return
    from ..serde.batches import decode_record_batch

    for batch in batches:
        yield decode_record_batch(batch, task.decode, task.topic, task.partition)


def _fetch_framed(task: FetchTask, pool: ConsumerPool, batch_rows: int,
                  batch_bytes: int) -> Iterator[pa.RecordBatch]:
    if task.end <= task.start:
        return
    if task.fetcher == "wire":
        # Imported here: the query's driver-side Python process never needs the fetch code.
        from ..client.fetcher import WireRange, handoff_log, read_range

        wr = WireRange(task.topic, task.partition, task.start, task.end, task.consumer_config,
                       task.include_headers)
        for decoded in read_range(wr):
            yield from decoded_batches(decoded, task.topic, task.partition, task.include_headers,
                                       batch_rows)
        if wr.handoff is None:
            return
        handoff_log(wr)
        task = dataclasses.replace(task, start=wr.handoff,
                                   earliest_start=task.earliest_start and wr.handoff == task.start)
    pc = pool.acquire(task)
    reusable = False
    try:
        yield from _RangeReader(task, pc, batch_rows, batch_bytes).run()
        reusable = True
    finally:
        pool.release(pc, reusable)


def next_messages(consumer: Consumer, wait: float) -> list[Message]:
    """What is queued now, else the first message within ``wait`` plus what came with it.

    (``consume(n, timeout)`` alone would block for the whole timeout unless n messages arrive.)
    """
    msgs = consumer.consume(num_messages=CONSUME_BATCH, timeout=0)
    if msgs:
        return msgs
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first] + consumer.consume(num_messages=CONSUME_BATCH - 1, timeout=0)


def _estimated_bytes(msgs: list[Message]) -> int:
    """Keys and values of ``msgs``, from a few of them: O(1) per chunk, so 10,000 rows of 1 MB
    values are not held (10 GB) before a batch goes out, at no per-record cost."""
    n = len(msgs)
    sample = [msgs[i] for i in {0, n // 3, (2 * n) // 3, n - 1}]
    per_row = sum(len(m.value() or b"") + len(m.key() or b"") for m in sample) / len(sample)
    return int(per_row * n)


class _RangeReader:
    def __init__(self, task: FetchTask, pc: PooledConsumer, batch_rows: int,
                 batch_bytes: int = BATCH_BYTES) -> None:
        self.task = task
        self.pc = pc
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.pos = task.start  # next offset this range still needs
        self.done = False
        self.resets = 0
        self.tp = TopicPartition(task.topic, task.partition)
        self.conf = dict(task.consumer_config)

    def _where(self) -> str:
        return f"topic {self.task.topic!r} partition {self.task.partition}"

    def run(self) -> Iterator[pa.RecordBatch]:
        task, consumer = self.task, self.pc.consumer
        chunks: list[tuple[list[Message], np.ndarray]] = []
        buffered = buffered_bytes = 0
        stall_budget = task.poll_timeout_ms / 1000.0
        last_progress = time.monotonic()
        pending, self.pc.pending = self.pc.pending, []
        while not self.done:
            if pending:
                msgs, pending = pending, []
            else:
                msgs = next_messages(consumer, max(0.0, min(
                    _POLL_SLICE_S, last_progress + stall_budget - time.monotonic())))
            if not msgs:
                if time.monotonic() - last_progress >= stall_budget:
                    self._stalled()
                    last_progress = time.monotonic()
                continue
            data, offsets = self._process(msgs)
            if data:
                chunks.append((data, offsets))
                buffered += len(data)
                buffered_bytes += _estimated_bytes(data)
            if data or self.done:
                last_progress = time.monotonic()
            if (buffered >= self.batch_rows or buffered_bytes >= self.batch_bytes
                    or (self.done and buffered)):
                yield from self._flush(chunks)
                chunks, buffered, buffered_bytes = [], 0, 0
        # A range ended by _stalled() (data loss under failOnDataLoss=false) still returns the
        # records it read before.
        yield from self._flush(chunks)
        if self.pc.tp is not None:
            self.pc.next_offset = task.end

    def _flush(self, chunks: list[tuple[list[Message], np.ndarray]]) -> Iterator[pa.RecordBatch]:
        if not chunks:
            return
        if len(chunks) == 1:
            batch, batch_offsets = chunks[0]
        else:
            batch = [m for c, _ in chunks for m in c]
            batch_offsets = np.concatenate([o for _, o in chunks])
        task = self.task
        yield from build_record_batches(batch, task.topic, task.partition, task.include_headers,
                                        batch_offsets)

    def _process(self, msgs: list[Message]) -> tuple[list[Message], np.ndarray]:
        """The data messages of ``msgs`` inside the range (and their offsets); handles events;
        sets ``done``."""
        # (KafkaError objects are truthy; events are rare, so test before listing them.)
        if not any(map(_ERROR, msgs)):
            return self._take(msgs, msgs, len(msgs))
        errors = list(map(_ERROR, msgs))
        out: list[Message] = []
        out_offsets: list[np.ndarray] = []

        def done() -> tuple[list[Message], np.ndarray]:
            return out, (np.concatenate(out_offsets) if out_offsets else _NO_OFFSETS)

        prev = 0
        for i, err in enumerate(errors):
            if err is None:
                continue
            if i > prev:
                data, offs = self._take(msgs[prev:i], msgs, i)
                out.extend(data)
                out_offsets.append(offs)
                if self.done:
                    return done()
            self._event(msgs[i])
            prev = i + 1
            if self.done:
                self.pc.pending = msgs[prev:]
                return done()
        if prev < len(msgs):
            data, offs = self._take(msgs[prev:], msgs, len(msgs))
            out.extend(data)
            out_offsets.append(offs)
        return done()

    def _take(self, seg: list[Message], msgs: list[Message],
              seg_end: int) -> tuple[list[Message], np.ndarray]:
        """Data messages of one partition in offset order: keep [pos, end), stop at end."""
        offsets = message_offsets(seg)
        lo = int(np.searchsorted(offsets, self.pos)) if offsets[0] < self.pos else 0
        hi = int(np.searchsorted(offsets, self.task.end))
        if hi < len(seg):
            # A record at or past the end: the range is complete; it and what follows belong to
            # the next range of this partition, kept for it.
            self.done = True
            self.pc.pending = seg[hi:] + msgs[seg_end:]
        if hi > lo:
            self.pos = int(offsets[hi - 1]) + 1
            if self.pos >= self.task.end:
                self.done = True  # the record at end - 1 arrived: no need to wait for more
        if self.done:
            self.pos = self.task.end
        if lo == 0 and hi == len(seg):
            return seg, offsets
        return seg[lo:hi], offsets[lo:hi]

    def _event(self, m: Message) -> None:
        err = m.error()
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            # librdkafka's EOF offset is the log end the fetcher reached (the LSO under
            # read_committed). An older EOF (queued before new data) is not the end of this range.
            if m.offset() >= self.task.end:
                self.done = True
                self.pos = self.task.end
            return
        if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
            self._out_of_range()
            return
        if code in _GONE:
            if not self._confirmed_gone():
                # librdkafka declares a partition gone on one metadata answer, and a broker out of
                # sync (restarting, leader moving) can answer "unknown topic" for a live topic
                # (librdkafka #4401). Read on from pos; if nothing comes, _stalled() bounds it.
                log.info("reading %s: %s, but the cluster still lists the partition; reading on "
                         "from offset %d", self._where(), redact_text(str(err), self.conf),
                         self.pos)
                self._reassign(self.pos)
                return
            report_data_loss(
                f"{self._where()} was deleted while offsets [{self.pos}, {self.task.end}) were "
                "being read", self.task.fail_on_data_loss)
            self._finish_abnormally()
            return
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # No READ (or DESCRIBE) on the topic: librdkafka would retry the fetch forever and the
            # range would end only at pollTimeoutMs as a time-out. Say what it is, naming the topic.
            raise translate_kafka_error(err, self.conf, action=f"reading {self._where()}",
                                        topic=self.task.topic, role="reader")
        if err.fatal():
            raise KafkaProtocolError(
                f"reading {self._where()}: {redact_text(str(err), self.conf)}")
        # Transient (broker down, leader moving): librdkafka retries by itself.
        log.debug("reading %s: %s", self._where(), redact_text(str(err), self.conf))

    def _confirmed_gone(self) -> bool:
        """A fresh metadata request (not librdkafka's cache) says the partition does not exist."""
        topic = self.task.topic
        try:
            t = self.pc.consumer.list_topics(topic, timeout=_WATERMARK_TIMEOUT_S).topics.get(topic)
        except Exception:  # noqa: BLE001 - no answer confirms nothing; a stall is diagnosed later
            return False
        if t is None or (t.error is not None and t.error.code() in _GONE):
            return True
        return t.error is None and self.task.partition not in t.partitions

    def _watermarks(self) -> tuple[int, int]:
        low, high = self.pc.consumer.get_watermark_offsets(self.tp, timeout=_WATERMARK_TIMEOUT_S,
                                                           cached=False)
        return int(low), int(high)

    def _finish_abnormally(self) -> None:
        """Range over without reaching its end normally: the consumer's position is not ``end``,
        so the pool must re-assign it before any reuse."""
        self.done = True
        self.pos = self.task.end
        self.pc.tp = None
        self.pc.pending = []

    def _reassign(self, offset: int) -> None:
        self.pc.consumer.assign([TopicPartition(self.task.topic, self.task.partition, offset)])
        self.pc.pending = []

    def _out_of_range(self) -> None:
        """The broker has no offset ``pos``: retention removed it, or the log went backwards."""
        low, high = self._watermarks()
        end = self.task.end
        if self.pos < low:
            if self.task.earliest_start and self.pos == self.task.start:
                log.info("reading %s from its log start %d: startingOffsets=earliest was %d when "
                         "the read was planned", self._where(), low, self.pos)
            else:
                report_data_loss(
                    f"{self._where()}: offsets [{self.pos}, {min(low, end)}) were deleted "
                    f"(retention or delete-records) before they were read; the earliest "
                    f"available offset is {low}", self.task.fail_on_data_loss)
            if low >= end:
                self._finish_abnormally()
                return
            self.pos = low
            self._reassign(low)
            return
        if self.pos > high:
            report_data_loss(
                f"{self._where()}: the batch needs offsets [{self.pos}, {end}) but the partition "
                f"now ends at {high}; its offsets went backwards (topic re-created, or an unclean "
                "leader election)", self.task.fail_on_data_loss)
            self._finish_abnormally()
            return
        self.resets += 1
        if self.resets > _MAX_RESETS:
            raise KafkaProtocolError(
                f"reading {self._where()} from offset {self.pos}: the broker kept answering "
                f"'offset out of range' although the partition holds [{low}, {high})")
        self._reassign(self.pos)

    def _stalled(self) -> None:
        """No record for pollTimeoutMs: data loss if the partition no longer reaches the end."""
        try:
            low, high = self._watermarks()
        except Exception as e:  # noqa: BLE001 - the broker is unreachable: say so below
            raise RecordFetchTimeoutError(
                f"no records of {self._where()} at offset {self.pos} (range ends at "
                f"{self.task.end}) within kafkaConsumer.pollTimeoutMs={self.task.poll_timeout_ms}, "
                f"and the broker did not answer: {redact_text(str(e), self.conf)}") from None
        if high < self.task.end and self.pos >= high:
            report_data_loss(
                f"{self._where()}: the batch needs offsets [{self.pos}, {self.task.end}) but the "
                f"partition's readable end is now {high}; its offsets went backwards (topic "
                "re-created, or an unclean leader election)", self.task.fail_on_data_loss)
            self._finish_abnormally()
            return
        if self.pos < low:
            self._out_of_range()
            return
        raise RecordFetchTimeoutError(
            f"no records of {self._where()} at offset {self.pos} (range ends at {self.task.end}, "
            f"partition holds [{low}, {high})) within kafkaConsumer.pollTimeoutMs="
            f"{self.task.poll_timeout_ms}; raise it or check the brokers")
