"""Reader options through real Spark and real Kafka: startingOffsets variants, timestamps,
admission control, AvailableNow, headers, new partitions and topics, consumer-group commits."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import NewPartitions
from pyspark.sql import Row

from integration_tests.kafka_helpers import unique
from integration_tests.reader_support import (
    QUERY_TIMEOUT_S,
    BatchCollector,
    batch,
    data_progress,
    end_offsets,
    offsets_log,
    record_key,
    row_key,
    run_available_now,
    start_memory_query,
    stream,
    wait_first_batch,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _values(rows) -> list[str]:
    """Values of Spark Rows or of collected (topic, partition, offset, key, value) tuples."""
    return sorted(bytes(r["value"] if isinstance(r, Row) else r[4]).decode() for r in rows)


def _fill(kafka, topic, partitions, per_partition, tag="v"):
    kafka.produce(topic, [(f"{tag}{p}-{i}", f"{tag}{p}-{i}", p)
                          for p in range(partitions) for i in range(per_partition)])


def test_starting_offsets_earliest_json_and_restart_ignores_them(spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=3)
    _fill(kafka, topic, 3, 10)
    # -2 = earliest, -1 = latest, or an offset.
    start = f'{{"{topic}": {{"0": -2, "1": 7, "2": -1}}}}'
    c = BatchCollector()
    run_available_now(stream(spark, kafka, subscribe=topic, startingOffsets=start),
                      checkpoint_dir, c)
    # Batch 0 read everything; its logged end carries the start it resolved.
    assert offsets_log(checkpoint_dir, 0) == {topic: {"0": 10, "1": 10, "2": 10},
                                              "txkafka:start": {topic: {"0": 0, "1": 7, "2": 10}}}
    assert _values(c.all_rows()) == sorted([f"v0-{i}" for i in range(10)] +
                                           [f"v1-{i}" for i in range(7, 10)])
    # A restart resumes from the checkpoint, whatever startingOffsets says now.
    _fill(kafka, topic, 3, 2, tag="w")
    again = BatchCollector()
    run_available_now(stream(spark, kafka, subscribe=topic, startingOffsets="earliest"),
                      checkpoint_dir, again)
    assert _values(again.all_rows()) == sorted(f"w{p}-{i}" for p in range(3) for i in range(2))


def test_starting_offsets_latest_reads_only_new_records(spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=2)
    _fill(kafka, topic, 2, 5, tag="old")
    q, name = start_memory_query(stream(spark, kafka, subscribe=topic), checkpoint_dir)
    try:
        wait_first_batch(q)  # batch 0 has fixed "latest" (and read nothing)
        _fill(kafka, topic, 2, 3, tag="new")
        q.processAllAvailable()
        rows = spark.sql(f"select * from {name}").collect()
    finally:
        q.stop()
    assert _values(rows) == sorted(f"new{p}-{i}" for p in range(2) for i in range(3))
    assert offsets_log(checkpoint_dir, 0) == {topic: {"0": 5, "1": 5},
                                              "txkafka:start": {topic: {"0": 5, "1": 5}}}


def test_starting_by_timestamp_streaming_and_batch(spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=2)
    base = int(time.time() * 1000) - 600_000  # recent: retention must not delete the records
    kafka.produce(topic, [(f"k{p}-{i}", f"t{p}-{i}", p, base + i * 1000)
                          for p in range(2) for i in range(10)])
    by_ts = f'{{"{topic}": {{"0": {base + 4000}, "1": {base + 8500}}}}}'
    c = BatchCollector()
    run_available_now(stream(spark, kafka, subscribe=topic, startingOffsetsByTimestamp=by_ts,
                             startingOffsets="latest"),  # the timestamp option takes precedence
                      checkpoint_dir, c)
    assert offsets_log(checkpoint_dir, 0) == {topic: {"0": 10, "1": 10},
                                              "txkafka:start": {topic: {"0": 4, "1": 9}}}
    assert _values(c.all_rows()) == sorted([f"t0-{i}" for i in range(4, 10)] + ["t1-9"])

    rows = batch(spark, kafka, subscribe=topic, startingTimestamp=base + 7000).collect()
    assert _values(rows) == sorted(f"t{p}-{i}" for p in range(2) for i in range(7, 10))
    rows = batch(spark, kafka, subscribe=topic, startingTimestamp=base + 2000,
                 endingTimestamp=base + 5000).collect()
    assert _values(rows) == sorted(f"t{p}-{i}" for p in range(2) for i in range(2, 5))
    # A timestamp newer than every record: error by default, latest on request.
    future = base + 10**7
    with pytest.raises(Exception, match="no record in topic .* has a timestamp >= "):
        batch(spark, kafka, subscribe=topic, startingTimestamp=future).collect()
    assert batch(spark, kafka, subscribe=topic, startingTimestamp=future,
                 startingOffsetsByTimestampStrategy="latest").count() == 0


def test_batch_ending_offsets_and_transactions(spark, kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(f"k{i}", f"c{i}", i % 2) for i in range(10)], transactional=True)
    kafka.produce(topic, [(f"a{i}", f"a{i}", i % 2) for i in range(4)], transactional=True,
                  commit=False)
    kafka.produce(topic, [(f"k{i}", f"d{i}", i % 2) for i in range(10, 14)], transactional=True)
    committed = kafka.read_all(topic)
    df = batch(spark, kafka, subscribe=topic)
    assert sorted(row_key(r) for r in df.collect()) == sorted(
        record_key(r) for r in committed)
    # endingOffsets JSON: an offset, or -1 for latest; [start, end) like Spark.
    rows = batch(spark, kafka, subscribe=topic,
                 endingOffsets=f'{{"{topic}": {{"0": 3, "1": -1}}}}').collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        [(0, 0), (0, 1), (0, 2)] + [(1, r.offset) for r in committed if r.partition == 1])
    rows = batch(spark, kafka, assign=f'{{"{topic}": [1]}}',
                 startingOffsets=f'{{"{topic}": {{"1": 2}}}}').collect()
    assert sorted(r["offset"] for r in rows) == [r.offset for r in committed
                                                 if r.partition == 1 and r.offset >= 2]
    # minPartitions / maxRecordsPerPartition split the ranges (12 offsets per partition) into more
    # tasks, with the same rows.
    for opts, tasks in (({"minPartitions": 5}, 5), ({"maxRecordsPerPartition": 3}, 8)):
        split = batch(spark, kafka, subscribe=topic, **opts)
        assert split.rdd.getNumPartitions() == tasks, opts
        assert sorted(row_key(r) for r in split.collect()) == sorted(
            record_key(r) for r in committed)


def test_headers(spark, kafka):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [("k0", "with")], headers=[("trace", b"t-1"), ("trace", b"t-2"),
                                                     ("empty", None)])
    kafka.produce(topic, [("k1", "without")])
    df = batch(spark, kafka, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = {bytes(r["value"]): r["headers"] for r in df.collect()}
    assert [(h["key"], None if h["value"] is None else bytes(h["value"]))
            for h in rows[b"with"]] == [("trace", b"t-1"), ("trace", b"t-2"), ("empty", None)]
    assert rows[b"without"] is None
    assert "headers" not in batch(spark, kafka, subscribe=topic).columns


def test_max_offsets_per_trigger_with_available_now_and_group_commits(spark, kafka,
                                                                       checkpoint_dir):
    topic = kafka.create_topic(partitions=3)
    kafka.produce(topic, [(None, f"p0-{i}", 0) for i in range(60)] +
                  [(None, f"p1-{i}", 1) for i in range(30)] +
                  [(None, f"p2-{i}", 2) for i in range(10)])
    group = unique("lag")
    c = BatchCollector()
    q = run_available_now(stream(spark, kafka, subscribe=topic, startingOffsets="earliest",
                                 maxOffsetsPerTrigger=20, commitOffsetsToGroup="true",
                                 **{"kafka.group.id": group}), checkpoint_dir, c)
    progress = data_progress(q)
    # 20 offsets per batch, split 60:30:10 like Spark: 12 + 6 + 2.
    assert end_offsets(progress[0])[topic] == {"0": 12, "1": 6, "2": 2}
    # reportLatestOffset: the progress shows how far the topic goes (the AvailableNow target).
    assert json.loads(progress[0]["sources"][0]["latestOffset"]) == {
        topic: {"0": 60, "1": 30, "2": 10}}
    assert [p["numInputRows"] for p in progress] == [20] * 5
    assert len(c.all_rows()) == 100 and len(set(c.all_rows())) == 100
    # The group shows the query's committed position, for lag tools (monitoring only).
    admin = kafka.admin()  # keep a reference: a collected client cancels its futures
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = {tp.partition: tp.offset for f in fut.values()
                 for tp in f.result(timeout=30).topic_partitions}
    assert committed == {0: 60, 1: 30, 2: 10}


def _trigger_start(progress: dict) -> float:
    """A progress event's trigger start, in seconds since the epoch."""
    return dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def test_min_offsets_per_trigger_waits_for_data_or_the_delay(spark, kafka, checkpoint_dir):
    """Fewer offsets than minOffsetsPerTrigger wait for more data (a batch of 10 runs as soon as
    they are there) or for maxTriggerDelay: a batch of 3 offsets, which data alone cannot trigger,
    runs only once the delay has passed since the previous trigger."""
    topic = kafka.create_topic(partitions=1)
    delay_s = 10
    q, name = start_memory_query(stream(spark, kafka, subscribe=topic, minOffsetsPerTrigger=10,
                                        maxTriggerDelay=f"{delay_s}s"), checkpoint_dir,
                                 trigger_s=0.5)

    def offsets() -> list[int]:
        # Every row's offset, as a sorted list (not a count: a duplicate and a gap would cancel).
        return [r[0] for r in spark.sql(f"select offset from {name} order by offset").collect()]

    try:
        wait_first_batch(q)
        _fill(kafka, topic, 1, 10)
        q.processAllAvailable()
        # Enough offsets: the batch runs (and the delay starts again).
        assert offsets() == list(range(10))
        _fill(kafka, topic, 1, 4, tag="few")
        q.processAllAvailable()  # returns at once: the source holds the 4 records back
        assert offsets() == list(range(10))
        _fill(kafka, topic, 1, 6, tag="more")
        q.processAllAvailable()
        assert offsets() == list(range(20))
        assert [p["numInputRows"] for p in data_progress(q) if p["numInputRows"]] == [10, 10]
        _fill(kafka, topic, 1, 3, tag="late")
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while len(offsets()) < 23 and time.monotonic() < deadline:  # until maxTriggerDelay runs out
            time.sleep(0.5)
        assert offsets() == list(range(23))
        batches = [p for p in data_progress(q) if p["numInputRows"]]
        assert [p["numInputRows"] for p in batches] == [10, 10, 3], batches
        # The delay's clock starts when the source admits a batch, just after that trigger
        # starts; the 3-row batch's own trigger starts just before the source admits it (the
        # 2 s allow for that, on a loaded machine). Data arrival would have run it within a
        # trigger interval of the records being written.
        waited = _trigger_start(batches[2]) - _trigger_start(batches[1])
        assert waited >= delay_s - 2, (waited, batches[1]["timestamp"], batches[2]["timestamp"])
    finally:
        q.stop()


def test_new_partitions_and_topics_start_at_earliest(spark, kafka, checkpoint_dir):
    prefix = unique("grow")
    first = kafka.create_topic(f"{prefix}-a", partitions=1)
    q, name = start_memory_query(stream(spark, kafka, subscribePattern=f"{prefix}-.*"),
                                 checkpoint_dir)
    try:
        wait_first_batch(q)
        kafka.produce(first, [(None, "a0-0", 0)])
        q.processAllAvailable()
        admin = kafka.admin()
        for f in admin.create_partitions([NewPartitions(first, 3)]).values():
            f.result(timeout=60)
        kafka.wait_topic(first, 3)
        second = kafka.create_topic(f"{prefix}-b", partitions=2)
        # Written before the query sees them: new partitions and topics still start at earliest.
        kafka.produce(first, [(None, f"a{p}-1", p) for p in range(3)])
        kafka.produce(second, [(None, f"b{p}-0", p) for p in range(2)])
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while time.monotonic() < deadline:
            q.processAllAvailable()
            rows = spark.sql(f"select * from {name}").collect()
            if len(rows) >= 6:
                break
            time.sleep(0.5)
    finally:
        q.stop()
    assert _values(rows) == sorted(["a0-0", "a0-1", "a1-1", "a2-1", "b0-0", "b1-0"])
