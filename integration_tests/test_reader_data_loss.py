"""Data loss through real Spark and real Kafka: records removed before they were read (retention /
delete-records), a deleted topic, offsets going backwards (topic re-created), each failing with a
message that names topic, partition and offsets, or skipped under failOnDataLoss=false."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from integration_tests.reader_support import BatchCollector, run_available_now, stream

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _delete_records_before(kafka, topic: str, partition: int, offset: int) -> None:
    """Advance the log start offset, as retention would (deterministic, immediate)."""
    admin = kafka.admin()
    for f in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        f.result(timeout=60)


def _delete_topic(kafka, topic: str) -> None:
    admin = kafka.admin()
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(timeout=60)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after deletion"
        time.sleep(0.2)


def test_retention_loss_fails_or_is_skipped(spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"v{i}", 0) for i in range(10)])
    opts = dict(subscribe=topic, startingOffsets="earliest")
    run_available_now(stream(spark, kafka, **opts), checkpoint_dir, BatchCollector())

    kafka.produce(topic, [(None, f"v{i}", 0) for i in range(10, 30)])
    _delete_records_before(kafka, topic, 0, 15)  # offsets 10-14 go before the query reads them

    with pytest.raises(Exception) as err:
        run_available_now(stream(spark, kafka, **opts), checkpoint_dir, BatchCollector())
    text = str(err.value)
    assert f"topic '{topic}' partition 0: offsets [10, 15) were deleted" in text
    assert "earliest available offset is 15" in text and "failOnDataLoss=false" in text

    skip = BatchCollector()
    run_available_now(stream(spark, kafka, failOnDataLoss="false", **opts), checkpoint_dir, skip)
    assert [r[2] for r in skip.all_rows()] == list(range(15, 30))


def test_deleted_and_recreated_topics(spark, kafka, checkpoint_dir, tmp_path):
    gone = kafka.create_topic(partitions=1)
    kafka.produce(gone, [(None, f"g{i}", 0) for i in range(10)])
    ck_gone = str(tmp_path / "gone")
    run_available_now(stream(spark, kafka, subscribe=gone, startingOffsets="earliest"), ck_gone,
                      BatchCollector())

    back = kafka.create_topic(partitions=1)
    kafka.produce(back, [(None, f"b{i}", 0) for i in range(10)])
    run_available_now(stream(spark, kafka, subscribe=back, startingOffsets="earliest"),
                      checkpoint_dir, BatchCollector())

    _delete_topic(kafka, gone)
    _delete_topic(kafka, back)
    kafka.create_topic(back, partitions=1)
    kafka.produce(back, [(None, f"new{i}", 0) for i in range(3)])

    with pytest.raises(Exception, match=f"topic '{gone}' partition 0 no longer exists .*read it up "
                                        "to offset 10"):
        run_available_now(stream(spark, kafka, subscribe=gone), ck_gone, BatchCollector())

    with pytest.raises(Exception, match=f"topic '{back}' partition 0: offsets went backwards from "
                                        "10 to 3"):
        run_available_now(stream(spark, kafka, subscribe=back), checkpoint_dir, BatchCollector())
    # Going on: the skipped partition continues from its new end.
    skip = BatchCollector()
    run_available_now(stream(spark, kafka, subscribe=back, failOnDataLoss="false"),
                      checkpoint_dir, skip)
    kafka.produce(back, [(None, "after", 0)])
    after = BatchCollector()
    run_available_now(stream(spark, kafka, subscribe=back, failOnDataLoss="false"),
                      checkpoint_dir, after)
    assert skip.all_rows() == []
    assert [(r[2], r[4]) for r in after.all_rows()] == [(3, b"after")]
