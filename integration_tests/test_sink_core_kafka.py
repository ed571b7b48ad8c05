"""The sink's core against a real Apache Kafka, without Spark: pre-commit in a task, commit from a
different connection (the driver), loss detection, orphan sweeping."""

from __future__ import annotations


import pyarrow as pa
import pytest

from tests.test_sink_core import _spark_offsets
from txkafka.connector.errors import TransactionError, TransactionLostError
from txkafka.connector.fault_injection import arm, disarm
from txkafka.connector.sink.committable import TaskResult
from txkafka.connector.sink.committer import KafkaCommitter, WritePlan
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.sink.options import SinkConfig
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory

# The protocol client's commit, validation, sweep and loss detection on every Kafka tested.
pytestmark = [pytest.mark.kafka, pytest.mark.kafka_matrix]


def _setup(kafka, tmp_path, topic, **opts):
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic,
               "checkpointLocation": str(tmp_path), **opts}
    cfg = SinkConfig.from_options(options, streaming=True)
    log = SinkCommitLog(str(tmp_path))
    ids = TransactionalIdFactory(cfg.transactional_id_prefix, log.identity("x").sink_id)
    return cfg, log, ids, KafkaCommitter(cfg, ids, log)


def _batch(start: int, n: int) -> pa.RecordBatch:
    vals = [f"v{i}".encode() for i in range(start, start + n)]
    keys = [f"k{i}" for i in range(start, start + n)]
    return pa.record_batch([pa.array(keys, pa.string()), pa.array(vals, pa.binary())],
                           names=["key", "value"])


def _task(cfg, ids, batch_id, part, batches, attempt=0):
    schema = validate_input_schema({"key": "string", "value": "binary"}, cfg.topic)
    w = KafkaWriter(cfg, schema, batch_id=batch_id, partition_id=part, attempt=attempt,
                    transactional_id=ids.transactional_id(part, attempt))
    c = w.write(batches)
    w.release()
    return TaskResult(part, attempt, batch_id, c, w.count)


def test_precommitted_transactions_are_committed_by_the_driver(kafka, tmp_path):
    topic = kafka.create_topic(partitions=3)
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic)
    r0 = _task(cfg, ids, 0, 0, [_batch(0, 100), _batch(100, 50)])
    r1 = _task(cfg, ids, 0, 1, [_batch(150, 50)])
    empty = _task(cfg, ids, 0, 2, [])
    assert empty.committable is None  # an empty task opens nothing
    c0 = r0.committable
    assert c0.record_count == 150 and c0.producer_id >= 0 and c0.producer_epoch >= 0

    # Pre-committed: visible to read_uncommitted only.
    assert len(kafka.read_all(topic, isolation="read_uncommitted")) == 200
    assert kafka.read_all(topic) == []

    report = committer.commit(0, [r0, r1, empty])
    assert report.transactions == 2 and report.records == 200
    values = sorted(int(r.value[1:]) for r in kafka.read_all(topic))
    assert values == list(range(200))
    assert log.latest().complete
    # The decision records the partitions the coordinator saw in each transaction: keys spread.
    decided = {c.transactional_id: c for c in log.latest().rounds[-1].decision}
    assert sum(len(p) for p in decided[c0.transactional_id].topic_partitions.values()) >= 2
    assert kafka.open_transactions(ids.sink_prefix) == []

    # Keys land where Java's murmur2 partitioner puts them: the same key, the same partition.
    placed = {r.key: r.partition for r in kafka.read_all(topic)}
    again = _task(cfg, ids, 1, 0, [_batch(0, 20)])
    committer.commit(1, [again])
    for r in kafka.read_all(topic):
        assert placed[r.key] == r.partition


def test_failed_attempt_and_speculative_loser_are_swept(kafka, tmp_path):
    topic = kafka.create_topic(partitions=2)
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic)
    loser = _task(cfg, ids, 0, 0, [_batch(0, 10)], attempt=0)      # never reaches commit()
    winner = _task(cfg, ids, 0, 0, [_batch(0, 10)], attempt=1)
    assert loser.committable.transactional_id != winner.committable.transactional_id
    assert len(kafka.open_transactions(ids.sink_prefix)) == 2
    report = committer.commit(0, [winner])
    assert report.orphans_aborted == 1
    assert kafka.open_transactions(ids.sink_prefix) == []
    assert sorted(r.value for r in kafka.read_all(topic)) == sorted(f"v{i}".encode() for i in range(10))


def test_validation_rejects_a_fenced_transaction(kafka, tmp_path):
    topic = kafka.create_topic()
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic)
    first = _task(cfg, ids, 0, 0, [_batch(0, 5)])
    _zombie = _task(cfg, ids, 0, 0, [_batch(100, 5)])  # same id: fences and aborts `first`
    with pytest.raises(TransactionError, match="cannot be committed"):
        committer.commit(0, [first])
    assert log.latest() is None  # no decision
    assert kafka.read_all(topic) == []
    committer.sweep_orphans()
    assert kafka.open_transactions(ids.sink_prefix) == []


def test_broker_timeout_after_decision_is_detected_recorded_and_redone(kafka, tmp_path):
    topic = kafka.create_topic(partitions=2)
    spec = "point=after_decision,action=sleep,ms=9000"
    _spark_offsets(tmp_path, 0, '{"in":{"0":20}}')
    arm(spec)
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic, **{
        "kafka.transaction.timeout.ms": "3000"})
    try:
        r0 = _task(cfg, ids, 0, 0, [_batch(0, 10)])
        r1 = _task(cfg, ids, 0, 1, [_batch(10, 10)])
        with pytest.raises(TransactionLostError) as err:
            committer.commit(0, [r0, r1])
    finally:
        disarm()
    msg = str(err.value)
    assert "batch 0" in msg and "task partition 0" in msg and "task partition 1" in msg
    assert kafka.read_all(topic) == []  # nothing silently half-committed
    state = log.latest()
    assert state.redo_partitions == {0, 1}

    cfg2, _, _, committer2 = _setup(kafka, tmp_path, topic, **{"kafka.transaction.timeout.ms": "60000"})
    plan = committer2.plan()  # the restart plans batch 0 again (its offsets/0 is the newest)
    assert plan == WritePlan(0, redo=frozenset({0, 1}), round_no=1)  # round 0 was lost
    assert plan.should_write(0, 0) and plan.should_write(0, 1)
    redo = [_task(cfg2, ids, 0, 0, [_batch(0, 10)]), _task(cfg2, ids, 0, 1, [_batch(10, 10)])]
    committer2.commit(0, redo)
    assert sorted(int(r.value[1:]) for r in kafka.read_all(topic)) == list(range(20))
    assert log.latest().complete and len(log.latest().rounds) == 2


def test_general_path_topic_column_headers_partition(kafka, tmp_path):
    t1 = kafka.create_topic(partitions=2)
    t2 = kafka.create_topic(partitions=2)
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "checkpointLocation": str(tmp_path)}
    cfg = SinkConfig.from_options(options, streaming=True)
    log = SinkCommitLog(str(tmp_path))
    ids = TransactionalIdFactory(cfg.transactional_id_prefix, log.identity("x").sink_id)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.record_batch([
        pa.array([t1, t2, t1], pa.string()),
        pa.array(["a", None, "c"], pa.string()),
        pa.array([1, 0, None], pa.int32()),
        pa.array([[{"key": "h", "value": b"1"}], None, []], header_type),
    ], names=["topic", "value", "partition", "headers"])
    schema = validate_input_schema({"topic": "string", "value": "string", "partition": "int",
                                    "headers": "headers"}, None)
    w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0,
                    transactional_id=ids.transactional_id(0, 0))
    c = w.write([batch])
    KafkaCommitter(cfg, ids, log).commit(0, [TaskResult(0, 0, 0, c, 3)])
    got1 = kafka.read_all(t1)
    got2 = kafka.read_all(t2)
    assert [r.partition for r in got1 if r.value == b"a"] == [1]  # the explicit partition
    assert [r.headers for r in got1 if r.value == b"a"] == [(("h", b"1"),)]
    assert [r.value for r in got2] == [None]  # a null value is a tombstone
    assert sorted(r.value for r in got1) == [b"a", b"c"]  # each exactly once


def test_partition_column_without_headers_explicit_and_null(kafka, tmp_path):
    """The C produce loop's partition argument: explicit partitions land there, a null one is
    placed by the partitioner (murmur2 of the key, as a row without the column would be)."""
    topic = kafka.create_topic(partitions=3)
    cfg, log, ids, committer = _setup(kafka, tmp_path, topic)
    n = 60
    keys = [f"k{i}" for i in range(n)]
    parts = [None if i % 2 else i % 3 for i in range(n)]
    batch = pa.record_batch([pa.array(keys, pa.string()),
                             pa.array([f"v{i}".encode() for i in range(n)], pa.binary()),
                             pa.array(parts, pa.int64())], names=["key", "value", "partition"])
    schema = validate_input_schema({"key": "string", "value": "binary", "partition": "long"},
                                   cfg.topic)
    w = KafkaWriter(cfg, schema, batch_id=0, partition_id=0, attempt=0,
                    transactional_id=ids.transactional_id(0, 0))
    c = w.write([batch])
    w.release()
    committer.commit(0, [TaskResult(0, 0, 0, c, w.count)])
    records = kafka.read_all(topic)
    # each exactly once (the values, not a dict of them: a duplicate would collapse into one key)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(n))
    got = {r.value: r for r in records}
    for i, p in enumerate(parts):
        if p is not None:
            assert got[f"v{i}".encode()].partition == p
    # The null-partition rows went where the partitioner puts their keys: the same key written
    # without a partition column (next batch) lands in the same partition.
    nulls = [i for i, p in enumerate(parts) if p is None]
    assert len({got[f"v{i}".encode()].partition for i in nulls}) >= 2  # spread, not all on -1/0
    again = _task(cfg, ids, 1, 0, [pa.record_batch(
        [pa.array([keys[i] for i in nulls], pa.string()),
         pa.array([f"again{i}".encode() for i in nulls], pa.binary())], names=["key", "value"])])
    committer.commit(1, [again])
    placed = {r.value: r.partition for r in kafka.read_all(topic)}
    for i in nulls:
        assert placed[f"again{i}".encode()] == placed[f"v{i}".encode()], keys[i]


def test_at_least_once_writes_without_transactions(kafka, tmp_path):
    topic = kafka.create_topic()
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic,
                                   "deliveryGuarantee": "at_least_once"}, streaming=True)
    schema = validate_input_schema({"key": "string", "value": "binary"}, topic)
    for b in range(2):  # the pooled producer is reused across tasks
        w = KafkaWriter(cfg, schema, batch_id=b, partition_id=0, attempt=0, transactional_id=None)
        assert w.write([_batch(b * 10, 10)]) is None
    assert sorted(int(r.value[1:]) for r in kafka.read_all(topic)) == list(range(20))
