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


@pytest.mark.parametrize("given, expected", [
    ({}, 60_000), ({"kafka.message.timeout.ms": "0"}, 60_000),
    ({"kafka.delivery.timeout.ms": "20000"}, 20_000), ({"kafka.message.timeout.ms": "90000"}, 60_000)])
def test_a_transactional_record_never_outlives_its_transaction(given, expected):
    # librdkafka's message.timeout.ms=0 means "no limit": inside a transaction it is the
    # transaction's timeout, as is any longer one (delivery.timeout.ms is its alias).
    cfg = SinkConfig.from_options({**BASE, "kafka.transaction.timeout.ms": "60000", **given},
                                  streaming=True)
    conf = producer_config(cfg, _ProducerProbe(cfg.kafka), "t-1-0-0")
    assert conf["message.timeout.ms"] == expected


def test_producers_switch_to_the_advertised_broker_quickly_unless_the_user_says_otherwise():
    for guarantee in ("exactly_once", "at_least_once"):
        cfg = SinkConfig.from_options({**BASE, "deliveryGuarantee": guarantee}, streaming=True)
        tid = "t-1-0-0" if cfg.exactly_once else None
        assert producer_config(cfg, _ProducerProbe(cfg.kafka), tid)["reconnect.backoff.ms"] == 20
    cfg = SinkConfig.from_options({**BASE, "kafka.reconnect.backoff.ms": "250"}, streaming=True)
    assert producer_config(cfg, _ProducerProbe(cfg.kafka), "t-1-0-0")["reconnect.backoff.ms"] == "250"


@pytest.fixture(scope="module")
def mock_cluster():
    """librdkafka's in-process mock cluster (one broker, no Kafka) with topics 'four' and 'two'
    created by its auto-creation; yields the bootstrap address and {topic: partition count}."""
    import logging

    from confluent_kafka import Producer

    quiet = logging.Logger("mock-cluster")
    quiet.addHandler(logging.NullHandler())
    host = Producer({"test.mock.num.brokers": 1, "logger": quiet})
    brokers = host.list_topics(timeout=10).brokers
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    creator = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True,
                        "logger": quiet})
    counts = {t: len(creator.list_topics(t, timeout=10).topics[t].partitions)
              for t in ("four", "two")}
    yield bootstrap, counts
    del host


@pytest.mark.parametrize("guarantee, columns", [
    ("exactly_once", ["value", "partition"]),
    ("exactly_once", ["value", "partition", "headers"]),
    ("at_least_once", ["topic", "value", "partition"]),
])
def test_a_partition_the_topic_lacks_is_refused_as_txkafkas_producer_refuses_it(
        mock_cluster, monkeypatch, tmp_path, guarantee, columns):
    """librdkafka answers only _UNKNOWN_PARTITION (at produce(), or in a delivery report when it
    did not know the topic yet); the task names the value and the topic's partitions, in the
    words of txkafka's own producer, and leaves no transaction open."""
    from txkafka.connector.client.record_batch_encoder import partition_out_of_range
    from txkafka.connector.sink import task_writer

    monkeypatch.setattr(task_writer, "_POOL", {})  # a new pooled producer: topic not known yet
    bootstrap, counts = mock_cluster
    exactly_once = guarantee == "exactly_once"
    options = {"kafka.bootstrap.servers": bootstrap, "producer": "librdkafka",
               "deliveryGuarantee": guarantee, "checkpointLocation": str(tmp_path)}
    if "topic" not in columns:
        options["topic"] = "four"
    cfg = SinkConfig.from_options(options, streaming=True)
    types = {"topic": "string", "value": "binary", "partition": "int", "headers": "headers"}
    w = KafkaWriter(cfg, validate_input_schema({c: types[c] for c in columns}, cfg.topic),
                    batch_id=0, partition_id=0, attempt=0,
                    transactional_id=f"oor-{len(columns)}" if exactly_once else None)
    bad = counts["four"] + 3
    data = {"topic": pa.array(["two", "four", "two"]), "value": pa.array([b"a", b"b", b"c"]),
            "partition": pa.array([1, bad, None], pa.int32()),
            "headers": pa.array([[], [{"key": "h", "value": b"1"}], None], _headers_type())}
    with pytest.raises(KafkaConfigError) as exc:
        w.write([pa.record_batch([data[c] for c in columns], names=columns)])
    assert str(exc.value) == str(partition_out_of_range(bad, "four", counts["four"]))
    assert f"is {bad}, but topic 'four' has {counts['four']} partitions" in str(exc.value)
    if exactly_once:  # the attempt aborted its own transaction
        state = w.probe.fresh_stats(w.producer, timeout=5.0)["eos"]["txn_state"]
        assert state == "Ready", state
