"""The task side of the sink: Arrow batches in, one pre-committed Kafka transaction out.

Flink's KafkaWriter, for one Spark task attempt: begin a transaction lazily on the first record, produce
every row, then pre-commit: flush, check that every record was delivered, read the producer id and
epoch, and return a committable WITHOUT committing. The producer is never closed while its
transaction is open (confluent-kafka's ``close()`` aborts it); dropping the reference does not.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pyarrow as pa

from .client_errors import TOPIC_AUTHORIZATION_FAILED, SecurityErrorProbe, translate_kafka_error
from .errors import KafkaConfigError, TransactionError
from .fault_injection import FaultInjector
from .kafka_committable import KafkaCommittable
from .secrets_redaction import redact_text
from .sink_options import SinkConfig

log = logging.getLogger(__name__)

_STATS_INTERVAL_MS = 25


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
    if "value" not in cols:
        raise KafkaConfigError(
            "the txkafka sink needs a 'value' column (string or binary); found columns "
            f"{sorted(fields)}. Use e.g. df.selectExpr(\"CAST(x AS STRING) AS value\")."
        )
    for name in ("value", "key"):
        if name in cols and cols[name] not in ("string", "binary"):
            raise KafkaConfigError(f"column '{name}' must be string or binary, got {cols[name]}")
    if "topic" in cols and cols["topic"] != "string":
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


def _as_bytes_list(arr: pa.Array | None, n: int) -> list:
    if arr is None:
        return [None] * n
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        # Zero-copy reinterpretation: to_pylist then yields bytes, which librdkafka takes as-is.
        arr = arr.view(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    return arr.to_pylist()


def _headers_list(arr: pa.Array | None, n: int) -> list:
    if arr is None:
        return [None] * n
    out = []
    for row in arr.to_pylist():
        out.append(None if not row else [(h["key"], h["value"]) for h in row])
    return out


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
                self.first_delivery_error = (err, msg.topic())
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

    def fresh_stats(self, producer: Any, timeout: float) -> dict:
        """A statistics snapshot taken after everything before this call happened."""
        with self._lock:
            seen = self._stats_seen
        deadline = time.monotonic() + timeout
        while True:
            producer.poll(0.005)
            with self._lock:
                if self._stats_seen >= seen + 1 and self._stats is not None:
                    return json.loads(self._stats)
            if time.monotonic() > deadline:
                raise TransactionError(
                    "librdkafka produced no statistics within "
                    f"{timeout:.1f}s; cannot read the producer id and epoch"
                )


def producer_config(cfg: SinkConfig, probe: _ProducerProbe, transactional_id: str | None,
                    logger: logging.Logger | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "partitioner": "murmur2_random",  # Java's placement of keyed records
        "enable.idempotence": True,
        "linger.ms": 5,
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
        # A record must not outlive its transaction.
        mt = int(cfg.kafka.get("message.timeout.ms", cfg.transaction_timeout_ms))
        conf["message.timeout.ms"] = min(mt, cfg.transaction_timeout_ms)
    if logger is not None:
        conf["logger"] = logger
    return conf


def _new_producer(conf: dict[str, Any]):
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(conf)
    except KafkaException as e:
        text = redact_text(str(e), conf)
        raise KafkaConfigError(f"the Kafka producer rejected its configuration: {text}") from None


# --------------------------------------------------------------------------- the writer

class KafkaWriter:
    """Writes one task attempt's rows; exactly-once: inside one transaction left open at the end."""

    def __init__(
        self,
        cfg: SinkConfig,
        schema: SinkSchema,
        *,
        batch_id: int,
        partition_id: int,
        attempt: int,
        transactional_id: str | None,
    ) -> None:
        if cfg.exactly_once and transactional_id is None:
            raise ValueError("exactly-once writes need a transactional id")
        self.cfg = cfg
        self.schema = schema
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.attempt = attempt
        self.transactional_id = transactional_id if cfg.exactly_once else None
        self.faults = FaultInjector.get(cfg.fault_injection)
        self.probe = _ProducerProbe(cfg.kafka)
        self.producer: Any = None
        self.count = 0
        self._in_txn = False

    # The producer opens lazily: an empty task opens no transaction (invariant 1).
    def _open(self) -> None:
        if self.producer is not None:
            return
        if self.transactional_id is None:
            self.producer, self.probe = _pooled_producer(self.cfg)
            return
        from confluent_kafka import KafkaException

        self.producer = _new_producer(producer_config(self.cfg, self.probe, self.transactional_id))
        timeout = self.cfg.commit_timeout_ms / 1000.0
        try:
            # Fences any earlier holder of this id (a zombie attempt) and aborts its transaction.
            self.producer.init_transactions(timeout)
            self.producer.begin_transaction()
        except KafkaException as e:
            self.producer.poll(0)  # serve error_cb: a TLS/SASL failure explains a time-out
            raise translate_kafka_error(
                e, self.cfg.kafka, action=f"starting transaction {self.transactional_id}",
                transactional_id=self.transactional_id, role="writer", probe=self.probe.security,
            ) from None
        self._in_txn = True

    def write(self, batches: Iterable[pa.RecordBatch]) -> KafkaCommittable | None:
        """Produce every row; return the pre-committed transaction (None when there was no row)."""
        try:
            for batch in batches:
                if batch.num_rows:
                    self._open()
                    self._produce_batch(batch)
            if self.producer is None:
                return None
            self.faults.check("before_precommit", batch=self.batch_id, partition=self.partition_id,
                              attempt=self.attempt)
            committable = self._precommit()
        except BaseException:
            self._abort_quietly()
            raise
        self.faults.check("after_precommit", batch=self.batch_id, partition=self.partition_id,
                          attempt=self.attempt)
        return committable

    def _produce_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        values = _as_bytes_list(_col(batch, "value"), n)
        keys = _as_bytes_list(_col(batch, "key"), n) if self.schema.has_key else None
        produce = self.producer.produce
        poll = self.producer.poll
        fixed_topic = self.cfg.topic
        if fixed_topic is not None and not self.schema.has_partition and not self.schema.has_headers:
            # Hot path: one topic, librdkafka's partitioner.
            if keys is None:
                for v in values:
                    try:
                        produce(fixed_topic, v)
                    except BufferError:
                        _wait_for_room(poll)
                        produce(fixed_topic, v)
            else:
                for v, k in zip(values, keys):
                    try:
                        produce(fixed_topic, v, k)
                    except BufferError:
                        _wait_for_room(poll)
                        produce(fixed_topic, v, k)
        else:
            self._produce_general(batch, values, keys, produce, poll)
        self.count += n
        poll(0)

    def _produce_general(self, batch: pa.RecordBatch, values: list, keys: list | None,
                         produce: Callable, poll: Callable) -> None:
        n = batch.num_rows
        if self.cfg.topic is not None:
            topics: Iterable = [self.cfg.topic] * n
        else:
            topic_col = _col(batch, "topic")
            assert topic_col is not None
            if topic_col.null_count:
                raise KafkaConfigError(
                    "a row has a null 'topic' and no option('topic', ...) is set; every row "
                    "needs a topic"
                )
            topics = topic_col.to_pylist()
        parts = _col(batch, "partition").to_pylist() if self.schema.has_partition else [None] * n
        headers = _headers_list(_col(batch, "headers"), n) if self.schema.has_headers else [None] * n
        keys = keys if keys is not None else [None] * n
        for t, v, k, p, h in zip(topics, values, keys, parts, headers):
            kwargs: dict[str, Any] = {}
            if p is not None:
                kwargs["partition"] = p
            if h:
                kwargs["headers"] = h
            try:
                produce(t, v, k, **kwargs)
            except BufferError:
                _wait_for_room(poll)
                produce(t, v, k, **kwargs)

    def _precommit(self) -> KafkaCommittable | None:
        timeout = self.cfg.transaction_timeout_ms / 1000.0
        remaining = self.producer.flush(timeout)
        if remaining:
            raise TransactionError(
                f"{remaining} of {self.count} records were not delivered within {timeout:.0f}s "
                f"(batch {self.batch_id}, task partition {self.partition_id})"
            )
        if self.probe.fatal:
            raise TransactionError(f"the producer hit a fatal error: {self.probe.fatal}")
        if self.probe.first_delivery_error is not None:
            err, topic = self.probe.first_delivery_error
            if getattr(err, "code", lambda: None)() == TOPIC_AUTHORIZATION_FAILED:
                raise translate_kafka_error(err, self.cfg.kafka, action="writing",
                                            topic=topic, role="writer")
        if self.probe.errors:
            raise TransactionError(
                f"{len(self.probe.errors)} record(s) failed delivery in batch {self.batch_id}, "
                f"task partition {self.partition_id}; first: {self.probe.errors[0]}"
            )
        if self.transactional_id is None:
            return None
        stats = self.probe.fresh_stats(self.producer, timeout=max(2.0, 40 * _STATS_INTERVAL_MS / 1000))
        eos = stats.get("eos") or {}
        state = eos.get("txn_state")
        pid = int(eos.get("producer_id", -1))
        epoch = int(eos.get("producer_epoch", -1))
        if state != "InTransaction" or pid < 0 or epoch < 0:
            raise TransactionError(
                f"transaction {self.transactional_id} is not open after flush (state {state}, "
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
            topic_partitions=_written_partitions(stats),
        )

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


def _wait_for_room(poll: Callable) -> None:
    poll(0.05)


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
            hit[1].errors.clear()
            return hit
        probe = _ProducerProbe(cfg.kafka)
        producer = _new_producer(producer_config(cfg, probe, None))
        _POOL[key] = (producer, probe)
        return producer, probe
