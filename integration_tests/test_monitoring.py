"""Monitoring against Apache Kafka and Spark: the query listener and ``txkafka status``.

One exactly-once query reads an input that is produced faster than ``maxOffsetsPerTrigger`` lets
it read: the listener's lag grows while the input comes, then shrinks to 0 once it stops, and
``txkafka status`` says "behind" (exit status 1) then "healthy" (0) with the same figures. One
task attempt of batch 1 dies after its pre-commit and is retried: the sink's figures that the
listener and the command show match the commit log's records, and the bytes match the output.
"""

from __future__ import annotations

import json
import time

import pytest

from integration_tests.kafka_helpers import unique
from integration_tests.pipeline_helpers import PipelineTopics, assert_exactly_once, wait_until
from txkafka.cli import main
from txkafka.connector.fault_injection import arm, disarm
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.monitoring import TxKafkaListener

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MAX_OFFSETS = 300   # per trigger, every partition together
BURST = 600         # records produced per burst: twice what a batch reads
BURSTS = 3


def _status(capsys, ck: str, bootstrap: str, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["status", "--checkpoint", ck, "-b", bootstrap, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_lag_grows_then_shrinks_and_the_sink_figures_match_the_commit_log(spark, kafka, tmp_path,
                                                                          capsys):
    src, dst = kafka.create_topic(partitions=3), kafka.create_topic(partitions=3)
    ck = str(tmp_path / "ck")
    group = unique("monitored")
    listener = TxKafkaListener([ck], sink_batches=50, history=200)
    spark.streams.addListener(listener)
    marker = tmp_path / "killed.marker"
    arm(f"point=after_precommit,batch=1,partition=0,attempt=0,action=exit,once={marker}")
    kafka.produce(src, [(f"id-{i:07d}", f"v{i}") for i in range(BURST)])
    total = BURST
    q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", str(MAX_OFFSETS))
         # lag tools' consumer group beside the listener (the Connect test runs without it)
         .option("commitOffsetsToGroup", "true").option("kafka.group.id", group).load()
         .selectExpr("key", "value").writeStream.format("txkafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", dst)
         .option("checkpointLocation", ck).trigger(processingTime="200 milliseconds")
         .queryName("monitored").start())
    started = time.monotonic()
    try:
        # A burst after each of the first batches: the input grows twice as fast as it is read,
        # however long a batch takes on this machine.
        for k in range(BURSTS):
            wait_until(lambda: (f := listener.figures("monitored")) is not None
                       and f.batch_id is not None and f.batch_id >= k, 180, f"batch {k}")
            kafka.produce(src, [(f"id-{total + i:07d}", f"v{total + i}") for i in range(BURST)])
            total += BURST
        behind = _status(capsys, ck, kafka.bootstrap)
        main(["status", "--checkpoint", ck, "-b", kafka.bootstrap, "--batches", "3"])
        shown_behind = capsys.readouterr().out
        wait_until(lambda: (f := listener.figures("monitored")) is not None and f.lag is not None
                   and f.lag.total == 0 and f.totals["records"] == total, 240,
                   "the query to catch up (the listener's lag at 0, every record committed)")
        code, healthy = _status(capsys, ck, kafka.bootstrap)
        # The group shows what the status shows: Kafka-side lag tools agree with it.
        wait_until(lambda: _group_offsets(kafka, group, src) == {
            r["partition"]: r["committed"] for r in healthy["partitions"]}, 60,
            "the consumer group to hold the committed offsets")
        capsys.readouterr()
        main(["status", "--checkpoint", ck, "-b", kafka.bootstrap, "--batches", "4"])
        shown = capsys.readouterr().out
    finally:
        q.stop()
        disarm()
        spark.streams.removeListener(listener)
    took = time.monotonic() - started
    assert marker.exists(), "the task attempt was never killed"

    # Lag through the listener: it grew while the input came, then shrank to 0.
    fig = listener.figures("monitored")
    history = fig.lag_history
    peak = history.index(max(history))
    assert max(history) > history[0] and peak > 0, history
    assert history[-1] == 0 and any(b < a for a, b in zip(history[peak:], history[peak + 1:]))
    assert fig.lag.metrics() == {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                                 "minOffsetsBehindLatest": "0"}

    # Lag through the command: behind (1) while the input came, healthy (0) once caught up.
    code_behind, was = behind
    assert code_behind == 1 and was["state"] == "BEHIND" and was["lag"]["recordsBehindLatest"] > 0
    assert sum(r["lag"] for r in was["partitions"]) == was["lag"]["recordsBehindLatest"]
    assert code == 0 and healthy["state"] == "HEALTHY", healthy
    assert healthy["lag"]["recordsBehindLatest"] == 0
    assert all(r["latest"] == r["committed"] for r in healthy["partitions"]), healthy
    assert healthy["needs_operator"] == [] and healthy["open_transactions"] == []

    # The sink's figures match the commit log, batch by batch, and the output's bytes.
    log = SinkCommitLog(ck)
    by_batch = {b.batch_id: b for b in fig.sink_batches}
    raw = {b: log.batch_state(b) for b in log.batch_ids()}
    assert set(by_batch) == set(raw)
    for b, state in raw.items():
        got = by_batch[b]
        if state.empty:
            assert got.status == "empty" and got.records == 0
            continue
        decided = state.last.decision
        assert got.status == "complete" and state.last.outcome is not None
        assert got.committed == len(state.last.outcome["committed"]) == len(decided)
        assert got.records == sum(c.record_count for c in decided)
        assert got.bytes == sum(c.byte_count for c in decided) == state.last.outcome["bytes"]
        assert got.commit_ms == state.last.outcome["end_txn_ms"]
        assert got.lost == 0 and got.rolled_forward == 0 and got.rewritten == 0
    retried = {c.partition_id: c.attempt for c in raw[1].last.decision}
    assert retried[0] == 1, retried  # the killed attempt's retry committed
    # The killed attempt left its pre-committed transaction open; the sink aborted it once, after
    # batch 1's commit (batch 2's record carries the count, for batch 1).
    assert by_batch[1].aborted == 1, fig.sink_batches
    assert sum(b.aborted + b.late_swept for b in fig.sink_batches) == 1, fig.sink_batches
    assert fig.totals["aborted"] == 1 and fig.totals["late_swept"] == 0, fig.totals
    out = kafka.read_all(dst)
    assert fig.totals["records"] == len(out) == total
    assert fig.totals["bytes"] == sum(len(r.key) + len(r.value) for r in out)
    assert [b["batch_id"] for b in healthy["sink_batches"]] == sorted(by_batch)[-5:]
    assert all(healthy["sink_batches"][i] == by_batch[b].to_json()
               for i, b in enumerate(sorted(by_batch)[-5:]))
    assert_exactly_once(kafka, PipelineTopics(src, dst, total), ck)
    print(f"\nquery ran {took:.1f}s; lag history {history}\n{shown_behind}\n{shown}\n"
          f"batches 1-2: {by_batch[1].to_json()} {by_batch[2].to_json()}\nlistener: "
          f"{json.dumps(fig.to_json()['lag'])} sink totals {fig.totals}\n"
          f"{listener.prometheus_text()}")


def _group_offsets(kafka, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = kafka.admin()  # kept while its future runs
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    parts = found[group].result(30).topic_partitions
    return {tp.partition: tp.offset for tp in parts if tp.topic == topic and tp.offset >= 0}
