"""Savepoints against real Spark and Kafka: a query killed (SIGKILL) at each of the sink's injection
points moves, through ``txkafka savepoint create``, to a changed query on a new checkpoint, and
the output of both together holds every committed input record exactly once (read_committed
reads, checked for duplicates AND gaps). Plus the refusals, a query that wrote nothing yet and a
union of two sources."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from integration_tests.kafka_helpers import KafkaTarget
from integration_tests.pipeline_helpers import (
    PipelineTopics,
    make_input,
    pipeline_args,
    run_pipeline,
    sink_prefix,
    wait_until,
)
from tests.spark_checkpoint_files import write_metadata, write_offsets
from txkafka.connector.errors import SavepointError
from txkafka.connector.fault_injection import arm, disarm, read_marker
from txkafka.connector.sink.committable import KafkaCommittable
from txkafka.connector.checkpoint.savepoint import (
    BASIS_BATCH_0,
    BASIS_SINK,
    BASIS_SPARK,
    read_savepoint,
)
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint
from txkafka.savepoint import create
from txkafka.kafka_admin import end_offsets, scan_topic
from txkafka.verify import verify

# Where the savepoint lands when the old query dies in batch 1 at each point: batch 1 once the
# sink has decided it (the savepoint rolls the decision forward), else batch 0.
KILL_POINTS = {
    "before_precommit": (0, BASIS_SPARK),
    "after_precommit": (0, BASIS_SPARK),
    "before_decision": (0, BASIS_SPARK),
    "after_decision": (1, BASIS_SINK),
    "between_endtxn": (1, BASIS_SINK),
    "after_sink_commit": (1, BASIS_SINK),
}
QUIET_S = "0.5"  # a killed query stays quiet for any period; the live query test watches longer


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True,
                          text=True, timeout=300)


def _fill(kafka: KafkaTarget, topic: str, prefix: str, records: int, per_txn: int = 200) -> int:
    """``records`` committed records with unique keys, in transactions (one aborted txn too)."""
    kafka.produce(topic, [(f"aborted-{prefix}-{i:06d}", "x") for i in range(per_txn // 2)],
                  transactional=True, commit=False)
    for first in range(0, records, per_txn):
        kafka.produce(topic, [(f"{prefix}-{i:06d}", f"value-{i}")
                              for i in range(first, min(records, first + per_txn))],
                      transactional=True)
    return records


def _changed_query(spark, kafka, sources: list[str], sink: str, checkpoint: str, savepoint: str,
                   **reader_opts: str):
    """Another projection, repartitioned to 5 tasks, on a new checkpoint, from the savepoint."""
    frames = []
    for topic in sources:
        r = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic).option("savepoint", savepoint))
        for k, v in reader_opts.items():
            r = r.option(k, v)
        frames.append(r.load())
    src = frames[0]
    for f in frames[1:]:
        src = src.union(f)
    out = src.selectExpr("key", "concat('moved|', CAST(value AS STRING)) AS value").repartition(5)
    q = (out.writeStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", sink).option("checkpointLocation", checkpoint)
         .trigger(processingTime="300 milliseconds").start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def _assert_exactly_once(kafka: KafkaTarget, inputs: list[str], sink: str, expected: int,
                         checkpoints: list[str], input_records=None):
    """Every committed input id once in the output, nothing else, nothing left open. Order is not
    checked: the changed query repartitions."""
    conf = {"bootstrap.servers": kafka.bootstrap}
    records = input_records if input_records is not None else itertools.chain.from_iterable(
        scan_topic(conf, t) for t in inputs)
    rep = verify(conf, "+".join(inputs), sink, check_order=False, input_records=records)
    assert rep.expected == expected, rep.text()
    assert rep.ok, rep.text()
    for ck in checkpoints:
        assert kafka.open_transactions(sink_prefix(ck)) == [], f"left open by {ck}"
    values = [r.value for r in kafka.read_all(sink)]
    return values


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_at_each_point_then_a_changed_query_from_the_savepoint_is_exactly_once(
        point, spark, kafka, driver_processes, tmp_path):
    topics = make_input(kafka, records=1200, per_txn=200)
    old = str(tmp_path / "old")
    marker = tmp_path / "kill.marker"
    fault = f"point={point},batch=1,action=kill,once={marker}"
    code, proc = run_pipeline(driver_processes, pipeline_args(
        kafka, topics, old, "--max-offsets", "450", "--fault", fault,
        "--transaction-timeout-ms", "600000"))
    assert code == -9 and read_marker(str(marker)).get("point") == point, proc.tail()
    assert read_marker(str(marker)).get("batch") == 1
    had_open = kafka.open_transactions(sink_prefix(old))

    sp = str(tmp_path / "sp.json")
    # Without --yes: the same checks, the plan printed, nothing changed.
    dry = _cli("savepoint", "create", "--checkpoint", old, "--out", sp, "-b", kafka.bootstrap,
               "--quiet-period", "0", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["positions_after_batch"] == KILL_POINTS[point][0], plan
    assert sorted(plan["would_commit"] + plan["would_abort"]) == sorted(
        t.transactional_id for t in had_open)
    assert not Path(sp).exists()
    assert ({t.transactional_id for t in kafka.open_transactions(sink_prefix(old))}
            == {t.transactional_id for t in had_open})
    made = _cli("savepoint", "create", "--checkpoint", old, "--out", sp, "-b", kafka.bootstrap,
                "--quiet-period", QUIET_S, "--yes")
    assert made.returncode == 0, made.stderr
    assert f"savepoint written to {sp}" in made.stdout
    saved = read_savepoint(sp)
    batch, basis = KILL_POINTS[point]
    assert (saved.batch_id, saved.basis) == (batch, basis), made.stdout
    expected_end = SparkCheckpoint(old).read_offsets(batch).topic_offsets(topics.source)
    assert saved.positions == {(topics.source, p): o for p, o in expected_end.items()}
    assert saved.resolved.get("orphans_aborted", 0) == len(
        [t for t in had_open if t.transactional_id not in _decided_ids(old)])
    assert kafka.open_transactions(sink_prefix(old)) == []  # resolved: nothing left open
    shown = _cli("savepoint", "show", sp)
    assert f"end of batch {batch}" in shown.stdout, shown.stdout

    more = _fill(kafka, topics.source, "more", 300)
    _changed_query(spark, kafka, [topics.source], topics.sink, str(tmp_path / "new"), sp)
    values = _assert_exactly_once(kafka, [topics.source], topics.sink,
                                  topics.expected_ids + more, [old, str(tmp_path / "new")])
    # Both queries wrote: the old one its batches up to the savepoint, the new one the rest.
    assert any(v.endswith(b"|seen") for v in values) and any(v.startswith(b"moved|")
                                                             for v in values)


def _decided_ids(checkpoint: str) -> set[str]:
    log = SinkCommitLog(checkpoint)
    return {c.transactional_id for b in log.batch_ids() for r in log.batch_state(b).rounds
            for c in r.decision}


def test_a_query_that_wrote_nothing_yet_moves_to_where_it_would_have_started(
        kafka, driver_processes, tmp_path):
    """The old query starts mid-topic (explicit offsets) and dies in batch 0 before deciding: the
    savepoint holds batch 0's start, and the new query (a pipeline driver with another
    projection and 4 tasks) reads from there: nothing before it, everything after it once."""
    topics = make_input(kafka, records=900, per_txn=150)
    start = {p: o // 2 for (_, p), o in _log_ends(kafka, topics.source).items()}
    old = str(tmp_path / "old")
    marker = tmp_path / "kill.marker"
    code, proc = run_pipeline(driver_processes, pipeline_args(
        kafka, topics, old, "--starting-offsets",
        json.dumps({topics.source: {str(p): o for p, o in start.items()}}),
        "--fault", f"point=before_decision,batch=0,action=kill,once={marker}"))
    assert marker.exists() and code == -9, proc.tail()
    assert kafka.read_all(topics.sink) == []  # it wrote nothing

    sp = create(old, str(tmp_path / "sp.json"), {"bootstrap.servers": kafka.bootstrap},
                quiet_period_s=float(QUIET_S))
    saved = read_savepoint(sp)
    assert (saved.batch_id, saved.basis) == (None, BASIS_BATCH_0)
    assert saved.positions == {(topics.source, p): o for p, o in start.items()}

    more = _fill(kafka, topics.source, "more", 200)
    new = str(tmp_path / "new")
    code, proc = run_pipeline(driver_processes, pipeline_args(
        kafka, topics, new, "--savepoint", sp, "--starting-offsets", "earliest",
        "--mode", "project", "--repartition", "4"))
    assert code == 0, proc.tail()
    conf = {"bootstrap.servers": kafka.bootstrap}
    kept = [m for m in scan_topic(conf, topics.source) if m.offset() >= start[m.partition()]]
    expected = sum(1 for m in kept if not m.key().startswith(b"aborted"))
    assert 0 < expected < topics.expected_ids + more
    _assert_exactly_once(kafka, [topics.source], topics.sink, expected, [old, new],
                         input_records=kept)


def _log_ends(kafka: KafkaTarget, topic: str) -> dict[tuple[str, int], int]:
    return {(topic, p): o for p, o in end_offsets(kafka.conf, topic).items()}


def test_a_union_of_two_sources_is_recorded_and_restored(spark, kafka, tmp_path):
    a, b, sink = kafka.create_topic(partitions=2), kafka.create_topic(partitions=3), \
        kafka.create_topic(partitions=2)
    n = _fill(kafka, a, "a", 600) + _fill(kafka, b, "b", 600)
    old = str(tmp_path / "old")
    marker = tmp_path / "fault.marker"

    def source(topic):
        return (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "300").load())

    arm(f"point=after_decision,batch=1,action=raise,once={marker}")  # disarmed below
    q = (source(a).union(source(b)).selectExpr("key", "value").writeStream.format("txkafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", sink)
         .option("checkpointLocation", old)
         .trigger(processingTime="300 milliseconds").start())
    try:
        with pytest.raises(StreamingQueryException, match="injected fault at after_decision"):
            q.awaitTermination(240)
            pytest.fail("the union query did not stop at the injected fault")
    finally:
        if q.isActive:
            q.stop()
        disarm()
    # Spark's abort() rolled the decided batch 1 forward; Spark itself never recorded it.
    assert SinkCommitLog(old).latest().complete and SinkCommitLog(old).latest().batch_id == 1
    assert SparkCheckpoint(old).latest_committed_batch() == 0

    sp = create(old, str(tmp_path / "sp.json"), {"bootstrap.servers": kafka.bootstrap},
                quiet_period_s=float(QUIET_S))
    saved = read_savepoint(sp)
    assert (saved.batch_id, saved.basis) == (1, BASIS_SINK)
    logged = SparkCheckpoint(old).read_offsets(1)
    assert [sorted({t for t, _ in s.positions}) for s in saved.sources] == [[a], [b]]
    assert saved.positions == {**{(a, p): o for p, o in logged.topic_offsets(a).items()},
                               **{(b, p): o for p, o in logged.topic_offsets(b).items()}}

    n += _fill(kafka, a, "a2", 200) + _fill(kafka, b, "b2", 200)
    new = str(tmp_path / "new")
    _changed_query(spark, kafka, [b, a], sink, new, sp)  # the other order: matched by topic
    _assert_exactly_once(kafka, [a, b], sink, n, [old, new])


def test_a_live_query_is_refused_and_a_stopped_one_is_not(spark, kafka, tmp_path):
    topics = PipelineTopics(kafka.create_topic(partitions=2), kafka.create_topic(partitions=2), 0)
    ck = str(tmp_path / "ck")
    q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("subscribe", topics.source).option("startingOffsets", "earliest").load()
         .selectExpr("key", "value").writeStream.format("txkafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topics.sink)
         .option("checkpointLocation", ck).trigger(processingTime="200 milliseconds").start())
    stop = threading.Event()
    written = [0]

    def keep_writing():
        while not stop.is_set():
            written[0] += kafka.produce(topics.source, [(f"id-{written[0]:06d}", "v")])
            stop.wait(0.2)

    feeder = threading.Thread(target=keep_writing, daemon=True)
    try:
        written[0] += kafka.produce(topics.source, [("id-first", "v")])
        q.processAllAvailable()  # the checkpoint and the sink exist
        feeder.start()
        spark_ck = SparkCheckpoint(ck)
        done = spark_ck.latest_committed_batch()

        def watch_a_batch_commit(seconds: float) -> None:
            """The quiet period, stretched until the live query has committed another batch (a
            loaded machine may take longer than the period for one)."""
            time.sleep(seconds)
            wait_until(lambda: spark_ck.latest_committed_batch() != done, 180,
                       "the live query's next batch")

        with pytest.raises(SavepointError, match="the query still looks alive") as exc:
            create(ck, str(tmp_path / "sp.json"), {"bootstrap.servers": kafka.bootstrap},
                   quiet_period_s=3, sleep=watch_a_batch_commit)
        assert "appeared" in str(exc.value)
        assert not (tmp_path / "sp.json").exists()
        assert q.isActive and q.exception() is None  # untouched
    finally:
        stop.set()
        feeder.join(30)
        q.processAllAvailable()
        q.stop()
    sp = create(ck, str(tmp_path / "sp.json"), {"bootstrap.servers": kafka.bootstrap},
                quiet_period_s=float(QUIET_S))
    saved = read_savepoint(sp)
    assert saved.batch_id == spark_ck.latest_committed_batch()
    assert saved.positions == _log_ends(kafka, topics.source)  # all it read is in the output


@pytest.mark.parametrize("sink", ["noop", "at_least_once"])
def test_a_query_without_an_exactly_once_txkafka_sink_is_refused(sink, spark, kafka, tmp_path):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [("k", "v")])
    ck = str(tmp_path / "ck")
    df = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    if sink == "noop":
        w = df.writeStream.format("noop")
    else:
        w = (df.selectExpr("key", "value").writeStream.format("txkafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("topic", kafka.create_topic(partitions=1))
             .option("deliveryGuarantee", "at_least_once"))
    q = w.option("checkpointLocation", ck).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert SparkCheckpoint(ck).latest_committed_batch() == 0
    made = _cli("savepoint", "create", "--checkpoint", ck, "--out", str(tmp_path / "sp.json"),
                "-b", kafka.bootstrap, "--quiet-period", "0", "--yes")
    assert made.returncode == 3
    assert "no exactly-once txkafka sink there" in made.stderr, made.stderr
    assert not (tmp_path / "sp.json").exists()
    assert not Path(ck, "txkafka-sink").exists()


def test_an_unknown_outcome_is_refused(kafka, tmp_path):
    """A decided round whose transactional id the coordinator does not know (as after
    transactional.id.expiration.ms): the real broker cannot tell its outcome."""
    ck = tmp_path / "ck"
    write_metadata(ck, "q")
    write_offsets(ck, 0, '{"in":{"0":10}}')
    log = SinkCommitLog(str(ck))
    ident = log.identity("txkafka")
    tid = f"txkafka-{ident.sink_id}-{uuid.uuid4().hex[:6]}-0-0-0"  # never used: unknown
    forgotten = KafkaCommittable(tid, 424242, 0, 0, 0, 0, 10, {"out": [0]})
    log.write_decision(0, 0, [forgotten], [0])
    made = _cli("savepoint", "create", "--checkpoint", str(ck), "--out", str(tmp_path / "sp.json"),
                "-b", kafka.bootstrap, "--quiet-period", "0", "--yes")
    assert made.returncode == 3, made.stdout
    assert "the output's content is not known" in made.stderr, made.stderr
    assert tid in made.stderr and "commit-log resolve" in made.stderr
    assert not (tmp_path / "sp.json").exists()
    assert log.latest().pending is not None  # no outcome invented
