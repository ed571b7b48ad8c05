"""The metadata warm-up before init_transactions (see kafka_writer._connect_to_cluster)."""

from __future__ import annotations

from confluent_kafka import KafkaException

from txkafka.connector.sink import task_writer as kafka_writer
from txkafka.connector.sink.options import SinkConfig

BASE = {"kafka.bootstrap.servers": "h:9092", "checkpointLocation": "/tmp/x",
        "kafka.sasl.password": "s3cret-pw"}


class MetadataProducer:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def list_topics(self, topic=None, timeout=-1):
        self.calls.append((topic, timeout))
        if self.fail:
            raise KafkaException("Local: Broker transport failure (password=s3cret-pw)")


def test_two_metadata_requests_for_the_sink_topic_come_before_init():
    cfg = SinkConfig.from_options({**BASE, "topic": "out"}, streaming=True)
    p = MetadataProducer()
    kafka_writer._connect_to_cluster(p, cfg)
    assert [t for t, _ in p.calls] == ["out", "out"]
    assert all(0 < timeout <= 5.0 for _, timeout in p.calls)


def test_without_a_fixed_topic_nothing_is_asked():
    cfg = SinkConfig.from_options(BASE, streaming=True)
    p = MetadataProducer()
    kafka_writer._connect_to_cluster(p, cfg)
    assert p.calls == []


def test_a_failed_warm_up_is_left_to_init_transactions_and_never_logs_the_secret(caplog):
    cfg = SinkConfig.from_options({**BASE, "topic": "out"}, streaming=True)
    caplog.set_level("DEBUG", logger="txkafka")
    p = MetadataProducer(fail=True)
    kafka_writer._connect_to_cluster(p, cfg)  # does not raise
    assert len(p.calls) == 1  # a cluster that does not answer costs one time-out, not two
    assert "metadata warm-up" in caplog.text
    assert "s3cret-pw" not in caplog.text
