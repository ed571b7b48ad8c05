"""Throwaway audit reproductions (not for merge)."""
from confluent_kafka import TopicPartition
import pytest

from python_datasource.kafka_reader import KafkaBatchReader
from txkafka.connector.errors import DataLossError
from txkafka.connector.source.range_reader import fetch_range


def _delete_before(kafka, topic, p, off):
    for f in kafka.admin().delete_records([TopicPartition(topic, p, off)]).values():
        f.result(30)


@pytest.mark.parametrize("fetcher", ["wire", "librdkafka"])
def test_batch_earliest_is_bound_at_planning(kafka, fetcher):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(b"k", str(i).encode()) for i in range(100)])
    r = KafkaBatchReader({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                          "fetcher": fetcher, "kafkaConsumer.pollTimeoutMs": "5000"}, None)
    parts = r.partitions()
    assert [(p.task.start, p.task.end) for p in parts] == [(0, 100)]
    # retention (or delete-records) moves the log start while the task waits to be scheduled
    _delete_before(kafka, topic, 0, 50)
    rows = 0
    try:
        for b in fetch_range(parts[0].task):
            rows += b.num_rows
        print("read rows", rows)
    except DataLossError as e:
        pytest.fail(f"startingOffsets=earliest (default) batch read failed: {e}")
