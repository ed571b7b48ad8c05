"""A full librdkafka send queue: the writer waits for room and never drops a record."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txkafka.connector.sink import task_writer as kafka_writer
from txkafka.connector.errors import TransactionError
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
from txkafka.connector.sink.options import SinkConfig

BASE = {"kafka.bootstrap.servers": "h:9092", "topic": "out", "checkpointLocation": "/tmp/x"}


class FullQueueProducer:
    """Refuses every produce call while ``full`` > 0; each poll frees one unit of room."""

    def __init__(self, full: int) -> None:
        self.full = full
        self.polls = 0
        self.records: list[tuple] = []

    def produce(self, *args, **kwargs):
        if self.full > 0:
            raise BufferError("Local: Queue full")
        self.records.append((args, kwargs))

    def poll(self, timeout=0):
        self.polls += 1
        self.full = max(0, self.full - 1)
        return 0


def _writer(options: dict, schema: dict) -> KafkaWriter:
    cfg = SinkConfig.from_options({**BASE, **options}, streaming=True)
    w = KafkaWriter(cfg, validate_input_schema(schema, cfg.topic), batch_id=3, partition_id=1,
                    attempt=0, transactional_id=None if not cfg.exactly_once else "tx-1-0-0")
    return w


@pytest.mark.parametrize("schema,columns", [
    ({"value": "binary"}, {"value": pa.array([b"a", b"b", b"c"])}),
    ({"key": "binary", "value": "binary"},
     {"key": pa.array([b"1", b"2", b"3"]), "value": pa.array([b"a", b"b", b"c"])}),
    ({"value": "binary", "partition": "int"},
     {"value": pa.array([b"a", b"b", b"c"]), "partition": pa.array([0, 1, 0], pa.int32())}),
])
def test_a_queue_full_for_many_polls_delays_but_loses_nothing(schema, columns):
    w = _writer({}, schema)
    w.producer = FullQueueProducer(full=7)  # one poll (the old behaviour) was not enough
    w._produce_batch(pa.record_batch(list(columns.values()), names=list(columns)))
    assert [r[0][1] for r in w.producer.records] == [b"a", b"b", b"c"]
    assert w.producer.polls >= 7
    assert w.count == 3


class FillingProducer:
    """Takes ``room`` records, then refuses them until ``polls_to_drain`` polls made room again."""

    def __init__(self, room: int, polls_to_drain: int) -> None:
        self.room, self.polls_to_drain = room, polls_to_drain
        self.free, self.blocked_polls = room, 0
        self.records: list[tuple] = []
        self.refusals = 0

    def produce(self, *args, **kwargs):
        if self.free == 0:
            self.refusals += 1
            raise BufferError("Local: Queue full")
        self.free -= 1
        self.records.append(args)

    def poll(self, timeout=0):
        if self.free == 0:
            self.blocked_polls += 1
            if self.blocked_polls >= self.polls_to_drain:
                self.free, self.blocked_polls = self.room, 0
        return 0


@pytest.mark.parametrize("keyed", [False, True])
def test_a_queue_filling_again_and_again_mid_batch_keeps_every_row_once_in_order(keyed):
    n = 1000
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % i for i in range(n)]
    schema = {"key": "binary", "value": "binary"} if keyed else {"value": "binary"}
    cols = ([pa.array(keys)] if keyed else []) + [pa.array(values)]
    w = _writer({}, schema)
    w.producer = FillingProducer(room=37, polls_to_drain=3)
    w._produce_batch(pa.record_batch(cols, names=list(schema)))
    assert w.producer.refusals >= n // 37
    expected = ([("out", v, k) for v, k in zip(values, keys)] if keyed
                else [("out", v) for v in values])
    assert w.producer.records == expected
    assert w.count == n


def test_rows_with_a_topic_column_survive_a_filling_queue_with_their_own_topics():
    n = 500
    values = [b"v%d" % i for i in range(n)]
    topics = ["t%d" % (i % 3) for i in range(n)]
    cfg = SinkConfig.from_options({k: v for k, v in BASE.items() if k != "topic"}, streaming=True)
    w = KafkaWriter(cfg, validate_input_schema({"topic": "string", "value": "binary"}, None),
                    batch_id=3, partition_id=1, attempt=0, transactional_id="tx-1-0-0")
    w.producer = FillingProducer(room=11, polls_to_drain=2)
    w._produce_batch(pa.record_batch([pa.array(topics), pa.array(values)],
                                     names=["topic", "value"]))
    assert w.producer.refusals >= n // 11
    assert w.producer.records == list(zip(topics, values))


@pytest.mark.parametrize("keyed", [False, True])
def test_rows_with_a_partition_column_survive_a_filling_queue_with_their_partitions(keyed):
    n = 300
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % i for i in range(n)]
    parts = [None if i % 4 == 0 else i % 3 for i in range(n)]
    schema = {"key": "binary", "value": "binary", "partition": "int"} if keyed else {
        "value": "binary", "partition": "int"}
    cols = ([pa.array(keys)] if keyed else []) + [pa.array(values), pa.array(parts, pa.int32())]
    w = _writer({}, schema)
    w.producer = FillingProducer(room=13, polls_to_drain=2)
    w._produce_batch(pa.record_batch(cols, names=list(schema)))
    assert w.producer.refusals >= n // 13
    assert w.producer.records == [
        ("out", v, k if keyed else None, -1 if p is None else p)
        for v, k, p in zip(values, keys, parts)]


def test_a_queue_that_never_drains_fails_the_write_with_a_clear_error(monkeypatch):
    w = _writer({"kafka.message.timeout.ms": "1000"}, {"value": "binary"})
    w.producer = FullQueueProducer(full=10**9)
    clock = iter(range(0, 10**6, 1))  # a fake monotonic clock: one second per call
    monkeypatch.setattr(kafka_writer.time, "monotonic", lambda: float(next(clock)))
    with pytest.raises(TransactionError, match=r"send queue stayed full for 1s.*batch 3"):
        w._produce_batch(pa.record_batch([pa.array([b"a"])], names=["value"]))
    assert w.producer.records == []


def test_the_delivery_timeout_is_capped_by_the_transaction_only_when_exactly_once():
    eos = SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "20000"}, streaming=True)
    assert kafka_writer._delivery_timeout_s(eos) == 20.0
    alo = SinkConfig.from_options({**BASE, "deliveryGuarantee": "at_least_once",
                                   "kafka.message.timeout.ms": "90000"}, streaming=True)
    assert kafka_writer._delivery_timeout_s(alo) == 90.0


class FailedTransactionProducer:
    """Takes ``room`` records, then refuses every produce as librdkafka does once the transaction
    failed (its AddPartitionsToTxn refused while the task was still producing)."""

    def __init__(self, room: int) -> None:
        self.room = room

    def produce(self, *args, **kwargs):
        from confluent_kafka import KafkaError, KafkaException

        if self.room == 0:
            raise KafkaException(KafkaError(KafkaError._STATE,
                                            "Unable to produce message: Local: Erroneous state"))
        self.room -= 1

    def poll(self, timeout=0):
        return 0


@pytest.mark.parametrize("schema,columns,topics", [
    ({"value": "binary"}, {"value": pa.array([b"a", b"b", b"c"])}, ["out"]),
    ({"value": "binary", "topic": "string"},
     {"value": pa.array([b"a", b"b", b"c"]), "topic": pa.array(["t2", "t1", "t2"])},
     ["t1", "t2"]),
])
def test_a_produce_refused_by_a_failed_transaction_names_the_missing_acl(monkeypatch, schema,
                                                                          columns, topics):
    from txkafka.connector.errors import KafkaAuthorizationError

    asked: list = []

    def missing(admin, names, needed, **kw):
        asked.append(sorted(names))
        return {"t2": ["WRITE"]} if "t2" in names else {"out": ["WRITE"]}

    monkeypatch.setattr(kafka_writer, "missing_topic_operations", missing)
    w = _writer({} if "topic" not in schema else {"topic": None}, schema)
    w.producer = FailedTransactionProducer(room=1)
    with pytest.raises(KafkaAuthorizationError, match="refused a record: its transaction had "
                       "failed.*lacks WRITE"):
        w._produce_batch(pa.record_batch(list(columns.values()), names=list(columns)))
    assert asked == [topics]  # every topic the batch writes, asked once


def test_a_produce_refused_by_a_failed_transaction_with_every_acl_keeps_librdkafkas_error(
        monkeypatch):
    from confluent_kafka import KafkaException

    monkeypatch.setattr(kafka_writer, "missing_topic_operations", lambda *a, **kw: {})
    w = _writer({}, {"value": "binary"})
    w.producer = FailedTransactionProducer(room=0)
    with pytest.raises(KafkaException, match="Erroneous state"):
        w._produce_batch(pa.record_batch([pa.array([b"a"])], names=["value"]))
