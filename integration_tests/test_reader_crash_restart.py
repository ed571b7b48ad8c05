"""A driver killed with SIGKILL in the middle of a batch, restarted from its checkpoint: the batch is
replayed with the same records, and the whole output holds every committed record exactly once."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from integration_tests.reader_support import QUERY_TIMEOUT_S, has_commit, offsets_log
from txkafka.connector.checkpoint.spark_checkpoint import SparkCheckpoint

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DRIVER = textwrap.dedent('''
    import hashlib, json, os, sys, time
    from txkafka.spark_session import session_builder

    bootstrap, topic, checkpoint, outdir, hang_at = sys.argv[1:6]
    hang_at = int(hang_at)
    spark = session_builder("txkafka-crash").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def sink(df, batch_id):
        rows = sorted([r["partition"], r["offset"], bytes(r["value"]).decode()]
                      for r in df.collect())
        text = json.dumps(rows)
        with open(os.path.join(outdir, "attempts.log"), "a") as f:
            f.write(json.dumps([batch_id, hashlib.sha256(text.encode()).hexdigest()]) + "\\n")
        tmp = os.path.join(outdir, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(outdir, f"batch-{batch_id:06d}.json"))
        if batch_id == hang_at:
            open(os.path.join(outdir, f"hanging-{batch_id}"), "w").close()
            time.sleep(3600)  # killed here: offsets/N is logged, commits/N is not

    q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "60").load()
         .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
         .trigger(processingTime="200 milliseconds").start())
    q.awaitTermination()
''')


def _wait_for(predicate, what: str, proc, timeout: float = QUERY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if not proc.alive():
            pytest.fail(f"driver exited while waiting for {what}:\n{proc.tail(60)}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n{proc.tail(60)}")


def _output(outdir: Path) -> dict[int, list]:
    return {int(p.name[6:12]): json.loads(p.read_text())
            for p in outdir.glob("batch-*.json")}


# Batch 2's replay on every Kafka tested; batch 0's differs only in Spark's offset log.
@pytest.mark.parametrize("hang_at", [0, pytest.param(2, marks=pytest.mark.kafka_matrix)])
def test_sigkill_mid_batch_then_restart(kafka, driver_processes, checkpoint_dir, tmp_path,
                                        hang_at):
    """hang_at 0: batch 0, whose start ("earliest", resolved at query start) is known on replay
    only from its logged end; 2: a later batch."""
    topic = kafka.create_topic(partitions=2)
    for n in range(4):
        kafka.produce(topic, [(f"k{i}", f"r{n}-{i}", i % 2) for i in range(30)],
                      transactional=True)
        kafka.produce(topic, [(f"k{i}", f"x{n}-{i}", i % 2) for i in range(7)],
                      transactional=True, commit=False)
    script = tmp_path / "crash_driver.py"
    script.write_text(DRIVER)
    outdir = tmp_path / "out"
    outdir.mkdir()

    first = driver_processes(script, kafka.bootstrap, topic, checkpoint_dir, str(outdir),
                             str(hang_at))
    _wait_for(lambda: (outdir / f"hanging-{hang_at}").exists(), f"batch {hang_at} in the sink",
              first)
    first.kill()  # SIGKILL to the driver's process group (Python, JVM, workers)
    assert SparkCheckpoint(checkpoint_dir).read_offsets(hang_at) is not None
    assert not has_commit(checkpoint_dir, hang_at)
    batch_0_end = offsets_log(checkpoint_dir, 0)
    assert batch_0_end["txkafka:start"] == {topic: {"0": 0, "1": 0}}

    # More data while the query is down, then the restart.
    kafka.produce(topic, [(f"k{i}", f"late-{i}", i % 2) for i in range(25)], transactional=True)
    expected = sorted([r.partition, r.offset, r.value.decode()] for r in kafka.read_all(topic))
    assert len(expected) == 4 * 30 + 25

    second = driver_processes(script, kafka.bootstrap, topic, checkpoint_dir, str(outdir), "-1")
    _wait_for(lambda: sum(len(rows) for rows in _output(outdir).values()) >= len(expected),
              "all records in the output", second)
    second.kill()

    output = _output(outdir)
    rows = sorted(r for batch_rows in output.values() for r in batch_rows)
    assert rows == expected  # no gap, no duplicate, nothing aborted
    attempts: dict[int, set] = {}
    for line in (outdir / "attempts.log").read_text().splitlines():
        batch_id, digest = json.loads(line)
        attempts.setdefault(batch_id, set()).add(digest)
    assert len(attempts.get(hang_at, ())) == 1  # it ran twice with the same records
    assert (outdir / "attempts.log").read_text().count(f"[{hang_at},") == 2
    assert len(output[0]) > 0  # batch 0 read data
    assert all(len(d) == 1 for d in attempts.values())
