"""Helpers of the reader's integration tests: run txkafka queries and collect what they read.

Every wait is bounded; a query that does not finish in time fails the test with its state.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from integration_tests.kafka_helpers import KafkaTarget, Record
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint

QUERY_TIMEOUT_S = 240


def reader_options(kafka: KafkaTarget, **options: Any) -> dict[str, str]:
    return {"kafka.bootstrap.servers": kafka.bootstrap, **{k: str(v) for k, v in options.items()}}


def stream(spark, kafka: KafkaTarget, **options: Any):
    return spark.readStream.format("txkafka").options(**reader_options(kafka, **options)).load()


def batch(spark, kafka: KafkaTarget, **options: Any):
    return spark.read.format("txkafka").options(**reader_options(kafka, **options)).load()


def row_key(r) -> tuple:
    """(topic, partition, offset, key, value): what identifies a record and its content."""
    return (r["topic"], r["partition"], r["offset"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]))


def record_key(r: Record) -> tuple:
    return (r.topic, r.partition, r.offset, r.key, r.value)


class InjectedFailure(RuntimeError):
    pass


@dataclass
class BatchCollector:
    """A foreachBatch sink keeping each batch's rows by batchId (a replay overwrites: idempotent).

    ``fail_at`` makes that batch raise after its rows were seen, leaving offsets/N without
    commits/N in the checkpoint: the next run must replay exactly that batch.
    """

    fail_at: Optional[int] = None
    batches: dict[int, list[tuple]] = field(default_factory=dict)
    attempts: list[tuple[int, list[tuple]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, df, batch_id: int) -> None:
        rows = sorted(row_key(r) for r in df.collect())
        with self.lock:
            self.attempts.append((batch_id, rows))
            self.batches[batch_id] = rows
        if self.fail_at is not None and batch_id == self.fail_at:
            self.fail_at = None
            raise InjectedFailure(f"injected failure in batch {batch_id}")

    def all_rows(self) -> list[tuple]:
        return sorted(r for rows in self.batches.values() for r in rows)


def run_available_now(df, checkpoint: str, collector: BatchCollector,
                      timeout: float = QUERY_TIMEOUT_S):
    """Run a Trigger.AvailableNow query to its end; returns the query (for recentProgress)."""
    q = (df.writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    try:
        finished = q.awaitTermination(timeout)
    except Exception:
        q.stop()
        raise
    if not finished:
        status = q.status
        q.stop()
        raise TimeoutError(f"AvailableNow query did not finish within {timeout}s: {status}")
    return q


def start_memory_query(df, checkpoint: str, trigger_s: float = 0.5):
    name = f"q_{uuid.uuid4().hex[:10]}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds").start())
    return q, name


def wait_first_batch(q, timeout: float = QUERY_TIMEOUT_S) -> None:
    """Wait until batch 0 is done: the start is then resolved and logged."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if q.exception() is not None:
            raise q.exception()
        if any(p["batchId"] >= 0 for p in q.recentProgress):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no batch completed within {timeout}s: {q.status}")


def data_progress(q) -> list[dict]:
    """Progress of the batches that read data, or could have: all but an empty batch 0 (which
    found nothing to read, e.g. from "latest")."""
    return [p for p in q.recentProgress if p["batchId"] > 0 or p["numInputRows"] > 0]


def end_offsets(progress: dict) -> dict[str, dict[str, int]]:
    return json.loads(progress["sources"][0]["endOffset"])


def offsets_log(checkpoint: str, batch_id: int) -> dict:
    """The (last) source's offset as Spark logged it for ``batch_id``."""
    entry = SparkCheckpoint(checkpoint).read_offsets(batch_id)
    assert entry is not None, f"Spark logged no offsets for batch {batch_id} in {checkpoint}"
    return entry.source_offsets()[-1]


def has_commit(checkpoint: str, batch_id: int) -> bool:
    return SparkCheckpoint(checkpoint).has_commit(batch_id)


def list_offsets(kafka: KafkaTarget, topic: str, *, committed: bool) -> dict[int, int]:
    """Latest offsets by ListOffsets: the LSO (``committed``) or the high watermark."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = kafka.admin()
    iso = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                  for p in kafka.partitions(topic)}, isolation_level=iso,
                                 request_timeout=30)
    return {tp.partition: f.result(timeout=60).offset for tp, f in futures.items()}
