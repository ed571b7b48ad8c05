"""Spark's writer calls, adapted to the sink's core (txkafka.connector).

Where each call runs (pyspark 4.3):
- ``streamWriter()``: on the driver, once while planning each micro-batch (the object is then pickled
  to the tasks) and again, on a fresh object, for ``commit``/``abort``. Both run recovery and plan
  the batch (KafkaCommitter.plan): rolling a decided batch forward is safe at either point and never
  touches the current batch's open transactions (invariant 5); a batch the sink already has must
  read the same source offsets as recorded, or nothing is written (invariant 11).
- ``write()``: in an executor's Python worker, once per task attempt.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Iterator, List, Optional

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from txkafka.connector.errors import KafkaConfigError, TransactionError
from txkafka.connector.sink.committable import TaskResult
from txkafka.connector.sink.committer import KafkaCommitter, WritePlan, host_clock
from txkafka.connector.sink.task_writer import (
    KafkaWriter,
    LateCheck,
    SinkSchema,
    validate_input_schema,
)
from txkafka.connector.sink.late_transactions import follow_up
from txkafka.connector.sink.partition_input import InputDigest
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.start_checks import validate_at_start
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory, run_tag
from txkafka.connector.sink.task_writer_txkafka import WireKafkaWriter

from txkafka.connector.serde.batches import encode_record_batches

from .formats import encode_plan
from .spark_worker import freeze_worker_heap, tune_worker_socket

log = logging.getLogger(__name__)


class TxKafkaCommitMessage(WriterCommitMessage):
    """Carries one task's result from executor to driver, and back to the driver the host clock
    of the batch's planning (``_KafkaWrite.planned_at``), which the task's writer was pickled
    with: a streaming commit runs in a writer Spark creates anew just before ``commit``."""

    def __init__(self, result: TaskResult, planned_at: float | None = None) -> None:
        self.result = result
        self.planned_at = planned_at

    def __repr__(self) -> str:
        c = self.result.committable
        return (f"TxKafkaCommitMessage(partition={self.result.partition_id}, "
                f"attempt={self.result.attempt}, txn={c.transactional_id if c else None}, "
                f"records={self.result.record_count})")


def _simple_type(dt: DataType) -> str:
    if isinstance(dt, StringType):
        return "string"
    if isinstance(dt, BinaryType):
        return "binary"
    if isinstance(dt, IntegerType):
        return "int"
    if isinstance(dt, LongType):
        return "long"
    if isinstance(dt, ShortType):
        return "short"
    if isinstance(dt, ByteType):
        return "byte"
    if isinstance(dt, ArrayType) and isinstance(dt.elementType, StructType):
        names = {f.name.lower(): f.dataType for f in dt.elementType.fields}
        if (set(names) == {"key", "value"} and isinstance(names["key"], StringType)
                and isinstance(names["value"], (BinaryType, StringType))):
            return "headers"
    return dt.simpleString()


def _results(messages: List[Optional[WriterCommitMessage]]) -> list[TaskResult | None]:
    return [m.result if isinstance(m, TxKafkaCommitMessage) else None for m in messages]


def _planned_at(messages: List[Optional[WriterCommitMessage]], own: float) -> float:
    """When the batch was planned: the tasks' planning writer's clock (a message of an older
    txkafka has none), else this writer's own creation. A time after that creation cannot be
    this host's clock (a driver moved to another host): it is not used."""
    return min((m.planned_at for m in messages if isinstance(m, TxKafkaCommitMessage)
                and getattr(m, "planned_at", None) is not None and m.planned_at <= own),
               default=own)


@dataclass(frozen=True)
class _TaskInfo:
    partition_id: int
    attempt: int
    batch_id: int | None
    run: str = "000000"


def _task_context() -> _TaskInfo:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return _TaskInfo(0, 0, None)
    raw = ctx.getLocalProperty("streaming.sql.batchId")
    return _TaskInfo(ctx.partitionId(), ctx.attemptNumber(), int(raw) if raw is not None else None,
                     run_tag(ctx.getLocalProperty("spark.jobGroup.id")))


_CHECKPOINTS_SEEN: set[str] = set()


def _require_own_checkpoint(log: SinkCommitLog) -> None:
    """Spark's checkpoint is where the sink's log is, and the log was recorded for this place (a
    moved or copied checkpoint stops here, before the sink's identity is used and any task
    writes). Once per checkpoint and driver process (this runs before every batch)."""
    if log.location not in _CHECKPOINTS_SEEN:
        log.check_store()
        log.require_spark_checkpoint()
        log.require_own_place()
        _CHECKPOINTS_SEEN.add(log.location)


class _KafkaWrite:
    """Shared by the streaming and batch writers: config, identity, plan, task-side write."""

    encode = None  # the key/value format plan (keyFormat/valueFormat); None: binary columns

    def __init__(self, options, schema: StructType, overwrite: bool, streaming: bool) -> None:
        # Spark creates the writer while it plans the batch, before its tasks start: nothing the
        # batch writes is older (KafkaCommitter's bound on a transaction's age). Spark creates
        # another just before a streaming commit: that one takes the tasks' (_planned_at).
        self.planned_at = host_clock()
        self.cfg = SinkConfig.from_options(options, streaming=streaming)
        self.streaming = streaming
        self.encode = encode_plan(self.cfg.formats, schema, self.cfg.topic)
        formatted = {c.fmt.column for c in (self.encode.key, self.encode.value)
                     if c is not None} if self.encode else set()
        self.sink_schema: SinkSchema = validate_input_schema(
            {f.name: "binary" if f.name.lower() in formatted else _simple_type(f.dataType)
             for f in schema.fields}, self.cfg.topic
        )
        if overwrite:
            raise KafkaConfigError(
                "txkafka appends to Kafka topics: "
                + ("output mode 'complete' rewrites the whole result each batch; use "
                   "outputMode('append')" if streaming else
                   "save mode 'overwrite' is not supported; use mode('append')"))
        self.plan = WritePlan()
        self.ids: TransactionalIdFactory | None = None
        self._committer: KafkaCommitter | None = None
        commit_log = (SinkCommitLog(self.cfg.checkpoint_location or "", self.cfg.s3)
                      if streaming and self.cfg.exactly_once else None)
        if commit_log is not None:
            _require_own_checkpoint(commit_log)
        # Keeps what the checks found beside the commit log: a broker down later never fails them.
        validate_at_start(self.cfg, self.sink_schema, commit_log=commit_log)
        if not self.cfg.exactly_once:
            return
        if commit_log is not None:
            identity = commit_log.identity(self.cfg.transactional_id_prefix)
            self.ids = TransactionalIdFactory(self.cfg.transactional_id_prefix, identity.sink_id)
            self._committer = KafkaCommitter(self.cfg, self.ids, commit_log)
            # Driver-side recovery and checks before this batch's tasks start (invariants 4, 11).
            self.plan = self._committer.plan()
        else:
            # A batch write is one job with its own ids, committed by this same object after it
            # comes back from pickling; it keeps no durable log (see docs/design.md).
            self.ids = TransactionalIdFactory(self.cfg.transactional_id_prefix,
                                              "b" + uuid.uuid4().hex[:8])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_committer"] = None  # live clients never travel to executors
        return state

    def committer(self) -> KafkaCommitter:
        if self._committer is None:
            assert self.ids is not None
            commit_log = (SinkCommitLog(self.cfg.checkpoint_location or "", self.cfg.s3)
                          if self.streaming else None)
            self._committer = KafkaCommitter(self.cfg, self.ids, commit_log)
        return self._committer

    # ------------------------------------------------------------------ task side

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxKafkaCommitMessage:
        tune_worker_socket()
        message = self._write(iterator)
        freeze_worker_heap("write")
        return message

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> TxKafkaCommitMessage:
        task = _task_context()
        partition_id, attempt, batch_id = task.partition_id, task.attempt, task.batch_id
        if batch_id is None and self.streaming and self.cfg.exactly_once:
            # Guessing batch 0 would let should_write() skip rows of a later batch.
            raise TransactionError(
                f"task partition {partition_id} attempt {attempt}: Spark did not set the task's "
                "local property streaming.sql.batchId, so txkafka cannot tell which micro-batch "
                "this task writes and refuses to guess (a wrong batch could skip or repeat rows). "
                "Nothing was written. Spark's micro-batch execution normally sets it: report this "
                "with the Spark version and deployment (Connect, cluster manager); "
                "deliveryGuarantee=at_least_once does not need it."
            )
        # A batch write is one job, batch 0, whatever batch id it inherits: inside foreachBatch
        # its tasks carry the stream's streaming.sql.batchId, and its commit checks batch 0.
        batch = batch_id if self.streaming and batch_id is not None else 0
        if self.encode is not None:
            # Encoded first: the input digest and the record encoder see binary key and value.
            iterator = encode_record_batches(iterator, self.encode, self.cfg.topic)
        digest: InputDigest | None = None
        if self.streaming and self.cfg.exactly_once:
            # What this task read, for the layout check of a re-written round (invariant 12).
            digest = InputDigest()
            iterator = digest.wrap(iterator)
        if self.cfg.exactly_once and not self.plan.should_write(batch, partition_id):
            for _ in iterator:  # drain: the input must be consumed even when nothing is written
                pass
            return TxKafkaCommitMessage(TaskResult(
                partition_id, attempt, batch, None, 0, True,
                input=digest.result() if digest is not None else None), self.planned_at)
        tid = (self.ids.transactional_id(partition_id, attempt, run=task.run, batch_id=batch)
               if self.ids else None)
        late_check = None
        if self.streaming and self.cfg.exactly_once and self.cfg.checkpoint_location:
            late_check = LateCheck(self.cfg.checkpoint_location, batch, self.plan.round_no,
                                   self.cfg.s3)
        writer_cls = WireKafkaWriter if self.cfg.producer == "txkafka" else KafkaWriter
        writer = writer_cls(self.cfg, self.sink_schema, batch_id=batch, partition_id=partition_id,
                            attempt=attempt, transactional_id=tid, late_check=late_check)
        try:
            committable = writer.write(iterator)
        finally:
            writer.release()
        return TxKafkaCommitMessage(TaskResult(
            partition_id, attempt, batch, committable, 0 if writer.late else writer.count,
            writer.late, input=digest.result() if digest is not None else None), self.planned_at)

    def _end(self, batch_id: int, messages: List[Optional[WriterCommitMessage]],
             abort: bool) -> None:
        committer = self.committer()
        # A streaming commit's writer is created just before it: the batch's age counts from
        # the planning writer's clock, which the tasks carried back.
        committer.planned_at = _planned_at(messages, self.planned_at)
        try:
            (committer.abort if abort else committer.commit)(batch_id, _results(messages))
        finally:
            # Attempts Spark gave up on can still open transactions (invariant 13).
            follow_up(committer.client, committer.ids, committer.log,
                      self.cfg.transaction_timeout_ms)


class KafkaStreamingWrite(_KafkaWrite, DataSourceStreamArrowWriter):
    def __init__(self, options, schema: StructType, overwrite: bool) -> None:
        _KafkaWrite.__init__(self, options, schema, overwrite, streaming=True)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        if self.cfg.exactly_once:
            self._end(batchId, messages, abort=False)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        if self.cfg.exactly_once:
            self._end(batchId, messages, abort=True)


class KafkaBatchWrite(_KafkaWrite, DataSourceArrowWriter):
    def __init__(self, options, schema: StructType, overwrite: bool) -> None:
        _KafkaWrite.__init__(self, options, schema, overwrite, streaming=False)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        if self.cfg.exactly_once:
            self._end(0, messages, abort=False)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        if self.cfg.exactly_once:
            self._end(0, messages, abort=True)

