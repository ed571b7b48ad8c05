"""The task side of the sink: Arrow batches in, one pre-committed Kafka transaction out.

Flink's KafkaWriter, for one Spark task attempt: begin a transaction lazily on the first record, produce
every row, then pre-commit: flush, check that every record was delivered, read the producer id and
epoch, and return a committable WITHOUT committing. The producer is never closed while its
transaction is open (confluent-kafka's ``close()`` aborts it); dropping the reference does not.

A streaming attempt also asks the sink's commit log whether its batch was decided without it (a
speculative loser, a zombie), before it opens its transaction and again after its flush: then it
writes nothing, or aborts what it wrote, and returns "late" (invariant 13).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from operator import length_hint
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ..client.librdkafka_errors import (
    RedactingLog,
    SecurityErrorProbe,
    missing_topic_operations,
    topic_access_error,
    translate_kafka_error,
)
from ..errors import KafkaConfigError, TransactionError
from ..fault_injection import FaultInjector
from .committable import KafkaCommittable
from ..client.config import RECONNECT_BACKOFF_MS
from ..client.error_codes import (INVALID_TIMESTAMP, INVALID_TIMESTAMP_HINT,
                                  TOPIC_AUTHORIZATION_FAILED)
from ..secrets_redaction import redact_text
from .commit_log import SinkCommitLog
from ..checkpoint.object_store import S3Settings
from .options import SinkConfig
from ..client.config import delivery_timeout_ms
from ..client.connection import ApiRange
from ..client.record_batch_encoder import partition_out_of_range

log = logging.getLogger(__name__)

_STATS_INTERVAL_MS = 25
_BAD_TXN_STATES = {"AbortableError", "FatalError", "AbortingTransaction", "AbortedTransaction"}
# librdkafka's own log lines go through Python logging (never straight to stderr).
_LIBRDKAFKA_LOG = logging.getLogger("txkafka.librdkafka")


def _stats_wait() -> float:
    return max(2.0, 40 * _STATS_INTERVAL_MS / 1000)


# --------------------------------------------------------------------------- input schema

@dataclass(frozen=True)
class SinkSchema:
    """Which input columns the sink uses (Spark's Kafka sink contract)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool


def validate_input_schema(fields: dict[str, str], topic_option: str | None) -> SinkSchema:
    """Check the DataFrame's columns once, at query start.

    ``fields`` maps column name (case-insensitive) to a simple type name: string, binary, int, long,
    short, byte, headers (array<struct<key:string,value:binary>>), or anything else.
    """
    cols = {k.lower(): v for k, v in fields.items()}
    roles = ("value", "key", "partition", "headers") + (("topic",) if topic_option is None else ())
    for role in roles:
        same = [k for k in fields if k.lower() == role]
        if len(same) > 1:
            # The check and the tasks could otherwise read different columns.
            raise KafkaConfigError(
                f"columns {same} all name the sink's '{role}' column (names are matched without "
                "regard to case); keep one, or rename the others")
    if "value" not in cols:
        raise KafkaConfigError(
            "the txkafka sink needs a 'value' column (string or binary); found columns "
            f"{sorted(fields)}. Use e.g. df.selectExpr(\"CAST(x AS STRING) AS value\")."
        )
    for name in ("value", "key"):
        if name in cols and cols[name] not in ("string", "binary"):
            raise KafkaConfigError(f"column '{name}' must be string or binary, got {cols[name]}")
    if topic_option is None and "topic" in cols and cols["topic"] != "string":
        # (as Spark: with the option set, the column is never read, whatever its type)
        raise KafkaConfigError(f"column 'topic' must be string, got {cols['topic']}")
    if topic_option is None and "topic" not in cols:
        raise KafkaConfigError(
            "no topic to write to: set option('topic', ...) or give the DataFrame a 'topic' column"
        )
    if "partition" in cols and cols["partition"] not in ("int", "long", "short", "byte"):
        raise KafkaConfigError(f"column 'partition' must be an integer, got {cols['partition']}")
    if "headers" in cols and cols["headers"] != "headers":
        raise KafkaConfigError(
            "column 'headers' must be array<struct<key:string,value:binary>>, got "
            f"{cols['headers']}"
        )
    return SinkSchema(
        has_key="key" in cols,
        has_topic="topic" in cols and topic_option is None,
        has_partition="partition" in cols,
        has_headers="headers" in cols,
    )


def _col(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        # Spark column names are case-insensitive.
        for i, f in enumerate(batch.schema):
            if f.name.lower() == name:
                return batch.column(i)
        return None
    return batch.column(idx)


def payload_bytes(batch: pa.RecordBatch, has_key: bool) -> int:
    """Key and value bytes of a batch's rows, vectorised (the sink's figure of bytes written;
    a null counts 0, headers and framing not at all)."""
    total = 0
    for name in ("value", "key") if has_key else ("value",):
        arr = _col(batch, name)
        if arr is not None and len(arr) > arr.null_count:
            total += pc.sum(pc.binary_length(arr)).as_py() or 0
    return total


def _as_bytes_list(arr: pa.Array | None, n: int) -> list:
    if arr is None:
        return [None] * n
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        # Zero-copy reinterpretation: rows then come out as bytes, which librdkafka takes as-is.
        arr = arr.view(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    # Through numpy: a third of to_pylist()'s cost per row (bytes objects; None for a null).
    return arr.to_numpy(zero_copy_only=False).tolist()


def _headers_list(arr: pa.Array | None, n: int) -> list:
    if arr is None:
        return [None] * n
    # The struct's field names match case-insensitively, as in the schema check at start.
    names = {f.name.lower(): f.name for f in arr.type.value_type}
    key, value = names["key"], names["value"]
    every = arr.flatten()  # all the batch's headers, one struct each: checked once, not per row
    if every.null_count or every.field(key).null_count:
        # confluent-kafka would write the header name "None"; Spark's sink fails the task too.
        raise KafkaConfigError(
            "a row's 'headers' column holds a header with a null key (or a null header); "
            "every header needs a string key"
        )
    return [None if not row else [(h[key], h[value]) for h in row] for row in arr.to_pylist()]


_INT_MAX = 2**31 - 1
UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner chooses


def _partitions_list(arr: pa.Array) -> list:
    """The ``partition`` column as librdkafka takes it (checked by check_partition_column)."""
    import pyarrow.compute as pc

    check_partition_column(arr)
    # A null becomes librdkafka's "unassigned" partition: the partitioner places that record.
    return pc.fill_null(arr, UNASSIGNED).to_numpy(zero_copy_only=False).tolist()


def check_partition_column(arr: pa.Array) -> None:
    """Refuse a ``partition`` value that is no partition number: -1 would read as "unassigned"
    (the partitioner would place the record) and a long beyond int overflows."""
    import pyarrow.compute as pc

    if arr.null_count < len(arr):
        bounds = pc.min_max(arr).as_py()
        for bad in (bounds["min"], bounds["max"]):
            if bad < 0 or bad > _INT_MAX:
                raise KafkaConfigError(
                    f"a row's 'partition' column is {bad}: a partition is a number from 0 "
                    f"(null lets the partitioner choose)"
                )


# --------------------------------------------------------------------------- producer plumbing

class _ProducerProbe:
    """Collects librdkafka's delivery failures, client errors and statistics (the producer id and
    epoch live only in the statistics)."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self.errors: list[str] = []
        self.first_delivery_error: Any = None
        self.fatal: str | None = None
        self.security = SecurityErrorProbe(conf)
        self._stats: str | None = None
        self._stats_seen = 0
        self._lock = threading.Lock()

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and len(self.errors) < 20:
            if self.first_delivery_error is None:
                self.first_delivery_error = (err, msg.topic(), msg.partition())
            self.errors.append(
                f"{msg.topic()}[{msg.partition()}]: {redact_text(str(err), self.conf)}"
            )

    def on_error(self, err: Any) -> None:
        self.security.on_error(err)
        if getattr(err, "fatal", lambda: False)():
            self.fatal = redact_text(str(err), self.conf)

    def on_stats(self, raw: str) -> None:
        with self._lock:
            self._stats = raw
            self._stats_seen += 1

    def latest_stats(self) -> dict | None:
        with self._lock:
            raw = self._stats
        return json.loads(raw) if raw else None

    def fresh_stats(self, producer: Any, timeout: float,
                    ready: Callable[[dict], bool] = lambda d: True) -> dict:
        """The first statistics snapshot emitted after this call that satisfies ``ready``.

        Snapshots queued before the call may predate what the caller just did, so they are skipped.
        """
        with self._lock:
            seen = self._stats_seen
        deadline = time.monotonic() + timeout
        while True:
            producer.poll(0.005)
            with self._lock:
                fresh = self._stats if self._stats_seen > seen else None
            if fresh is not None:
                stats = json.loads(fresh)
                if ready(stats):
                    return stats
                with self._lock:
                    seen = self._stats_seen
            if time.monotonic() > deadline:
                raise TransactionError(
                    "librdkafka reported no producer id within "
                    f"{timeout:.1f}s of init_transactions; cannot identify the transaction"
                )


# What librdkafka's transactional producer needs of a broker (it picks the versions itself):
# record batches with producer ids (Produce v3, Kafka 0.11) and the transaction requests,
# FindCoordinator with a key type (v1).
LIBRDKAFKA_TRANSACTIONAL_APIS = (
    ApiRange(0, "Produce", 3), ApiRange(10, "FindCoordinator", 1),
    ApiRange(22, "InitProducerId", 0), ApiRange(24, "AddPartitionsToTxn", 0),
    ApiRange(26, "EndTxn", 0))


def producer_config(cfg: SinkConfig, probe: _ProducerProbe, transactional_id: str | None,
                    logger: logging.Logger | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "partitioner": "murmur2_random",  # Java's placement of keyed records
        "enable.idempotence": True,
        "linger.ms": 5,
        # librdkafka's producer default (true) would have a row's missing topic created with the
        # broker's defaults; txkafka never creates topics.
        "allow.auto.create.topics": False,
        # every task's producer connects to an advertised broker before init_transactions
        # (client.config.RECONNECT_BACKOFF_MS says why)
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        **cfg.kafka,
        "delivery.report.only.error": True,
        "on_delivery": probe.on_delivery,
        "error_cb": probe.on_error,
    }
    if transactional_id is not None:
        conf["transactional.id"] = transactional_id
        conf["transaction.timeout.ms"] = cfg.transaction_timeout_ms
        conf["statistics.interval.ms"] = _STATS_INTERVAL_MS
        conf["stats_cb"] = probe.on_stats
        # A record must not outlive its transaction (librdkafka's 0, no limit, included).
        conf["message.timeout.ms"] = int(delivery_timeout_ms(cfg.kafka,
                                                             cfg.transaction_timeout_ms))
    if logger is not None:
        conf["logger"] = RedactingLog(logger, cfg.kafka)
    return conf


def _new_producer(conf: dict[str, Any]):
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(conf)
    except KafkaException as e:
        text = redact_text(str(e), conf)
        raise KafkaConfigError(f"the Kafka producer rejected its configuration: {text}") from None


def _connect_to_cluster(producer: Any, cfg: SinkConfig) -> None:
    """Have a connection to a broker the cluster advertised up before init_transactions.

    librdkafka drops its bootstrap connection once the first metadata answer names the real
    brokers; an InitProducerId falling into that gap finds "no brokers available for
    transactions" and is retried by a 500 ms timer, which under CPU load many task producers paid,
    every batch. Two metadata requests for the sink's topic close the gap: the first is answered on the
    bootstrap connection, the second on an advertised broker's, which InitProducerId then uses.
    Without a fixed topic there is nothing cheap to ask for, and the retry stays possible.
    """
    if cfg.topic is None:
        return
    timeout = min(5.0, cfg.commit_timeout_ms / 1000.0)
    try:
        for _ in range(2):
            producer.list_topics(cfg.topic, timeout=timeout)
    except Exception as e:  # noqa: BLE001 - only a warm-up: init_transactions reports real failures
        # (once: a cluster that does not answer is init_transactions' to report, without delay)
        log.debug("metadata warm-up before init_transactions failed: %s",
                  redact_text(str(e), cfg.kafka))


# --------------------------------------------------------------------------- late attempts

_TASK_LOGS: dict[str, SinkCommitLog] = {}
_TASK_LOGS_LOCK = threading.Lock()


@dataclass(frozen=True)
class LateCheck:
    """What a streaming task needs to tell whether its batch was decided without it: the
    checkpoint (read through pyarrow, as the driver does) and the batch and round it writes."""

    checkpoint_location: str
    batch_id: int
    round_no: int
    s3: S3Settings | None = field(default=None, repr=False)

    def decided(self) -> bool:
        """True once the task's round is decided (the driver committed it without this attempt)
        or Spark finished the batch (``commits/N``, written before any later batch starts): two
        stats, no listing. An executor that cannot read the checkpoint answers False (the
        driver's follow-up sweeps remain)."""
        try:
            with _TASK_LOGS_LOCK:
                commit_log = _TASK_LOGS.get(self.checkpoint_location)
                if commit_log is None:
                    commit_log = _TASK_LOGS[self.checkpoint_location] = SinkCommitLog(
                        self.checkpoint_location, self.s3)
            return (commit_log.has_decision(self.batch_id, self.round_no)
                    or commit_log.spark.has_commit(self.batch_id))
        except Exception as e:  # noqa: BLE001 - the check is a shortcut, never a failure
            log.debug("batch %d: cannot read the checkpoint from this executor, so the "
                      "late-attempt check is skipped: %s", self.batch_id, e)
            return False


# --------------------------------------------------------------------------- the writer

class TaskAttempt:
    """What every task writer knows of its attempt (KafkaWriter here; task_writer_txkafka's on
    txkafka's own producer) and the late-attempt check they share."""

    def __init__(
        self,
        cfg: SinkConfig,
        schema: SinkSchema,
        *,
        batch_id: int,
        partition_id: int,
        attempt: int,
        transactional_id: str | None,
        late_check: LateCheck | None = None,
    ) -> None:
        if cfg.exactly_once and transactional_id is None:
            raise ValueError("exactly-once writes need a transactional id")
        self.cfg = cfg
        self.schema = schema
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.attempt = attempt
        self.transactional_id = transactional_id if cfg.exactly_once else None
        self.late_check = late_check if self.transactional_id is not None else None
        self.late = False  # the batch was decided without this attempt: it wrote nothing
        self.faults = FaultInjector.get()
        self.count = 0
        self.bytes = 0  # key and value bytes written (payload_bytes)

    def _decided_without_me(self, when: str) -> bool:
        if self.late_check is None or not self.late_check.decided():
            return False
        self.late = True
        log.info("batch %d round %d, task partition %d attempt %d: the batch was decided without "
                 "this attempt (found %s)", self.batch_id, self.late_check.round_no,
                 self.partition_id, self.attempt, when)
        return True


class KafkaWriter(TaskAttempt):
    """Writes one task attempt's rows; exactly-once: inside one transaction left open at the end."""

    def __init__(self, cfg: SinkConfig, schema: SinkSchema, **attempt: Any) -> None:
        """``attempt``: TaskAttempt's keyword arguments (batch_id, partition_id, ...)."""
        super().__init__(cfg, schema, **attempt)
        self.probe = _ProducerProbe(cfg.kafka)
        self.producer: Any = None
        self._in_txn = False
        self._init_thread: threading.Thread | None = None
        self._init_error: BaseException | None = None
        self._identity: tuple[int, int] = (-1, -1)

    def prepare(self) -> None:
        """Create the producer and initialise its transactional id in the background.

        The two round trips (FindCoordinator, InitProducerId) then overlap with the upstream work
        that produces this task's first rows. No transaction begins until a row arrives, so an
        empty task still opens nothing (invariant 1).
        """
        if self.transactional_id is None or self._init_thread is not None:
            return
        self._init_thread = threading.Thread(target=self._init_producer, daemon=True,
                                             name=f"txkafka-init-{self.transactional_id}")
        self._init_thread.start()

    def _init_producer(self) -> None:
        try:
            producer = _new_producer(producer_config(self.cfg, self.probe, self.transactional_id,
                                                     _LIBRDKAFKA_LOG))
            self.producer = producer
            _connect_to_cluster(producer, self.cfg)
            # Fences any earlier holder of this id (a zombie attempt) and aborts its transaction.
            producer.init_transactions(self.cfg.commit_timeout_ms / 1000.0)
            eos = self.probe.fresh_stats(
                producer, timeout=_stats_wait(),
                ready=lambda st: int((st.get("eos") or {}).get("producer_id", -1)) >= 0,
            ).get("eos") or {}
            self._identity = (int(eos.get("producer_id", -1)), int(eos.get("producer_epoch", -1)))
        except BaseException as e:  # noqa: BLE001 - re-raised by _open on the task's thread
            self._init_error = e

    def _open(self) -> None:
        if self._in_txn or (self.producer is not None and self.transactional_id is None):
            return
        if self.transactional_id is None:
            self.producer, self.probe = _pooled_producer(self.cfg)
            return
        from confluent_kafka import KafkaException

        self.prepare()
        assert self._init_thread is not None
        self._init_thread.join()
        try:
            if self._init_error is not None:
                raise self._init_error
            self.producer.begin_transaction()
        except KafkaException as e:
            if self.producer is not None:
                try:
                    self.producer.poll(0)  # serve error_cb: a TLS/SASL failure explains a time-out
                except KafkaException:
                    pass  # poll() re-raises a fatal error (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            raise translate_kafka_error(
                e, self.cfg.kafka, action=f"starting transaction {self.transactional_id}",
                transactional_id=self.transactional_id, role="writer", probe=self.probe.security,
            ) from None
        self._in_txn = True

    def write(self, batches: Iterable[pa.RecordBatch]) -> KafkaCommittable | None:
        """Produce every row; return the pre-committed transaction (None when there was no row,
        or when the attempt is late: then ``self.late`` is set and nothing it wrote remains)."""
        # Before the producer's init: init_transactions fences the id's holder, and batch N+2
        # uses batch N's ids, so a late attempt of N would abort N+2's open transaction.
        if self._decided_without_me("before opening its transaction: it writes nothing"):
            return self._drain_late(batches)
        self.prepare()
        try:
            for batch in batches:
                if batch.num_rows:
                    first = not self._in_txn
                    self._open()
                    if first and self._in_txn:
                        self.faults.check("before_first_produce", batch=self.batch_id,
                                          partition=self.partition_id, attempt=self.attempt)
                    self._produce_batch(batch)
            if not self._in_txn and self.transactional_id is not None:
                # Empty task: let the background init finish here, so it can never fence a later
                # batch's producer of the same id.
                if self._init_thread is not None:
                    self._init_thread.join()
                return None
            if self.producer is None:
                return None
            self.faults.check("before_precommit", batch=self.batch_id, partition=self.partition_id,
                              attempt=self.attempt)
            committable = self._precommit()
        except BaseException:
            self._abort_quietly()
            if self._init_thread is not None and not self._in_txn:
                # Never leave an init_transactions in flight: finishing later, it could fence the
                # next batch's producer of the same id.
                self._init_thread.join(self.cfg.commit_timeout_ms / 1000.0)
            raise
        self.faults.check("after_precommit", batch=self.batch_id, partition=self.partition_id,
                          attempt=self.attempt)
        if committable is not None and self._decided_without_me(
                "after its flush: it aborts its transaction"):
            # Its transaction may have opened after the batch's sweep: end it now rather than
            # leave it to the driver's follow-up sweeps or the broker's timeout.
            self._abort_quietly()
            return None
        return committable

    def _drain_late(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Consume the input (Spark requires it) without writing, and let a producer's init that
        started finish, so that it can never fence a later batch's producer of the same id."""
        for _ in batches:
            pass
        if self._init_thread is not None:
            self._init_thread.join(self.cfg.commit_timeout_ms / 1000.0)

    def _produce_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        values = _as_bytes_list(_col(batch, "value"), n)
        keys = _as_bytes_list(_col(batch, "key"), n) if self.schema.has_key else None
        produce = self.producer.produce
        poll = self.producer.poll
        topics = self._topics(batch, n)
        parts = _partitions_list(_col(batch, "partition")) if self.schema.has_partition else None
        try:
            if not self.schema.has_headers:
                self._produce_all(produce, poll, topics, values, keys, parts)
            else:
                self._produce_general(batch, topics, values, keys, parts, produce, poll)
        except Exception as e:
            err = e.args[0] if e.args else None
            if self.transactional_id is not None and _is_erroneous_state(err):
                # The transaction failed while its records were being produced (e.g. its
                # AddPartitionsToTxn refused): the same diagnosis as records purged at flush.
                self._diagnose_failed_transaction(err, _distinct(topics), refused=True)
            if parts is None or not _is_unknown_partition(err):
                raise
            # librdkafka refuses a partition the topic lacks naming neither; say which (the
            # caller aborts the attempt's transaction, as for any other bad row).
            refusal = self._out_of_range(topics, parts)
            if refusal is None:
                raise
            raise refusal from None
        self.count += n
        self.bytes += payload_bytes(batch, self.schema.has_key)
        poll(0)

    def _topics(self, batch: pa.RecordBatch, n: int) -> str | list:
        """The option's topic for every row, else the ``topic`` column's values."""
        if self.cfg.topic is not None:
            return self.cfg.topic
        topic_col = _col(batch, "topic")
        assert topic_col is not None
        if topic_col.null_count:
            raise KafkaConfigError(
                "a row has a null 'topic' and no option('topic', ...) is set; every row "
                "needs a topic"
            )
        return topic_col.to_numpy(zero_copy_only=False).tolist()

    def _produce_all(self, produce: Callable, poll: Callable, topics: str | list, values: list,
                     keys: list | None, partitions: list | None = None) -> None:
        """``produce(topic, value[, key[, partition]])`` for every row, the loop run by ``map`` in
        C (no Python bytecode per row: ~25 % less CPU per record than a ``for`` loop around
        ``produce``). Rows with headers take ``_produce_general``.

        A full send queue raises BufferError out of the C loop after the row's arguments were
        taken: the values iterator then tells which row it was (``length_hint``), that row waits
        for room, and the loop resumes at the next row, so no row is lost or sent twice.
        """
        n = len(values)
        rest = iter(values)
        topic_of = repeat(topics) if isinstance(topics, str) else topics
        if partitions is not None:
            calls = map(produce, topic_of, rest, repeat(None) if keys is None else keys,
                        partitions)
        elif keys is not None:
            calls = map(produce, topic_of, rest, keys)
        else:
            calls = map(produce, topic_of, rest)
        while True:
            try:
                deque(calls, maxlen=0)
                return
            except BufferError:
                i = n - length_hint(rest) - 1
                args: tuple = (topics if isinstance(topics, str) else topics[i], values[i])
                if keys is not None or partitions is not None:
                    args += (None if keys is None else keys[i],)
                if partitions is not None:
                    args += (partitions[i],)
                self._produce_when_room(produce, poll, args, {})

    def _produce_when_room(self, produce: Callable, poll: Callable, args: tuple,
                           kwargs: dict[str, Any]) -> None:
        """The slow path of a full local queue: serve the producer until the record fits.

        One poll is not enough: a slow broker (or a long linger.ms) can keep the queue full for
        longer, and a record must never be dropped by giving up early. Only a queue that stays
        full as long as a record may wait for delivery ends the write, with an error saying so.
        """
        waits = _delivery_timeout_s(self.cfg)
        deadline = time.monotonic() + waits
        while True:
            poll(0.05)
            try:
                produce(*args, **kwargs)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise TransactionError(
                        f"librdkafka's send queue stayed full for {waits:.0f}s "
                        f"(batch {self.batch_id}, task partition {self.partition_id}, "
                        f"{self.count} records written before this batch): the brokers are not "
                        "taking records; check their health, or raise "
                        "kafka.queue.buffering.max.messages / kafka.queue.buffering.max.kbytes"
                    ) from None

    def _produce_general(self, batch: pa.RecordBatch, topics: str | list, values: list,
                         keys: list | None, parts: list | None, produce: Callable,
                         poll: Callable) -> None:
        """Rows with a ``headers`` column: keyword arguments per row."""
        n = batch.num_rows
        if isinstance(topics, str):
            topics = [topics] * n
        parts = parts if parts is not None else [UNASSIGNED] * n
        headers = _headers_list(_col(batch, "headers"), n)
        keys = keys if keys is not None else [None] * n
        for t, v, k, p, h in zip(topics, values, keys, parts, headers):
            kwargs: dict[str, Any] = {}
            if p != UNASSIGNED:
                kwargs["partition"] = p
            if h:
                kwargs["headers"] = h
            try:
                produce(t, v, k, **kwargs)
            except BufferError:
                self._produce_when_room(produce, poll, (t, v, k), kwargs)

    def _precommit(self) -> KafkaCommittable | None:
        # As long as a record may wait for its delivery: at_least_once has no transaction to cap
        # it, and a flush given up earlier would fail a task whose records are still delivered.
        timeout = _delivery_timeout_s(self.cfg)
        remaining = self.producer.flush(timeout if math.isfinite(timeout) else -1)
        if remaining:
            raise TransactionError(
                f"{remaining} of {self.count} records were not delivered within {timeout:.0f}s "
                f"(batch {self.batch_id}, task partition {self.partition_id})"
            )
        if self.probe.fatal:
            raise TransactionError(f"the producer hit a fatal error: {self.probe.fatal}")
        if self.probe.first_delivery_error is not None:
            err, topic, partition = self.probe.first_delivery_error
            if _is_unknown_partition(err):
                # (a record produced before the producer knew the topic's partitions)
                raise self._out_of_range(topic, [partition]) or TransactionError(
                    f"batch {self.batch_id}, task partition {self.partition_id}: {topic}"
                    f"[{partition}]: {redact_text(str(err), self.cfg.kafka)}")
            code = _code(err)
            if code == TOPIC_AUTHORIZATION_FAILED:
                raise translate_kafka_error(err, self.cfg.kafka, action="writing",
                                            topic=topic, role="writer")
            if code == INVALID_TIMESTAMP:
                raise TransactionError(
                    f"batch {self.batch_id}, task partition {self.partition_id}: writing "
                    f"{topic}[{partition}]: {INVALID_TIMESTAMP_HINT}")
            if self.transactional_id is not None:
                self._diagnose_failed_transaction(err, [topic])
        if self.probe.errors:
            raise TransactionError(
                f"{len(self.probe.errors)} record(s) failed delivery in batch {self.batch_id}, "
                f"task partition {self.partition_id}; first: {self.probe.errors[0]}"
            )
        if self.transactional_id is None:
            return None
        # The producer id and epoch were read right after init_transactions; with librdkafka's
        # (pre-KIP-890) protocol they change only on init or after an error, which the checks above
        # catch. The driver checks them against the coordinator before deciding (invariant 7).
        pid, epoch = self._identity
        stats = self.probe.latest_stats()
        state = ((stats or {}).get("eos") or {}).get("txn_state")
        if pid < 0 or epoch < 0 or state in _BAD_TXN_STATES:
            raise TransactionError(
                f"transaction {self.transactional_id} is not usable after flush (state {state}, "
                f"producer id {pid}, epoch {epoch})"
            )
        return KafkaCommittable(
            transactional_id=self.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            partition_id=self.partition_id,
            attempt=self.attempt,
            batch_id=self.batch_id,
            record_count=self.count,
            topic_partitions=_written_partitions(stats or {}),
            byte_count=self.bytes,
        )

    def _out_of_range(self, topics: str | list, parts: list) -> KafkaConfigError | None:
        """The refusal of a ``partition`` value its topic lacks, in txkafka's producer's words
        (one owner: record_batch_encoder), for the largest such value of the rows; None if the
        topics' partition counts (asked now) show none."""
        largest: dict[str, int] = {}
        for topic, p in zip(repeat(topics) if isinstance(topics, str) else topics, parts):
            largest[topic] = max(largest.get(topic, UNASSIGNED), p)
        for topic, p in largest.items():
            if p == UNASSIGNED:
                continue  # only rows the partitioner placed
            count = self._partition_count(topic)
            if count is None or p >= count:
                return partition_out_of_range(p, topic, count)
        return None

    def _partition_count(self, topic: str) -> int | None:
        """The topic's partition count from the producer's metadata (None: not known)."""
        try:
            t = self.producer.list_topics(topic, timeout=min(5.0, self.cfg.commit_timeout_ms
                                                             / 1000.0)).topics.get(topic)
        except Exception as e:  # noqa: BLE001 - only for the message: None says "unknown"
            log.debug("no metadata for topic %r: %s", topic, redact_text(str(e), self.cfg.kafka))
            return None
        return len(t.partitions) if t is not None and t.error is None and t.partitions else None

    def _diagnose_failed_transaction(self, err: Any, topics: list[str], *,
                                     refused: bool = False) -> None:
        """Records purged from a transactional producer, or a produce refused because its
        transaction already failed (``refused``): say why when it is a missing topic ACL.

        Without WRITE on the topic, AddPartitionsToTxn is refused, the transaction fails and
        librdkafka purges its records (_PURGE_QUEUE) or refuses the next produce (_STATE); the
        cause reaches only its log. Ask the broker which operations the principal has on the
        topics (only on this failure path).
        """
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import AdminClient

        if not refused and _code(err) != KafkaError._PURGE_QUEUE:
            return
        try:
            admin = AdminClient({**self.cfg.kafka,
                                 "logger": RedactingLog(_LIBRDKAFKA_LOG, self.cfg.kafka)})
            lacking = missing_topic_operations(admin, topics, ("WRITE",), timeout_s=10.0)
        except Exception as e:  # noqa: BLE001 - only a diagnosis: the generic error follows
            log.debug("could not check the writer's operations on %s: %s", topics,
                      redact_text(str(e), self.cfg.kafka))
            return
        for topic in sorted(lacking):
            what = ("refused a record: its transaction had failed" if refused
                    else "purged the transaction's records")
            raise topic_access_error(
                f"writing batch {self.batch_id}, task partition {self.partition_id} (librdkafka "
                f"{what})", topic, lacking[topic], "writer")

    def _abort_quietly(self) -> None:
        """A failed attempt aborts its own transaction at once so readers are not held up."""
        if not self._in_txn or self.producer is None:
            return
        self._in_txn = False
        try:
            self.producer.abort_transaction(10)
        except Exception as e:  # noqa: BLE001 - best effort; the committer sweeps orphans too
            log.warning("could not abort transaction %s: %s", self.transactional_id,
                        redact_text(str(e), self.cfg.kafka))

    def release(self) -> None:
        """Drop the producer WITHOUT close(): close() would abort the pre-committed transaction."""
        self.producer = None


def _delivery_timeout_s(cfg: SinkConfig) -> float:
    """How long a record may wait for its delivery (message.timeout.ms, capped by the transaction
    timeout when exactly once; inf: no limit): the pre-commit's flush waits that long, and a
    record as long for room in librdkafka's queue."""
    return delivery_timeout_ms(cfg.kafka, cfg.transaction_timeout_ms if cfg.exactly_once
                               else None) / 1000.0


def _code(err: Any) -> int | None:
    """A librdkafka error's code (None for anything else)."""
    return getattr(err, "code", lambda: None)()


def _is_erroneous_state(err: Any) -> bool:
    """librdkafka refused a produce because the producer's transaction is in an error state."""
    from confluent_kafka import KafkaError

    return _code(err) == KafkaError._STATE


def _distinct(topics: str | list) -> list[str]:
    """The topics a batch writes: the option's, or the ``topic`` column's distinct values."""
    return [topics] if isinstance(topics, str) else sorted(set(topics))


def _is_unknown_partition(err: Any) -> bool:
    """librdkafka's answer to a record for a partition its topic does not have."""
    from confluent_kafka import KafkaError

    return _code(err) == KafkaError._UNKNOWN_PARTITION


def _written_partitions(stats: dict) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, t in (stats.get("topics") or {}).items():
        parts = sorted(int(p) for p, ps in (t.get("partitions") or {}).items()
                       if int(p) >= 0 and (ps.get("txmsgs", 0) or ps.get("msgq_cnt", 0)
                                           or ps.get("xmit_msgq_cnt", 0)))
        if parts:
            out[topic] = parts
    return out


# Idempotent (at-least-once) producers carry no per-batch state: keep one per config per worker.
_POOL: dict[tuple, tuple[Any, _ProducerProbe]] = {}
_POOL_LOCK = threading.Lock()


def _pooled_producer(cfg: SinkConfig) -> tuple[Any, _ProducerProbe]:
    key = tuple(sorted(cfg.kafka.items()))
    with _POOL_LOCK:
        hit = _POOL.get(key)
        if hit is not None and hit[1].fatal is None:
            # A delivery failure belongs to the task that saw it; the next task starts clean
            # (e.g. once a missing topic ACL is granted).
            hit[1].errors.clear()
            hit[1].first_delivery_error = None
            return hit
        probe = _ProducerProbe(cfg.kafka)
        producer = _new_producer(producer_config(cfg, probe, None, _LIBRDKAFKA_LOG))
        _POOL[key] = (producer, probe)
        return producer, probe
