"""Transactional topics through real Spark and real Kafka: exactly the committed records, batch
boundaries on commit/abort markers and aborted records, an open transaction bounding "latest", and
restarts from the checkpoint (a replayed batch and a resumed query) with no gap and no duplicate."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from integration_tests.kafka_helpers import unique
from integration_tests.reader_support import (
    BatchCollector,
    data_progress,
    end_offsets,
    has_commit,
    list_offsets,
    offsets_log,
    record_key,
    run_available_now,
    stream,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.kafka_matrix]


def _txn(kafka, topic, n, tag, commit=True):
    kafka.produce(topic, [(f"{tag}-k{i}", f"{tag}-{i}", 0) for i in range(n)], transactional=True,
                  commit=commit)


def test_committed_records_only_with_batch_boundaries_on_markers_and_restarts(
        spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=1)
    # Offsets of partition 0 (M = transaction marker):
    #   A committed 0-4 M5 | B aborted 6-10 M11 | C committed 12-16 M17 | D aborted 18-19 M20 |
    #   E committed 21-23 M24 | F open 25-27 ... (the LSO stays at 25 while F is open)
    _txn(kafka, topic, 5, "A")
    _txn(kafka, topic, 5, "B", commit=False)
    _txn(kafka, topic, 5, "C")
    _txn(kafka, topic, 2, "D", commit=False)
    _txn(kafka, topic, 3, "E")
    everything = kafka.read_all(topic, isolation="read_uncommitted")
    committed = kafka.read_all(topic)
    assert [r.offset for r in committed] == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16, 21, 22, 23]
    assert kafka.end_offsets(topic) == {0: 25} and len(everything) == 20  # 5 markers

    # A long transaction timeout: the broker must not abort it while the queries run.
    open_tx = kafka.producer(unique("open-tx"), **{"transaction.timeout.ms": 600_000})
    open_tx.init_transactions(30)
    open_tx.begin_transaction()
    for i in range(3):
        open_tx.produce(topic, f"F-{i}".encode(), f"F-k{i}".encode(), partition=0)
    open_tx.flush(30)
    try:
        # The open transaction: high watermark 28, last stable offset still 25.
        assert list_offsets(kafka, topic, committed=False) == {0: 28}
        assert list_offsets(kafka, topic, committed=True) == {0: 25}

        # Batches of 6 offsets: [0,6) [6,12) [12,18) [18,24) [24,25) all end on a marker; [6,12)
        # holds only aborted records. A short poll timeout makes any wait for a record that never
        # comes fail the query instead of passing slowly.
        opts = dict(subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=6,
                    **{"kafkaConsumer.pollTimeoutMs": 20000})
        first = BatchCollector(fail_at=3)
        with pytest.raises(Exception, match="injected failure in batch 3"):
            run_available_now(stream(spark, kafka, **opts), checkpoint_dir, first)
        # Batch 3 was planned and logged but not committed: the restart must replay it.
        assert offsets_log(checkpoint_dir, 3) == {topic: {"0": 24}}
        assert has_commit(checkpoint_dir, 2) and not has_commit(checkpoint_dir, 3)

        second = BatchCollector()
        q = run_available_now(stream(spark, kafka, **opts), checkpoint_dir, second)
        # The replay of batch 3 read exactly what the failed attempt read.
        assert second.attempts[0][0] == 3 and second.attempts[0][1] == first.batches[3]
        assert [end_offsets(p)[topic]["0"] for p in data_progress(q)] == [24, 25]
        # "latest" is the LSO: the open transaction's records (25-27) are neither read nor awaited.
        assert offsets_log(checkpoint_dir, 4) == {topic: {"0": 25}}
    except BaseException:
        try:
            open_tx.abort_transaction(30)
        except Exception:  # noqa: BLE001 - the test's own failure is the one to report
            pass
        raise
    open_tx.commit_transaction(30)  # F: 25-27 M28
    kafka.wait_decided_markers(topic)  # else G could land before M28

    expected_by_range = {0: (0, 6), 1: (6, 12), 2: (12, 18), 3: (18, 24), 4: (24, 25)}
    seen = {**first.batches, **second.batches}
    assert sorted(seen) == sorted(expected_by_range)
    for batch_id, (lo, hi) in expected_by_range.items():
        assert seen[batch_id] == [record_key(r) for r in committed if lo <= r.offset < hi], batch_id

    # Resume after more data: the committed F and a non-transactional G, nothing read twice.
    kafka.produce(topic, [("G-k0", "G-0", 0), ("G-k1", "G-1", 0)])
    third = BatchCollector()
    run_available_now(stream(spark, kafka, **opts), checkpoint_dir, third)
    assert min(third.batches) == 5
    new_rows = third.all_rows()
    assert [r[4] for r in new_rows] == [b"F-0", b"F-1", b"F-2", b"G-0", b"G-1"]
    assert [r[2] for r in new_rows] == [25, 26, 27, 29, 30]

    # The sink keeps one result per batch id (a replay replaces it): together, every committed
    # record exactly once.
    final = {**first.batches, **second.batches, **third.batches}
    every_row = sorted(r for rows in final.values() for r in rows)
    assert every_row == sorted(record_key(r) for r in kafka.read_all(topic))
    assert len(every_row) == len(set(every_row))


def test_order_per_partition_offsets_and_columns(spark, kafka, checkpoint_dir):
    topic = kafka.create_topic(partitions=3)
    kafka.produce(topic, [(f"k{i}", f"c{i}", i % 3) for i in range(30)], transactional=True)
    kafka.produce(topic, [(f"x{i}", f"aborted{i}", i % 3) for i in range(9)], transactional=True,
                  commit=False)
    kafka.produce(topic, [(None, f"plain{i}", i % 3) for i in range(6)])
    expected = kafka.read_all(topic)
    # Each partition: committed 0-9, marker 10, aborted 11-13, marker 14, non-transactional 15-16.
    want_offsets = list(range(10)) + [15, 16]
    for p in range(3):
        assert [r.offset for r in expected if r.partition == p] == want_offsets, p

    collected: list = []

    def sink(df, batch_id):
        # No sort: tag each row with its position in the reader's output. Within one Spark
        # partition monotonically_increasing_id follows the order the reader yielded the rows;
        # its upper bits are the Spark partition index, so (batch, id) is the read order.
        rows = df.withColumn("_seq", F.monotonically_increasing_id()).collect()
        collected.extend((batch_id, r["_seq"], r) for r in rows)

    q = (stream(spark, kafka, subscribe=topic, startingOffsets="earliest")
         .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint_dir)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(240)

    rows = [r for _, _, r in sorted(collected, key=lambda t: (t[0], t[1]))]
    by_partition: dict[int, list] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    # In the reader's own order, each partition's offsets strictly increase with no duplicate and
    # no gap except the markers and aborted records (10-14).
    assert by_partition == {p: want_offsets for p in range(3)}
    assert sorted((r["topic"], r["partition"], r["offset"], r["key"], bytes(r["value"]))
                  for r in rows) == sorted(
        (r.topic, r.partition, r.offset, r.key, r.value) for r in expected)
    assert not any(bytes(r["value"]).startswith(b"aborted") for r in rows)
    by_offset = {(r.partition, r.offset): r for r in expected}
    for r in rows:
        rec = by_offset[(r["partition"], r["offset"])]
        assert r["timestampType"] == 0  # CreateTime
        assert int(r["timestamp"].timestamp() * 1000) == rec.timestamp
