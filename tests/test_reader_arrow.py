"""Executor reads without a broker: Arrow batches exactly as Spark wants them, and the range logic
(markers, EOF, overshoot, consumer reuse, out-of-range, stalls) against a scripted consumer."""

import dataclasses
import datetime as dt
import logging
import pickle

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

from txkafka.connector.source.range_reader import (
    ConsumerPool,
    FetchTask,
    arrow_schema,
    build_record_batch,
    fetch_range,
    message_offsets,
)
from txkafka.connector.errors import (
    DataLossError,
    KafkaAuthorizationError,
    KafkaProtocolError,
    MalformedRecordError,
    RecordFetchTimeoutError,
)

T = "orders"


def msg(offset, value=None, key=None, ts=(1, 1_700_000_000_123), headers=None, partition=0):
    return Message(topic=T, partition=partition, offset=offset, key=key,
                   value=value if value is not None else f"v{offset}".encode(), timestamp=ts,
                   headers=headers)


def event(code, offset):
    return Message(topic=T, partition=0, offset=offset, error=KafkaError(code))


def eof(offset):
    return event(KafkaError._PARTITION_EOF, offset)


# ---- Arrow -----------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [False, True])
def test_schema_is_exactly_what_spark_derives(headers):
    # pyspark's own conversion of the source schema (no session needed).
    from pyspark.sql.pandas.types import to_arrow_schema

    from txkafka.python_datasource.kafka_reader import _schema

    assert arrow_schema(headers).equals(to_arrow_schema(_schema(headers), timezone="UTC"))


def test_record_batch_columns():
    msgs = [msg(5, b"a", b"k", ts=(1, 1_700_000_000_123)),
            msg(7, b"b", None, ts=(2, 1_700_000_000_456)),
            msg(9, b"", b"", ts=(0, -1))]
    batch = build_record_batch(msgs, T, 3, include_headers=False)
    assert batch.schema.equals(arrow_schema(False))
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [b"k", None, b""]
    assert [r["value"] for r in rows] == [b"a", b"b", b""]
    assert {r["topic"] for r in rows} == {T} and {r["partition"] for r in rows} == {3}
    assert [r["offset"] for r in rows] == [5, 7, 9]
    # librdkafka's timestamp types 1/2/0 are Spark's 0 (CreateTime) / 1 (LogAppendTime) / -1.
    assert [r["timestampType"] for r in rows] == [0, 1, -1]
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000,
                                               tzinfo=dt.timezone.utc)
    assert batch.column("timestamp").cast(pa.int64()).to_pylist()[1] == 1_700_000_000_456_000


@pytest.mark.parametrize("ts", [1_700_000_000_123_456_789, 9_223_372_036_854_776, -2**63])
def test_a_timestamp_beyond_spark_s_range_fails_naming_the_record(ts):
    # A producer writing nanoseconds: ms * 1000 overflows a long; numpy would wrap it into some
    # other date where Spark fails (KAFKA_MALFORMED_RECORD_TIMESTAMP).
    last_good = 9_223_372_036_854_775
    assert build_record_batch([msg(4, ts=(1, last_good))], T, 0, include_headers=False) \
        .column("timestamp").cast(pa.int64()).to_pylist() == [last_good * 1000]
    with pytest.raises(MalformedRecordError, match=rf"partition 2 at offset 5 has timestamp {ts}"):
        build_record_batch([msg(4), msg(5, ts=(1, ts)), msg(6)], T, 2, include_headers=False)


@pytest.mark.parametrize("offsets", [[], [7], [3, 4, 5, 6], [3, 4, 6, 7], [3, 5, 6],
                                     [10, 11, 12, 14, 15]])
def test_message_offsets_consecutive_or_with_gaps(offsets):
    # Consecutive offsets come from arange, gaps (markers, compaction) from every message.
    got = message_offsets([msg(o) for o in offsets])
    assert got.dtype.name == "int64" and got.tolist() == offsets


def test_record_batch_offsets_after_a_gap_are_each_messages_own():
    batch = build_record_batch([msg(o) for o in (0, 1, 2, 4, 5)], T, 0, include_headers=False)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 4, 5]


def test_headers_column_null_when_absent():
    msgs = [msg(0, headers=[("h1", b"x"), ("h2", None)]), msg(1), msg(2, headers=[("h1", b"")])]
    batch = build_record_batch(msgs, T, 0, include_headers=True)
    assert batch.schema.equals(arrow_schema(True))
    assert batch.column("headers").to_pylist() == [
        [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}],
        None,
        [{"key": "h1", "value": b""}],
    ]


# ---- the range logic against a scripted consumer -----------------------------------------------


class ScriptedConsumer:
    """Hands out pre-arranged message lists; records assign/pause/resume calls."""

    def __init__(self, script, watermarks=(0, 10**9), topics=((T, (0,)),)):
        self.script = list(script)
        self.watermarks = watermarks
        self.topics = None if topics is None else dict(topics)  # metadata; None: no answer
        self.assigned = []
        self.paused = []
        self.unassigned = 0
        self.closed = False

    def consume(self, num_messages=1, timeout=-1):
        return self.script.pop(0) if self.script else []

    def poll(self, timeout=None):
        batch = self.consume()
        if not batch:
            return None
        first, rest = batch[0], batch[1:]
        if rest:
            self.script.insert(0, rest)
        return first

    def assign(self, tps):
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in tps])

    def pause(self, tps):
        self.paused.append(True)

    def unassign(self):
        self.unassigned += 1

    def resume(self, tps):
        pass

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return self.watermarks

    def list_topics(self, topic=None, timeout=-1):
        if self.topics is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        md, t = ClusterMetadata(), TopicMetadata()
        t.topic = topic
        if topic in self.topics:
            t.partitions = {p: PartitionMetadata() for p in self.topics[topic]}
        else:
            t.error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        md.topics = {topic: t}
        return md

    def close(self):
        self.closed = True


CONF = (("bootstrap.servers", "h:1"), ("group.id", "g"))


def task(start, end, fail=True, poll_ms=200, headers=False):
    return FetchTask(T, 0, start, end, CONF, poll_ms, fail, headers)


def FakePool(consumers):
    """The real pool, handing out scripted consumers."""
    fakes = list(consumers)
    return ConsumerPool(factory=lambda conf: fakes.pop(0))


def offsets_of(batches):
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_range_ending_on_a_marker_finishes_on_eof_without_waiting():
    # Records 0-4 committed, 5 is the commit marker, end of log = 6.
    consumer = ScriptedConsumer([[msg(i) for i in range(5)], [eof(6)]])
    pool = FakePool([consumer])
    batches = list(fetch_range(task(0, 6, poll_ms=60_000), pool=pool))
    assert offsets_of(batches) == [0, 1, 2, 3, 4]
    assert not consumer.script  # finished on EOF, not on a timeout


def test_range_inside_the_log_finishes_on_the_first_record_past_the_end():
    # 0-2 committed, 3 marker, 4-6 aborted, 7 abort marker, 8-9 committed ...
    consumer = ScriptedConsumer([[msg(0), msg(1), msg(2), msg(8), msg(9)]])
    pool = FakePool([consumer])
    assert offsets_of(fetch_range(task(0, 8), pool=pool)) == [0, 1, 2]
    # The records at and past the end are kept for the next range of the same partition.
    assert offsets_of(fetch_range(task(8, 10), pool=pool)) == [8, 9]
    # Reused: unassigned while idle (never paused: see ConsumerPool), then assigned right after
    # the records it kept.
    assert pool.created == 1 and consumer.assigned == [[(T, 0, 0)], [(T, 0, 10)]]
    assert consumer.unassigned == 2 and consumer.paused == []


def test_range_of_only_markers_and_aborted_records_is_empty():
    consumer = ScriptedConsumer([[eof(12)]])
    assert offsets_of(fetch_range(task(8, 12), pool=FakePool([consumer]))) == []


def test_stale_eof_is_not_the_end():
    # An EOF at 3 queued before more data arrived; the range needs [3, 6).
    consumer = ScriptedConsumer([[eof(3)], [msg(3), msg(4), msg(5)]])
    assert offsets_of(fetch_range(task(3, 6), pool=FakePool([consumer]))) == [3, 4, 5]


def test_events_between_records_keep_order_and_batches_are_bounded():
    script = [[msg(0), msg(1), event(KafkaError._TRANSPORT, -1), msg(2)],
              [msg(i) for i in range(3, 13)], [msg(i) for i in range(13, 25)]]
    batches = list(fetch_range(task(0, 25), pool=FakePool([ScriptedConsumer(script)]),
                               batch_rows=10))
    assert offsets_of(batches) == list(range(25))
    # A batch is handed over once it holds batch_rows rows (whole consume() chunks).
    assert [b.num_rows for b in batches] == [13, 12]


def test_start_deleted_by_retention_fails_or_skips():
    def run(fail):
        consumer = ScriptedConsumer(
            [[event(KafkaError._AUTO_OFFSET_RESET, 2)], [msg(5), msg(6)], [eof(8)]],
            watermarks=(5, 8))
        return consumer, list(fetch_range(task(2, 8, fail=fail), pool=FakePool([consumer])))

    with pytest.raises(DataLossError, match=r"offsets \[2, 5\) were deleted .*earliest available "
                                            r"offset is 5"):
        run(True)
    consumer, batches = run(False)
    assert offsets_of(batches) == [5, 6]
    assert consumer.assigned[-1] == [(T, 0, 5)]  # re-assigned at the log start


@pytest.mark.parametrize("handoff", [None, 2, 4])
def test_only_a_batch_read_s_earliest_start_follows_the_log_start(monkeypatch, handoff):
    """startingOffsets=earliest of a batch read is bound when its task runs, as Spark binds it: the
    log start having moved past the planned start is no loss. An explicit start still is, and so
    are records deleted after the task read some (here txkafka's own fetch read [2, 4), then
    handed over)."""
    if handoff is not None:
        import txkafka.connector.client.fetcher as wire

        def read_range(wr):
            wr.handoff, wr.handoff_reason = handoff, "the broker answered OFFSET_OUT_OF_RANGE"
            return iter(())

        monkeypatch.setattr(wire, "read_range", read_range)

    def run(earliest_start):
        at = handoff or 2
        consumer = ScriptedConsumer(
            [[event(KafkaError._AUTO_OFFSET_RESET, at)], [msg(5), msg(6)], [eof(8)]],
            watermarks=(5, 8))
        t = dataclasses.replace(task(2, 8), earliest_start=earliest_start,
                                fetcher="librdkafka" if handoff is None else "wire")
        return offsets_of(fetch_range(t, pool=FakePool([consumer])))

    lost = r"offsets \[%d, 5\) were deleted" % (handoff or 2)
    with pytest.raises(DataLossError, match=lost):
        run(earliest_start=False)
    if handoff == 4:
        with pytest.raises(DataLossError, match=lost):
            run(earliest_start=True)
    else:
        assert run(earliest_start=True) == [5, 6]


def test_log_that_went_backwards_fails_or_skips():
    def run(fail):
        consumer = ScriptedConsumer([[event(KafkaError._AUTO_OFFSET_RESET, 50)]],
                                    watermarks=(0, 10))
        return list(fetch_range(task(50, 60, fail=fail), pool=FakePool([consumer])))

    with pytest.raises(DataLossError, match="now ends at 10; its offsets went backwards"):
        run(True)
    assert run(False) == []


def test_stall_is_bounded_by_poll_timeout():
    consumer = ScriptedConsumer([[msg(0)]], watermarks=(0, 5))
    with pytest.raises(RecordFetchTimeoutError, match="kafkaConsumer.pollTimeoutMs=200"):
        list(fetch_range(task(0, 5, poll_ms=200), pool=FakePool([consumer])))


def test_failed_or_abandoned_reads_never_return_a_consumer_to_the_pool():
    consumer = ScriptedConsumer([[msg(0), msg(1)], [msg(2)]])
    pool = FakePool([consumer])
    it = fetch_range(task(0, 100), pool=pool, batch_rows=1)
    next(it)
    it.close()  # Spark stopped reading early
    assert consumer.closed and pool.idle_count() == 0


def test_fetch_task_pickles_and_hides_secrets():
    t = FetchTask(T, 1, 0, 9, (("sasl.password", "hunter22"), ("bootstrap.servers", "h:1")),
                  1000, True, False)
    assert "hunter22" not in repr(t)
    assert pickle.loads(pickle.dumps(t)) == t


def test_large_values_go_out_in_batches_bounded_by_bytes_not_only_rows():
    # 1 KB values, a 4 KB budget: batches of about 4 rows, not one batch of all of them.
    big = [[msg(i, value=b"x" * 1000) for i in range(j, j + 3)] for j in range(0, 12, 3)]
    consumer = ScriptedConsumer([*big, [eof(12)]])
    batches = list(fetch_range(task(0, 12), pool=FakePool([consumer]), batch_bytes=4000))
    assert offsets_of(batches) == list(range(12))
    assert [b.num_rows for b in batches] == [6, 6]  # flushed once two 3 KB chunks passed 4 KB
    small = ScriptedConsumer([[msg(i) for i in range(12)], [eof(12)]])
    assert [b.num_rows for b in fetch_range(task(0, 12), pool=FakePool([small]),
                                            batch_bytes=4000)] == [12]


def test_records_read_before_a_stall_that_ends_the_range_are_not_dropped():
    # [8, 12) planned, but the log now ends at 10 (re-created topic, unclean election): 8 and 9
    # are readable and must be returned; only [10, 12) is reported lost (failOnDataLoss=false).
    consumer = ScriptedConsumer([[msg(8), msg(9)], [eof(10)]], watermarks=(0, 10))
    assert offsets_of(fetch_range(task(8, 12, fail=False), pool=FakePool([consumer]))) == [8, 9]
    # Same when the stall finds the rest of the range deleted by retention.
    consumer = ScriptedConsumer([[msg(0), msg(1)]], watermarks=(5, 8))
    assert offsets_of(fetch_range(task(0, 4, fail=False), pool=FakePool([consumer]))) == [0, 1]


def test_a_batch_over_arrows_2gib_binary_limit_is_split(monkeypatch):
    # pyarrow returns a ChunkedArray for a binary column past 2 GiB (values of ~215 KB average
    # reach it within one 10,000-row batch); simulated here for any column of more than 3 values.
    import txkafka.connector.source.range_reader as af

    real = af.pa.array

    def chunking_array(obj, *args, **kwargs):
        arr = real(obj, *args, **kwargs)
        if kwargs.get("type") == pa.binary() and len(arr) > 3:
            return pa.chunked_array([arr.slice(0, 3), arr.slice(3)])
        return arr

    monkeypatch.setattr(af.pa, "array", chunking_array)
    consumer = ScriptedConsumer([[msg(i) for i in range(10)]])
    batches = list(fetch_range(task(0, 10), pool=FakePool([consumer])))
    assert offsets_of(batches) == list(range(10))
    assert all(b.num_rows <= 3 for b in batches)


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                  KafkaError._UNKNOWN_TOPIC])
@pytest.mark.parametrize("metadata", [{}, {T: (1,)}], ids=["topic-gone", "partition-gone"])
def test_partition_deleted_mid_read_fails_or_returns_what_was_read(code, metadata, caplog):
    def run(fail):
        consumer = ScriptedConsumer([[msg(0), msg(1)], [msg(2), event(code, -1), msg(9)]],
                                    topics=metadata)
        return list(fetch_range(task(0, 6, fail=fail), pool=FakePool([consumer])))

    with pytest.raises(DataLossError, match=r"topic 'orders' partition 0 was deleted while offsets "
                                            r"\[3, 6\) were being read"):
        run(True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="txkafka.reader"):
        # The records read before the event are returned; nothing after it is.
        assert offsets_of(run(False)) == [0, 1, 2]
    assert "topic 'orders' partition 0 was deleted while offsets [3, 6) were being read" in (
        caplog.text)


def test_topic_authorization_failure_during_a_fetch_is_a_typed_error_naming_the_topic():
    consumer = ScriptedConsumer([[msg(0)], [event(KafkaError.TOPIC_AUTHORIZATION_FAILED, 1)]])
    pool = FakePool([consumer])
    with pytest.raises(KafkaAuthorizationError,
                       match=r"reading topic 'orders' partition 0: not authorized on topic "
                             r"'orders' \(TOPIC_AUTHORIZATION_FAILED\).*READ"):
        list(fetch_range(task(0, 5), pool=pool))
    assert consumer.closed and pool.idle_count() == 0


def test_fatal_consumer_error_fails_the_range_with_secrets_redacted():
    fatal = Message(topic=T, partition=0, offset=-1,
                    error=KafkaError(KafkaError._FATAL, "fenced; password hunter22", fatal=True))
    consumer = ScriptedConsumer([[msg(0), fatal, msg(1)]])
    pool = FakePool([consumer])
    t = FetchTask(T, 0, 0, 5, CONF + (("sasl.password", "hunter22"),), 200, True, False)
    with pytest.raises(KafkaProtocolError,
                       match="reading topic 'orders' partition 0: .*fenced") as e:
        list(fetch_range(t, pool=pool))
    assert "hunter22" not in str(e.value)
    assert consumer.closed and pool.idle_count() == 0


def test_repeated_out_of_range_answers_are_bounded():
    from txkafka.connector.source.range_reader import _MAX_RESETS

    def run(resets):
        # The broker answers out of range at 5 although its log holds [0, 100).
        script = [[event(KafkaError._AUTO_OFFSET_RESET, 5)] for _ in range(resets)]
        consumer = ScriptedConsumer(script + [[msg(5), msg(6)]], watermarks=(0, 100))
        return consumer, list(fetch_range(task(5, 7), pool=FakePool([consumer])))

    # Up to _MAX_RESETS: re-assigned at the same offset each time, then reads on.
    consumer, batches = run(_MAX_RESETS)
    assert offsets_of(batches) == [5, 6]
    assert consumer.assigned == [[(T, 0, 5)]] * (_MAX_RESETS + 1)
    with pytest.raises(KafkaProtocolError,
                       match=r"from offset 5: the broker kept answering 'offset out of range' "
                             r"although the partition holds \[0, 100\)"):
        run(_MAX_RESETS + 1)


def test_next_range_served_only_from_records_kept_by_the_pooled_consumer():
    # The first fetch brought 0-7 although the first range is [0, 3).
    consumer = ScriptedConsumer([[msg(i) for i in range(8)], [msg(8), msg(9)]])
    pool = FakePool([consumer])
    assert offsets_of(fetch_range(task(0, 3), pool=pool)) == [0, 1, 2]
    # [3, 8) is exactly what it kept: served without a fetch (nothing past 7 exists yet, so
    # waiting for more would stall) and without duplicates.
    assert offsets_of(fetch_range(task(3, 8), pool=pool)) == [3, 4, 5, 6, 7]
    assert len(consumer.script) == 1
    # Fetching goes on right after the last kept record: no gap, no duplicate.
    assert offsets_of(fetch_range(task(8, 10), pool=pool)) == [8, 9]
    assert pool.created == 1
    assert consumer.assigned == [[(T, 0, 0)], [(T, 0, 8)], [(T, 0, 8)]]


@pytest.mark.parametrize("metadata", [((T, (0,)),), None], ids=["still-listed", "no-answer"])
@pytest.mark.parametrize("fail", [True, False])
def test_unknown_partition_event_not_confirmed_by_metadata_is_not_data_loss(metadata, fail):
    # librdkafka reports a partition gone on one broker's metadata answer; a broker out of sync
    # (restart, leader move) can give it for a live topic. Unless fresh metadata confirms it, the
    # range reads on from where it stood: no skipped records, no data-loss error.
    consumer = ScriptedConsumer(
        [[msg(0), msg(1)], [event(KafkaError.UNKNOWN_TOPIC_OR_PART, -1)], [msg(2), msg(3)]],
        topics=metadata)
    assert offsets_of(fetch_range(task(0, 4, fail=fail), pool=FakePool([consumer]))) == [
        0, 1, 2, 3]
    assert consumer.assigned == [[(T, 0, 0)], [(T, 0, 2)]]  # re-assigned where it stood


def test_decoded_records_become_spark_schema_batches_of_bounded_rows():
    """txkafka's own fetch (record_batch_decoder) yields the same schema as the librdkafka path,
    cut into batches of at most batch_rows rows."""
    import numpy as np
    import pyarrow as pa

    from txkafka.connector.source.range_reader import SCHEMA, SCHEMA_WITH_HEADERS, decoded_batches
    from txkafka.connector.client.record_batch_decoder import HEADERS_TYPE, DecodedRecords

    n = 25
    d = DecodedRecords(
        offsets=np.arange(100, 100 + n, dtype=np.int64),
        timestamps_ms=np.arange(n, dtype=np.int64) + 1_700_000_000_000,
        timestamp_types=np.array([0] * 20 + [1] * 5, dtype=np.int32),
        keys=pa.array([None if i % 4 == 0 else b"k%d" % i for i in range(n)], pa.binary()),
        values=pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        headers=pa.array([None] * 24 + [[{"key": "h", "value": b"x"},
                                         {"key": "n", "value": None}]], type=HEADERS_TYPE),
        next_offset=100 + n)
    batches = list(decoded_batches(d, T, 7, include_headers=False, batch_rows=10))
    assert [b.num_rows for b in batches] == [10, 10, 5]
    assert all(b.schema == SCHEMA for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(100, 125))
    assert rows[0]["key"] is None and rows[1]["key"] == b"k1" and rows[24]["value"] == b"v24"
    assert {r["topic"] for r in rows} == {T} and {r["partition"] for r in rows} == {7}
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.0
    assert [r["timestampType"] for r in rows] == [0] * 20 + [1] * 5
    with_headers = list(decoded_batches(d, T, 7, include_headers=True, batch_rows=100))
    assert len(with_headers) == 1 and with_headers[0].schema == SCHEMA_WITH_HEADERS
    hdrs = with_headers[0].column("headers").to_pylist()
    assert hdrs[0] is None
    assert hdrs[24] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
