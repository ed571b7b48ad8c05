"""The task side of the sink on txkafka's own producer (option ``producer=txkafka``).

The same contract as :class:`task_writer.KafkaWriter` (one task attempt's rows into one Kafka
transaction, pre-committed and left open for the driver), with :class:`client.producer.WireProducer`
underneath: Arrow columns are encoded into record batches without a Python call per record, and
the worker's kept :class:`client.producer.ClusterLink` makes a task's start one InitProducerId.

Every task-side step of the librdkafka path is kept, in the same order: the late-attempt check
before the transaction opens and after the flush (invariant 13), the fault-injection points
(``before_first_produce``, ``before_precommit``, ``after_precommit``), an empty task opening
nothing, a failed attempt aborting its own transaction at once.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import KafkaConfigError
from .committable import KafkaCommittable
from .task_writer import SinkSchema, TaskAttempt, _col, check_partition_column, payload_bytes
from ..secrets_redaction import redact_text
from .options import SinkConfig
from ..client.producer import WireProducer, link_for

log = logging.getLogger(__name__)


class WireKafkaWriter(TaskAttempt):
    """Writes one task attempt's rows with txkafka's own producer; the interface of KafkaWriter
    (``write``, ``release``, ``count``, ``late``)."""

    def __init__(self, cfg: SinkConfig, schema: SinkSchema, **attempt: Any) -> None:
        """``attempt``: TaskAttempt's keyword arguments (batch_id, partition_id, ...)."""
        super().__init__(cfg, schema, **attempt)
        self.producer: WireProducer | None = None
        self._where = (f"batch {self.batch_id}, task partition {self.partition_id} attempt "
                       f"{self.attempt}")

    # ------------------------------------------------------------------ write

    def write(self, batches: Iterable[pa.RecordBatch]) -> KafkaCommittable | None:
        """Send every row; return the pre-committed transaction (None without rows, when
        at-least-once, or when the attempt is late: then ``self.late`` is set and nothing it
        wrote remains)."""
        if self._decided_without_me("before opening its transaction: it writes nothing"):
            for _ in batches:
                pass
            return None
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if self.producer is None:
                    self._begin()
                    self.faults.check("before_first_produce", batch=self.batch_id,
                                      partition=self.partition_id, attempt=self.attempt)
                self._send(batch)
            if self.producer is None:
                return None  # no row: no producer id, no transaction (invariant 1)
            self.faults.check("before_precommit", batch=self.batch_id,
                              partition=self.partition_id, attempt=self.attempt)
            result = self.producer.flush()
        except BaseException:
            self._abort_quietly()
            raise
        self.faults.check("after_precommit", batch=self.batch_id, partition=self.partition_id,
                          attempt=self.attempt)
        if self.transactional_id is None:
            return None
        if self._decided_without_me("after its flush: it aborts its transaction"):
            self._abort_quietly()
            return None
        return KafkaCommittable(
            transactional_id=self.transactional_id,
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
            partition_id=self.partition_id,
            attempt=self.attempt,
            batch_id=self.batch_id,
            record_count=self.count,
            topic_partitions=result.topic_partitions,
            byte_count=self.bytes,
        )

    def _begin(self) -> None:
        """InitProducerId on the worker's kept link (fences an earlier holder of the id and aborts
        its open transaction), or an idle idempotent producer id when at-least-once."""
        self.producer = WireProducer(
            self.cfg.kafka, transactional_id=self.transactional_id,
            transaction_timeout_ms=self.cfg.transaction_timeout_ms,
            link=link_for(self.cfg.kafka), where=self._where,
            timeout_s=self.cfg.commit_timeout_ms / 1000.0)
        self.producer.begin()

    def _send(self, batch: pa.RecordBatch) -> None:
        assert self.producer is not None
        values = _col(batch, "value")
        keys = _col(batch, "key") if self.schema.has_key else None
        headers = _col(batch, "headers") if self.schema.has_headers else None
        partitions = _col(batch, "partition") if self.schema.has_partition else None
        if partitions is not None:
            check_partition_column(partitions)
        if self.cfg.topic is not None:
            self.producer.send(self.cfg.topic, values, keys=keys, headers=headers,
                               partitions=partitions)
        else:
            self._send_by_topic_column(batch, values, keys, headers, partitions)
        self.count += batch.num_rows
        self.bytes += payload_bytes(batch, self.schema.has_key)

    def _send_by_topic_column(self, batch: pa.RecordBatch, values: pa.Array,
                              keys: pa.Array | None, headers: pa.Array | None,
                              partitions: pa.Array | None) -> None:
        """Rows with a ``topic`` column: each topic's rows, in their order, one send each."""
        assert self.producer is not None
        topics = _col(batch, "topic")
        assert topics is not None
        if topics.null_count:
            raise KafkaConfigError(
                "a row has a null 'topic' and no option('topic', ...) is set; every row "
                "needs a topic")
        names = pc.unique(topics).to_pylist()
        for name in names:
            if len(names) == 1:
                pick = None
            else:
                pick = pc.equal(topics, name)
            cols = [values, keys, headers, partitions]
            if pick is not None:
                cols = [c.filter(pick) if c is not None else None for c in cols]
            v, k, h, p = cols
            self.producer.send(name, v, keys=k, headers=h, partitions=p)

    # ------------------------------------------------------------------ abort

    def _abort_quietly(self) -> None:
        """A failed or late attempt ends its own transaction at once (EndTxn abort), so
        read_committed readers are not held up until the transaction times out."""
        producer = self.producer
        if producer is None:
            return
        try:
            producer.abort()
        except Exception as e:  # noqa: BLE001 - best effort; the committer sweeps orphans too
            log.warning("could not abort transaction %s: %s", self.transactional_id,
                        redact_text(str(e), self.cfg.kafka))

    def release(self) -> None:
        """Stop the producer's senders; the transaction stays open for the driver."""
        if self.producer is not None:
            self.producer.close()
            self.producer = None

