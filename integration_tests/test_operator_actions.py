"""Operator actions on a running pipeline, in real Spark against real Kafka.

Each test accepts one of two outcomes only: the output holds every committed input exactly once,
or the query fails with the specific error and the output holds no duplicates (and nothing of the
failed run). Scenario numbers are the issue's:
1. a rolled-back checkpoint (newest offsets/N and commits/N deleted), with and without new input;
   a checkpoint whose offsets/, commits/, sources/ and metadata were deleted, txkafka-sink kept;
2. a decided batch lost to the transaction timeout, then restarted with another task layout;
4. a second driver started on the checkpoint of a live one.
Also: a checkpoint copied to run beside the original (refused at start), then moved.
Scenario 4 as two committers deciding one batch, and scenario 5 (a fenced answer after the
commit), are in test_operator_actions_kafka.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from integration_tests.pipeline_helpers import (
    PipelineTopics,
    assert_exactly_once,
    make_input,
    pipeline_args,
    run_pipeline,
    sink_prefix,
    wait_until,
)
from txkafka.connector.fault_injection import arm, disarm
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint
from txkafka.connector.sink.transactional_ids import TransactionalIdFactory
from txkafka.verify import verify

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

TRIGGERS = ["available_now", "processing_time"]
QUERY_TIMEOUT_S = 300


def _start(spark, kafka, topics: PipelineTopics, ck: str, trigger: str, *, max_offsets=None,
           min_partitions=None, starting="earliest", **sink_options):
    r = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("subscribe", topics.source).option("startingOffsets", starting))
    if max_offsets:
        r = r.option("maxOffsetsPerTrigger", str(max_offsets))
    if min_partitions:
        r = r.option("minPartitions", str(min_partitions))
    w = (r.load().selectExpr("key", "value").writeStream.format("txkafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topics.sink)
         .option("checkpointLocation", ck))
    for k, v in sink_options.items():
        w = w.option(k, v)
    if trigger == "available_now":
        w = w.trigger(availableNow=True)
    else:
        w = w.trigger(processingTime="300 milliseconds")
    return w.start()


def _run(q, trigger: str) -> None:
    """Until the query has read all input (AvailableNow: until it stops by itself)."""
    try:
        if trigger == "available_now":
            assert q.awaitTermination(QUERY_TIMEOUT_S), "AvailableNow query still running"
            assert q.exception() is None, q.exception()
        else:
            q.processAllAvailable()
    finally:
        if q.isActive:
            q.stop()
        disarm()


def _run_until_it_fails(q, expected: str) -> str:
    """The query must fail, with ``expected`` in its error; returns the error's text."""
    try:
        with pytest.raises(StreamingQueryException) as exc:
            stopped = q.awaitTermination(QUERY_TIMEOUT_S)
            pytest.fail("the query " + ("ended without an error" if stopped else
                                        f"still ran after {QUERY_TIMEOUT_S}s") +
                        f"; expected it to fail with {expected!r}")
    finally:
        if q.isActive:
            q.stop()
        disarm()
    text = str(exc.value)
    assert expected in text, text[-3000:]
    return text


def _no_duplicates(kafka, topics: PipelineTopics, expected_found: int | None = None) -> None:
    rep = verify({"bootstrap.servers": kafka.bootstrap}, topics.source, topics.sink)
    assert rep.duplicates == 0 and rep.unexpected == 0, rep.text()
    if expected_found is not None:
        assert rep.distinct_found == expected_found, rep.text()


def _roll_back(ck: str, batch: int) -> None:
    """The usual repair of a corrupt last offsets file: remove offsets/N and commits/N with
    their .crc files."""
    for folder in ("offsets", "commits"):
        for name in (str(batch), f".{batch}.crc"):
            path = Path(ck) / folder / name
            if path.exists():
                path.unlink()


def _more_input(kafka, topics: PipelineTopics, n: int, start: int = 900_000) -> None:
    kafka.produce(topics.source, [(f"id-{start + i:07d}", f"value-{start + i}") for i in range(n)],
                  transactional=True)
    topics.expected_ids += n


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True, text=True,
                          timeout=120)


# ------------------------------------------------------------ scenario 1: checkpoint rollback

@pytest.mark.parametrize("trigger", TRIGGERS)
def test_a_rolled_back_checkpoint_with_new_input_stops_and_resumes_on_a_new_one(
        spark, kafka, tmp_path, trigger):
    # 1,300 input records (300 in aborted transactions) and their markers: batches of 400
    # offsets, the last one partial, so re-planned with more input it reads another range.
    topics = make_input(kafka, records=1000, partitions=2, per_txn=100)
    ck = str(tmp_path / "ck")
    _run(_start(spark, kafka, topics, ck, trigger, max_offsets=400), trigger)
    newest = SparkCheckpoint(ck).latest_committed_batch()
    assert newest is not None and newest >= 2, newest
    before = SinkCommitLog(ck).batch_state(newest)
    assert before.complete and before.source_offsets is not None

    _roll_back(ck, newest)
    _more_input(kafka, topics, 200)
    text = _run_until_it_fails(_start(spark, kafka, topics, ck, trigger, max_offsets=400),
                               "Spark's checkpoint and the sink's commit log disagree")
    assert f"batch {newest}:" in text and before.source_offsets[0] in text, text[-3000:]
    assert "NEW checkpointLocation" in text and "startingOffsets" in text
    _no_duplicates(kafka, topics, expected_found=topics.expected_ids - 200)
    assert kafka.open_transactions(sink_prefix(ck)) == []
    assert SinkCommitLog(ck).batch_state(newest).source_offsets == before.source_offsets

    # The documented way on: a new checkpoint from the end offsets of the last committed batch.
    shown = json.loads(_cli("commit-log", "show", "--checkpoint", ck, "--json").stdout)
    last = [b for b in shown["batches"] if b["status"].startswith("complete")][-1]
    assert last["batch"] == newest
    text = _cli("commit-log", "show", "--checkpoint", ck).stdout
    resume = text.rsplit("startingOffsets ", 1)[1].strip()
    assert json.loads(resume) == {k: v for k, v in json.loads(last["source_offsets"][0]).items()
                                  if k != "txkafka:start"}
    ck2 = str(tmp_path / "ck2")
    _run(_start(spark, kafka, topics, ck2, trigger, max_offsets=400, starting=resume), trigger)
    assert_exactly_once(kafka, topics, ck2)


def test_a_rollback_replaying_the_same_offsets_skips_the_batch_and_says_so(
        kafka, driver_processes, tmp_path):
    topics = make_input(kafka, records=1000, partitions=2, per_txn=100)
    ck = str(tmp_path / "ck")
    args = pipeline_args(kafka, topics, ck, "--max-offsets", "400")
    code, proc = run_pipeline(driver_processes, args)
    assert code == 0, proc.tail()
    newest = SparkCheckpoint(ck).latest_committed_batch()
    assert newest is not None and newest >= 2

    _roll_back(ck, newest)  # no new input: Spark re-plans the same range
    code, proc = run_pipeline(driver_processes, args)
    assert code == 0, proc.tail()
    assert f"batch {newest}: the sink committed this batch already" in proc.output(), proc.tail()
    assert "The re-run writes nothing" in proc.output()
    assert_exactly_once(kafka, topics, ck)
    assert (Path(ck) / "commits" / str(newest)).exists()
    assert len(SinkCommitLog(ck).batch_state(newest).rounds) == 1


def test_a_checkpoint_without_spark_state_but_with_the_sinks_log_stops(spark, kafka, tmp_path):
    """offsets/, commits/, sources/ and metadata deleted, txkafka-sink/ kept: Spark starts the
    query afresh from startingOffsets; the sink compares every batch id it already has."""
    topics = make_input(kafka, records=1000, partitions=2, per_txn=100)
    ck = str(tmp_path / "ck")
    _run(_start(spark, kafka, topics, ck, "available_now", max_offsets=400), "available_now")
    committed = SinkCommitLog(ck).batch_ids()
    assert len(committed) >= 3
    for name in ("offsets", "commits", "sources", "metadata", ".metadata.crc"):
        path = Path(ck) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    _more_input(kafka, topics, 200)
    text = _run_until_it_fails(_start(spark, kafka, topics, ck, "available_now", max_offsets=400),
                               "Spark's checkpoint and the sink's commit log disagree")
    assert "already committed batch" in text
    _no_duplicates(kafka, topics, expected_found=topics.expected_ids - 200)
    assert kafka.open_transactions(sink_prefix(ck)) == []


def test_a_copied_checkpoint_stops_at_start_and_a_moved_one_continues_once_recorded(
        spark, kafka, tmp_path):
    """A copy of a checkpoint carries the sink's id, so a query on it beside the original would
    abort the original's transactions (and the original its): it stops at start, before anything
    is written. Once the original is gone (a move), `txkafka commit-log moved` records the new
    place and the query continues exactly once."""
    topics = make_input(kafka, records=1000, partitions=2, per_txn=100)
    original = tmp_path / "ck"
    _run(_start(spark, kafka, topics, str(original), "available_now", max_offsets=400),
         "available_now")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    _more_input(kafka, topics, 200)
    text = _run_until_it_fails(
        _start(spark, kafka, topics, str(copy), "available_now", max_offsets=400),
        "the checkpoint was moved or copied")
    assert f"recorded for the checkpoint at file://{original.resolve()}, not at " \
           f"file://{copy.resolve()}" in text, text[-3000:]
    _no_duplicates(kafka, topics, expected_found=topics.expected_ids - 200)

    refused = _cli("commit-log", "moved", "--checkpoint", str(copy), "--yes")
    assert refused.returncode == 3 and "copied, not moved" in refused.stderr, refused.stderr
    shutil.rmtree(original)  # the copy is now the checkpoint's one place: a move
    moved = _cli("commit-log", "moved", "--checkpoint", str(copy), "--yes")
    assert moved.returncode == 0, moved.stderr
    _run(_start(spark, kafka, topics, str(copy), "available_now", max_offsets=400),
         "available_now")
    assert_exactly_once(kafka, topics, str(copy))


# ------------------------------------------------- scenario 2: layout changed during a redo

@pytest.mark.timeout(900)
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_a_lost_batch_is_rewritten_only_by_the_same_task_layout(spark, kafka, tmp_path, trigger):
    topics = make_input(kafka, records=1000, partitions=2, per_txn=100)
    ck = str(tmp_path / "ck")
    timeout_ms = 15000  # above a batch's duration on a busy machine
    marker = tmp_path / "slept"
    # Batch 0 is decided, then the driver stalls past the transaction timeout before EndTxn.
    fault = f"point=after_decision,batch=0,action=sleep,ms={timeout_ms + 6000},once={marker}"
    sink = {"kafka.transaction.timeout.ms": str(timeout_ms)}
    arm(fault)  # disarmed by _run_until_it_fails
    text = _run_until_it_fails(
        _start(spark, kafka, topics, ck, trigger, min_partitions=2, **sink),
        "the broker aborted")
    assert marker.exists() and "TransactionLostError" in text
    log = SinkCommitLog(ck)
    lost_round = log.batch_state(0).last
    assert sorted(c.partition_id for c in lost_round.lost) == [0, 1]
    assert sorted(lost_round.layout) == [0, 1]
    assert kafka.read_all(topics.sink) == []

    # Scaled up to catch up after the outage: the re-run has four task partitions.
    text = _run_until_it_fails(_start(spark, kafka, topics, ck, trigger, min_partitions=4, **sink),
                               "has another task layout")
    assert "2 task partitions then (0, 1), 4 now (0-3)" in text and "minPartitions" in text
    assert "TaskLayoutChangedError" in text
    assert kafka.read_all(topics.sink) == []  # nothing of the re-run committed
    assert kafka.open_transactions(sink_prefix(ck)) == []
    assert len(log.batch_state(0).rounds) == 1

    # The layout of the lost round: its partitions are written again, exactly once.
    q = _start(spark, kafka, topics, ck, trigger, min_partitions=2, **sink)
    _run(q, trigger)
    assert_exactly_once(kafka, topics, ck)
    state = log.batch_state(0)
    assert state.complete and len(state.rounds) == 2
    assert state.rounds[1].layout == state.rounds[0].layout  # the same rows per task partition
    # Each run of the query writes under its own run tag (spark.jobGroup.id reaches the tasks).
    ids = TransactionalIdFactory("txkafka", SinkCommitLog(ck).existing_identity().sink_id)
    tags = [{ids.parse(c.transactional_id).run for c in r.decision} for r in state.rounds]
    assert all(len(t) == 1 and "000000" not in t for t in tags), tags
    assert tags[0] != tags[1], tags


# ------------------------------------------------- scenario 4: two live drivers, one checkpoint

# How a driver that meets another one on its checkpoint must fail: the sink's exclusive records,
# or Spark's own offset and commit logs (their files are created, never replaced). Which of them
# sees the collision first depends on timing; each is loud and leaves no duplicate.
CONCURRENT_WRITER_ERRORS = ("ConcurrentWriterError", "CONCURRENT_STREAM_LOG_UPDATE",
                            "Concurrent update to the",
                            "Multiple streaming queries are concurrently using")


class _SessionDriver:
    """The first driver: a query of this test's own Spark application (a warm session: one
    Spark start fewer than a second driver process)."""

    def __init__(self, query) -> None:
        self.query = query

    def alive(self) -> bool:
        return self.query.isActive

    def ran_a_batch(self) -> bool:
        return any("addBatch" in (p.get("durationMs") or {}) for p in self.query.recentProgress)

    def output(self) -> str:
        e = self.query.exception()
        return f"PIPELINE-FAILED {e}" if e is not None else ""

    def tail(self) -> str:
        return self.output()[-3000:] or "(no error)"

    def stop(self) -> None:
        if self.query.isActive:
            self.query.stop()


def _failed_loudly(driver) -> str:
    out = driver.output()
    assert "PIPELINE-FAILED" in out, driver.tail()
    named = [e for e in CONCURRENT_WRITER_ERRORS if e in out]
    assert named, f"failed, but not as a second writer:\n{driver.tail()}"
    return named[0]


@pytest.mark.timeout(900)
def test_a_second_live_driver_on_one_checkpoint_fails_loudly(spark, kafka, driver_processes,
                                                             tmp_path):
    """A relaunched driver while the old one still runs: a query of this test's Spark
    application and a pipeline driver (another application) plan the batches of new input on
    one checkpoint. One fails loudly; the output never holds a duplicate; the survivor writes
    every input record exactly once. (The first writes values as read, the second with
    '|seen': the check is by id.)"""
    topics = make_input(kafka, records=200, partitions=2, per_txn=100)
    ck = str(tmp_path / "ck")
    first = _SessionDriver(_start(spark, kafka, topics, ck, "processing_time", max_offsets=100))
    try:
        wait_until(lambda: first.ran_a_batch() or not first.alive(), QUERY_TIMEOUT_S,
                   "the first driver's first batch")
        assert first.alive(), first.tail()
        second = driver_processes(
            "-m", "txkafka.pipeline", "-b", kafka.bootstrap, "--input", topics.source,
            "--output", topics.sink, "--checkpoint", ck, "--trigger-ms", "300",
            "--max-offsets", "100", "--timeout", "800",
            # No task retries: a refusal is deterministic, retries only cost time.
            "--master", "local[2]")
        wait_until(lambda: "PIPELINE-STARTED" in second.output() or not second.alive(),
                   QUERY_TIMEOUT_S, "the second driver's query")

        # New input while both live, until one of them stops: both plan the batches that read
        # it, and the one that falls behind or writes a batch's record second fails.
        stop = threading.Event()
        fed = [0]

        def feed() -> None:
            while not stop.is_set() and fed[0] < 1000:
                _more_input(kafka, topics, 20, start=1_000_000 + 20 * fed[0])
                fed[0] += 1
                stop.wait(0.5)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            ended = wait_until(lambda: [d for d in (first, second) if not d.alive()],
                               QUERY_TIMEOUT_S, "one of the two drivers to stop")
        finally:
            stop.set()
            feeder.join(120)
        errors = [_failed_loudly(d) for d in ended]
        if second in ended:
            second.kill()  # its JVM and Python workers too: nothing of the loser runs on
        # (A look while the survivor may still write: what is committed so far; the verdict on the
        # whole topics is assert_exactly_once's, once every driver stopped.)
        rep = verify({"bootstrap.servers": kafka.bootstrap}, topics.source, topics.sink,
                     whole=False)
        assert rep.duplicates == 0 and rep.unexpected == 0, rep.text()

        survivors = [d for d in (first, second) if d.alive()]
        if survivors:
            # Input after the loser stopped: the survivor commits a batch, whose orphan sweep
            # aborts whatever the loser left open. It reads everything, never a duplicate.
            _more_input(kafka, topics, 20, start=2_000_000)

            def caught_up():
                now = verify({"bootstrap.servers": kafka.bootstrap}, topics.source, topics.sink,
                             whole=False)
                assert now.duplicates == 0 and now.unexpected == 0, now.text()
                return now.missing == 0 and now.expected == topics.expected_ids
            wait_until(caught_up, QUERY_TIMEOUT_S, "the survivor to write every input record",
                       interval=3)
            if survivors[0] is first:
                first.stop()
            else:
                os.kill(second.pid, signal.SIGINT)  # stops its query and Spark
                second.wait(120)
        else:
            # Both stopped, each as a second writer: a restart of one finishes the input.
            code, proc = run_pipeline(driver_processes, pipeline_args(kafka, topics, ck,
                                                                      "--max-offsets", "100"))
            assert code == 0, proc.tail()
        assert_exactly_once(kafka, topics, ck)
        print(f"two drivers: {'first' if first in ended else 'second'} stopped ({errors}), "
              f"{len(survivors)} survived, {fed[0]} feeder transactions")
    finally:
        first.stop()
