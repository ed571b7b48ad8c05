"""at_least_once: the pooled producer's delivery errors belong to the task that saw them.

One worker keeps one idempotent producer for every task. After a task failed on a missing topic
ACL, the next task (the ACL granted meanwhile) must not fail on the old delivery error.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError

from txkafka.connector.sink import task_writer as kafka_writer
from txkafka.connector.errors import KafkaAuthorizationError, TransactionError
from txkafka.connector.sink.task_writer import KafkaWriter, validate_input_schema
from txkafka.connector.sink.options import SinkConfig

OPTIONS = {"kafka.bootstrap.servers": "pooled-test:9092", "topic": "out",
           "deliveryGuarantee": "at_least_once"}


class _Msg:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self):
        return self._topic

    def partition(self):
        return 0


class AclProducer:
    """Delivers every record unless ``denied``: then reports TOPIC_AUTHORIZATION_FAILED."""

    def __init__(self, conf: dict) -> None:
        self.on_delivery = conf["on_delivery"]
        self.denied = True
        self.pending: list[str] = []

    def produce(self, topic, value=None, key=None, **kwargs):
        self.pending.append(topic)

    def poll(self, timeout=0):
        while self.pending:
            topic = self.pending.pop()
            if self.denied:
                self.on_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), _Msg(topic))
        return 0

    def flush(self, timeout=None):
        self.poll()
        return 0


def _task(cfg: SinkConfig, partition: int):
    w = KafkaWriter(cfg, validate_input_schema({"value": "binary"}, cfg.topic), batch_id=1,
                    partition_id=partition, attempt=0, transactional_id=None)
    return w.write([pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"b"])})])


def test_a_task_after_a_fixed_acl_succeeds_on_the_same_producer(monkeypatch):
    producers: list[AclProducer] = []
    monkeypatch.setattr(kafka_writer, "_new_producer",
                        lambda conf: producers.append(AclProducer(conf)) or producers[-1])
    monkeypatch.setattr(kafka_writer, "_POOL", {})
    cfg = SinkConfig.from_options(OPTIONS, streaming=True)
    with pytest.raises(KafkaAuthorizationError, match="TOPIC_AUTHORIZATION_FAILED"):
        _task(cfg, 0)
    producers[0].denied = False  # the operator granted WRITE on the topic
    assert _task(cfg, 1) is None  # delivered (at_least_once returns no committable)
    assert len(producers) == 1  # the pooled producer was reused


class FlushProducer(AclProducer):
    """Records what each flush was given (the test needs no broker and no wall clock)."""

    def __init__(self, conf: dict) -> None:
        super().__init__(conf)
        self.denied = False
        self.flushes: list[float] = []

    def flush(self, timeout=None):
        self.flushes.append(timeout)
        return super().flush(timeout)


@pytest.mark.parametrize("extra, waits", [
    ({"kafka.message.timeout.ms": "20000"}, 20.0),
    ({}, 300.0),  # librdkafka's default message.timeout.ms
    ({"kafka.message.timeout.ms": "0"}, -1),  # no limit: a flush without one
])
def test_the_flush_waits_for_the_delivery_timeout_not_the_transaction_timeout(
        monkeypatch, extra, waits):
    """at_least_once has no transaction: a record may wait kafka.message.timeout.ms for its
    delivery, and the pooled producer delivers it later anyway. A flush given up at the
    (unused) transaction timeout failed the task during a shorter broker outage, and its retry
    wrote the records again."""
    producers: list[FlushProducer] = []
    monkeypatch.setattr(kafka_writer, "_new_producer",
                        lambda conf: producers.append(FlushProducer(conf)) or producers[-1])
    monkeypatch.setattr(kafka_writer, "_POOL", {})
    cfg = SinkConfig.from_options({**OPTIONS, "kafka.transaction.timeout.ms": "3000", **extra},
                                  streaming=True)
    assert _task(cfg, 0) is None
    assert producers[0].flushes == [waits]


class SkewedClockProducer(AclProducer):
    """The topic's leader refuses every record's CreateTime (this executor's clock is off)."""

    def poll(self, timeout=0):
        while self.pending:
            self.on_delivery(KafkaError(KafkaError.INVALID_TIMESTAMP), _Msg(self.pending.pop()))
        return 0


def test_a_refused_record_timestamp_names_the_clocks_and_the_topic_settings(monkeypatch):
    monkeypatch.setattr(kafka_writer, "_new_producer", SkewedClockProducer)
    monkeypatch.setattr(kafka_writer, "_POOL", {})
    cfg = SinkConfig.from_options(OPTIONS, streaming=True)
    with pytest.raises(TransactionError, match=r"task partition 0: writing out\[0\]: the broker "
                       r"refused the records' timestamps \(INVALID_TIMESTAMP\).*clock of the "
                       r"executor.*message.timestamp.after.max.ms.*\(NTP\)"):
        _task(cfg, 0)
