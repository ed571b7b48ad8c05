"""The reader's Kafka side against a real broker, without Spark: which offset "latest" is under
read_committed, how ranges end on markers and at the LSO, retention seen by an executor, consumer
reuse, and consumer-group commits."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from integration_tests.kafka_helpers import unique
from integration_tests.reader_support import list_offsets
from python_datasource.kafka_reader import KafkaBatchReader
from txkafka.connector.source.range_reader import ConsumerPool, FetchTask, fetch_range
from txkafka.connector.source.group_offsets import ConsumerGroupCommitter
from txkafka.connector.errors import DataLossError, KafkaConfigError
from txkafka.connector.source.offset_reader import KafkaOffsetReader
from txkafka.connector.source.options import parse_source_options

pytestmark = pytest.mark.kafka


def _options(kafka, topic, **extra):
    return parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                                 "kafkaConsumer.pollTimeoutMs": "15000", **extra},
                                streaming=True)


def _task(options, topic, start, end, partition=0, fetcher="librdkafka"):
    return FetchTask(topic, partition, start, end, tuple(sorted(options.consumer_config().items())),
                     options.poll_timeout_ms, options.fail_on_data_loss, options.include_headers,
                     fetcher)


@pytest.fixture(params=["wire", "librdkafka"])
def fetcher(request):
    """Both executor paths: txkafka's own Fetch (the default) and confluent-kafka's consumer."""
    return request.param


def _read(task, pool):
    return [(o, v) for b in fetch_range(task, pool=pool)
            for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist())]


@pytest.fixture
def handoffs(caplog):
    """The ranges txkafka's own fetch handed to the librdkafka reader (their log lines)."""
    caplog.set_level(logging.INFO, logger="txkafka.reader")
    return lambda: [r.getMessage() for r in caplog.records if "hands offsets" in r.getMessage()]


@pytest.fixture
def open_transaction_topic(kafka):
    """Committed 0-2 M3, aborted 4-5 M6, then an open transaction at 7-8: LSO 7, HW 9."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [("k", f"c{i}", 0) for i in range(3)], transactional=True)
    kafka.produce(topic, [("k", f"a{i}", 0) for i in range(2)], transactional=True, commit=False)
    producer = kafka.producer(unique("open"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"o0", partition=0)
    producer.produce(topic, b"o1", partition=0)
    producer.flush(30)
    yield topic
    producer.abort_transaction(30)


def test_latest_is_the_last_stable_offset_under_read_committed(kafka, open_transaction_topic):
    topic = open_transaction_topic
    assert list_offsets(kafka, topic, committed=True) == {0: 7}
    assert list_offsets(kafka, topic, committed=False) == {0: 9}
    reader = KafkaOffsetReader(_options(kafka, topic))
    assert reader.latest_offsets([(topic, 0)]) == {(topic, 0): 7}
    assert reader.high_watermarks([(topic, 0)]) == {(topic, 0): 9}
    assert reader.earliest_offsets([(topic, 0)]) == {(topic, 0): 0}
    uncommitted = KafkaOffsetReader(_options(kafka, topic, **{
        "kafka.isolation.level": "read_uncommitted"}))
    assert uncommitted.latest_offsets([(topic, 0)]) == {(topic, 0): 9}


def test_ranges_end_on_markers_and_at_the_lso_without_waiting(kafka, open_transaction_topic,
                                                              fetcher, handoffs):
    topic = open_transaction_topic
    options = _options(kafka, topic)
    pool = ConsumerPool()
    # A reader waiting for a record at end - 1 would stall and fail with RecordFetchTimeoutError.
    # [0,4) ends on the commit marker, [4,7) is aborted records + abort marker, up to the LSO.
    started = time.monotonic()
    assert _read(_task(options, topic, 0, 4, fetcher=fetcher), pool) == [
        (0, b"c0"), (1, b"c1"), (2, b"c2")]
    assert _read(_task(options, topic, 4, 7, fetcher=fetcher), pool) == []
    assert _read(_task(options, topic, 0, 7, fetcher=fetcher), pool) == [
        (0, b"c0"), (1, b"c1"), (2, b"c2")]
    assert time.monotonic() - started < 10  # none waited for kafkaConsumer.pollTimeoutMs (15 s)
    # One consumer reused for every range; txkafka's own fetch needs none.
    assert pool.created == (1 if fetcher == "librdkafka" else 0)
    raw = _options(kafka, topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert [v for _, v in _read(_task(raw, topic, 0, 9, fetcher=fetcher), pool)] == [
        b"c0", b"c1", b"c2", b"a0", b"a1", b"o0", b"o1"]
    assert handoffs() == []
    pool.close_all()


def test_a_timestamp_look_up_under_read_committed_stops_at_the_last_stable_offset(kafka):
    """The broker looks only below the LSO under read_committed (as Spark's admin look-up asks):
    a newer record in an open transaction is no match, and the error says so. (A commit marker
    carries the time it was written: a look-up for an older time finds the marker.)"""
    topic = kafka.create_topic(partitions=1)
    now = int(time.time() * 1000)
    kafka.produce(topic, [("k", "c0", 0, now - 60_000)], transactional=True)
    producer = kafka.producer(unique("open-ts"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"o0", partition=0, timestamp=now + 600_000)
    producer.flush(30)
    try:
        tp, quick, wanted = (topic, 0), {"fetchOffset.numRetries": "1"}, now + 300_000
        committed = KafkaOffsetReader(_options(kafka, topic, **quick))
        uncommitted = KafkaOffsetReader(_options(kafka, topic, **quick, **{
            "kafka.isolation.level": "read_uncommitted"}))
        assert committed.offsets_for_timestamps({tp: wanted}) == {tp: None}
        assert uncommitted.offsets_for_timestamps({tp: wanted}) == {tp: 2}  # after the marker
        options = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap,
                                        "subscribe": topic, "startingTimestamp": str(wanted),
                                        **quick}, streaming=True)
        with pytest.raises(KafkaConfigError, match=rf"has a timestamp >= {wanted} \(none before "
                           r"its last stable offset 2: offsets 2 to 3 wait on a transaction"):
            KafkaOffsetReader(options).resolve(options.starting, [tp], starting=True)
    finally:
        producer.abort_transaction(30)


def test_no_match_by_timestamp_and_ending_offsets_past_the_end(kafka, open_transaction_topic):
    """librdkafka's real answers: -1 for "no record that new" (anything else negative is retried
    as leaderless, so this would fail after the retry budget), and the end check at the LSO."""
    topic = open_transaction_topic
    tp = (topic, 0)
    quick = {"kafka.socket.timeout.ms": "2000", "fetchOffset.numRetries": "1"}
    reader = KafkaOffsetReader(_options(kafka, topic, **quick))
    future = int(time.time() * 1000) + 86_400_000
    assert reader.offsets_for_timestamps({tp: future}) == {tp: None}
    assert reader.offsets_for_timestamps({tp: 0}) == {tp: 0}

    def ending(offset, **extra):
        options = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap,
                                        "subscribe": topic, **quick, **extra,
                                        "endingOffsets": f'{{"{topic}": {{"0": {offset}}}}}'},
                                       streaming=False)
        return KafkaOffsetReader(options).resolve(options.ending, [tp], starting=False)

    assert ending(7) == {tp: 7}
    with pytest.raises(KafkaConfigError, match=r"ends at 8, past the partition's current end "
                                               r"offset 7 .*offsets 7 to 9 wait on a transaction"):
        ending(8)
    assert ending(9, **{"kafka.isolation.level": "read_uncommitted"}) == {tp: 9}
    with pytest.raises(KafkaConfigError, match=r"ends at 10, past the partition's current end "
                                               r"offset 9\. .*use -1 \(latest\)"):
        ending(10, **{"kafka.isolation.level": "read_uncommitted"})


def test_consecutive_ranges_continue_on_the_prefetched_consumer(kafka, fetcher, handoffs):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"v{i}", 0) for i in range(3000)])
    options = _options(kafka, topic)
    pool = ConsumerPool()
    seen = []
    for start in range(0, 3000, 700):
        seen += _read(_task(options, topic, start, min(start + 700, 3000), fetcher=fetcher), pool)
    assert seen == [(i, f"v{i}".encode()) for i in range(3000)]
    if fetcher == "librdkafka":
        assert pool.created == 1 and pool.idle_count() == 1
    else:
        assert pool.created == 0
    assert handoffs() == []
    pool.close_all()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_read_alike_through_both_fetchers(kafka, codec, handoffs):
    """librdkafka's producer compresses each batch; txkafka's own fetch decompresses it (cramjam)
    and must return what librdkafka's consumer returns: offsets, keys, values, timestamps,
    headers (null keys, empty and 20 KB values, records with and without headers included)."""
    from confluent_kafka import Producer

    topic = kafka.create_topic(partitions=1)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": codec,
                  "linger.ms": 50, "enable.idempotence": True})
    # Recent timestamps: the embedded broker's retention check (every 2 s, 7 days) deletes older.
    ts0 = int(time.time() * 1000) - 60_000
    for i in range(5000):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = (b"" if i % 11 == 0 else b"x" * 20_000 if i % 500 == 0
                 else f"value-{i}".encode() * (i % 5 + 1))
        headers = [("h", f"{i}".encode()), ("none", None)] if i % 3 == 0 else None
        p.produce(topic, value, key, partition=0, timestamp=ts0 + i,
                  headers=headers)
    assert p.flush(30) == 0
    options = _options(kafka, topic, includeHeaders="true")

    def rows(fetcher):
        out = []
        for b in fetch_range(_task(options, topic, 0, 5000, fetcher=fetcher), pool=ConsumerPool()):
            out += b.to_pylist()
        return out

    wire = rows("wire")
    assert len(wire) == 5000 and [r["offset"] for r in wire] == list(range(5000))
    assert wire[3]["headers"] == [{"key": "h", "value": b"3"}, {"key": "none", "value": None}]
    assert wire[1]["headers"] is None and wire[0]["key"] is None and wire[0]["value"] == b""
    assert handoffs() == []
    assert wire == rows("librdkafka")


def test_executor_sees_retention_before_reading(kafka, fetcher, handoffs):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"v{i}", 0) for i in range(20)])
    admin = kafka.admin()
    for f in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        f.result(timeout=60)
    pool = ConsumerPool()
    with pytest.raises(DataLossError, match=rf"topic '{topic}' partition 0: offsets \[5, 12\) "
                                            r"were deleted .*earliest available offset is 12"):
        _read(_task(_options(kafka, topic), topic, 5, 15, fetcher=fetcher), pool)
    lenient = _options(kafka, topic, failOnDataLoss="false")
    # (txkafka's own fetch hands "offset out of range" to the librdkafka reader's diagnosis.)
    assert [o for o, _ in _read(_task(lenient, topic, 5, 15, fetcher=fetcher), pool)] == [
        12, 13, 14]
    assert _read(_task(lenient, topic, 2, 8, fetcher=fetcher), pool) == []  # all of it gone
    if fetcher == "wire":
        assert len(handoffs()) == 3 and all("OFFSET_OUT_OF_RANGE" in h for h in handoffs())
    pool.close_all()


def test_a_batch_read_from_earliest_starts_where_the_log_starts_when_its_task_runs(kafka, fetcher):
    """Like Spark, a batch read binds startingOffsets=earliest when its task runs: retention or
    delete-records between planning and a queued task is not data loss (an explicit start is:
    the test above)."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"v{i}", 0) for i in range(100)])
    reader = KafkaBatchReader({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                               "fetcher": fetcher, "kafkaConsumer.pollTimeoutMs": "15000"}, None)
    [part] = reader.partitions()
    assert (part.task.start, part.task.end) == (0, 100)
    admin = kafka.admin()  # (held: a client collected early never resolves its futures)
    for f in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        f.result(timeout=60)
    pool = ConsumerPool()
    assert [o for o, _ in _read(part.task, pool)] == list(range(50, 100))
    pool.close_all()


def test_group_commit_is_visible_to_lag_tools(kafka):
    topic = kafka.create_topic(partitions=2)
    group = unique("monitor")
    options = _options(kafka, topic, commitOffsetsToGroup="true", **{"kafka.group.id": group})
    reader = KafkaOffsetReader(options)
    committer = ConsumerGroupCommitter(options, reader._admin)
    assert committer.commit({(topic, 0): 5, (topic, 1): 7})
    admin = kafka.admin()
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    got = {tp.partition: tp.offset for f in fut.values()
           for tp in f.result(timeout=30).topic_partitions}
    assert got == {0: 5, 1: 7}
