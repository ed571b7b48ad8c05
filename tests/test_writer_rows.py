"""Rows to produce() calls: the input columns as Spark's Kafka sink reads them (no broker)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.sink.task_writer import KafkaWriter, producer_config, validate_input_schema, \
    _ProducerProbe
from txkafka.connector.sink.options import SinkConfig

BASE = {"kafka.bootstrap.servers": "h:9092", "topic": "out", "checkpointLocation": "/tmp/x"}


class RecordingProducer:
    def __init__(self) -> None:
        self.records: list[tuple] = []

    def produce(self, *args, **kwargs):
        self.records.append((args, kwargs))

    def poll(self, timeout=0):
        return 0


def _writer(options: dict, schema: dict) -> KafkaWriter:
    cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": "at_least_once", **options},
                                  streaming=True)
    w = KafkaWriter(cfg, validate_input_schema(schema, cfg.topic), batch_id=0, partition_id=0,
                    attempt=0, transactional_id=None)
    w.producer = RecordingProducer()
    return w


def _headers_type(key: str = "key", value: str = "value") -> pa.DataType:
    return pa.list_(pa.struct([pa.field(key, pa.string()), pa.field(value, pa.binary())]))


def test_header_struct_field_names_match_case_insensitively():
    # Spark (case-insensitive analysis, the default) accepts struct<Key:string,Value:binary>, and
    # so does the schema check at start: the task must then read those fields too.
    w = _writer({}, {"value": "binary", "headers": "headers"})
    headers = pa.array([[{"Key": "h", "Value": b"1"}]], _headers_type("Key", "Value"))
    w._produce_batch(pa.record_batch([pa.array([b"v"]), headers], names=["value", "headers"]))
    assert w.producer.records == [(("out", b"v", None), {"headers": [("h", b"1")]})]


def test_a_null_header_value_is_written_as_a_null_value():
    w = _writer({}, {"value": "binary", "headers": "headers"})
    headers = pa.array([[{"key": "h", "value": None}]], _headers_type())
    w._produce_batch(pa.record_batch([pa.array([b"v"]), headers], names=["value", "headers"]))
    assert w.producer.records == [(("out", b"v", None), {"headers": [("h", None)]})]


def test_a_null_header_key_fails_naming_the_column():
    # confluent-kafka would write the header name "None"; Spark's sink fails the task.
    w = _writer({}, {"value": "binary", "headers": "headers"})
    headers = pa.array([[{"key": None, "value": b"x"}]], _headers_type())
    with pytest.raises(KafkaConfigError, match="'headers'.*null key"):
        w._produce_batch(pa.record_batch([pa.array([b"v"]), headers], names=["value", "headers"]))
    assert w.producer.records == []


@pytest.mark.parametrize("bad", [-1, -2])
def test_a_negative_partition_fails_naming_the_column(bad):
    # librdkafka reads -1 as "unassigned" and would let the partitioner place the record; Java's
    # ProducerRecord (Spark's sink) refuses a negative partition.
    w = _writer({}, {"value": "binary", "partition": "int"})
    batch = pa.record_batch([pa.array([b"a", b"b"]), pa.array([0, bad], pa.int32())],
                            names=["value", "partition"])
    with pytest.raises(KafkaConfigError, match=f"'partition'.*{bad}"):
        w._produce_batch(batch)
    assert w.producer.records == []


def test_a_partition_beyond_int_fails_naming_the_column():
    w = _writer({}, {"value": "binary", "partition": "long"})
    batch = pa.record_batch([pa.array([b"a"]), pa.array([2**40], pa.int64())],
                            names=["value", "partition"])
    with pytest.raises(KafkaConfigError, match="'partition'"):
        w._produce_batch(batch)


def test_null_partitions_leave_placement_to_the_partitioner():
    w = _writer({}, {"value": "binary", "partition": "int"})
    batch = pa.record_batch([pa.array([b"a", b"b"]), pa.array([None, 2], pa.int32())],
                            names=["value", "partition"])
    w._produce_batch(batch)
    # Positional, as the C produce loop passes them: -1 is librdkafka's "unassigned" partition.
    assert w.producer.records == [(("out", b"a", None, -1), {}), (("out", b"b", None, 2), {})]


def test_null_partitions_with_headers_pass_no_partition_at_all():
    w = _writer({}, {"value": "binary", "partition": "int", "headers": "headers"})
    headers = pa.array([[{"key": "h", "value": b"1"}], None], _headers_type())
    batch = pa.record_batch([pa.array([b"a", b"b"]), pa.array([None, 2], pa.int32()), headers],
                            names=["value", "partition", "headers"])
    w._produce_batch(batch)
    assert w.producer.records == [(("out", b"a", None), {"headers": [("h", b"1")]}),
                                  (("out", b"b", None), {"partition": 2})]


def test_the_topic_option_overrides_a_topic_column_of_any_type():
    # Spark: topic.map(Literal(_)) - with the option set, the column is never read or type-checked.
    schema = validate_input_schema({"value": "binary", "topic": "int"}, "out")
    assert not schema.has_topic
    with pytest.raises(KafkaConfigError, match="column 'topic' must be string"):
        validate_input_schema({"value": "binary", "topic": "int"}, None)


def test_the_producer_never_asks_the_broker_to_create_a_topic():
    # librdkafka's producer default is allow.auto.create.topics=true: a row's topic (column) that
    # does not exist would be created with the broker's defaults.
    for guarantee in ("exactly_once", "at_least_once"):
        cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": guarantee}, streaming=True)
        tid = "t-1-0-0" if cfg.exactly_once else None
        assert producer_config(cfg, _ProducerProbe(cfg.kafka), tid)["allow.auto.create.topics"] \
            is False


def test_producers_switch_to_the_advertised_broker_quickly_unless_the_user_says_otherwise():
    for guarantee in ("exactly_once", "at_least_once"):
        cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": guarantee}, streaming=True)
        tid = "t-1-0-0" if cfg.exactly_once else None
        assert producer_config(cfg, _ProducerProbe(cfg.kafka), tid)["reconnect.backoff.ms"] == 20
    cfg = SinkConfig.from_options({**BASE, "kafka.reconnect.backoff.ms": "250"}, streaming=True)
    assert producer_config(cfg, _ProducerProbe(cfg.kafka), "t-1-0-0")["reconnect.backoff.ms"] == "250"
